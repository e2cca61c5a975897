//! A model in either container (a GGUF file or split set, a safetensors file or model
//! folder) as one list of tensors, each read as f32 a range of rows at a time: the input
//! of `quantforge dequantize` and `quantforge diff`.
//!
//! ggml types decode through [`quantforge_kernels::dequantize`] (the fastest path this CPU
//! has). safetensors F32, F16, BF16 (and the integer dtypes of the same name) are the ggml
//! types of the same name, byte for byte; the F8 dtypes decode through the formats
//! crate's tables; U8 tensors that [`crate::convert::KEY_GGML_TYPES`] lists are the ggml
//! block rows they carry (a GGUF converted to safetensors).
//!
//! Work is cut in slabs of rows (about [`SLAB_BYTES`]) whose pages are asked for a slab
//! ahead and released once used, and each slab in tasks of about [`TASK_ELEMENTS`]
//! that the current rayon pool runs; memory stays near one slab whatever the model size.

use crate::convert::{block_dims, ggml_block_types};
use anyhow::{Context, Result, ensure};
use quantforge_formats::gguf::{GgufFile, GgufModel};
use quantforge_formats::safetensors::{self as st, Dtype, ModelFolder, SafeTensors};
use quantforge_kernels::{GgmlType, can_dequantize};
use std::collections::HashMap;
use std::fmt;
use std::ops::Range;
use std::path::Path;

/// Bytes of source (or output, if wider) handled per slab.
pub const SLAB_BYTES: usize = 16 << 20;
/// Elements decoded per parallel task.
pub const TASK_ELEMENTS: usize = 64 << 10;

/// An open model: a GGUF file (or split set) or a safetensors file (or model folder).
pub enum Model {
    /// GGUF.
    Gguf(GgufModel),
    /// safetensors, with the block types of its U8 carrier tensors.
    Safetensors {
        /// The file or folder (boxed: it is much larger than a GGUF model).
        folder: Box<ModelFolder>,
        /// Tensors listed under [`crate::convert::KEY_GGML_TYPES`] and their ggml types.
        block_types: HashMap<String, GgmlType>,
    },
}

impl Model {
    /// Opens a GGUF file, or the split set whose first part `path` is.
    pub fn open_gguf(path: &Path) -> Result<Model> {
        Ok(Model::Gguf(GgufModel::open(path)?))
    }

    /// Opens a safetensors file, index or model folder.
    pub fn open_safetensors(path: &Path) -> Result<Model> {
        let folder = ModelFolder::open(path)?;
        let block_types = ggml_block_types(folder.metadata().unwrap_or(&[]))
            .with_context(|| format!("{}", path.display()))?;
        Ok(Model::Safetensors {
            folder: Box::new(folder),
            block_types,
        })
    }

    /// Every tensor, in the container's order (GGUF: model order; safetensors: shard by
    /// shard, each in file order).
    pub fn tensors(&self) -> Result<Vec<Tensor<'_>>> {
        match self {
            Model::Gguf(model) => Ok(model
                .tensors()
                .map(|v| Tensor {
                    name: v.name(),
                    encoding: Encoding::Ggml(v.ty()),
                    shape: v.shape(),
                    data: v.data(),
                    pages: Pages::Gguf(&model.parts()[v.part()], v.offset()),
                })
                .collect()),
            Model::Safetensors {
                folder,
                block_types,
            } => folder
                .shards()
                .flat_map(|(_, file)| file.tensors().map(move |v| (file, v)))
                .map(|(file, v)| {
                    let (encoding, shape) = match block_types.get(v.name()) {
                        Some(&ty) => {
                            let (ty, ne) = block_dims(&v, ty)?;
                            (Encoding::Ggml(ty), ne.into_iter().rev().collect())
                        }
                        None => (
                            Encoding::of_dtype(v.dtype()),
                            v.shape().iter().map(|&d| d as u64).collect(),
                        ),
                    };
                    Ok(Tensor {
                        name: v.name(),
                        encoding,
                        shape,
                        data: v.data(),
                        pages: Pages::Safetensors(file),
                    })
                })
                .collect(),
        }
    }
}

