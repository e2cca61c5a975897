//! `quantforge diff A B [--json]`: compares two models tensor by tensor
//! ([`quantforge::diff`]) and prints a table with a totals line, or one JSON document. It is a
//! report: the exit code is 0 whether or not the models differ.

use super::file_kind;
use anyhow::Result;
use clap::Args;
use quantforge::diff::{ErrorStats, Report, TensorDiff, Unmatched, Values, diff};
use serde_json::{Value as Json, json};
use std::fmt::Write as _;
use std::path::PathBuf;

#[derive(Args, Debug)]
#[command(after_help = "\
A and B are GGUF files (or first parts of split sets), safetensors files or model \
folders, in any mix. Tensors are matched by name. For each pair: the shapes, both types, \
whether the bytes are identical, and with both sides decoded to f32 the largest absolute \
difference, the element index (row-major) where it first occurs, and the RMSE. Elements \
where a side is NaN or infinite are left out of those figures and counted in the note \
column (in --json: non_finite_a, non_finite_b, non_finite_mismatches).

Exit code 0 whether or not the models differ; 2 when a file cannot be read.")]
pub struct DiffArgs {
    /// Print one JSON document instead of the table.
    #[arg(long)]
    json: bool,
    /// First model.
    a: PathBuf,
    /// Second model.
    b: PathBuf,
}

pub fn run(args: DiffArgs) -> Result<()> {
    let a = file_kind::open_model(&args.a)?;
    let b = file_kind::open_model(&args.b)?;
    let report = diff(&a, &b)?;
    if args.json {
        let doc = report_json(&report, &args);
        println!("{}", serde_json::to_string_pretty(&doc)?);
    } else {
        print!("{}", report_text(&report));
    }
    Ok(())
}

fn report_text(report: &Report) -> String {
    let header = [
        "name",
        "shape",
        "type A",
        "type B",
        "bytes",
        "max abs err",
        "at",
        "rmse",
        "note",
    ];
    let mut rows: Vec<[String; 9]> = vec![header.map(str::to_owned)];
    for t in &report.both {
        rows.push(tensor_row(t));
    }
    let mut widths = [0usize; 9];
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut s = String::new();
    for row in &rows {
        let mut line = String::new();
        for (i, (cell, &w)) in row.iter().zip(&widths).enumerate() {
            // Numbers right-aligned, text left-aligned.
            let _ = match i {
                5..=7 => write!(line, "{cell:>w$}  "),
                _ => write!(line, "{cell:<w$}  "),
            };
        }
        s.push_str(line.trim_end());
        s.push('\n');
    }
    for (label, list) in [("A", &report.only_in_a), ("B", &report.only_in_b)] {
        for Unmatched { name, side } in list {
            let _ = writeln!(
                s,
                "only in {label}: {name} ({} {:?})",
                side.encoding, side.shape
            );
        }
    }
    let overall = report.overall();
    let identical = report.identical();
    let _ = writeln!(
        s,
        "totals: {} tensors in both: {identical} identical, {} differing; {} only in A, {} \
         only in B; overall RMSE {} over {} elements, max abs error {}",
        report.both.len(),
        report.both.len() - identical,
        report.only_in_a.len(),
        report.only_in_b.len(),
        number(overall.rmse()),
        overall.compared,
        number(overall.max_index.map(|_| overall.max_abs)),
    );
    s
}

fn tensor_row(t: &TensorDiff) -> [String; 9] {
    let shape = if t.a.shape == t.b.shape {
        format!("{:?}", t.a.shape)
    } else {
        format!("{:?} / {:?}", t.a.shape, t.b.shape)
    };
    let (max, at, rmse, note) = match &t.values {
        Values::Compared(s) => (
            number(s.max_index.map(|_| s.max_abs)),
            s.max_index
                .map_or_else(|| "-".to_owned(), |i| i.to_string()),
            number(s.rmse()),
            non_finite_note(s),
        ),
        Values::ShapesDiffer => (dash(), dash(), dash(), "shapes differ".to_owned()),
        Values::CannotDecode(e) => (dash(), dash(), dash(), format!("cannot decode {e}")),
    };
    [
        t.name.clone(),
        shape,
        t.a.encoding.to_string(),
        t.b.encoding.to_string(),
        if t.identical_bytes { "same" } else { "differ" }.to_owned(),
        max,
        at,
        rmse,
        note,
    ]
}

fn non_finite_note(s: &ErrorStats) -> String {
    if s.non_finite_a == 0 && s.non_finite_b == 0 {
        return String::new();
    }
    format!(
        "NaN/inf: {} in A, {} in B, {} mismatched",
        s.non_finite_a, s.non_finite_b, s.non_finite_mismatches
    )
}

fn number(value: Option<f64>) -> String {
    match value {
        Some(0.0) => "0".to_owned(),
        Some(v) => format!("{v:.4e}"),
        None => dash(),
    }
}

fn dash() -> String {
    "-".to_owned()
}

fn report_json(report: &Report, args: &DiffArgs) -> Json {
    let tensors: Vec<Json> = report.both.iter().map(tensor_json).collect();
    let side_list = |list: &[Unmatched]| -> Vec<Json> {
        list.iter()
            .map(|Unmatched { name, side }| {
                json!({"name": name, "type": side.encoding.to_string(), "shape": side.shape})
            })
            .collect()
    };
    let overall = report.overall();
    let identical = report.identical();
    json!({
        "a": args.a.display().to_string(),
        "b": args.b.display().to_string(),
        "tensors": tensors,
        "only_in_a": side_list(&report.only_in_a),
        "only_in_b": side_list(&report.only_in_b),
        "totals": {
            "in_both": report.both.len(),
            "identical": identical,
            "differing": report.both.len() - identical,
            "only_in_a": report.only_in_a.len(),
            "only_in_b": report.only_in_b.len(),
            "elements_compared": overall.compared,
            "rmse": overall.rmse(),
            "max_abs_error": overall.max_index.map(|_| overall.max_abs),
        },
    })
}

fn tensor_json(t: &TensorDiff) -> Json {
    let stats = match &t.values {
        Values::Compared(s) => Some(s),
        _ => None,
    };
    let note = match &t.values {
        Values::Compared(_) => None,
        Values::ShapesDiffer => Some("shapes differ".to_owned()),
        Values::CannotDecode(e) => Some(format!("cannot decode {e}")),
    };
    json!({
        "name": t.name,
        "shape_a": t.a.shape,
        "shape_b": t.b.shape,
        "shape_equal": t.shapes_equal(),
        "type_a": t.a.encoding.to_string(),
        "type_b": t.b.encoding.to_string(),
        "identical_bytes": t.identical_bytes,
        "elements_compared": stats.map(|s| s.compared),
        "max_abs_error": stats.and_then(|s| s.max_index.map(|_| s.max_abs)),
        "max_error_index": stats.and_then(|s| s.max_index),
        "rmse": stats.and_then(ErrorStats::rmse),
        "cosine": stats.and_then(ErrorStats::cosine),
        "non_finite_a": stats.map(|s| s.non_finite_a),
        "non_finite_b": stats.map(|s| s.non_finite_b),
        "non_finite_mismatches": stats.map(|s| s.non_finite_mismatches),
        "note": note,
    })
}
