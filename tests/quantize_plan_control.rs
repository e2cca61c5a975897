//! `quantforge quantize`'s plan control: `--tensor-type-file` (llama-quantize's rules file,
//! its rules in command-line order among `--tensor-type`), `--no-fallback`, and the
//! sizes and bits per weight `--dry-run` reports for every output.

mod model_cli;

use model_cli::{arg as s, fails_naming, names, quantforge, success, tiny};
use quantforge::formats::gguf::{GgufBuilder, GgufFile, Value};
use quantforge::kernels::GgmlType;

/// Removes an output and its manifest.
fn remove_output(out: &std::path::Path) {
    std::fs::remove_file(out).unwrap();
    let mut manifest = out.as_os_str().to_owned();
    manifest.push(".qf.json");
    std::fs::remove_file(manifest).unwrap();
}

/// The type of `name` in the GGUF at `path`.
fn type_of(path: &std::path::Path, name: &str) -> String {
    let file = GgufFile::open(path).unwrap();
    let t = file.tensors().iter().find(|t| t.name() == name).unwrap();
    t.ty().to_string()
}

#[test]
fn a_rules_file_is_the_same_rules_given_inline_in_their_order() {
    let dir = tempfile::tempdir().unwrap();
    let rules = dir.path().join("rules.txt");
    // Spaces, tabs, blank lines and a type in capitals, as llama-quantize reads them.
    std::fs::write(&rules, "attn_v=q8_0\tffn_down=Q5_K\n\n  output=q6_K \n").unwrap();
    let (file, inline) = (dir.path().join("file.gguf"), dir.path().join("inline.gguf"));
    success(&quantforge(&[
        "quantize",
        "-q",
        s(&tiny()),
        s(&file),
        "Q4_K_M",
        "--tensor-type-file",
        s(&rules),
    ]));
    success(&quantforge(&[
        "quantize",
        "-q",
        s(&tiny()),
        s(&inline),
        "Q4_K_M",
        "--tensor-type",
        "attn_v=q8_0",
        "--tensor-type",
        "ffn_down=q5_K",
        "--tensor-type",
        "output=q6_K",
    ]));
    assert!(std::fs::read(&file).unwrap() == std::fs::read(&inline).unwrap());
    assert_eq!(type_of(&file, "blk.0.attn_v.weight"), "q8_0");
    assert_eq!(type_of(&file, "blk.1.ffn_down.weight"), "q5_K");
    // The first matching rule wins, so the order across the two options decides.
    let (a, b) = (dir.path().join("a.gguf"), dir.path().join("b.gguf"));
    success(&quantforge(&[
        "quantize",
        "-q",
        s(&tiny()),
        s(&a),
        "Q4_K_M",
        "--tensor-type",
        "attn_v=q6_K",
        "--tensor-type-file",
        s(&rules),
    ]));
    success(&quantforge(&[
        "quantize",
        "-q",
        s(&tiny()),
        s(&b),
        "Q4_K_M",
        "--tensor-type-file",
        s(&rules),
        "--tensor-type",
        "attn_v=q6_K",
    ]));
    assert_eq!(type_of(&a, "blk.0.attn_v.weight"), "q6_K");
    assert_eq!(type_of(&b, "blk.0.attn_v.weight"), "q8_0");
}

#[test]
fn a_bad_rules_file_names_the_file_and_the_rule() {
    let dir = tempfile::tempdir().unwrap();
    let rules = dir.path().join("rules.txt");
    std::fs::write(&rules, "attn_v=q8_0 ffn_down\n").unwrap();
    let out = dir.path().join("out.gguf");
    let run = |rules: &std::path::Path| {
        quantforge(&[
            "quantize",
            s(&tiny()),
            s(&out),
            "Q4_K_M",
            "--tensor-type-file",
            s(rules),
        ])
    };
    fails_naming(
        &run(&rules),
        &format!("{}: malformed --tensor-type \"ffn_down\"", s(&rules)),
    );
    std::fs::write(&rules, "attn_v=q9_9\n").unwrap();
    fails_naming(&run(&rules), "q9_9");
    fails_naming(&run(&dir.path().join("missing.txt")), "cannot read");
    assert_eq!(names(dir.path()), ["rules.txt"]);
}

#[test]
fn no_fallback_refuses_listing_the_tensors() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.gguf");
    // The tiny llama's rows fit every k-quant: nothing to refuse.
    success(&quantforge(&[
        "quantize",
        "-q",
        s(&tiny()),
        s(&out),
        "Q4_K_M",
        "--no-fallback",
    ]));
    remove_output(&out);
    // Rows of 320 fit no 256-wide k-quant block: llama.cpp falls back to q5_0.
    let input = dir.path().join("narrow.gguf");
    let mut b = GgufBuilder::new();
    let m = b.metadata_mut();
    m.set("general.architecture", Value::from("llama")).unwrap();
    m.set("llama.block_count", Value::U32(1)).unwrap();
    let data: Vec<u8> = (0..320 * 4)
        .flat_map(|i| (i as f32 * 0.01).to_le_bytes())
        .collect();
    b.add_tensor("blk.0.attn_q.weight", GgmlType::F32, &[320, 4], data)
        .unwrap();
    b.write(&input).unwrap();
    success(&quantforge(&[
        "quantize",
        "-q",
        s(&input),
        s(&out),
        "Q4_K_M",
    ]));
    assert_eq!(type_of(&out, "blk.0.attn_q.weight"), "q5_0");
    remove_output(&out);
    for dry in [&["--dry-run"][..], &[]] {
        let mut args = vec!["quantize", s(&input), s(&out), "Q4_K_M", "--no-fallback"];
        args.extend(dry);
        fails_naming(
            &quantforge(&args),
            "--no-fallback: 1 tensor(s) of Q4_K_M would take a fallback type: \
             blk.0.attn_q.weight (q4_K does not fit rows of 320; q5_0 instead)",
        );
    }
    assert_eq!(names(dir.path()), ["narrow.gguf"]);
}

#[test]
fn dry_run_reports_each_output_s_size_and_bits_per_weight() {
    let dir = tempfile::tempdir().unwrap();
    let text = success(&quantforge(&[
        "quantize",
        "--dry-run",
        s(&tiny()),
        "--types",
        "Q4_K_M,Q8_0",
        "--out-dir",
        s(dir.path()),
    ]));
    assert!(names(dir.path()).is_empty());
    // The sizes it reports are the sizes of the files a run writes.
    success(&quantforge(&[
        "quantize",
        "-q",
        s(&tiny()),
        "--types",
        "Q4_K_M,Q8_0",
        "--out-dir",
        s(dir.path()),
    ]));
    for preset in ["Q4_K_M", "Q8_0"] {
        let path = dir.path().join(format!("tiny-llama-f16-{preset}.gguf"));
        let size = std::fs::metadata(&path).unwrap().len();
        let line = format!("would write {} ({size} bytes,", s(&path));
        assert!(text.contains(&line), "{line} not in:\n{text}");
    }
    assert!(text.contains("bits per weight"), "{text}");
    let table = text
        .lines()
        .skip_while(|l| !l.starts_with("output "))
        .collect::<Vec<_>>();
    assert_eq!(table.len(), 3, "{text}");
    assert!(
        table[1].starts_with("Q4_K_M") && table[2].starts_with("Q8_0"),
        "{text}"
    );
    // Q8_0 is 8.5 bits per weight for the quantized tensors, more with the f32 norms.
    let bpw: f64 = table[2].split_whitespace().nth(2).unwrap().parse().unwrap();
    assert!((8.5..9.0).contains(&bpw), "{text}");
}
