//! `quantforge quantize` as a user runs it: the README's first command on the committed
//! tiny llama, both argument forms, --dry-run, and the errors users meet (exit code 2, a
//! one-line reason, no file under OUT's name). Byte-identity with llama.cpp is checked in
//! `ggml-ref/tests/llama_quantize_bytes.rs`.

mod model_cli;

use model_cli::{imatrix_files, tiny_imatrix, tiny_llama};

use quantforge::formats::gguf::{GgufBuilder, GgufFile, Value};
use quantforge::kernels::GgmlType;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn quantforge(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_quantforge"))
        .args(args)
        .output()
        .expect("run quantforge")
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn tiny() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("golden/tiny-llama-f16.gguf")
}

fn ok(out: &Output) -> String {
    assert!(
        out.status.success(),
        "exit {:?}: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout.clone()).unwrap()
}

/// Exit code 2, one line on stderr containing `needle`.
fn fails_with(out: &Output, needle: &str) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "stderr: {err}");
    assert!(err.contains(needle), "stderr lacks {needle:?}: {err}");
    assert_eq!(err.trim_end().lines().count(), 1, "stderr: {err}");
}

fn no_files_in(dir: &Path, except: &[&Path]) {
    let left: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| !except.contains(&p.as_path()))
        // An output that was written has its manifest beside it.
        .filter(|p| {
            let output = p.to_str().and_then(|p| p.strip_suffix(".qf.json"));
            !output.is_some_and(|o| Path::new(o).exists())
        })
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
}

#[test]
fn readme_first_command_and_the_positional_form_agree() {
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("a.gguf");
    let b = dir.path().join("b.gguf");
    let out = ok(&quantforge(&[
        "quantize",
        s(&tiny()),
        s(&a),
        "--type",
        "Q4_K_M",
    ]));
    assert!(out.contains("wrote"), "{out}");
    ok(&quantforge(&[
        "quantize",
        "-q",
        s(&tiny()),
        s(&b),
        "q4_k_m",
        "1",
    ]));
    assert_eq!(std::fs::read(&a).unwrap(), std::fs::read(&b).unwrap());
    let f = GgufFile::open(&a).unwrap();
    assert_eq!(f.metadata().get_u32("general.file_type").unwrap(), 15);
    assert_eq!(
        f.metadata()
            .get_u32("general.quantization_version")
            .unwrap(),
        2
    );
    let ty = |name: &str| f.tensors().iter().find(|t| t.name() == name).unwrap().ty();
    assert_eq!(ty("output.weight"), GgmlType::Q6_K);
    assert_eq!(ty("blk.3.attn_v.weight"), GgmlType::Q6_K);
    assert_eq!(ty("blk.0.attn_v.weight"), GgmlType::Q4_K);
    assert_eq!(ty("blk.0.attn_norm.weight"), GgmlType::F32);
}

/// llama-quantize's `IN TYPE [NTHREADS]`: without OUT the output is
/// `ggml-model-NAME.gguf` in IN's folder, NAME from llama-quantize's table (a number names
/// its first entry); the same bytes as with OUT given.
#[test]
fn without_out_the_output_takes_llama_quantize_s_default_name() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("m.gguf");
    std::fs::copy(tiny(), &input).unwrap();
    let named = dir.path().join("named.gguf");
    ok(&quantforge(&[
        "quantize",
        "-q",
        s(&input),
        s(&named),
        "Q8_0",
    ]));
    ok(&quantforge(&["quantize", "-q", s(&input), "q8_0", "2"]));
    let default = dir.path().join("ggml-model-Q8_0.gguf");
    assert_eq!(
        std::fs::read(&named).unwrap(),
        std::fs::read(&default).unwrap()
    );
    // 15 is MOSTLY_Q4_K_M, listed first under its alias Q4_K.
    ok(&quantforge(&["quantize", "-q", s(&input), "15"]));
    assert!(dir.path().join("ggml-model-Q4_K.gguf").is_file());
    ok(&quantforge(&[
        "quantize",
        "-q",
        s(&input),
        "--type",
        "Q6_K",
    ]));
    assert!(dir.path().join("ggml-model-Q6_K.gguf").is_file());
    fails_with(
        &quantforge(&["quantize", s(&input), "Q8_0", "many"]),
        "NTHREADS must be a number",
    );
    fails_with(
        &quantforge(&["quantize", s(&input), "Q8_0", "2", "3"]),
        "unexpected argument 3",
    );
    fails_with(&quantforge(&["quantize", s(&input)]), "no target type");
}