/// How a tensor's elements are stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Encoding {
    /// A ggml type (GGUF, or a safetensors dtype with the same bytes).
    Ggml(GgmlType),
    /// A safetensors dtype ggml has no type for (U8, BOOL, the F8 types, ...).
    Safetensors(Dtype),
}

impl Encoding {
    /// The ggml type of a safetensors dtype when one has the same bytes, else the dtype.
    pub fn of_dtype(dtype: Dtype) -> Encoding {
        let ty = match dtype {
            Dtype::F32 => GgmlType::F32,
            Dtype::F16 => GgmlType::F16,
            Dtype::BF16 => GgmlType::BF16,
            Dtype::F64 => GgmlType::F64,
            Dtype::I8 => GgmlType::I8,
            Dtype::I16 => GgmlType::I16,
            Dtype::I32 => GgmlType::I32,
            Dtype::I64 => GgmlType::I64,
            other => return Encoding::Safetensors(other),
        };
        Encoding::Ggml(ty)
    }

    /// Whether elements of this encoding can be decoded to f32.
    pub fn can_decode(self) -> bool {
        match self {
            Encoding::Ggml(ty) => can_dequantize(ty),
            Encoding::Safetensors(dtype) => st::can_decode_f32(dtype),
        }
    }

    /// Bytes of one row of `row_len` elements.
    fn row_bytes(self, row_len: usize) -> Result<usize> {
        match self {
            Encoding::Ggml(ty) => Ok(ty.row_size(row_len)?),
            Encoding::Safetensors(dtype) => dtype
                .bytes_of(row_len)
                .with_context(|| format!("{row_len} elements of {dtype} are not whole bytes")),
        }
    }
}

/// ggml's type names (`f16`, `q4_K`), safetensors' for the rest (`F8_E4M3`).
impl fmt::Display for Encoding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Encoding::Ggml(ty) => f.write_str(ty.name()),
            Encoding::Safetensors(dtype) => f.write_str(dtype.name()),
        }
    }
}

/// One tensor of a [`Model`]: its name, encoding, shape and bytes (borrowed, mapped).
#[derive(Clone, Debug)]
pub struct Tensor<'a> {
    name: &'a str,
    encoding: Encoding,
    shape: Vec<u64>,
    data: &'a [u8],
    pages: Pages<'a>,
}

/// The file holding a tensor's data, for page prefetch and release.
#[derive(Clone, Copy, Debug)]
enum Pages<'a> {
    /// A GGUF file and the data's offset in it.
    Gguf(&'a GgufFile, u64),
    /// A safetensors file (it finds the data's offset itself).
    Safetensors(&'a SafeTensors<'static>),
}

