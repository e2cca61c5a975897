//! Converting between the two containers without changing any tensor byte: safetensors
//! (a file or a model folder, sharded or not) to GGUF, and GGUF (a file or a split set)
//! to safetensors.
//!
//! Tensors keep their names, their order and their data, copied a slab at a time (see
//! [`crate::slab`]). safetensors F32, F16, BF16,
//! F64, I8, I16, I32 and I64 become the GGUF types of the same name (dimensions reversed
//! into ggml order); dtypes GGUF lacks travel in a same-width carrier (BOOL, U8 and the
//! F8 types as i8, U16 as i16, U32 as i32, U64 as i64, C64 as f32 pairs, F4/F6 as their
//! bytes), and shapes of more than 4 axes have their leading axes merged. GGUF block
//! types (q4_K, ...) become U8 tensors whose last axis is the row's bytes, with their
//! ggml types listed under [`KEY_GGML_TYPES`].
//!
//! What is recorded so that converting there and back gives the same bytes:
//! - safetensors to GGUF: each `__metadata__` entry becomes a GGUF string key of the same
//!   name, and the whole safetensors header, verbatim, goes in [`KEY_SAFETENSORS_HEADER`]
//!   (for a sharded folder, the header of the one canonical file the shards merge into).
//!   Coming back, that header is written again byte for byte when it still describes
//!   the GGUF exactly (same tensors, carriers, sizes, string metadata); each tensor's
//!   dtype and shape come from it where they still fit. So `model.safetensors -> GGUF ->
//!   safetensors` reproduces the file exactly, whoever wrote it and however it is laid out.
//! - GGUF to safetensors: every UTF-8 string key becomes a `__metadata__` entry of the
//!   same name; [`KEY_GGUF_METADATA`] records the GGUF version, the key order and every
//!   other value with its exact wire type; tensors stay in GGUF order. Coming back, the
//!   keys are rebuilt exactly, so `GGUF -> safetensors -> GGUF` reproduces a GGUF whose
//!   layout is llama.cpp's (as every GGUF this project or llama.cpp writes).

use crate::error::{Context, Result, bail, ensure};
use crate::model::{GgufDims, Model, ModelSource};
use crate::slab::for_each_byte_slab;
use quantforge_formats::gguf::{
    Array, GgufBuilder, GgufModel, GgufString, KEY_ALIGNMENT, MAX_DIMS, Metadata, Value, ValueType,
};
use quantforge_formats::safetensors::{
    self as st, Dtype, FileWriter, Layout, ModelFolder, Order, TensorSpec, TensorView,
};
use quantforge_kernels::GgmlType;
use serde_json::{Value as Json, json};
use std::collections::{HashMap, HashSet};
use std::path::Path;

/// GGUF key holding the safetensors header (JSON text, verbatim) a GGUF was made from.
pub const KEY_SAFETENSORS_HEADER: &str = "safetensors.header";
/// `__metadata__` key listing, as a JSON object, the U8 tensors that hold GGUF block
/// types and the ggml type of each (`{"blk.0.attn_q.weight": "q4_K"}`).
pub const KEY_GGML_TYPES: &str = "gguf.ggml_types";
/// `__metadata__` key recording a GGUF's version, key order and non-string values
/// with their wire types (JSON), so the GGUF can be rebuilt exactly.
pub const KEY_GGUF_METADATA: &str = "gguf.metadata";

/// What a conversion wrote.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Converted {
    /// Tensors written.
    pub tensors: usize,
    /// Bytes of tensor data written (padding excluded).
    pub data_bytes: u64,
    /// Whether the output reuses a recorded header or metadata record (an exact return
    /// to the container the input was made from).
    pub restored: bool,
}