#[test]
fn dry_run_prints_the_plan_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.gguf");
    let text = ok(&quantforge(&[
        "quantize",
        "--dry-run",
        s(&tiny()),
        s(&out),
        "--type",
        "Q4_K_S",
    ]));
    assert!(text.contains("blk.0.attn_v.weight"), "{text}");
    assert!(text.contains("f16 -> q5_K"), "{text}");
    assert!(text.contains("general.file_type = 14"), "{text}");
    no_files_in(dir.path(), &[]);
}

#[test]
fn options_reach_the_plan() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.gguf");
    ok(&quantforge(&[
        "quantize",
        "-q",
        "--pure",
        "--output-tensor-type",
        "q8_0",
        "--tensor-type",
        "ffn_down=q5_k",
        "--override-kv",
        "general.name=str:renamed",
        "--override-kv",
        "x.count=int:-7",
        s(&tiny()),
        s(&out),
        "Q4_K_M",
    ]));
    let f = GgufFile::open(&out).unwrap();
    let ty = |name: &str| f.tensors().iter().find(|t| t.name() == name).unwrap().ty();
    assert_eq!(ty("output.weight"), GgmlType::Q8_0);
    assert_eq!(ty("blk.3.attn_v.weight"), GgmlType::Q4_K);
    assert_eq!(ty("blk.3.ffn_down.weight"), GgmlType::Q5_K);
    let m = f.metadata();
    assert_eq!(m.get_str("general.name").unwrap(), "renamed");
    assert_eq!(m.get_u32("x.count").unwrap(), 7);
    // llama.cpp's order: overrides, quantization version and file type move to the end.
    let keys: Vec<_> = m.keys().collect();
    let n = keys.len();
    assert_eq!(
        keys[n - 4..],
        [
            "general.quantization_version",
            "general.file_type",
            "general.name",
            "x.count"
        ]
    );
}

#[test]
fn prune_layers_drops_and_renumbers() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.gguf");
    // The committed llama has 4 layers; llama-quantize sorts the list and drops repeats.
    ok(&quantforge(&[
        "quantize",
        "-q",
        "--prune-layers",
        " 3,1,1",
        s(&tiny()),
        s(&out),
        "Q4_K_M",
    ]));
    let f = GgufFile::open(&out).unwrap();
    assert_eq!(f.metadata().get_u32("llama.block_count").unwrap(), 2);
    let source = GgufFile::open(tiny()).unwrap();
    let shape = |f: &GgufFile, name: &str| {
        let t = f.tensors().iter().find(|t| t.name() == name).unwrap();
        (t.ty(), t.ne4())
    };
    // Layer 2 is now layer 1; nothing of layers 1 and 3 is left.
    assert_eq!(
        shape(&f, "blk.1.attn_norm.weight"),
        shape(&source, "blk.2.attn_norm.weight")
    );
    assert!(f.tensors().iter().all(|t| !t.name().starts_with("blk.2.")));
    let dropped = source
        .tensors()
        .iter()
        .filter(|t| t.name().starts_with("blk.1.") || t.name().starts_with("blk.3."))
        .count();
    assert_eq!(f.tensors().len(), source.tensors().len() - dropped);
    for bad in ["1,x", "-1", "2,,3", "99999999999"] {
        let o = quantforge(&[
            "quantize",
            "--prune-layers",
            bad,
            s(&tiny()),
            s(&out),
            "Q8_0",
        ]);
        assert_eq!(o.status.code(), Some(2));
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains("invalid layer id"), "{bad}: {err}");
    }
}

#[test]
fn bad_arguments_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.gguf");
    let t = tiny();
    fails_with(
        &quantforge(&["quantize", s(&t), s(&out), "--type", "Q9_K"]),
        "unknown type",
    );
    fails_with(&quantforge(&["quantize", s(&t), s(&out)]), "no target type");
    fails_with(
        &quantforge(&["quantize", s(&t), s(&out), "--type", "Q8_0", "Q4_0"]),
        "disagree",
    );
    fails_with(
        &quantforge(&["quantize", s(&t), s(&t), "--type", "Q8_0"]),
        "same file",
    );
    fails_with(
        &quantforge(&["quantize", s(&t), s(&out), "Q8_0", "--tensor-type", "x"]),
        "PATTERN=TYPE",
    );
    fails_with(
        &quantforge(&["quantize", "missing.gguf", s(&out), "Q8_0"]),
        "missing.gguf",
    );
    no_files_in(dir.path(), &[]);
}

