//! `quantforge quantize --report FILE`: the error of every converted tensor, measured on
//! its rows as they are quantized, is what `quantforge diff` computes afterwards on the
//! source and the finished file (RMSE, largest error and where, cosine similarity),
//! number for number; for every output of a one-pass run too.

mod model_cli;

use model_cli::{arg as s, quantforge, success, tiny, tiny_imatrix};
use serde_json::Value;
use std::collections::HashMap;
use std::path::Path;

fn json(text: &str) -> Value {
    serde_json::from_str(text).expect("JSON")
}

/// Asserts that every tensor of every output in the report at `report` has the figures
/// `diff` gives for `input` against that output, and that every converted tensor is
/// there.
fn report_equals_diff(input: &Path, report: &Path) {
    let report = json(&std::fs::read_to_string(report).unwrap());
    for output in report["outputs"].as_array().unwrap() {
        let file = output["files"][0].as_str().unwrap();
        let diff = json(&success(&quantforge(&["diff", "--json", s(input), file])));
        let diffs: HashMap<&str, &Value> = diff["tensors"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| (t["name"].as_str().unwrap(), t))
            .collect();
        let converted = diffs
            .values()
            .filter(|t| t["type_a"] != t["type_b"])
            .count();
        let tensors = output["tensors"].as_array().unwrap();
        assert_eq!(
            tensors.len(),
            converted,
            "{file}: one entry per converted tensor"
        );
        for t in tensors {
            let name = t["name"].as_str().unwrap();
            let d = diffs[name];
            assert_eq!(t["type"], d["type_b"], "{file} {name}");
            for key in [
                "elements_compared",
                "rmse",
                "max_abs_error",
                "max_error_index",
                "cosine",
            ] {
                assert_eq!(t[key], d[key], "{file} {name}: {key}");
            }
        }
    }
}

#[test]
fn the_report_of_one_pass_equals_diff_on_every_output() {
    let dir = tempfile::tempdir().unwrap();
    let imatrix = dir.path().join("imatrix.gguf");
    tiny_imatrix(&imatrix, &[], |_, _| {});
    let report = dir.path().join("report.json");
    let text = success(&quantforge(&[
        "quantize",
        "-q",
        s(&tiny()),
        "--imatrix",
        s(&imatrix),
        "--threads",
        "2",
        "--types",
        "Q4_K_M,IQ4_XS,Q2_K,Q8_0",
        "--out-dir",
        s(dir.path()),
        "--report",
        s(&report),
    ]));
    assert_eq!(text.matches("worst tensors").count(), 4, "{text}");
    report_equals_diff(&tiny(), &report);
}

#[test]
fn the_report_of_the_real_gemma_equals_diff() {
    let dir = tempfile::tempdir().unwrap();
    let Some(f16) = model_cli::gemma_f16(dir.path()) else {
        return;
    };
    let report = dir.path().join("report.json");
    let out = dir.path().join("q4.gguf");
    success(&quantforge(&[
        "quantize",
        "-q",
        s(&f16),
        s(&out),
        "Q4_K_M",
        "--report",
        s(&report),
    ]));
    report_equals_diff(&f16, &report);
}

#[test]
fn without_report_there_is_no_file_and_no_list() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.gguf");
    let text = success(&quantforge(&[
        "quantize",
        "-q",
        s(&tiny()),
        s(&out),
        "Q4_K_M",
    ]));
    assert!(!text.contains("worst tensors"), "{text}");
    assert_eq!(model_cli::names(dir.path()), ["out.gguf"]);
}
