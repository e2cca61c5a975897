//! A Hugging Face folder as a quantization's source: the GGUF the converter writes with
//! `--outtype` the checkpoint's own float type (bf16 stays bf16, f16 f16, f32 f32: nothing
//! is rounded), read straight from the mapped safetensors files without being written.
//! So `quantforge quantize DIR OUT TYPE` gives what `convert_hf_to_gguf.py` followed by
//! `llama-quantize` gives, in one pass. Llama's Q/K weights, whose rows the converter
//! permutes, are read in interleaved row groups (see
//! [`crate::model::Tensor::with_row_groups`]), a task's rows at a time.

use super::{ConvertOptions, HfFolder, OutType};
use crate::error::{Context, Result, bail};
use crate::model::{ModelSource, Stored, Tensor};
use quantforge_formats::gguf::Metadata;
use quantforge_formats::safetensors::Dtype;
use quantforge_kernels::GgmlType;
use std::borrow::Cow;
use std::path::Path;

/// An open folder with the converter's keys and tensor list worked out once.
pub struct HfModel {
    folder: HfFolder,
    metadata: Metadata,
    recipes: Vec<Recipe>,
    warnings: Vec<String>,
}

/// How one tensor of the intermediate GGUF is read.
struct Recipe {
    name: String,
    ty: GgmlType,
    shape: Vec<u64>,
    /// The source tensors' names in their files and the bytes of their data read: one,
    /// or a MoE block's experts stacked (Gemma 3 drops embedding rows past the
    /// vocabulary, so not always the whole tensor).
    runs: Vec<(String, std::ops::Range<usize>)>,
    /// The bytes, when the converter makes them (a bf16 norm kept in f32, a permuted
    /// bias, a shifted norm) rather than reading them as stored.
    bytes: Option<Vec<u8>>,
    /// Rows per interleaved group (Llama's Q/K weights: one group per head), else 1.
    group: usize,
    /// An FP8 weight's element type and scales, widened to `ty` (f32) as it is read.
    stored: Option<Stored>,
}

/// The ggml type with a safetensors float dtype's bytes.
fn float_type(d: Dtype) -> Option<GgmlType> {
    match d {
        Dtype::F32 => Some(GgmlType::F32),
        Dtype::F16 => Some(GgmlType::F16),
        Dtype::BF16 => Some(GgmlType::BF16),
        _ => None,
    }
}

/// The bytes of a float tensor of the converter's GGUF when they are made rather than
/// read in place: a tensor made while the conversion was planned, or one widened to f32
/// (small: norms and biases); `None` for one read as stored.
fn float_bytes(dir: &Path, t: &super::OutTensor<'_>) -> Result<Option<Vec<u8>>> {
    let src = float_type(t.dtype);
    let made = match t.parts.as_slice() {
        [p] if p.origin.is_none() => Some(p.bytes.to_vec()),
        _ => None,
    };
    if src == Some(t.ty) {
        return Ok(made);
    }
    if let (GgmlType::F32, Some(_), [p]) = (t.ty, src, t.parts.as_slice()) {
        let n = p.bytes.len() / t.dtype.bytes_of(1).unwrap_or(1).max(1);
        let mut f = vec![0f32; n];
        quantforge_formats::safetensors::decode_f32_into(
            &t.source_name,
            t.dtype,
            &p.bytes,
            &mut f,
        )?;
        return Ok(Some(bytemuck::cast_slice(&f).to_vec()));
    }
    bail!(
        "{}: tensor `{}` would be converted to {} by the converter",
        dir.display(),
        t.source_name,
        t.ty.name()
    )
}

