//! `quantforge quantize` writing several presets in one pass (`--out PRESET=FILE`,
//! `--types ... --out-dir DIR`): every output is the file a run of its own writes, byte
//! for byte, on the committed tiny llama and the real Gemma-3-270M (as F16), with and
//! without an importance matrix and in split sets; a failure leaves none of the outputs.
//! Single runs are checked against llama.cpp in `ggml-ref/tests/llama_quantize_bytes.rs`.

mod model_cli;

use model_cli::{arg as s, fails_naming, names, quantforge, success, tiny, tiny_imatrix};
use std::path::Path;

/// The presets the publishers' scripts make most, and two that copy or fall back.
const PRESETS: [&str; 7] = [
    "Q4_K_M", "Q5_K_M", "Q6_K", "Q8_0", "IQ4_XS", "Q3_K_S", "COPY",
];

/// Runs `quantize` once per preset and once for all of them with `--out`, with `extra`
/// options each time, and asserts that the one run wrote the same files as the single
/// runs (`parts` of them for each output: one, or a split set), byte for byte.
fn one_run_equals_single_runs(input: &Path, presets: &[&str], extra: &[&str], parts: usize) {
    let dir = tempfile::tempdir().unwrap();
    let (single, many) = (dir.path().join("single"), dir.path().join("many"));
    std::fs::create_dir_all(&single).unwrap();
    std::fs::create_dir_all(&many).unwrap();
    let mut base: Vec<String> = vec!["quantize".into(), "-q".into(), s(input).into()];
    base.extend(extra.iter().map(|a| a.to_string()));
    let mut args = base.clone();
    for p in presets {
        let mut one = base.clone();
        one.extend([s(&single.join(format!("{p}.gguf"))).into(), p.to_string()]);
        success(&quantforge(
            &one.iter().map(String::as_str).collect::<Vec<_>>(),
        ));
        args.extend([
            "--out".into(),
            format!("{p}={}", s(&many.join(format!("{p}.gguf")))),
        ]);
    }
    let text = success(&quantforge(
        &args.iter().map(String::as_str).collect::<Vec<_>>(),
    ));
    assert!(
        text.contains(&format!("{} outputs in one pass", presets.len())),
        "{text}"
    );
    let files = names(&single);
    assert_eq!(files.len(), presets.len() * parts, "{files:?}");
    assert_eq!(files, names(&many));
    for name in files {
        let (a, b) = (single.join(&name), many.join(&name));
        assert!(
            std::fs::read(&a).unwrap() == std::fs::read(&b).unwrap(),
            "{name} from {}: the one-pass output differs from the single run",
            input.display()
        );
    }
}

#[test]
fn tiny_llama_presets_in_one_pass_equal_single_runs() {
    one_run_equals_single_runs(&tiny(), &PRESETS, &[], 1);
}

#[test]
fn with_an_importance_matrix_and_tensor_options_too() {
    let dir = tempfile::tempdir().unwrap();
    let imatrix = dir.path().join("imatrix.gguf");
    tiny_imatrix(&imatrix, &[], |name, sums| {
        if name.contains("ffn_up") {
            sums.reverse();
        }
    });
    let extra = [
        "--imatrix",
        s(&imatrix),
        "--tensor-type",
        "attn_v=q8_0",
        "--output-tensor-type",
        "q6_K",
        "--threads",
        "2",
    ];
    let presets = ["Q4_K_M", "IQ4_XS", "Q2_K", "IQ2_XS", "IQ3_M"];
    one_run_equals_single_runs(&tiny(), &presets, &extra, 1);
}

#[test]
fn split_sets_in_one_pass_equal_single_runs() {
    one_run_equals_single_runs(
        &tiny(),
        &["Q4_K_M", "Q8_0"],
        &["--split-max-tensors", "13"],
        3,
    );
}

#[test]
fn real_gemma_f16_five_presets_in_one_pass_equal_single_runs() {
    let dir = tempfile::tempdir().unwrap();
    let Some(f16) = model_cli::gemma_f16(dir.path()) else {
        return;
    };
    let presets = ["Q4_K_M", "Q5_K_M", "Q6_K", "Q8_0", "IQ4_XS"];
    one_run_equals_single_runs(&f16, &presets, &[], 1);
}

#[test]
fn types_and_out_dir_name_outputs_after_the_input() {
    let dir = tempfile::tempdir().unwrap();
    let text = success(&quantforge(&[
        "quantize",
        s(&tiny()),
        "--types",
        "q4_k_m,Q8_0",
        "--out-dir",
        s(dir.path()),
    ]));
    assert_eq!(
        names(dir.path()),
        ["tiny-llama-f16-Q4_K_M.gguf", "tiny-llama-f16-Q8_0.gguf"]
    );
    // One summary per output, and progress lines saying which output each is.
    assert_eq!(
        text.matches("\nwrote ").count() + usize::from(text.starts_with("wrote ")),
        2
    );
    assert!(text.contains("Q8_0: [   1/  "), "{text}");
    // --dry-run prints each plan under its output and writes nothing.
    let other = tempfile::tempdir().unwrap();
    let text = success(&quantforge(&[
        "quantize",
        "--dry-run",
        s(&tiny()),
        "--types",
        "Q4_K_M,Q6_K",
        "--out-dir",
        s(other.path()),
    ]));
    assert!(
        text.contains("Q4_K_M -> ") && text.contains("Q6_K -> "),
        "{text}"
    );
    assert_eq!(text.matches("general.file_type = ").count(), 2, "{text}");
    assert!(names(other.path()).is_empty());
}

#[test]
fn bad_outputs_exit_2_and_a_failed_run_leaves_no_output() {
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("a.gguf");
    let out = |p: &str, f: &Path| format!("{p}={}", s(f));
    fails_naming(
        &quantforge(&[
            "quantize",
            s(&tiny()),
            "--out",
            &out("Q4_K_M", &a),
            "--out",
            &out("Q8_0", &a),
        ]),
        "two outputs go to",
    );
    fails_naming(
        &quantforge(&["quantize", s(&tiny()), "--out", "Q4_K_M"]),
        "expected PRESET=FILE",
    );
    fails_naming(
        &quantforge(&["quantize", s(&tiny()), "--out", &out("Q9_K", &a)]),
        "unknown type \"Q9_K\"",
    );
    fails_naming(
        &quantforge(&[
            "quantize",
            s(&tiny()),
            s(&a),
            "Q8_0",
            "--out",
            &out("Q6_K", &a),
        ]),
        "not both",
    );
    fails_naming(
        &quantforge(&["quantize", s(&tiny()), "--out", &out("Q8_0", &tiny())]),
        "input and output are the same file",
    );
    // IQ2_XS needs an importance matrix: the run stops before any file is made, the
    // Q8_0 beside it included.
    let b = dir.path().join("b.gguf");
    fails_naming(
        &quantforge(&[
            "quantize",
            s(&tiny()),
            "--out",
            &out("Q8_0", &a),
            "--out",
            &out("IQ2_XS", &b),
        ]),
        "importance matrix",
    );
    assert!(names(dir.path()).is_empty());
}