#[test]
fn an_error_says_its_cause_once() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.gguf");
    let missing = dir.path().join("missing.dat");
    let t = tiny();
    let run = quantforge(&[
        "quantize",
        "--imatrix",
        s(&missing),
        s(&t),
        s(&out),
        "Q4_K_M",
    ]);
    fails_with(&run, "missing.dat: cannot read: ");
    let err = String::from_utf8_lossy(&run.stderr);
    // A cause printed by the error and again as its source reads "...: C: C".
    let parts: Vec<&str> = err.trim_end().split(": ").collect();
    assert!(parts.windows(2).all(|w| w[0] != w[1]), "{err}");
    let run = quantforge(&[
        "quantize",
        s(&t),
        s(&out),
        "Q8_0",
        "--tensor-type",
        "([=q8_0",
    ]);
    let err = String::from_utf8_lossy(&run.stderr);
    assert_eq!(run.status.code(), Some(2), "{err}");
    assert_eq!(err.matches("unclosed character class").count(), 1, "{err}");
    no_files_in(dir.path(), &[]);
}

#[test]
fn requantizing_needs_the_flag() {
    let dir = tempfile::tempdir().unwrap();
    let q8 = dir.path().join("q8.gguf");
    let out = dir.path().join("out.gguf");
    ok(&quantforge(&["quantize", "-q", s(&tiny()), s(&q8), "Q8_0"]));
    fails_with(
        &quantforge(&["quantize", s(&q8), s(&out), "Q4_K_M"]),
        "--allow-requantize",
    );
    no_files_in(dir.path(), &[&q8]);
    ok(&quantforge(&[
        "quantize",
        "-q",
        "--allow-requantize",
        s(&q8),
        s(&out),
        "Q4_K_M",
    ]));
    // Same type: copied, no flag needed.
    std::fs::remove_file(&out).unwrap();
    ok(&quantforge(&["quantize", "-q", s(&q8), s(&out), "Q8_0"]));
    assert_eq!(std::fs::read(&q8).unwrap(), std::fs::read(&out).unwrap());
}

#[test]
fn a_nan_names_the_tensor_and_leaves_no_file() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("nan.gguf");
    let out = dir.path().join("out.gguf");
    let mut b = GgufBuilder::new();
    let m = b.metadata_mut();
    m.set("general.architecture", Value::from("llama")).unwrap();
    m.set("llama.block_count", Value::U32(1)).unwrap();
    let mut good = vec![0.5f32; 256 * 4];
    b.add_tensor(
        "blk.0.attn_q.weight",
        GgmlType::F32,
        &[256, 4],
        good.iter()
            .flat_map(|x| x.to_le_bytes())
            .collect::<Vec<u8>>(),
    )
    .unwrap();
    good[256 * 2 + 7] = f32::NAN;
    b.add_tensor(
        "blk.0.attn_v.weight",
        GgmlType::F32,
        &[256, 4],
        good.iter()
            .flat_map(|x| x.to_le_bytes())
            .collect::<Vec<u8>>(),
    )
    .unwrap();
    b.write(&input).unwrap();
    fails_with(
        &quantforge(&["quantize", s(&input), s(&out), "Q8_0"]),
        "tensor blk.0.attn_v.weight: non-finite value NaN at element 519 (row 2, column 7)",
    );
    no_files_in(dir.path(), &[&input]);
}

#[test]
fn tiny_llama_template_is_what_the_committed_file_holds() {
    // Keeps the shared generator module in use in this test binary.
    assert_eq!(
        tiny_llama::TinyLlama::COMMITTED.tensors().len(),
        GgufFile::open(tiny()).unwrap().tensors().len()
    );
}