/// Converts the safetensors file or model folder at `input` to one GGUF file at
/// `output` (replaced atomically).
pub fn safetensors_to_gguf(input: &Path, output: &Path) -> Result<Converted> {
    let folder = ModelFolder::open(input)?;
    let block_types = ggml_block_types(folder.metadata().unwrap_or(&[]))?;
    let mut builder = GgufBuilder::new();
    let restored = gguf_keys_of_folder(&mut builder, &folder)?;
    for t in folder.tensors() {
        let GgufDims { ty, ne } = match block_types.get(t.name()) {
            Some(&ty) => block_dims(&t, ty)?,
            None => carrier(t.dtype(), t.shape()),
        };
        builder
            .declare_tensor(t.name(), ty, &ne)
            .with_context(|| format!("tensor `{}`", t.name()))?;
    }
    let model = Model::Safetensors {
        folder: Box::new(folder),
        block_types,
    };
    let tensors = model.tensors()?;
    let mut writer = builder.create(output)?;
    let mut data_bytes = 0u64;
    for t in &tensors {
        for_each_byte_slab(t, |bytes| Ok(writer.write_chunk(&t.data()[bytes])?))?;
        data_bytes += t.data().len() as u64;
    }
    writer.commit()?;
    Ok(Converted {
        tensors: tensors.len(),
        data_bytes,
        restored,
    })
}

/// Sets a GGUF's version and keys as [`safetensors_to_gguf`] makes them from the model:
/// rebuilt from a GGUF record (returns true), or `__metadata__` as string keys and the
/// safetensors header to come back to under [`KEY_SAFETENSORS_HEADER`] (returns false).
fn gguf_keys_of_folder(builder: &mut GgufBuilder<'_>, model: &ModelFolder) -> Result<bool> {
    let restored = gguf_keys_from_safetensors(builder, model.metadata().unwrap_or(&[]))?;
    if !restored {
        // The header to come back to: the file's own, or for shards, that of the one
        // canonical file they merge into (as `write_file` would make it).
        let merged;
        let header = match model.shards().collect::<Vec<_>>()[..] {
            [(_, file)] => file.header_bytes(),
            _ => {
                let specs = model.tensors().map(|t| TensorSpec::from(&t));
                merged = Layout::new(specs, model.metadata(), Order::Canonical)?;
                &merged.prefix()[8..]
            }
        };
        let header = std::str::from_utf8(header).context("the safetensors header is not UTF-8")?;
        builder.metadata_mut().set(KEY_SAFETENSORS_HEADER, header)?;
    }
    Ok(restored)
}

/// The GGUF keys [`safetensors_to_gguf`] would write for the model, in order, without
/// writing anything: what a quantization of the model reads as its metadata.
pub fn gguf_metadata_of_safetensors(model: &ModelFolder) -> Result<Metadata> {
    let mut builder = GgufBuilder::new();
    gguf_keys_of_folder(&mut builder, model)?;
    Ok(builder.header().metadata().clone())
}

/// The ggml types of the U8 tensors that `__metadata__` lists under [`KEY_GGML_TYPES`]
/// (none when the key is absent).
pub(crate) fn ggml_block_types(metadata: &[(String, String)]) -> Result<HashMap<String, GgmlType>> {
    match metadata.iter().find(|(k, _)| k == KEY_GGML_TYPES) {
        Some((_, json)) => parse_ggml_types(json),
        None => Ok(HashMap::new()),
    }
}

/// Sets a GGUF's version and keys from safetensors `__metadata__`: rebuilt exactly from
/// [`KEY_GGUF_METADATA`] when that record still describes the metadata (returns true),
/// else each entry as a string key of the same name (returns false).
pub(crate) fn gguf_keys_from_safetensors(
    builder: &mut GgufBuilder<'_>,
    metadata: &[(String, String)],
) -> Result<bool> {
    if let Some((_, record)) = metadata.iter().find(|(k, _)| k == KEY_GGUF_METADATA)
        && restore_gguf_metadata(builder, record, metadata)?
    {
        return Ok(true);
    }
    for (key, value) in metadata {
        if key == KEY_GGML_TYPES || key == KEY_GGUF_METADATA {
            continue;
        }
        ensure!(
            key != KEY_SAFETENSORS_HEADER && key != KEY_ALIGNMENT && !key.starts_with("split."),
            "__metadata__ key `{key}` would clash with a GGUF key this conversion or GGUF \
             itself defines"
        );
        builder.metadata_mut().set(key.as_str(), value.as_str())?;
    }
    Ok(false)
}

