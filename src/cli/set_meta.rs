//! `quantforge set-meta IN OUT KEY=TYPE:VALUE... [--delete KEY]...`: writes a copy of a
//! GGUF file with metadata values set (in place when the key exists, keeping the order of
//! every other key) or deleted. Tensor data is copied as is.

use super::file_kind::{self, FileKind};
use anyhow::{Context, Result, bail};
use clap::Args;
use quantforge_formats::gguf::{Array, GgufModel, Value, ValueType};
use serde_json::Value as Json;
use std::path::PathBuf;

#[derive(Args, Debug)]
#[command(after_help = "\
ASSIGNMENT is KEY=TYPE:VALUE, split at the first '=' and the first ':' after it.
TYPE is one of the GGUF wire types:
  u8 i8 u16 i16 u32 i32 u64 i64   integers, range-checked (e.g. llama.block_count=u32:26)
  f32 f64                         floats (e.g. llama.rope.freq_base=f32:10000, f32:nan)
  bool                            true or false
  str                             the rest of the argument, verbatim (may contain ':' '=')
  arr[T]                          VALUE is a JSON array of T (e.g. general.tags=arr[str]:[\"a\",\"b\"],
                                  x=arr[i32]:[1,-2], floats may be \"nan\"/\"inf\" strings)
  arr[arr[T]]                     nested JSON arrays (e.g. x=arr[arr[u8]]:[[1],[2,3]])
An existing key keeps its position (its type may change); a new key is appended.
split.* keys cannot be set (convert manages them); a split set must be merged first.")]
pub struct SetMetaArgs {
    /// Delete this key (repeatable).
    #[arg(long = "delete", value_name = "KEY")]
    delete: Vec<String>,
    /// Input GGUF file.
    input: PathBuf,
    /// Output GGUF file (may be the input: it is replaced atomically).
    output: PathBuf,
    /// KEY=TYPE:VALUE assignments, applied in order.
    #[arg(value_name = "ASSIGNMENT")]
    assignments: Vec<String>,
}

pub fn run(args: SetMetaArgs) -> Result<()> {
    match file_kind::detect(&args.input)? {
        FileKind::Gguf => set_meta_gguf(&args),
        FileKind::Safetensors => bail!(
            "{}: set-meta edits GGUF files; this is safetensors",
            args.input.display()
        ),
    }
}

fn set_meta_gguf(args: &SetMetaArgs) -> Result<()> {
    if args.assignments.is_empty() && args.delete.is_empty() {
        bail!("nothing to do: give KEY=TYPE:VALUE assignments or --delete KEY");
    }
    let changes = args
        .assignments
        .iter()
        .map(|a| parse_assignment(a))
        .collect::<Result<Vec<_>>>()?;
    let model = GgufModel::open(&args.input)?;
    if model.is_split() {
        bail!(
            "{} is part of a split set: merge it first with `quantforge convert`",
            args.input.display()
        );
    }
    let mut header = model.merged_header()?;
    for key in &args.delete {
        header
            .metadata_mut()
            .remove(key)
            .with_context(|| format!("--delete {key}: no such key"))?;
    }
    for (key, value) in changes {
        header.metadata_mut().set(key, value)?;
    }
    model.write_with_header(&args.output, &header)?;
    Ok(())
}

/// `KEY=TYPE:VALUE` -> key and typed value.
fn parse_assignment(text: &str) -> Result<(String, Value)> {
    let fail = || format!("'{text}': expected KEY=TYPE:VALUE (see --help)");
    let (key, rest) = text.split_once('=').with_context(fail)?;
    let (ty, value) = rest.split_once(':').with_context(fail)?;
    if key.is_empty() {
        bail!("'{text}': empty key");
    }
    if key.starts_with("split.") {
        bail!("'{text}': split.* keys are managed by `quantforge convert`");
    }
    let value = parse_value(ty, value).with_context(|| format!("'{text}'"))?;
    Ok((key.to_string(), value))
}

fn parse_value(ty: &str, text: &str) -> Result<Value> {
    if let Some(elem) = array_elem(ty) {
        let json: Json = serde_json::from_str(text).context("value is not JSON")?;
        return Ok(Value::Array(parse_array(elem, &json)?));
    }
    let ty = ValueType::from_name(ty)
        .filter(|t| *t != ValueType::Array)
        .with_context(|| {
            format!("unknown type '{ty}' (u8 i8 u16 i16 u32 i32 u64 i64 f32 f64 bool str arr[T])")
        })?;
    parse_scalar(ty, text)
}

/// `arr[T]` -> `T`.
fn array_elem(ty: &str) -> Option<&str> {
    ty.strip_prefix("arr[")?.strip_suffix(']')
}

fn parse_scalar(ty: ValueType, text: &str) -> Result<Value> {
    let bad = || format!("'{text}' is not a valid {ty}");
    Ok(match ty {
        ValueType::U8 => Value::U8(text.parse().with_context(bad)?),
        ValueType::I8 => Value::I8(text.parse().with_context(bad)?),
        ValueType::U16 => Value::U16(text.parse().with_context(bad)?),
        ValueType::I16 => Value::I16(text.parse().with_context(bad)?),
        ValueType::U32 => Value::U32(text.parse().with_context(bad)?),
        ValueType::I32 => Value::I32(text.parse().with_context(bad)?),
        ValueType::U64 => Value::U64(text.parse().with_context(bad)?),
        ValueType::I64 => Value::I64(text.parse().with_context(bad)?),
        ValueType::F32 => Value::F32(text.parse().with_context(bad)?),
        ValueType::F64 => Value::F64(text.parse().with_context(bad)?),
        ValueType::Bool => Value::Bool(text.parse().with_context(bad)?),
        ValueType::String => Value::from(text),
        ValueType::Array => bail!("arrays are written arr[T]:[...]"),
    })
}

/// A JSON array as a typed array of `elem` (`u32`, `str`, `arr[f32]`, ...).
fn parse_array(elem: &str, json: &Json) -> Result<Array> {
    let items = json
        .as_array()
        .with_context(|| format!("expected a JSON array of {elem}, got {json}"))?;
    if let Some(inner) = array_elem(elem) {
        let arrays = items
            .iter()
            .map(|item| parse_array(inner, item))
            .collect::<Result<Vec<_>>>()?;
        return Ok(Array::Array(arrays));
    }
    let ty = ValueType::from_name(elem)
        .filter(|t| *t != ValueType::Array)
        .with_context(|| format!("unknown element type '{elem}'"))?;
    let mut array = Array::empty(ty);
    for item in items {
        let text = match (ty, item) {
            (_, Json::String(s)) => s.clone(),
            (ValueType::String, other) => bail!("expected a JSON string, got {other}"),
            (_, other) => other.to_string(),
        };
        push(&mut array, parse_scalar(ty, &text)?);
    }
    Ok(array)
}

/// Appends a value of the array's own element type (guaranteed by the caller).
fn push(array: &mut Array, value: Value) {
    match (array, value) {
        (Array::U8(v), Value::U8(x)) => v.push(x),
        (Array::I8(v), Value::I8(x)) => v.push(x),
        (Array::U16(v), Value::U16(x)) => v.push(x),
        (Array::I16(v), Value::I16(x)) => v.push(x),
        (Array::U32(v), Value::U32(x)) => v.push(x),
        (Array::I32(v), Value::I32(x)) => v.push(x),
        (Array::U64(v), Value::U64(x)) => v.push(x),
        (Array::I64(v), Value::I64(x)) => v.push(x),
        (Array::F32(v), Value::F32(x)) => v.push(x),
        (Array::F64(v), Value::F64(x)) => v.push(x),
        (Array::Bool(v), Value::Bool(x)) => v.push(x),
        (Array::String(v), Value::String(x)) => v.push(x),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn assignments_parse_to_exact_types() {
        let ok = |t: &str| parse_assignment(t).unwrap();
        assert_eq!(ok("a=u16:7"), ("a".into(), Value::U16(7)));
        assert_eq!(ok("a=i64:-9"), ("a".into(), Value::I64(-9)));
        assert_eq!(ok("a=f32:0.5"), ("a".into(), Value::F32(0.5)));
        assert_eq!(ok("a=bool:true"), ("a".into(), Value::Bool(true)));
        assert_eq!(ok("a=str:x:y=z"), ("a".into(), Value::from("x:y=z")));
        assert_eq!(ok("a=str:"), ("a".into(), Value::from("")));
        assert_eq!(
            ok(r#"a=arr[str]:["p","q"]"#).1,
            Value::Array(Array::String(vec!["p", "q"].into()))
        );
        assert_eq!(
            ok(r#"a=arr[f32]:[1,"nan"]"#).1.type_name(),
            "arr[f32]".to_string()
        );
        assert_eq!(
            ok("a=arr[arr[u8]]:[[1],[2,3]]").1,
            Value::Array(Array::Array(vec![
                Array::U8(vec![1]),
                Array::U8(vec![2, 3])
            ]))
        );
        for bad in [
            "a",
            "a=u8",
            "=u8:1",
            "a=u8:256",
            "a=u8:-1",
            "a=q8:1",
            "a=bool:yes",
            "a=arr[u8]:[1,",
            "a=arr[u8]:{}",
            "a=arr[str]:[1]",
            "a=arr[x]:[1]",
            "split.count=u16:2",
        ] {
            assert!(parse_assignment(bad).is_err(), "{bad}");
        }
    }
}
