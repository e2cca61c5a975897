//! Dequantizing a whole model: every tensor of a [`Model`] widened to f32 (with
//! [`quantforge_kernels::dequantize`]) and written as f32, f16 or bf16 into one GGUF or
//! safetensors file, streamed slab by slab into a file that takes the output's name only
//! when complete.
//!
//! Only the tensor data and types change; names, shapes, order and the metadata mapping
//! between containers are those of [`crate::convert`]. A GGUF output keeps the source's
//! keys (without `split.*`) and sets `general.file_type` to llama.cpp's file type for the
//! output type. Narrowing to f16/bf16 uses ggml's conversions (`ggml_fp32_to_fp16_row`,
//! round to nearest even), NaN and infinities included.

use crate::convert::{
    KEY_GGML_TYPES, ggml_ne, gguf_keys_from_safetensors, safetensors_metadata_of_gguf,
};
use crate::error::{Context, Result};
use crate::model::{Encoding, Model, Tensor};
use crate::pipeline::plan::FileType;
use crate::slab::{for_each_slab, tasks};
use quantforge_formats::gguf::{
    GgufBuilder, KEY_SPLIT_COUNT, KEY_SPLIT_NO, KEY_SPLIT_TENSORS_COUNT, Value,
};
use quantforge_formats::safetensors::{Dtype, FileWriter, Layout, Order, TensorSpec};
use quantforge_kernels::{Error as CodecError, GgmlType};
use rayon::prelude::*;
use std::path::Path;

/// The GGUF key a dequantized GGUF's file type goes in.
pub const KEY_FILE_TYPE: &str = "general.file_type";

/// A float type a model can be dequantized to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FloatType {
    /// IEEE single precision.
    F32,
    /// IEEE half precision.
    F16,
    /// bfloat16.
    Bf16,
}

impl FloatType {
    /// `f32`, `f16` or `bf16`, in any case.
    pub fn from_name(name: &str) -> Option<FloatType> {
        match name.to_ascii_lowercase().as_str() {
            "f32" => Some(FloatType::F32),
            "f16" => Some(FloatType::F16),
            "bf16" => Some(FloatType::Bf16),
            _ => None,
        }
    }

    /// The ggml type.
    pub fn ggml(self) -> GgmlType {
        match self {
            FloatType::F32 => GgmlType::F32,
            FloatType::F16 => GgmlType::F16,
            FloatType::Bf16 => GgmlType::BF16,
        }
    }

    /// The safetensors dtype.
    pub fn dtype(self) -> Dtype {
        match self {
            FloatType::F32 => Dtype::F32,
            FloatType::F16 => Dtype::F16,
            FloatType::Bf16 => Dtype::BF16,
        }
    }

    /// llama.cpp's file type of a model of this type (`general.file_type`: 0, 1, 32).
    pub fn file_type(self) -> FileType {
        match self {
            FloatType::F32 => FileType::F32,
            FloatType::F16 => FileType::F16,
            FloatType::Bf16 => FileType::BF16,
        }
    }
}

/// What a dequantization wrote.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Dequantized {
    /// Tensors written.
    pub tensors: usize,
    /// Bytes of tensor data written (padding excluded).
    pub data_bytes: u64,
}

/// Writes every tensor of `model` as `to` into the GGUF file `output` (replaced
/// atomically). Errors name the first tensor whose type cannot be decoded, before
/// anything is written.
pub fn dequantize_to_gguf(model: &Model, output: &Path, to: FloatType) -> Result<Dequantized> {
    let tensors = decodable_tensors(model)?;
    let mut builder = GgufBuilder::new();
    match model {
        Model::Gguf(gguf) => {
            builder.set_version(gguf.parts()[0].header().version())?;
            let metadata = builder.metadata_mut();
            *metadata = gguf.metadata().clone();
            for key in [KEY_SPLIT_NO, KEY_SPLIT_COUNT, KEY_SPLIT_TENSORS_COUNT] {
                metadata.remove(key);
            }
        }
        Model::Safetensors { folder, .. } => {
            gguf_keys_from_safetensors(&mut builder, folder.metadata().unwrap_or(&[]))?;
        }
    }
    builder
        .metadata_mut()
        .set(KEY_FILE_TYPE, Value::U32(to.file_type().code()))?;
    for t in &tensors {
        builder
            .declare_tensor(t.name(), to.ggml(), &ggml_ne(t.shape()))
            .with_context(|| format!("tensor `{}`", t.name()))?;
    }
    let mut writer = builder.create(output)?;
    let mut data_bytes = 0;
    for t in &tensors {
        data_bytes += write_widened(t, to, |chunk| Ok(writer.write_chunk(chunk)?))?;
    }
    writer.commit()?;
    Ok(Dequantized {
        tensors: tensors.len(),
        data_bytes,
    })
}

