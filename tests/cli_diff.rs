//! `quantforge diff` as a user runs it: a model against itself, the f16 tiny llama
//! against its Q8_0 quantization (every figure recomputed here from the kernels'
//! dequantizer), GGUF against safetensors, tensors missing on one side, different
//! shapes, NaN and infinities, and unreadable files (exit code 2 naming the file).

mod model_cli;

use model_cli::{arg, fails_naming, quantforge, success, tensor_f32, tiny, tiny_quantized};
use quantforge::formats::gguf::{GgufBuilder, GgufFile};
use quantforge::kernels::GgmlType;
use serde_json::Value as Json;
use std::path::Path;

fn diff_json(a: &Path, b: &Path) -> Json {
    let text = success(&quantforge(&["diff", "--json", arg(a), arg(b)]));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
}

fn f32_bytes(values: &[f32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

/// A GGUF of f32 tensors (name, ggml dims, values).
fn write_f32_model(path: &Path, tensors: &[(&str, &[u64], &[f32])]) {
    let mut builder = GgufBuilder::new();
    for (name, ne, values) in tensors {
        builder
            .add_tensor(*name, GgmlType::F32, ne, f32_bytes(values))
            .unwrap();
    }
    builder.write(path).unwrap();
}

fn tensor<'a>(doc: &'a Json, name: &str) -> &'a Json {
    doc["tensors"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == name)
        .unwrap_or_else(|| panic!("no tensor {name} in {doc}"))
}

#[test]
fn a_model_against_itself_is_identical_with_zero_error() {
    let doc = diff_json(&tiny(), &tiny());
    let tensors = doc["tensors"].as_array().unwrap();
    assert_eq!(tensors.len(), 39);
    for t in tensors {
        assert_eq!(t["identical_bytes"], true, "{t}");
        assert_eq!(t["shape_equal"], true, "{t}");
        assert_eq!(t["type_a"], t["type_b"], "{t}");
        assert_eq!(t["max_abs_error"], 0.0, "{t}");
        assert_eq!(t["rmse"], 0.0, "{t}");
    }
    let totals = &doc["totals"];
    assert_eq!(totals["identical"], 39);
    assert_eq!(totals["differing"], 0);
    assert_eq!(totals["only_in_a"], 0);
    assert_eq!(totals["only_in_b"], 0);
    assert_eq!(totals["rmse"], 0.0);

    let text = success(&quantforge(&["diff", arg(&tiny()), arg(&tiny())]));
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 1 + 39 + 1, "{text}");
    assert!(lines[0].starts_with("name"), "{text}");
    let totals = lines.last().unwrap();
    assert!(
        totals.contains("39 tensors in both: 39 identical, 0 differing"),
        "{totals}"
    );
    assert!(totals.contains("overall RMSE 0 "), "{totals}");
    // An aligned table: every row has its type column where the header has it.
    let col = lines[0].find("type A").unwrap();
    for row in &lines[1..40] {
        assert!(
            row[col..].starts_with("f16") || row[col..].starts_with("f32"),
            "{row}"
        );
    }
}

#[test]
fn f16_against_q8_0_reports_the_errors_computed_independently() {
    let dir = tempfile::tempdir().unwrap();
    let q8 = tiny_quantized(dir.path(), "Q8_0");
    let doc = diff_json(&tiny(), &q8);
    let (a, b) = (
        GgufFile::open(tiny()).unwrap(),
        GgufFile::open(&q8).unwrap(),
    );

    let (mut sum_squares, mut count, mut weight_squares) = (0f64, 0u64, 0f64);
    let mut differing = 0;
    for ta in a.tensors() {
        let name = ta.name();
        let t = tensor(&doc, name);
        let tb = b.tensor(name).unwrap();
        assert_eq!(t["type_a"], ta.ty().name());
        assert_eq!(t["type_b"], tb.ty().name());
        assert_eq!(t["shape_equal"], true);
        let (x, y) = (tensor_f32(&a, name), tensor_f32(&b, name));
        let exact = |i: usize| (f64::from(x[i]) - f64::from(y[i])).abs();
        let (mut max, mut sq) = (0f64, 0f64);
        for (i, &p) in x.iter().enumerate() {
            let d = exact(i);
            max = max.max(d);
            sq += d * d;
            weight_squares += f64::from(p) * f64::from(p);
        }
        // Differences are taken in f32, a rounding of the exact ones (serde_json prints
        // the shortest exact digits and parses them to within an ulp of f64).
        let f32_ulp = 2f64.powi(-23);
        let reported = t["max_abs_error"].as_f64().unwrap();
        assert!(
            (reported - max).abs() <= max * f32_ulp,
            "{name}: {reported} vs {max}"
        );
        let at = t["max_error_index"].as_u64().unwrap() as usize;
        assert!(
            (exact(at) - max).abs() <= max * f32_ulp,
            "{name}: the largest difference is not at {at}"
        );
        // The sums are made in f32 over short runs of elements, then in f64.
        let rmse = (sq / x.len() as f64).sqrt();
        let reported = t["rmse"].as_f64().unwrap();
        assert!(
            (reported - rmse).abs() <= 1e-6 * rmse,
            "{name}: {reported} vs {rmse}"
        );
        assert_eq!(t["elements_compared"].as_u64().unwrap(), x.len() as u64);
        let same = ta.ty() == tb.ty();
        assert_eq!(t["identical_bytes"], same, "{name}");
        if same {
            assert_eq!(max, 0.0, "{name}");
        } else {
            assert!(max > 0.0, "{name}: q8_0 of random weights is not exact");
            differing += 1;
        }
        sum_squares += sq;
        count += x.len() as u64;
    }
    let totals = &doc["totals"];
    assert_eq!(totals["differing"], differing);
    assert!(differing >= 29, "only {differing} tensors quantized");
    let overall = totals["rmse"].as_f64().unwrap();
    let expected = (sum_squares / count as f64).sqrt();
    assert!((overall - expected).abs() <= 1e-6 * expected);
    // Nonzero but small: q8_0 keeps well under 1% of the weights' RMS.
    let weight_rms = (weight_squares / count as f64).sqrt();
    assert!(
        overall > 0.0 && overall < 0.01 * weight_rms,
        "{overall} vs {weight_rms}"
    );
}

