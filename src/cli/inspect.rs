//! `quantforge inspect FILE [--json] [--full]`: a GGUF file's header, metadata (with wire
//! types) and tensor table. The first part of a split set is shown as the whole model.
//! Safetensors files and model folders are described by [`super::safetensors`].

use super::file_kind::{self, FileKind};
use anyhow::Result;
use clap::Args;
use quantforge_formats::gguf::{
    Array, GgufFile, GgufModel, KEY_SPLIT_COUNT, KEY_SPLIT_NO, TensorView, Value,
};
use serde_json::{Value as Json, json};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// Array elements shown when not `--full`.
const SHOWN_ELEMENTS: usize = 8;
/// Characters of a string shown when not `--full`.
const SHOWN_CHARS: usize = 120;

#[derive(Args, Debug)]
pub struct InspectArgs {
    /// Print JSON instead of text (arrays still abbreviated unless --full).
    #[arg(long)]
    json: bool,
    /// Print every array element and whole strings (e.g. all 262144 tokens).
    #[arg(long)]
    full: bool,
    /// The file (for a split set, its first part: NAME-00001-of-0000N.gguf), or a
    /// safetensors file, index or model folder.
    file: PathBuf,
}

pub fn run(args: InspectArgs) -> Result<()> {
    match file_kind::detect(&args.file)? {
        FileKind::Gguf => inspect_gguf(&args),
        FileKind::Safetensors => super::safetensors::inspect(&args.file, args.json, args.full),
    }
}

fn inspect_gguf(args: &InspectArgs) -> Result<()> {
    let model = open_model(&args.file)?;
    let out = if args.json {
        let mut text = serde_json::to_string_pretty(&to_json(&model, args.full))?;
        text.push('\n');
        text
    } else {
        to_text(&model, args.full)
    };
    print!("{out}");
    Ok(())
}

/// The model starting at `path`: the whole set for a first split part, else the file.
fn open_model(path: &Path) -> Result<GgufModel> {
    let file = GgufFile::open(path)?;
    let meta = file.metadata();
    let first_of_many = meta.get_uint(KEY_SPLIT_COUNT).is_ok_and(|n| n > 1)
        && meta.get_uint(KEY_SPLIT_NO).is_ok_and(|n| n == 0);
    if first_of_many {
        drop(file);
        return Ok(GgufModel::open(path)?);
    }
    // A plain file, or a later part of a split set shown on its own.
    Ok(GgufModel::from_file(file))
}

fn to_text(model: &GgufModel, full: bool) -> String {
    let mut s = String::new();
    for part in model.parts() {
        let layout = part.layout();
        let _ = writeln!(
            s,
            "{}: GGUF v{}, {} bytes, alignment {}, data at offset {}, {} keys, {} tensors",
            part.path()
                .map(|p| p.display().to_string())
                .unwrap_or_default(),
            part.header().version(),
            part.file_size(),
            layout.alignment,
            layout.data_offset,
            part.metadata().len(),
            part.tensors().len()
        );
    }
    let meta = model.metadata();
    let _ = writeln!(s, "\nmetadata ({} keys):", meta.len());
    let width = meta.keys().map(str::len).max().unwrap_or(0);
    for (key, value) in meta.iter() {
        let _ = writeln!(
            s,
            "  {key:width$}  {:10}  {}",
            value.type_name(),
            text_value(value, full)
        );
    }
    let total: u64 = model.tensors().map(|v| v.data().len() as u64).sum();
    let _ = writeln!(
        s,
        "\ntensors ({}, {total} bytes of data):",
        model.n_tensors()
    );
    let width = model.tensors().map(|v| v.name().len()).max().unwrap_or(0);
    let split = model.parts().len() > 1;
    let _ = writeln!(
        s,
        "  {:>5}  {:width$}  {:8}  {:24}  {:>12}  {:>12}{}",
        "#",
        "name",
        "type",
        "ne (ggml order)",
        "bytes",
        "offset",
        if split { "  part" } else { "" }
    );
    for (i, v) in model.tensors().enumerate() {
        let _ = writeln!(
            s,
            "  {i:>5}  {:width$}  {:8}  {:24}  {:>12}  {:>12}{}",
            v.name(),
            v.ty().name(),
            format!("{:?}", v.ne()),
            v.data().len(),
            v.offset(),
            if split {
                format!("  {:>4}", v.part() + 1)
            } else {
                String::new()
            }
        );
    }
    s
}

/// A value as one line of text: strings quoted and escaped, long things abbreviated.
fn text_value(value: &Value, full: bool) -> String {
    match value {
        Value::String(v) => quoted(&v.to_string_lossy(), full),
        Value::Array(a) => text_array(a, full),
        Value::F32(v) => format!("{v:?}"),
        Value::F64(v) => format!("{v:?}"),
        other => json_scalar(other).to_string(),
    }
}

fn quoted(text: &str, full: bool) -> String {
    let count = text.chars().count();
    if full || count <= SHOWN_CHARS {
        return format!("{text:?}");
    }
    let head: String = text.chars().take(SHOWN_CHARS).collect();
    format!("{head:?}... ({count} chars)")
}