impl HfModel {
    /// Opens `dir` and works out the converter's output for the checkpoint's own float
    /// type.
    pub fn open(dir: &Path) -> Result<HfModel> {
        let folder = HfFolder::open(dir)?;
        let (metadata, recipes, warnings) = {
            let outtype = source_outtype(&folder)?;
            let conv = folder.conversion(&ConvertOptions {
                outtype,
                ..ConvertOptions::default()
            })?;
            let mut recipes = Vec::with_capacity(conv.tensors.len());
            for t in &conv.tensors {
                // A 2-D Q/K weight is read in interleaved row groups (one per head).
                let group = match t.permute {
                    Some(heads) => t.ne.last().copied().unwrap_or(0) as usize / heads,
                    None => 1,
                };
                let (bytes, stored) = if super::fp8::is_fp8(t.dtype) {
                    // Dequantized to f32 as the converter does, row by row as it is read.
                    if t.ty != GgmlType::F32 {
                        bail!(
                            "{}: tensor `{}` is {} and would be converted to {}, not f32",
                            dir.display(),
                            t.source_name,
                            t.dtype,
                            t.ty.name()
                        );
                    }
                    let scales = t.parts.iter().map(|p| p.scale.clone()).collect();
                    (
                        None,
                        Some(Stored {
                            dtype: t.dtype,
                            scales,
                        }),
                    )
                } else {
                    (float_bytes(dir, t)?, None)
                };
                let runs = match bytes {
                    Some(_) => Vec::new(),
                    None => t.parts.iter().filter_map(|p| p.origin.clone()).collect(),
                };
                recipes.push(Recipe {
                    name: t.name.clone(),
                    ty: t.ty,
                    shape: t.ne.iter().rev().copied().collect(),
                    runs,
                    bytes,
                    group,
                    stored,
                });
            }
            (conv.metadata, recipes, conv.warnings)
        };
        Ok(HfModel {
            folder,
            metadata,
            recipes,
            warnings,
        })
    }

    /// What the user should know about the reading (see [`super::Conversion::warnings`]).
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }
}

/// The checkpoint's own float type: that of its first tensor of two or more axes stored as
/// bf16, f16 or f32; f32 for an FP8 checkpoint (its weights dequantized are f32 values).
fn source_outtype(folder: &HfFolder) -> Result<OutType> {
    let sources = folder.sources()?;
    if sources
        .iter()
        .any(|(_, v, _)| super::fp8::is_fp8(v.dtype()))
    {
        return Ok(OutType::F32);
    }
    for (_, v, _) in sources {
        if v.shape().len() < 2 {
            continue;
        }
        match v.dtype() {
            Dtype::BF16 => return Ok(OutType::Bf16),
            Dtype::F16 => return Ok(OutType::F16),
            Dtype::F32 => return Ok(OutType::F32),
            _ => {}
        }
    }
    Ok(OutType::F32)
}

impl ModelSource for HfModel {
    fn gguf_metadata(&self) -> Result<Cow<'_, Metadata>> {
        Ok(Cow::Borrowed(&self.metadata))
    }

    fn tensors(&self) -> Result<Vec<Tensor<'_>>> {
        let mut offset = 0u64;
        let mut out = Vec::with_capacity(self.recipes.len());
        for r in &self.recipes {
            let tensor = match (&r.bytes, r.runs.as_slice()) {
                (Some(bytes), _) => Tensor::of_bytes(
                    &r.name,
                    r.ty,
                    r.shape.clone(),
                    bytes.as_slice(),
                    None,
                    offset,
                ),
                (None, [(source, range)]) => {
                    let view = self.folder.weights.tensor(source)?;
                    let data = &view.data()[range.clone()];
                    let file = self.folder.weights.file_of(source);
                    Tensor::of_bytes(&r.name, r.ty, r.shape.clone(), data, file, offset)
                }
                (None, runs) => {
                    let mut parts = Vec::with_capacity(runs.len());
                    for (source, range) in runs {
                        let view = self.folder.weights.tensor(source)?;
                        let file =
                            self.folder.weights.file_of(source).with_context(|| {
                                format!("tensor `{source}`: not in a mapped file")
                            })?;
                        parts.push((&view.data()[range.clone()], file));
                    }
                    Tensor::stacked(&r.name, r.ty, r.shape.clone(), parts, offset)
                }
            };
            let tensor = match &r.stored {
                Some(stored) => {
                    // Placed as the f32 tensor the converter writes.
                    let rows: u64 = r.shape.iter().rev().skip(1).product();
                    let row_len = r.shape.last().copied().unwrap_or(1) as usize;
                    offset += r.ty.row_size(row_len)? as u64 * rows;
                    tensor.with_stored(stored.clone())
                }
                None => {
                    offset += tensor.len() as u64;
                    tensor
                }
            };
            out.push(tensor.with_row_groups(r.group));
        }
        Ok(out)
    }
}