/// Converts the GGUF file (or split set, given its first part) at `input` to one
/// safetensors file at `output` (replaced atomically).
pub fn gguf_to_safetensors(input: &Path, output: &Path) -> Result<Converted> {
    let model = GgufModel::open(input)?;
    let recorded = recorded_header(&model);

    // Tensors: dtype and shape from the recorded header where it still fits, else from
    // the GGUF type.
    let mut specs = Vec::with_capacity(model.n_tensors());
    let mut block_types = serde_json::Map::new();
    let mut from_header = 0;
    for v in model.tensors() {
        let fitting = recorded
            .as_ref()
            .and_then(|(_, h)| h.tensor(v.name()))
            .filter(|info| {
                carrier(info.dtype(), info.shape())
                    == GgufDims {
                        ty: v.ty(),
                        ne: v.ne().to_vec(),
                    }
                    && info.byte_len() == v.data().len()
            });
        let (dtype, shape) = match fitting {
            Some(info) => {
                from_header += 1;
                (info.dtype(), info.shape().to_vec())
            }
            None => match native_dtype(v.ty()) {
                Some(dtype) => (dtype, dims_to_shape(v.ne(), None)?),
                None => {
                    block_types.insert(v.name().to_owned(), json!(v.ty().name()));
                    let row_len = usize::try_from(v.info().ne4()[0])?;
                    let row = v.ty().row_size(row_len)?;
                    (Dtype::U8, dims_to_shape(v.ne(), Some(row))?)
                }
            },
        };
        specs.push(TensorSpec {
            name: v.name().to_owned(),
            dtype,
            shape,
        });
    }

    let keys = GgufKeys::of(&model)?;
    let exact = recorded.as_ref().is_some_and(|(_, h)| {
        from_header == specs.len()
            && h.tensors().len() == specs.len()
            && block_types.is_empty()
            && h.metadata().unwrap_or(&[]) == keys.strings.as_slice()
            && keys.all_strings()
    });
    let layout = if let (true, Some((text, _))) = (exact, &recorded) {
        Layout::from_header_bytes(text.as_bytes())?
    } else {
        let mut metadata = keys.into_metadata(&model, recorded.is_some());
        if !block_types.is_empty() {
            metadata.push((
                KEY_GGML_TYPES.to_owned(),
                Json::Object(block_types).to_string(),
            ));
        }
        let metadata = (!metadata.is_empty()).then_some(metadata);
        Layout::new(specs, metadata.as_deref(), Order::AsGiven)?
    };
    let writer = FileWriter::create(output, layout)?;
    let mut data_bytes = 0u64;
    for t in ModelSource::tensors(&model)? {
        for_each_byte_slab(&t, |bytes| {
            Ok(writer.write_at(t.name(), bytes.start, &t.data()[bytes])?)
        })?;
        data_bytes += t.data().len() as u64;
    }
    writer.finish()?;
    Ok(Converted {
        tensors: model.n_tensors(),
        data_bytes,
        restored: exact,
    })
}

/// The safetensors header a GGUF made from safetensors records, when it still parses.
fn recorded_header(model: &GgufModel) -> Option<(&str, st::Header)> {
    let text = model.metadata().get(KEY_SAFETENSORS_HEADER)?.as_str()?;
    let header = st::Header::parse(text.as_bytes()).ok()?;
    Some((text, header))
}

/// A GGUF's keys as safetensors `__metadata__` when the tensors are not the GGUF's own
/// (so no recorded header can be reused): as [`gguf_to_safetensors`] writes them.
pub(crate) fn safetensors_metadata_of_gguf(model: &GgufModel) -> Result<Vec<(String, String)>> {
    let from_safetensors = recorded_header(model).is_some();
    Ok(GgufKeys::of(model)?.into_metadata(model, from_safetensors))
}