impl<'a> Tensor<'a> {
    /// The name.
    pub fn name(&self) -> &'a str {
        self.name
    }

    /// How the elements are stored.
    pub fn encoding(&self) -> Encoding {
        self.encoding
    }

    /// The row-major shape, outermost axis first (GGUF's `ne` reversed).
    pub fn shape(&self) -> &[u64] {
        &self.shape
    }

    /// The raw bytes.
    pub fn data(&self) -> &'a [u8] {
        self.data
    }

    /// Elements in a row (the innermost axis; 1 for a scalar).
    pub fn row_len(&self) -> usize {
        self.shape.last().map_or(1, |&n| n as usize)
    }

    /// Number of rows (0 when any axis is 0).
    pub fn n_rows(&self) -> usize {
        match self.row_len() {
            0 => 0,
            n => self.elements() as usize / n,
        }
    }

    /// Number of elements.
    pub fn elements(&self) -> u64 {
        self.shape.iter().product()
    }

    /// Bytes of one row.
    pub fn row_bytes(&self) -> Result<usize> {
        self.encoding
            .row_bytes(self.row_len())
            .with_context(|| format!("tensor `{}`", self.name))
    }

    /// An error unless the elements can be decoded to f32.
    pub fn check_decodable(&self) -> Result<()> {
        ensure!(
            self.encoding.can_decode(),
            "tensor `{}`: type {} cannot be decoded to f32",
            self.name,
            self.encoding
        );
        Ok(())
    }

    /// Decodes rows `rows` into `out` (resized to fit) on this thread, and returns them.
    pub fn decode_rows<'o>(&self, rows: Range<usize>, out: &'o mut Vec<f32>) -> Result<&'o [f32]> {
        let row_bytes = self.row_bytes()?;
        let bytes = self
            .data
            .get(rows.start * row_bytes..rows.end * row_bytes)
            .with_context(|| format!("tensor `{}`: rows {rows:?} out of range", self.name))?;
        out.resize(rows.len() * self.row_len(), 0.0);
        match self.encoding {
            Encoding::Ggml(ty) => quantforge_kernels::dequantize(ty, bytes, out)
                .with_context(|| format!("tensor `{}`", self.name))?,
            Encoding::Safetensors(dtype) => st::decode_f32_into(self.name, dtype, bytes, out)?,
        }
        Ok(out)
    }

    /// Rows per parallel task.
    pub fn task_rows(&self) -> usize {
        (TASK_ELEMENTS / self.row_len().max(1)).max(1)
    }

    /// Passes `hint` on for bytes `bytes` of the data to the file that holds them.
    fn hint(&self, hint: Hint, bytes: Range<usize>) -> Result<()> {
        let at = bytes.start as u64;
        let data = &self.data[bytes];
        match (self.pages, hint) {
            (Pages::Gguf(file, offset), Hint::Prefetch) => {
                file.prefetch_bytes(offset + at, data.len())?
            }
            (Pages::Gguf(file, offset), Hint::Release) => {
                file.release_bytes(offset + at, data.len())?
            }
            (Pages::Safetensors(file), Hint::Prefetch) => file.prefetch(data)?,
            (Pages::Safetensors(file), Hint::Release) => file.release(data)?,
        }
        Ok(())
    }
}

/// What a slab's pages are about to be.
#[derive(Clone, Copy, Debug)]
enum Hint {
    /// Read soon: read them ahead.
    Prefetch,
    /// Done with: let them leave the resident set.
    Release,
}

/// Calls `f` with consecutive ranges of rows covering tensors with the same row count:
/// each a whole number of tasks and about [`SLAB_BYTES`] of the widest of the tensors'
/// rows and `out_row_bytes`. Each slab's pages are asked for before the previous slab is
/// handed over and released after it.
pub fn for_each_slab(
    tensors: &[&Tensor<'_>],
    out_row_bytes: usize,
    mut f: impl FnMut(Range<usize>) -> Result<()>,
) -> Result<()> {
    let Some(first) = tensors.first() else {
        return Ok(());
    };
    let n_rows = first.n_rows();
    let row_bytes = tensors
        .iter()
        .map(|t| t.row_bytes())
        .collect::<Result<Vec<_>>>()?;
    let widest = row_bytes.iter().copied().fold(out_row_bytes, usize::max);
    let task_rows = first.task_rows();
    let slab_rows = (SLAB_BYTES / widest.max(1))
        .max(1)
        .next_multiple_of(task_rows);
    let bytes = |t: usize, rows: &Range<usize>| rows.start * row_bytes[t]..rows.end * row_bytes[t];
    let slabs: Vec<Range<usize>> = (0..n_rows)
        .step_by(slab_rows)
        .map(|start| start..(start + slab_rows).min(n_rows))
        .collect();
    if let Some(slab) = slabs.first() {
        for (t, tensor) in tensors.iter().enumerate() {
            tensor.hint(Hint::Prefetch, bytes(t, slab))?;
        }
    }
    for (i, slab) in slabs.iter().enumerate() {
        if let Some(next) = slabs.get(i + 1) {
            for (t, tensor) in tensors.iter().enumerate() {
                tensor.hint(Hint::Prefetch, bytes(t, next))?;
            }
        }
        f(slab.clone())?;
        for (t, tensor) in tensors.iter().enumerate() {
            tensor.hint(Hint::Release, bytes(t, slab))?;
        }
    }
    Ok(())
}

/// `rows` cut into ranges of `task_rows`.
pub fn tasks(rows: Range<usize>, task_rows: usize) -> Vec<Range<usize>> {
    rows.clone()
        .step_by(task_rows.max(1))
        .map(|start| start..(start + task_rows).min(rows.end))
        .collect()
}
