//! `quantize --log-format llama` against what llama.cpp's quantizer logs for the same
//! run, byte for byte: the loader's metadata dump, the planning warnings (fallbacks,
//! `--tensor-type` overrides), a line per tensor, the sizes. Only llama-quantize's own
//! opening lines (version, build) and its timing lines are quantforge's; they are checked
//! for their form. Needs `--features ggml`.
#![cfg(feature = "ggml")]

mod model_cli;

use ggml_ref::llama::{Quantize, quantize_logged};
use model_cli::{arg, gemma_f16, quantforge, tiny, tiny_imatrix};
use quantforge::pipeline::imatrix::Imatrix;
use quantforge::pipeline::plan::Preset;
use std::path::Path;

/// What llama.cpp logs quantizing `input` to `out` with `q`.
fn llama_log(input: &Path, out: &Path, q: &Quantize) -> Vec<u8> {
    let (result, log) = quantize_logged(input, out, q);
    result.expect("llama.cpp quantizes");
    log
}

/// quantforge's standard error and output for `quantize --log-format llama ARGS`; the
/// standard error's three opening lines are checked and dropped.
fn our_log(args: &[&str], opening: &str) -> (Vec<u8>, String) {
    let mut all = vec!["quantize", "--log-format", "llama"];
    all.extend_from_slice(args);
    let out = quantforge(&all);
    assert!(
        out.status.success(),
        "quantforge failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stderr = out.stderr;
    let mut lines = stderr.splitn(4, |&b| b == b'\n');
    let version = String::from_utf8_lossy(lines.next().unwrap()).into_owned();
    assert!(
        version.starts_with("version: quantforge ") && version.contains("(build "),
        "{version}"
    );
    let built = String::from_utf8_lossy(lines.next().unwrap()).into_owned();
    assert!(built.starts_with("built with "), "{built}");
    let main = String::from_utf8_lossy(lines.next().unwrap()).into_owned();
    assert_eq!(main, opening);
    let stdout = String::from_utf8(out.stdout).unwrap();
    (lines.next().unwrap_or_default().to_vec(), stdout)
}

/// llama-quantize's closing lines: a blank line, then the two times.
fn assert_closing(stdout: &str) {
    let tail: Vec<&str> = stdout.lines().rev().take(3).collect();
    assert!(tail[0].starts_with("main:    total time = ") && tail[0].ends_with(" ms"));
    assert!(tail[1].starts_with("main: quantize time = ") && tail[1].ends_with(" ms"));
    assert_eq!(tail[2], "");
}

fn assert_same(what: &str, ours: &[u8], theirs: &[u8]) {
    if ours != theirs {
        let (a, b) = (
            String::from_utf8_lossy(ours),
            String::from_utf8_lossy(theirs),
        );
        let line = a
            .lines()
            .zip(b.lines())
            .position(|(x, y)| x != y)
            .unwrap_or(a.lines().count().min(b.lines().count()));
        panic!(
            "{what}: the logs differ at line {}:\n  quantforge: {:?}\n  llama.cpp:  {:?}",
            line + 1,
            a.lines().nth(line),
            b.lines().nth(line)
        );
    }
}

fn code(preset: &str) -> u32 {
    Preset::parse(preset).unwrap().ftype.code()
}

#[test]
fn gemma_presets_and_a_tensor_type_run_log_as_llama_quantize_does() {
    let dir = tempfile::tempdir().unwrap();
    let Some(f16) = gemma_f16(dir.path()) else {
        return;
    };
    let (ours_out, theirs_out) = (dir.path().join("ours.gguf"), dir.path().join("llama.gguf"));
    let rules = [("ffn_down", "q8_0"), ("attn_v", "q5_K"), ("attn_q", "q4_K")];
    for (preset, tensor_types) in [
        ("Q4_K_M", &[][..]),
        ("Q6_K", &[][..]),
        ("Q4_K_M", &rules[..]),
    ] {
        let mut q = Quantize::new(code(preset));
        q.nthread = 2;
        q.tensor_types = tensor_types
            .iter()
            .map(|(p, t)| {
                let ty = quantforge::GgmlType::from_name(t).unwrap();
                (p.to_string(), ty.code())
            })
            .collect();
        let theirs = llama_log(&f16, &theirs_out, &q);
        let rule_args: Vec<String> = tensor_types
            .iter()
            .map(|(p, t)| format!("--tensor-type={p}={t}"))
            .collect();
        let mut args: Vec<&str> = rule_args.iter().map(String::as_str).collect();
        args.extend([arg(&f16), arg(&ours_out), preset, "2"]);
        let opening = format!(
            "main: quantizing '{}' to '{}' as {preset} using 2 threads",
            f16.display(),
            ours_out.display()
        );
        let (ours, stdout) = our_log(&args, &opening);
        assert_same(&format!("{preset} {tensor_types:?}"), &ours, &theirs);
        assert_closing(&stdout);
        assert_eq!(
            std::fs::read(&ours_out).unwrap(),
            std::fs::read(&theirs_out).unwrap(),
            "{preset}: the files differ"
        );
    }

    // The dry run: sizes only, and the same text.
    let mut q = Quantize::new(code("Q4_K_M"));
    q.dry_run = true;
    let theirs = llama_log(&f16, &theirs_out, &q);
    let opening = format!(
        "main: calculating quantization size for '{}' as Q4_K_M",
        f16.display()
    );
    let (ours, stdout) = our_log(&["--dry-run", arg(&f16), "Q4_K_M"], &opening);
    assert_same("Q4_K_M --dry-run", &ours, &theirs);
    assert_closing(&stdout);
}

/// An importance matrix without entries for some tensors: llama.cpp's "did not find
/// weights" lines inside the tensor lines, and llama-quantize's imatrix lines.
#[test]
fn an_imatrix_run_logs_as_llama_quantize_does() {
    let dir = tempfile::tempdir().unwrap();
    let imatrix = dir.path().join("imatrix.gguf");
    tiny_imatrix(&imatrix, &["ffn_up", "blk.1.attn_k"], |_, _| {});
    let (ours_out, theirs_out) = (dir.path().join("ours.gguf"), dir.path().join("llama.gguf"));
    let m = Imatrix::load(&imatrix).unwrap();
    let mut q = Quantize::new(code("Q4_K_M"));
    q.nthread = 2;
    (q.imatrix, q.kv_overrides) = m.llama_inputs(imatrix.as_os_str().as_encoded_bytes());
    let theirs = llama_log(&tiny(), &theirs_out, &q);
    assert!(String::from_utf8_lossy(&theirs).contains("did not find weights"));
    let opening = format!(
        "main: quantizing '{}' to '{}' as Q4_K_M using 2 threads",
        tiny().display(),
        ours_out.display()
    );
    let (ours, stdout) = our_log(
        &[
            "--imatrix",
            arg(&imatrix),
            arg(&tiny()),
            arg(&ours_out),
            "Q4_K_M",
            "2",
        ],
        &opening,
    );
    assert_same("tiny llama Q4_K_M --imatrix", &ours, &theirs);
    let first: Vec<&str> = stdout.lines().take(3).collect();
    assert_eq!(
        first,
        [
            "load_imatrix: imatrix datasets=['calibration.txt']".to_string(),
            format!(
                "load_imatrix: loaded {} importance matrix entries from {} computed on 9 chunks",
                m.len(),
                imatrix.display()
            ),
            format!(
                "prepare_imatrix: have {} importance matrix entries",
                m.len()
            ),
        ]
    );
    assert_closing(&stdout);
    assert_eq!(
        std::fs::read(&ours_out).unwrap(),
        std::fs::read(&theirs_out).unwrap()
    );
}

/// Several outputs, or one part of a split set, have no llama-quantize log: refused,
/// saying so.
#[test]
fn runs_llama_quantize_cannot_make_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let out = quantforge(&[
        "quantize",
        "--log-format",
        "llama",
        arg(&tiny()),
        "--out",
        &format!("Q8_0={}", dir.path().join("a.gguf").display()),
        "--out",
        &format!("Q4_0={}", dir.path().join("b.gguf").display()),
    ]);
    model_cli::fails_naming(&out, "--log-format llama");
    let (input, out_path) = (tiny(), dir.path().join("c.gguf"));
    for extra in [&["--only-part", "1"][..], &["--resume"][..]] {
        let mut args = vec!["quantize", "--log-format", "llama", "--keep-split"];
        args.extend_from_slice(extra);
        args.extend([arg(&input), arg(&out_path), "Q8_0"]);
        model_cli::fails_naming(&quantforge(&args), "--log-format llama");
    }
}
