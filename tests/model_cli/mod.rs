//! Helpers shared by the command tests (`dequantize`, `diff`, `quantize` from safetensors
//! and into split sets): running the built binary, the committed tiny llama and its
//! quantizations, the files a directory holds, decoding a GGUF tensor with
//! the kernels directly (the tests' independent reference).
#![allow(dead_code)] // each test binary uses its own subset

#[path = "../../formats/tests/gguf_common/mod.rs"]
pub mod gguf_common;
#[path = "../../src/pipeline/imatrix/files.rs"]
pub mod imatrix_files;
#[path = "../../golden/tiny_llama.rs"]
pub mod tiny_llama;

use quantforge::formats::gguf::GgufFile;
use quantforge::kernels::{GgmlType, dequantize};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Runs the `quantforge` binary with `args`.
pub fn quantforge(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_quantforge"))
        .args(args)
        .output()
        .expect("run quantforge")
}

/// A path as a command-line argument.
pub fn arg(p: &Path) -> &str {
    p.to_str().expect("UTF-8 path")
}

/// The stdout of a run that must have succeeded.
pub fn success(out: &Output) -> String {
    assert!(
        out.status.success(),
        "exit {:?}: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout.clone()).expect("UTF-8 stdout")
}

/// Asserts exit code 2 with a one-line reason on stderr containing `needle`.
pub fn fails_naming(out: &Output, needle: &str) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "stderr: {err}");
    assert!(err.contains(needle), "stderr lacks {needle:?}: {err}");
    assert_eq!(err.trim_end().lines().count(), 1, "stderr: {err}");
}

/// The names of the files in `dir`, sorted, leaving out the manifests `quantize` writes
/// beside its outputs (`FILE.qf.json`, each asserted to have its FILE).
pub fn names(dir: &Path) -> Vec<String> {
    let all: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    for name in &all {
        if let Some(output) = name.strip_suffix(".qf.json") {
            assert!(all.iter().any(|n| n == output), "{name} without {output}");
        }
    }
    let mut v: Vec<String> = all
        .into_iter()
        .filter(|n| !n.ends_with(".qf.json"))
        .collect();
    v.sort();
    v
}

/// The committed llama-shaped f16 model.
pub fn tiny() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("golden/tiny-llama-f16.gguf")
}

/// The tiny llama quantized to the llama.cpp `preset`, written into `dir`.
pub fn tiny_quantized(dir: &Path, preset: &str) -> PathBuf {
    let out = dir.join(format!("tiny-{preset}.gguf"));
    success(&quantforge(&[
        "quantize",
        "-q",
        arg(&tiny()),
        arg(&out),
        "--type",
        preset,
    ]));
    out
}

/// The real Gemma-3-270M as F16, written into `dir` (quantforge's F16 of the Q4_K_M GGUF,
/// the same file llama-quantize makes of it); `None` when real models are skipped.
pub fn gemma_f16(dir: &Path) -> Option<PathBuf> {
    let q4 = gguf_common::gemma_gguf()?;
    let f16 = dir.join("gemma-f16.gguf");
    success(&quantforge(&[
        "quantize",
        "-q",
        "--allow-requantize",
        arg(&q4),
        arg(&f16),
        "F16",
    ]));
    Some(f16)
}

/// Every element of a `ty` buffer as f32, by the kernels' own dequantizer.
pub fn decoded(ty: GgmlType, bytes: &[u8]) -> Vec<f32> {
    let n = bytes.len() / ty.type_size() * ty.block_size();
    let mut out = vec![0f32; n];
    dequantize(ty, bytes, &mut out).expect("dequantize");
    out
}

/// Tensor `name` of `file` as f32.
pub fn tensor_f32(file: &GgufFile, name: &str) -> Vec<f32> {
    let view = file.tensor(name).expect("tensor");
    decoded(view.ty(), view.data())
}

/// Bit patterns, so that comparisons are exact (and NaN equals NaN).
pub fn bits(values: &[f32]) -> Vec<u32> {
    values.iter().map(|v| v.to_bits()).collect()
}

/// Writes a GGUF importance matrix for the committed tiny llama to `path`: an entry for
/// every 2-D tensor but the token embeddings and those whose name contains one of `skip`,
/// with sums `1 + i % 13` (changed by `edit`) and a count of 2.
pub fn tiny_imatrix(path: &Path, skip: &[&str], edit: impl Fn(&str, &mut Vec<f32>)) {
    let entries: Vec<(String, Vec<f32>, Vec<f32>)> = tiny_llama::TinyLlama::COMMITTED
        .tensors()
        .into_iter()
        .filter(|(name, ne, _)| {
            ne[1] > 1 && name != "token_embd.weight" && !skip.iter().any(|s| name.contains(s))
        })
        .map(|(name, ne, _)| {
            let mut sums: Vec<f32> = (0..ne[0]).map(|i| (1 + i % 13) as f32).collect();
            edit(&name, &mut sums);
            (name, sums, vec![2.0])
        })
        .collect();
    let entries: Vec<_> = entries
        .iter()
        .map(|(n, s, c)| (n.as_str(), s.as_slice(), c.as_slice()))
        .collect();
    imatrix_files::gguf_builder(&entries, &["calibration.txt"], 9, 512)
        .unwrap()
        .write(path)
        .unwrap();
}