#[test]
fn gguf_against_its_safetensors_conversion_is_identical() {
    let dir = tempfile::tempdir().unwrap();
    let st = dir.path().join("tiny.safetensors");
    success(&quantforge(&["convert", arg(&tiny()), arg(&st)]));
    let doc = diff_json(&tiny(), &st);
    assert_eq!(doc["totals"]["identical"], 39, "{}", doc["totals"]);
    assert_eq!(doc["totals"]["max_abs_error"], 0.0);
}

#[test]
fn missing_tensors_other_shapes_and_non_finite_values_are_reported_not_fatal() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a.gguf"), dir.path().join("b.gguf"));
    let values: Vec<f32> = (0..32).map(|i| i as f32 * 0.25).collect();
    let mut odd = values.clone();
    odd[3] = f32::NAN;
    odd[5] = f32::INFINITY;
    odd[9] += 2.0;
    odd[20] -= 2.0;
    write_f32_model(
        &a,
        &[
            ("same", &[32], &values),
            ("odd", &[32], &values),
            ("reshaped", &[8, 4], &values),
            ("only_a", &[32], &values),
        ],
    );
    write_f32_model(
        &b,
        &[
            ("only_b", &[32], &values),
            ("reshaped", &[4, 8], &values),
            ("odd", &[32], &odd),
            ("same", &[32], &values),
        ],
    );
    let doc = diff_json(&a, &b);

    let odd = tensor(&doc, "odd");
    assert_eq!(odd["identical_bytes"], false);
    assert_eq!(odd["elements_compared"], 30);
    assert_eq!(odd["non_finite_a"], 0);
    assert_eq!(odd["non_finite_b"], 2);
    assert_eq!(odd["non_finite_mismatches"], 2);
    assert_eq!(odd["max_abs_error"], 2.0);
    assert_eq!(odd["max_error_index"], 9, "the first of the tied maxima");
    assert_eq!(odd["rmse"].as_f64().unwrap(), (8.0f64 / 30.0).sqrt());

    let reshaped = tensor(&doc, "reshaped");
    assert_eq!(reshaped["shape_equal"], false);
    assert_eq!(reshaped["shape_a"], serde_json::json!([4, 8]));
    assert_eq!(reshaped["shape_b"], serde_json::json!([8, 4]));
    assert_eq!(reshaped["note"], "shapes differ");
    assert!(reshaped["rmse"].is_null());

    assert_eq!(tensor(&doc, "same")["identical_bytes"], true);
    assert_eq!(doc["only_in_a"][0]["name"], "only_a");
    assert_eq!(doc["only_in_b"][0]["name"], "only_b");
    assert_eq!(doc["only_in_b"][0]["type"], "f32");
    let totals = &doc["totals"];
    assert_eq!(
        [
            &totals["in_both"],
            &totals["identical"],
            &totals["differing"],
            &totals["only_in_a"],
            &totals["only_in_b"],
        ],
        [3, 1, 2, 1, 1]
    );

    let text = success(&quantforge(&["diff", arg(&a), arg(&b)]));
    assert!(
        text.contains("NaN/inf: 0 in A, 2 in B, 2 mismatched"),
        "{text}"
    );
    assert!(text.contains("only in A: only_a (f32 [32])"), "{text}");
    assert!(text.contains("only in B: only_b (f32 [32])"), "{text}");
    assert!(text.contains("[4, 8] / [8, 4]"), "{text}");
}

#[test]
fn unreadable_files_exit_2_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.gguf");
    fails_naming(
        &quantforge(&["diff", arg(&tiny()), arg(&missing)]),
        "missing.gguf",
    );
    let truncated = dir.path().join("truncated.gguf");
    let bytes = std::fs::read(tiny()).unwrap();
    std::fs::write(&truncated, &bytes[..bytes.len() - 1000]).unwrap();
    fails_naming(
        &quantforge(&["diff", arg(&truncated), arg(&tiny())]),
        "truncated.gguf",
    );
    let not_a_model = dir.path().join("notes.txt");
    std::fs::write(&not_a_model, "hello").unwrap();
    fails_naming(
        &quantforge(&["diff", "--json", arg(&not_a_model), arg(&tiny())]),
        "notes.txt",
    );
}