/// A GGUF imatrix for the tiny llama: every weight matrix but the embeddings, except those
/// whose name contains one of `skip`; `edit` may change an entry's values.
#[test]
fn imatrix_weights_the_quantizers_and_is_recorded() {
    let dir = tempfile::tempdir().unwrap();
    let imatrix = dir.path().join("imatrix.gguf");
    tiny_imatrix(&imatrix, &[], |_, _| {});
    let (with, without) = (
        dir.path().join("with.gguf"),
        dir.path().join("without.gguf"),
    );
    let text = ok(&quantforge(&[
        "quantize",
        "--imatrix",
        s(&imatrix),
        "--override-kv",
        "general.name=str:weighted",
        s(&tiny()),
        s(&with),
        "Q4_K_M",
    ]));
    assert!(
        text.contains("imatrix: 29 entries from") && text.contains("computed on 9 chunks"),
        "{text}"
    );
    assert!(
        text.contains("imatrix: 29 of 30 converted tensors weighted"),
        "{text}"
    );
    assert!(
        text.contains("token_embd.weight") && text.contains("(no imatrix entry)"),
        "{text}"
    );
    ok(&quantforge(&[
        "quantize",
        "-q",
        s(&tiny()),
        s(&without),
        "Q4_K_M",
    ]));
    let f = GgufFile::open(&with).unwrap();
    let m = f.metadata();
    let keys: Vec<_> = m.keys().collect();
    // llama-quantize passes its imatrix keys after the user's overrides.
    assert_eq!(
        keys[keys.len() - 5..],
        [
            "general.name",
            "quantize.imatrix.file",
            "quantize.imatrix.dataset",
            "quantize.imatrix.entries_count",
            "quantize.imatrix.chunks_count"
        ]
    );
    assert_eq!(m.get_str("quantize.imatrix.file").unwrap(), s(&imatrix));
    assert_eq!(
        m.get_str("quantize.imatrix.dataset").unwrap(),
        "calibration.txt"
    );
    assert_eq!(m.get_u32("quantize.imatrix.entries_count").unwrap(), 29);
    assert_eq!(m.get_u32("quantize.imatrix.chunks_count").unwrap(), 9);
    let g = GgufFile::open(&without).unwrap();
    let data = |f: &GgufFile, name: &str| f.tensor(name).unwrap().data().to_vec();
    assert_ne!(
        data(&f, "blk.0.attn_q.weight"),
        data(&g, "blk.0.attn_q.weight")
    );
    assert_eq!(data(&f, "token_embd.weight"), data(&g, "token_embd.weight"));

    // Q2_K_S requires importance data.
    let q2 = dir.path().join("q2.gguf");
    fails_with(
        &quantforge(&["quantize", s(&tiny()), s(&q2), "Q2_K_S"]),
        "requires an importance matrix",
    );
    ok(&quantforge(&[
        "quantize",
        "-q",
        "--imatrix",
        s(&imatrix),
        s(&tiny()),
        s(&q2),
        "Q2_K_S",
    ]));
}

#[test]
fn imatrix_problems_exit_2_naming_file_entry_or_tensor() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.gguf");
    let t = tiny();
    let run = |imatrix: &Path, ty: &str| {
        quantforge(&["quantize", "--imatrix", s(imatrix), s(&t), s(&out), ty])
    };

    let missing = dir.path().join("missing.dat");
    fails_with(&run(&missing, "Q4_K_M"), "missing.dat");

    let truncated = dir.path().join("truncated.dat");
    let legacy = imatrix_files::legacy_bytes(&[("blk.0.attn_q.weight", 1, &[1.0; 256])], None);
    std::fs::write(&truncated, &legacy[..100]).unwrap();
    fails_with(
        &run(&truncated, "Q4_K_M"),
        "truncated.dat: legacy imatrix truncated: values of entry 1 at offset 35",
    );

    let nan = dir.path().join("nan.gguf");
    tiny_imatrix(&nan, &[], |name, sums| {
        if name == "blk.2.ffn_up.weight" {
            sums[5] = f32::NAN;
        }
    });
    fails_with(
        &run(&nan, "Q4_K_M"),
        "imatrix entry blk.2.ffn_up.weight: non-finite value NaN at index 5",
    );

    let short = dir.path().join("short.gguf");
    tiny_imatrix(&short, &[], |name, sums| {
        if name == "blk.1.attn_v.weight" {
            sums.truncate(100);
        }
    });
    fails_with(
        &run(&short, "Q4_K_M"),
        "tensor blk.1.attn_v.weight: its imatrix entry has 100 values, the tensor needs 256",
    );

    let partial = dir.path().join("partial.gguf");
    tiny_imatrix(&partial, &["attn_k"], |_, _| {});
    fails_with(
        &run(&partial, "Q2_K_S"),
        "tensor blk.0.attn_k.weight: quantizing to q2_K requires importance data",
    );
    no_files_in(dir.path(), &[&truncated, &nan, &short, &partial]);
    // Without the type that requires it, a missing entry only means no weights.
    ok(&run(&partial, "Q4_K_M"));
}