/// Writes every tensor of `model` as `to` into the safetensors file `output` (replaced
/// atomically): GGUF tensors in GGUF order with [`crate::convert`]'s metadata record,
/// safetensors tensors in the canonical order with their `__metadata__` (less the block
/// types list, as no tensor carries blocks any more).
pub fn dequantize_to_safetensors(
    model: &Model,
    output: &Path,
    to: FloatType,
) -> Result<Dequantized> {
    let tensors = decodable_tensors(model)?;
    let (metadata, order) = match model {
        Model::Gguf(gguf) => {
            let metadata = safetensors_metadata_of_gguf(gguf)?;
            ((!metadata.is_empty()).then_some(metadata), Order::AsGiven)
        }
        Model::Safetensors { folder, .. } => {
            let kept = folder.metadata().map(|m| {
                let kept = m.iter().filter(|(k, _)| k != KEY_GGML_TYPES);
                kept.cloned().collect::<Vec<_>>()
            });
            (kept, Order::Canonical)
        }
    };
    let specs = tensors
        .iter()
        .map(|t| {
            let shape = t.shape().iter().map(|&d| usize::try_from(d));
            Ok(TensorSpec {
                name: t.name().to_owned(),
                dtype: to.dtype(),
                shape: shape.collect::<Result<_, _>>()?,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    let layout = Layout::new(specs, metadata.as_deref(), order)?;
    let writer = FileWriter::create(output, layout)?;
    let mut data_bytes = 0;
    for t in &tensors {
        let mut offset = 0;
        data_bytes += write_widened(t, to, |chunk| {
            writer.write_at(t.name(), offset, chunk)?;
            offset += chunk.len();
            Ok(())
        })?;
    }
    writer.finish()?;
    Ok(Dequantized {
        tensors: tensors.len(),
        data_bytes,
    })
}

/// The model's tensors, or an error naming the first one that cannot be decoded.
fn decodable_tensors(model: &Model) -> Result<Vec<Tensor<'_>>> {
    let tensors = model.tensors()?;
    for t in &tensors {
        t.check_decodable()?;
    }
    Ok(tensors)
}

/// Hands `write` the tensor's data as `to`, slab by slab (an empty tensor as one empty
/// chunk), and returns the bytes written. Data already of type `to` is copied as is.
fn write_widened(
    t: &Tensor<'_>,
    to: FloatType,
    mut write: impl FnMut(&[u8]) -> Result<()>,
) -> Result<u64> {
    let out_row = to.ggml().row_size(t.row_len())?;
    if t.n_rows() == 0 {
        write(&[])?;
        return Ok(0);
    }
    let copy = t.encoding() == Encoding::Ggml(to.ggml());
    let task_rows = t.task_rows();
    let mut out = Vec::new();
    let mut written = 0u64;
    for_each_slab(&[t], out_row, |rows| {
        if copy {
            write(&t.data()[rows.start * out_row..rows.end * out_row])?;
            written += (rows.len() * out_row) as u64;
            return Ok(());
        }
        out.resize(rows.len() * out_row, 0);
        out.par_chunks_mut(task_rows * out_row)
            .zip(tasks(rows, task_rows))
            .try_for_each_init(Vec::new, |f32s, (y, rows)| {
                narrow(to.ggml(), t.decode_rows(rows, f32s)?, y)
                    .with_context(|| format!("tensor `{}`", t.name()))
            })?;
        write(&out)?;
        written += out.len() as u64;
        Ok(())
    })?;
    Ok(written)
}

/// f32 values as `ty` (f32, f16 or bf16) bytes: the fastest path for finite values, and
/// ggml's scalar conversions (defined for NaN and infinities) when there are others.
fn narrow(ty: GgmlType, x: &[f32], y: &mut [u8]) -> Result<(), CodecError> {
    match quantforge_kernels::quantize(ty, x, x.len(), None, y) {
        Ok(_) => Ok(()),
        Err(CodecError::NonFinite { .. }) => {
            use quantforge_kernels::scalar::float;
            match ty {
                GgmlType::F16 => float::quantize_f16(x, y),
                GgmlType::BF16 => float::quantize_bf16(x, y),
                _ => float::quantize_f32(x, y),
            }
            Ok(())
        }
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn narrowing_keeps_non_finite_values_as_ggml_converts_them() {
        let x = [1.5f32, f32::NAN, f32::INFINITY, -2.0];
        let mut y = [0u8; 8];
        narrow(GgmlType::F16, &x, &mut y).unwrap();
        let halves: Vec<u16> = y
            .chunks_exact(2)
            .map(|b| u16::from_le_bytes([b[0], b[1]]))
            .collect();
        assert_eq!(halves[0], 0x3e00);
        assert_eq!(halves[1] & 0x7c00, 0x7c00);
        assert_ne!(halves[1] & 0x03ff, 0, "NaN stays NaN");
        assert_eq!(halves[2], 0x7c00);
        assert_eq!(halves[3], 0xc000);
        let mut y = [0u8; 16];
        narrow(GgmlType::F32, &x, &mut y).unwrap();
        assert!(f32::from_le_bytes([y[4], y[5], y[6], y[7]]).is_nan());
    }

    #[test]
    fn float_types_name_their_llama_file_types() {
        assert_eq!(FloatType::from_name("F32"), Some(FloatType::F32));
        assert_eq!(FloatType::from_name("bf16"), Some(FloatType::Bf16));
        assert_eq!(FloatType::from_name("q8_0"), None);
        let codes: Vec<u32> = [FloatType::F32, FloatType::F16, FloatType::Bf16]
            .iter()
            .map(|t| t.file_type().code())
            .collect();
        assert_eq!(codes, [0, 1, 32]);
    }
}