/// `[a, b, ... N more] (len L)`; the length is given once, for the outermost array.
fn text_array(a: &Array, full: bool) -> String {
    format!("{} (len {})", text_items(a, full), a.len())
}

fn text_items(a: &Array, full: bool) -> String {
    let n = a.len();
    let shown = if full { n } else { n.min(SHOWN_ELEMENTS) };
    let items: Vec<String> = (0..shown).map(|i| text_element(a, i, full)).collect();
    let more = if shown < n {
        format!(", ... {} more", n - shown)
    } else {
        String::new()
    };
    format!("[{}{more}]", items.join(", "))
}

fn text_element(a: &Array, i: usize, full: bool) -> String {
    match a {
        Array::String(v) => quoted(&String::from_utf8_lossy(&v[i]), full),
        Array::Array(v) => text_items(&v[i], full),
        Array::F32(v) => format!("{:?}", v[i]),
        Array::F64(v) => format!("{:?}", v[i]),
        other => json_element(other, i, full).to_string(),
    }
}

fn to_json(model: &GgufModel, full: bool) -> Json {
    let parts: Vec<Json> = model
        .parts()
        .iter()
        .map(|p| {
            json!({
                "path": p.path().map(|p| p.display().to_string()),
                "version": p.header().version(),
                "file_size": p.file_size(),
                "alignment": p.layout().alignment,
                "data_offset": p.layout().data_offset,
                "n_keys": p.metadata().len(),
                "n_tensors": p.tensors().len(),
            })
        })
        .collect();
    let metadata: Vec<Json> = model
        .metadata()
        .iter()
        .map(|(key, value)| {
            let mut entry = json!({"key": key, "type": value.type_name()});
            if let Value::Array(a) = value {
                entry["len"] = json!(a.len());
                entry["truncated"] = json!(!full && a.len() > SHOWN_ELEMENTS);
            }
            entry["value"] = json_value(value, full);
            entry
        })
        .collect();
    let tensors: Vec<Json> = model.tensors().map(|v| tensor_json(&v)).collect();
    json!({
        "format": "gguf",
        "parts": parts,
        "metadata": metadata,
        "tensors": tensors,
    })
}

fn tensor_json(v: &TensorView<'_>) -> Json {
    json!({
        "name": v.name(),
        "type": v.ty().name(),
        "ne": v.ne(),
        "shape": v.shape(),
        "bytes": v.data().len(),
        "offset": v.offset(),
        "part": v.part(),
    })
}

/// JSON for a value; non-finite floats become the strings "NaN", "inf", "-inf".
fn json_value(value: &Value, full: bool) -> Json {
    match value {
        Value::Array(a) => json_array(a, full),
        Value::String(s) if !full => {
            let text = s.to_string_lossy();
            json!(text.chars().take(SHOWN_CHARS).collect::<String>())
        }
        other => json_scalar(other),
    }
}

fn json_scalar(value: &Value) -> Json {
    match value {
        Value::U8(v) => json!(v),
        Value::I8(v) => json!(v),
        Value::U16(v) => json!(v),
        Value::I16(v) => json!(v),
        Value::U32(v) => json!(v),
        Value::I32(v) => json!(v),
        Value::U64(v) => json!(v),
        Value::I64(v) => json!(v),
        Value::F32(v) => json_float(f64::from(*v)),
        Value::F64(v) => json_float(*v),
        Value::Bool(v) => json!(v),
        Value::String(v) => json!(v.to_string_lossy()),
        Value::Array(a) => json_array(a, true),
    }
}

fn json_float(v: f64) -> Json {
    if v.is_finite() {
        json!(v)
    } else if v.is_nan() {
        json!("NaN")
    } else if v > 0.0 {
        json!("inf")
    } else {
        json!("-inf")
    }
}

fn json_array(a: &Array, full: bool) -> Json {
    let shown = if full {
        a.len()
    } else {
        a.len().min(SHOWN_ELEMENTS)
    };
    Json::Array((0..shown).map(|i| json_element(a, i, full)).collect())
}

fn json_element(a: &Array, i: usize, full: bool) -> Json {
    match a {
        Array::U8(v) => json!(v[i]),
        Array::I8(v) => json!(v[i]),
        Array::U16(v) => json!(v[i]),
        Array::I16(v) => json!(v[i]),
        Array::U32(v) => json!(v[i]),
        Array::I32(v) => json!(v[i]),
        Array::U64(v) => json!(v[i]),
        Array::I64(v) => json!(v[i]),
        Array::F32(v) => json_float(f64::from(v[i])),
        Array::F64(v) => json_float(v[i]),
        Array::Bool(v) => json!(v[i]),
        Array::String(v) => json_value(
            &Value::String(quantforge_formats::gguf::GgufString::from_bytes(
                v[i].to_vec(),
            )),
            full,
        ),
        Array::Array(v) => json_array(&v[i], full),
    }
}