/// A GGUF's keys on their way to `__metadata__`: the UTF-8 strings as they are, and a
/// record of every key in order (strings by name, other values with their wire types).
/// The recorded safetensors header and, for a split set, the `split.*` keys are left out.
struct GgufKeys {
    strings: Vec<(String, String)>,
    record: Vec<Json>,
}

impl GgufKeys {
    fn of(model: &GgufModel) -> Result<GgufKeys> {
        let skip_split_keys = model.parts().len() > 1;
        let mut keys = GgufKeys {
            strings: Vec::new(),
            record: Vec::new(),
        };
        for (key, value) in model.metadata().iter() {
            if key == KEY_SAFETENSORS_HEADER || (skip_split_keys && key.starts_with("split.")) {
                continue;
            }
            ensure!(
                key != KEY_GGML_TYPES && key != KEY_GGUF_METADATA,
                "GGUF key `{key}` would clash with this conversion's own metadata"
            );
            match value.as_str() {
                Some(text) => {
                    keys.strings.push((key.to_owned(), text.to_owned()));
                    keys.record.push(json!([key]));
                }
                None => {
                    keys.record
                        .push(json!([key, value.value_type().name(), value_json(value)]))
                }
            }
        }
        Ok(keys)
    }

    fn all_strings(&self) -> bool {
        self.record.len() == self.strings.len()
    }

    /// The strings, then the record under [`KEY_GGUF_METADATA`], unless the GGUF was
    /// made from safetensors and has only string keys (they are that file's metadata).
    fn into_metadata(self, model: &GgufModel, from_safetensors: bool) -> Vec<(String, String)> {
        let all_strings = self.all_strings();
        let mut metadata = self.strings;
        if !from_safetensors || !all_strings {
            let version = model.parts().first().map_or(3, |p| p.header().version());
            let record = json!({"version": version, "keys": self.record});
            metadata.push((KEY_GGUF_METADATA.to_owned(), record.to_string()));
        }
        metadata
    }
}

/// The safetensors dtype a GGUF type is when no header says otherwise.
fn native_dtype(ty: GgmlType) -> Option<Dtype> {
    Some(match ty {
        GgmlType::F32 => Dtype::F32,
        GgmlType::F16 => Dtype::F16,
        GgmlType::BF16 => Dtype::BF16,
        GgmlType::F64 => Dtype::F64,
        GgmlType::I8 => Dtype::I8,
        GgmlType::I16 => Dtype::I16,
        GgmlType::I32 => Dtype::I32,
        GgmlType::I64 => Dtype::I64,
        _ => return None,
    })
}

/// The GGUF type and dimensions (ggml order) that carry a safetensors tensor.
pub(crate) fn carrier(dtype: Dtype, shape: &[usize]) -> GgufDims {
    let mut dims: Vec<u64> = shape.iter().map(|&d| d as u64).collect();
    let ty = match dtype {
        Dtype::F32 => GgmlType::F32,
        Dtype::F16 => GgmlType::F16,
        Dtype::BF16 => GgmlType::BF16,
        Dtype::F64 => GgmlType::F64,
        Dtype::I8 | Dtype::U8 | Dtype::Bool => GgmlType::I8,
        Dtype::F8E4M3 | Dtype::F8E5M2 | Dtype::F8E8M0 | Dtype::F8E4M3Fnuz | Dtype::F8E5M2Fnuz => {
            GgmlType::I8
        }
        Dtype::I16 | Dtype::U16 => GgmlType::I16,
        Dtype::I32 | Dtype::U32 => GgmlType::I32,
        Dtype::I64 | Dtype::U64 => GgmlType::I64,
        Dtype::C64 => {
            dims.push(2);
            GgmlType::F32
        }
        Dtype::F4 | Dtype::F6E2M3 | Dtype::F6E3M2 => {
            let bits = dims.iter().product::<u64>() * dtype.bit_size() as u64;
            dims = vec![bits / 8];
            GgmlType::I8
        }
    };
    GgufDims {
        ty,
        ne: ggml_ne(&dims),
    }
}