#[test]
fn include_and_exclude_weights_filter_the_entries() {
    let dir = tempfile::tempdir().unwrap();
    let imatrix = dir.path().join("imatrix.gguf");
    tiny_imatrix(&imatrix, &[], |_, _| {});
    let out = dir.path().join("out.gguf");
    let input = tiny();
    let entries = |filter: &[&str]| {
        let mut args = vec!["quantize", "-q", "--imatrix", s(&imatrix)];
        args.extend_from_slice(filter);
        args.extend_from_slice(&[s(&input), s(&out), "Q4_K_M"]);
        ok(&quantforge(&args));
        let f = GgufFile::open(&out).unwrap();
        let n = f.metadata().get_u32("quantize.imatrix.entries_count").ok();
        drop(f);
        std::fs::remove_file(&out).unwrap();
        std::fs::remove_file(dir.path().join("out.gguf.qf.json")).unwrap();
        n
    };
    assert_eq!(entries(&[]), Some(29));
    // Substrings, repeatable.
    assert_eq!(
        entries(&["--include-weights", "attn_v", "--include-weights", "blk.0."]),
        Some(10)
    );
    assert_eq!(entries(&["--exclude-weights", "blk."]), Some(1));
    // Nothing left: quantized as without --imatrix, no imatrix metadata.
    assert_eq!(entries(&["--include-weights", "nothing"]), None);

    fails_with(
        &quantforge(&[
            "quantize",
            "--imatrix",
            s(&imatrix),
            "--include-weights",
            "a",
            "--exclude-weights",
            "b",
            s(&tiny()),
            s(&out),
            "Q4_K_M",
        ]),
        "--include-weights and --exclude-weights cannot be used together",
    );
    no_files_in(dir.path(), &[&imatrix]);
}

#[test]
fn progress_is_one_line_per_tensor_in_a_log_and_nothing_with_quiet() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.gguf");
    let logged = quantforge(&["quantize", s(&tiny()), s(&out), "Q4_K_M"]);
    let text = ok(&logged);
    assert!(text.contains("[   1/  39] output.weight"), "{text}");
    assert!(text.contains("[  39/  39] blk.3.ffn_up.weight"), "{text}");
    assert!(String::from_utf8_lossy(&logged.stderr).is_empty());
    // The summary: type pairs with counts and sizes, totals, fallbacks, time and rate.
    for needle in [
        "  f32     -> f32           9        0.009 ->        0.009",
        "  f16     -> q4_K         25        4.188 ->        1.178",
        "  f16     -> q6_K          5        1.062 ->        0.436",
        "  total                   39        5.259 ->        1.622",
        "  30 converted, 0 fallbacks; ",
        " MB/s",
    ] {
        assert!(text.contains(needle), "no {needle:?} in {text}");
    }
    let quiet = quantforge(&["quantize", "--quiet", s(&tiny()), s(&out), "Q4_K_M"]);
    let text = ok(&quiet);
    assert!(!text.contains("output.weight"), "{text}");
    assert!(text.starts_with("wrote "), "{text}");
    assert!(quiet.stderr.is_empty());
}

/// On a terminal (a pseudo-terminal from util-linux `script`): a progress bar on standard
/// error instead of the per-tensor lines.
#[cfg(target_os = "linux")]
#[test]
fn progress_is_a_bar_on_a_terminal() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.gguf");
    let quote = |p: &Path| format!("'{}'", s(p).replace('\'', r"'\''"));
    let command = format!(
        "{} quantize {} {} Q4_K_M",
        quote(Path::new(env!("CARGO_BIN_EXE_quantforge"))),
        quote(&tiny()),
        quote(&out)
    );
    let Ok(run) = Command::new("script")
        .args(["-qec", &command, "/dev/null"])
        .output()
    else {
        eprintln!("SKIPPED: no `script` command to give quantforge a terminal");
        return;
    };
    let text = String::from_utf8_lossy(&run.stdout);
    assert!(run.status.success(), "{text}");
    assert!(text.contains("/5.26 MiB") && text.contains("ETA"), "{text}");
    assert!(text.contains("/39 tensors "), "{text}");
    assert!(!text.contains("[   1/  39]"), "{text}");
    assert!(text.contains("wrote "), "{text}");
}
