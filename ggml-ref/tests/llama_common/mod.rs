//! What the llama.cpp comparison tests share: the preset lists, the generated models (the
//! committed tiny llama and models of drawn shapes) and the real Gemma from the cache.
#![allow(dead_code)]

use super::tiny_llama::TinyLlama;
use ggml_ref::llama::Quantize;
use ggml_ref::remembered::{Reference, quantize_fresh, quantize_remembered};
use quantforge::pipeline::plan::{ModelParams, Options, Preset, plan};
use quantforge::pipeline::run::{RunOptions, run, tensor_specs};
use quantforge_formats::gguf::{GgufFile, GgufModel};
use std::path::{Path, PathBuf};

/// The presets the quantizer must match llama.cpp on: the common llama-quantize targets.
pub const PRESETS: [&str; 20] = [
    "Q4_K_M", "Q4_K_S", "Q5_K_M", "Q5_K_S", "Q6_K", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q2_K",
    "Q3_K_S", "Q3_K_M", "Q3_K_L", "TQ1_0", "TQ2_0", "F16", "BF16", "F32", "COPY",
];

/// `all`, narrowed to the comma-separated list in `QF_PLAN_PRESETS` when it is set.
pub fn presets(all: &[&'static str]) -> Vec<&'static str> {
    match std::env::var("QF_PLAN_PRESETS") {
        Ok(list) => all
            .iter()
            .copied()
            .filter(|p| list.split(',').any(|q| q.eq_ignore_ascii_case(p)))
            .collect(),
        Err(_) => all.to_vec(),
    }
}

/// [`PRESETS`] followed by `more`, both narrowed by `QF_PLAN_PRESETS`.
pub fn presets_and(more: &[&'static str]) -> Vec<&'static str> {
    let mut all = presets(&PRESETS);
    all.extend(presets(more));
    all
}

/// Threads for both quantizers: one per CPU.
pub fn threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Where two files first differ, named by the part of the file (header or tensor).
pub fn first_difference(ours: &Path, theirs: &Path) -> Option<String> {
    let (a, b) = match (GgufFile::open(ours), GgufFile::open(theirs)) {
        (Ok(a), Ok(b)) => (a, b),
        (a, b) => {
            return Some(format!(
                "cannot open: ours {:?}, llama.cpp's {:?}",
                a.err(),
                b.err()
            ));
        }
    };
    let (x, y) = (a.bytes(), b.bytes());
    let at = x
        .iter()
        .zip(y)
        .position(|(p, q)| p != q)
        .or_else(|| (x.len() != y.len()).then_some(x.len().min(y.len())))?;
    let layout = b.layout();
    let place = if (at as u64) < layout.data_offset {
        "the header".to_string()
    } else {
        let rel = at as u64 - layout.data_offset;
        let i = layout
            .offsets
            .partition_point(|&o| o <= rel)
            .saturating_sub(1);
        let t = &b.tensors()[i];
        format!(
            "tensor {} ({}), byte {}",
            t.name(),
            t.ty(),
            rel - layout.offsets[i]
        )
    };
    Some(format!(
        "sizes {} vs {} (llama.cpp); first difference at byte {at}, in {place}",
        x.len(),
        y.len()
    ))
}

/// Writes `model` as `model-f16.gguf` in `dir`.
pub fn write_model(dir: &Path, model: &TinyLlama) -> PathBuf {
    let path = dir.join("model-f16.gguf");
    model.write(&path).expect("write the generated model");
    path
}

/// A llama of shapes nobody chose: the seed comes from `QF_PLAN_SEED` or the clock and is
/// printed, so a failure can be replayed.
pub fn drawn_model() -> (u64, TinyLlama) {
    let seed = std::env::var("QF_PLAN_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64)
        });
    let mut state = seed | 1;
    let mut draw = |n: u64| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state % n
    };
    let n_head_kv = 1 << draw(2);
    let n_head = n_head_kv << draw(3);
    let head = 16 * (1 + draw(4));
    let model = TinyLlama {
        n_embd: head * n_head,
        n_ff: 16 * (1 + draw(48)),
        n_layer: 1 + draw(12) as u32,
        n_head: n_head as u32,
        n_head_kv: n_head_kv as u32,
        n_vocab: 1 + draw(300),
        tied: draw(2) == 0,
        n_expert: [0, 0, 2, 4, 8][draw(5) as usize],
        seed,
    };
    eprintln!("QF_PLAN_SEED={seed}: {model:?}");
    (seed, model)
}

/// The real Gemma-3-270M Q4_K_M from the model cache, fetched by `scripts/fetch-models`
/// if missing; `None` when `QF_SKIP_REAL_MODELS=1`.
pub fn gemma_q4_k_m() -> Option<PathBuf> {
    real_model("gemma3-270m-q4_k_m.gguf")
}

/// A file of the real-model cache (`$QF_MODEL_CACHE`), fetched by `scripts/fetch-models`
/// if missing; `None` when `QF_SKIP_REAL_MODELS=1`.
pub fn real_model(rel: &str) -> Option<PathBuf> {
    if std::env::var("QF_SKIP_REAL_MODELS").as_deref() == Ok("1") {
        eprintln!("SKIPPED: real model {rel} not used because QF_SKIP_REAL_MODELS=1");
        return None;
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let cache = std::env::var_os("QF_MODEL_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join(".cache/models"));
    let path = cache.join(rel);
    if !path.exists() {
        let status = std::process::Command::new(root.join("scripts/fetch-models"))
            .env("QF_MODEL_CACHE", &cache)
            .status()
            .expect("cannot run scripts/fetch-models");
        assert!(status.success(), "scripts/fetch-models failed: {status}");
    }
    Some(path)
}

/// llama.cpp's answer for quantizing `input` with `q`: remembered from an earlier run of
/// the same input, options and llama.cpp build, or made now with `theirs` as its output
/// (see `ggml_ref::remembered`).
pub fn llama_reference(input: &Path, theirs: &Path, q: &Quantize) -> Result<Reference, String> {
    quantize_remembered(input, theirs, q).map_err(|e| e.to_string())
}

/// Where `ours` differs from llama.cpp's output for `input` and `q`, `None` when it is the
/// same file. When the answer was remembered (no file of llama.cpp's at hand), llama.cpp
/// runs again into `theirs`: its fresh answer decides, replaces the remembered one, and
/// names the first differing byte.
pub fn difference(
    reference: &Reference,
    input: &Path,
    q: &Quantize,
    ours: &Path,
    theirs: &Path,
) -> Option<String> {
    match reference.matches(ours) {
        Ok(true) => return None,
        Ok(false) => {}
        Err(e) => return Some(format!("cannot read our output {}: {e}", ours.display())),
    }
    if !reference.written {
        match quantize_fresh(input, theirs, q) {
            Err(e) => return Some(format!("llama.cpp, run again to compare: {e}")),
            Ok(fresh) if fresh.matches(ours).unwrap_or(false) => {
                eprintln!(
                    "warning: llama.cpp's remembered answer (sha256 {}) was not its output \
                     now (sha256 {}); replaced",
                    reference.sha256, fresh.sha256
                );
                return None;
            }
            Ok(_) => {}
        }
    }
    Some(
        first_difference(ours, theirs)
            .unwrap_or_else(|| "differs from llama.cpp's output (sha256)".to_string()),
    )
}

/// quantforge's run of `input` with `options` (no importance matrix) into `out`.
pub fn quantforge_quantize(input: &Path, out: &Path, options: &Options) -> Result<(), String> {
    let model = GgufModel::open(input).map_err(|e| e.to_string())?;
    let params = ModelParams::from_gguf(model.metadata()).map_err(|e| e.to_string())?;
    let plan = plan(
        &params,
        &tensor_specs(&model).map_err(|e| e.to_string())?,
        options,
    )
    .map_err(|e| e.to_string())?;
    plan.check_runnable().map_err(|e| e.to_string())?;
    let run_options = RunOptions {
        threads: threads(),
        ..RunOptions::default()
    };
    run(&model, &plan, out, &run_options, |_| {})
        .map(drop)
        .map_err(|e| e.to_string())
}

/// The real Gemma-3-270M as F16 (`llama-quantize --allow-requantize` of the Q4_K_M) in
/// `dir`: written by quantforge and checked to be llama.cpp's file byte for byte (its
/// answer remembered between runs). `None` when `QF_SKIP_REAL_MODELS=1`.
pub fn gemma_f16(dir: &Path) -> Option<PathBuf> {
    let q4 = gemma_q4_k_m()?;
    let (ours, theirs) = (dir.join("gemma3-270m-f16.gguf"), dir.join("llama-f16.gguf"));
    let mut options = Options::new(Preset::parse("F16").expect("F16"));
    options.allow_requantize = true;
    let mut q = Quantize::new(options.ftype.code());
    q.allow_requantize = true;
    q.nthread = threads() as i32;
    let reference = llama_reference(&q4, &theirs, &q).expect("llama.cpp: Q4_K_M -> F16");
    quantforge_quantize(&q4, &ours, &options).expect("quantforge: Q4_K_M -> F16");
    if let Some(diff) = difference(&reference, &q4, &q, &ours, &theirs) {
        panic!("Q4_K_M -> F16 --allow-requantize: {diff}");
    }
    let _ = std::fs::remove_file(&theirs);
    Some(ours)
}

/// The imatrix file's name as both runs record it in `quantize.imatrix.file`: the name
/// alone, not its temporary directory, so the same data is the same run (and llama.cpp's
/// remembered answer for it applies).
pub fn recorded_name(file: &Path) -> &[u8] {
    file.file_name()
        .unwrap_or(file.as_os_str())
        .as_encoded_bytes()
}