/// GGUF dimensions (ggml order, `ne[0]` the row) of a row-major shape; the leading axes
/// of a shape with more than ggml's four are merged into one.
pub(crate) fn ggml_ne(shape: &[u64]) -> Vec<u64> {
    let mut ne = shape.to_vec();
    if ne.len() > MAX_DIMS {
        let merged = ne.len() - (MAX_DIMS - 1);
        let lead = ne[..merged].iter().product();
        ne.splice(..merged, [lead]);
    }
    ne.reverse();
    ne
}

/// The safetensors shape of GGUF dimensions `ne` (reversed), with `ne[0]` replaced by
/// the row's byte count for a block type.
fn dims_to_shape(ne: &[u64], row_bytes: Option<usize>) -> Result<Vec<usize>> {
    let mut shape = ne
        .iter()
        .map(|&d| usize::try_from(d))
        .collect::<Result<Vec<_>, _>>()?;
    if let (Some(row), Some(first)) = (row_bytes, shape.first_mut()) {
        *first = row;
    }
    shape.reverse();
    Ok(shape)
}

/// GGUF dimensions of a U8 tensor holding a block type: its last axis is bytes per row.
pub(crate) fn block_dims(t: &TensorView<'_>, ty: GgmlType) -> Result<GgufDims> {
    ensure!(
        t.dtype() == Dtype::U8 && !t.shape().is_empty(),
        "tensor `{}` is listed as {ty} in {KEY_GGML_TYPES} but is {} of shape {:?}, not U8 rows",
        t.name(),
        t.dtype(),
        t.shape()
    );
    let mut ne: Vec<u64> = t.shape().iter().rev().map(|&d| d as u64).collect();
    let row_bytes = ne[0];
    ensure!(
        row_bytes.is_multiple_of(ty.type_size() as u64),
        "tensor `{}`: rows of {row_bytes} bytes are not whole {ty} blocks of {} bytes",
        t.name(),
        ty.type_size()
    );
    ne[0] = row_bytes / ty.type_size() as u64 * ty.block_size() as u64;
    Ok(GgufDims { ty, ne })
}

fn parse_ggml_types(json: &str) -> Result<HashMap<String, GgmlType>> {
    let map: HashMap<String, String> = serde_json::from_str(json)
        .with_context(|| format!("__metadata__ {KEY_GGML_TYPES} is not a JSON object of names"))?;
    map.into_iter()
        .map(|(name, ty)| {
            let parsed = GgmlType::from_name(&ty)
                .with_context(|| format!("{KEY_GGML_TYPES}: tensor `{name}`"))?;
            Ok((name, parsed))
        })
        .collect()
}

