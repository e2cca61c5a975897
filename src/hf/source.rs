//! A Hugging Face folder as a quantization's source: the GGUF the converter writes with
//! `--outtype` the checkpoint's own float type (bf16 stays bf16, f16 f16, f32 f32: nothing
//! is rounded), read straight from the mapped safetensors files without being written.
//! So `quantforge quantize DIR OUT TYPE` gives what `convert_hf_to_gguf.py` followed by
//! `llama-quantize` gives, in one pass. Llama's Q/K weights, whose rows the converter
//! permutes, are read in interleaved row groups (see
//! [`crate::model::Tensor::with_row_groups`]), a task's rows at a time.

use super::{ConvertOptions, HfFolder, OutType};
use crate::error::{Result, bail};
use crate::model::{ModelSource, Tensor};
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
    /// The source tensor's name in its file.
    source: String,
    /// The bytes, when the converter widens the tensor (a bf16 norm kept in f32) or
    /// permutes a 1-D one.
    widened: Option<Vec<u8>>,
    /// Rows per interleaved group (Llama's Q/K weights: one group per head), else 1.
    group: usize,
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
                let src = float_type(t.source.dtype());
                let rows = t.source.shape().first().copied().unwrap_or(0);
                // A 2-D Q/K weight is read in interleaved row groups (one per head); a 1-D
                // Q/K bias is small and permuted here, element by element.
                let permuted = t.permuted_1d();
                let group = match (t.permute, t.ne.len()) {
                    (Some(heads), n) if n > 1 => rows / heads,
                    _ => 1,
                };
                let widened = if src == Some(t.ty) {
                    permuted
                } else if t.ty == GgmlType::F32 && src.is_some() {
                    let bytes = permuted.as_deref().unwrap_or(t.source.data());
                    let mut f = vec![0f32; t.source.elements()];
                    quantforge_formats::safetensors::decode_f32_into(
                        t.source.name(),
                        t.source.dtype(),
                        bytes,
                        &mut f,
                    )?;
                    Some(bytemuck::cast_slice(&f).to_vec())
                } else {
                    bail!(
                        "{}: tensor `{}` would be converted to {} by the converter",
                        dir.display(),
                        t.source.name(),
                        t.ty.name()
                    );
                };
                recipes.push(Recipe {
                    name: t.name.clone(),
                    ty: t.ty,
                    shape: t.ne.iter().rev().copied().collect(),
                    source: t.source.name().to_string(),
                    widened,
                    group,
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
/// bf16, f16 or f32.
fn source_outtype(folder: &HfFolder) -> Result<OutType> {
    for (_, v, _) in folder.sources()? {
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
            let view = self.folder.weights.tensor(&r.source)?;
            let file = self.folder.weights.file_of(&r.source);
            let (data, file) = match &r.widened {
                Some(bytes) => (bytes.as_slice(), None),
                None => (view.data(), file),
            };
            out.push(
                Tensor::of_bytes(&r.name, r.ty, r.shape.clone(), data, file, offset)
                    .with_row_groups(r.group),
            );
            offset += data.len() as u64;
        }
        Ok(out)
    }
}