/// Rebuilds a GGUF's keys from [`KEY_GGUF_METADATA`] (strings from `__metadata__`).
/// Returns false, changing nothing, when the record no longer matches the metadata.
fn restore_gguf_metadata(
    builder: &mut GgufBuilder<'_>,
    record: &str,
    metadata: &[(String, String)],
) -> Result<bool> {
    let record: Json = serde_json::from_str(record)
        .with_context(|| format!("__metadata__ {KEY_GGUF_METADATA} is not JSON"))?;
    let strings: HashMap<&str, &str> = metadata
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    let mut keys = Metadata::new();
    let entries = record["keys"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    let mut string_keys: HashSet<&str> = HashSet::from([KEY_GGML_TYPES, KEY_GGUF_METADATA]);
    for entry in entries {
        let key = entry[0]
            .as_str()
            .context("a key of the GGUF record is not a string")?;
        let value = match entry.as_array().map(Vec::len) {
            Some(1) => match strings.get(key) {
                Some(&text) => {
                    string_keys.insert(key);
                    Value::from(text)
                }
                None => return Ok(false),
            },
            _ => {
                let ty = entry[1].as_str().and_then(ValueType::from_name);
                let ty =
                    ty.with_context(|| format!("GGUF record: key `{key}` has no valid type"))?;
                json_value(ty, &entry[2]).with_context(|| format!("GGUF record: key `{key}`"))?
            }
        };
        keys.set(key, value)?;
    }
    // A string added since the record was made means the record no longer describes
    // the metadata.
    if metadata
        .iter()
        .any(|(k, _)| !string_keys.contains(k.as_str()))
    {
        return Ok(false);
    }
    let version = record["version"].as_u64().unwrap_or(3);
    builder.set_version(u32::try_from(version)?)?;
    builder.metadata_mut().copy_all_from(&keys);
    Ok(true)
}

/// A non-string value as JSON: numbers and booleans as themselves, floats by their bit
/// patterns (exact, NaN payloads included), strings as text (or hex bytes if not UTF-8),
/// arrays as `[element type, [elements]]`.
fn value_json(value: &Value) -> Json {
    match value {
        Value::U8(v) => json!(v),
        Value::I8(v) => json!(v),
        Value::U16(v) => json!(v),
        Value::I16(v) => json!(v),
        Value::U32(v) => json!(v),
        Value::I32(v) => json!(v),
        Value::U64(v) => json!(v),
        Value::I64(v) => json!(v),
        Value::F32(v) => json!(v.to_bits()),
        Value::F64(v) => json!(v.to_bits()),
        Value::Bool(v) => json!(v),
        Value::String(s) => string_json(s.as_bytes()),
        Value::Array(a) => array_json(a),
    }
}

fn string_json(s: &[u8]) -> Json {
    match std::str::from_utf8(s) {
        Ok(text) => json!(text),
        Err(_) => json!({"hex": s.iter().map(|b| format!("{b:02x}")).collect::<String>()}),
    }
}

fn array_json(a: &Array) -> Json {
    let items: Vec<Json> = match a {
        Array::U8(v) => v.iter().map(|x| json!(x)).collect(),
        Array::I8(v) => v.iter().map(|x| json!(x)).collect(),
        Array::U16(v) => v.iter().map(|x| json!(x)).collect(),
        Array::I16(v) => v.iter().map(|x| json!(x)).collect(),
        Array::U32(v) => v.iter().map(|x| json!(x)).collect(),
        Array::I32(v) => v.iter().map(|x| json!(x)).collect(),
        Array::U64(v) => v.iter().map(|x| json!(x)).collect(),
        Array::I64(v) => v.iter().map(|x| json!(x)).collect(),
        Array::F32(v) => v.iter().map(|x| json!(x.to_bits())).collect(),
        Array::F64(v) => v.iter().map(|x| json!(x.to_bits())).collect(),
        Array::Bool(v) => v.iter().map(|x| json!(x)).collect(),
        Array::String(v) => v.iter().map(string_json).collect(),
        Array::Array(v) => v.iter().map(array_json).collect(),
    };
    json!([a.elem_type().name(), items])
}

/// The inverse of [`value_json`] for a value of wire type `ty`.
fn json_value(ty: ValueType, json: &Json) -> Result<Value> {
    let int = || json.as_i64().context("not an integer");
    let uint = || json.as_u64().context("not an unsigned integer");
    Ok(match ty {
        ValueType::U8 => Value::U8(u8::try_from(uint()?)?),
        ValueType::I8 => Value::I8(i8::try_from(int()?)?),
        ValueType::U16 => Value::U16(u16::try_from(uint()?)?),
        ValueType::I16 => Value::I16(i16::try_from(int()?)?),
        ValueType::U32 => Value::U32(u32::try_from(uint()?)?),
        ValueType::I32 => Value::I32(i32::try_from(int()?)?),
        ValueType::U64 => Value::U64(uint()?),
        ValueType::I64 => Value::I64(int()?),
        ValueType::F32 => Value::F32(f32::from_bits(u32::try_from(uint()?)?)),
        ValueType::F64 => Value::F64(f64::from_bits(uint()?)),
        ValueType::Bool => Value::Bool(json.as_bool().context("not a boolean")?),
        ValueType::String => Value::String(json_string(json)?),
        ValueType::Array => Value::Array(json_array(json)?),
    })
}

fn json_string(json: &Json) -> Result<GgufString> {
    if let Some(text) = json.as_str() {
        return Ok(GgufString::from(text));
    }
    let hex = json["hex"].as_str().context("not a string")?;
    ensure!(hex.len().is_multiple_of(2), "odd-length hex string");
    let bytes = (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(hex.get(i..i + 2).unwrap_or("??"), 16))
        .collect::<Result<Vec<u8>, _>>()?;
    Ok(GgufString::from(bytes))
}

fn json_array(json: &Json) -> Result<Array> {
    let elem = json[0]
        .as_str()
        .and_then(ValueType::from_name)
        .context("array without a valid element type")?;
    let items = json[1].as_array().context("array without elements")?;
    macro_rules! collect {
        ($variant:ident, $ty:ident) => {
            Array::$variant(
                items
                    .iter()
                    .map(|x| match json_value(ValueType::$ty, x)? {
                        Value::$variant(v) => Ok(v),
                        _ => bail!("mixed array"),
                    })
                    .collect::<Result<_>>()?,
            )
        };
    }
    Ok(match elem {
        ValueType::U8 => collect!(U8, U8),
        ValueType::I8 => collect!(I8, I8),
        ValueType::U16 => collect!(U16, U16),
        ValueType::I16 => collect!(I16, I16),
        ValueType::U32 => collect!(U32, U32),
        ValueType::I32 => collect!(I32, I32),
        ValueType::U64 => collect!(U64, U64),
        ValueType::I64 => collect!(I64, I64),
        ValueType::F32 => collect!(F32, F32),
        ValueType::F64 => collect!(F64, F64),
        ValueType::Bool => collect!(Bool, Bool),
        ValueType::String => collect!(String, String),
        ValueType::Array => Array::Array(items.iter().map(json_array).collect::<Result<_>>()?),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dims(ty: GgmlType, ne: &[u64]) -> GgufDims {
        GgufDims {
            ty,
            ne: ne.to_vec(),
        }
    }

    #[test]
    fn carriers_keep_width_and_rank() {
        assert_eq!(carrier(Dtype::F16, &[2, 3]), dims(GgmlType::F16, &[3, 2]));
        assert_eq!(carrier(Dtype::U32, &[5]), dims(GgmlType::I32, &[5]));
        assert_eq!(carrier(Dtype::C64, &[4]), dims(GgmlType::F32, &[2, 4]));
        assert_eq!(carrier(Dtype::F4, &[3, 2]), dims(GgmlType::I8, &[3]));
        assert_eq!(
            carrier(Dtype::U8, &[2, 3, 4, 5, 6]),
            dims(GgmlType::I8, &[6, 5, 4, 6])
        );
        assert_eq!(carrier(Dtype::F32, &[]), dims(GgmlType::F32, &[]));
    }

    #[test]
    fn values_round_trip_through_json() {
        let values = [
            Value::U8(7),
            Value::I64(-3),
            Value::F32(f32::from_bits(0x7fc0_0001)),
            Value::F64(-0.0),
            Value::Bool(true),
            Value::String(GgufString::from(vec![0xff, 0x41])),
            Value::Array(Array::String(vec!["a", "é"].into())),
            Value::Array(Array::Array(vec![
                Array::F32(vec![1.5]),
                Array::I16(vec![-1, 2]),
            ])),
            Value::Array(Array::empty(ValueType::U32)),
        ];
        for v in values {
            let back = json_value(v.value_type(), &value_json(&v)).unwrap();
            assert_eq!(back, v);
        }
    }
}
