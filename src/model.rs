//! A model in either container (a GGUF file or split set, a safetensors file or model
//! folder) as one list of tensors, each read as f32 a range of rows at a time: the input
//! of `quantforge quantize`, `quantforge dequantize` and `quantforge diff`.
//!
//! ggml types decode through [`quantforge_kernels::dequantize`] (the fastest path this CPU
//! has). safetensors F32, F16, BF16 (and the integer dtypes of the same name) are the ggml
//! types of the same name, byte for byte; the F8 dtypes decode through the formats
//! crate's tables; U8 tensors that [`crate::convert::KEY_GGML_TYPES`] lists are the ggml
//! block rows they carry (a GGUF converted to safetensors).
//!
//! A quantization reads either container through [`ModelSource`]: a safetensors model is
//! seen as the GGUF [`crate::convert`] would make of it (its keys, each tensor's GGUF type
//! and dimensions), straight from the mapped safetensors files. Work on the tensors is cut
//! in slabs and tasks by [`crate::slab`].

use crate::convert::{
    block_dims, carrier, ggml_block_types, ggml_ne, gguf_metadata_of_safetensors,
};
use crate::error::{Context, Result, ensure};
use crate::hf::fp8::Scale;
use quantforge_formats::gguf::{GgufFile, GgufModel, MAX_DIMS, Metadata};
use quantforge_formats::safetensors::{self as st, Dtype, ModelFolder, SafeTensors};
use quantforge_kernels::{GgmlType, can_dequantize};
use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt;
use std::ops::Range;
use std::path::Path;
use std::sync::Arc;

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
        Model::from_folder(ModelFolder::open(path)?).with_context(|| format!("{}", path.display()))
    }

    /// A safetensors file or folder already open, with the block types its
    /// `__metadata__` lists.
    pub fn from_folder(folder: ModelFolder) -> Result<Model> {
        let block_types = ggml_block_types(folder.metadata().unwrap_or(&[]))?;
        Ok(Model::Safetensors {
            folder: Box::new(folder),
            block_types,
        })
    }

    /// Every tensor, in the container's order (GGUF: model order; safetensors: shard by
    /// shard, each in file order).
    pub fn tensors(&self) -> Result<Vec<Tensor<'_>>> {
        match self {
            Model::Gguf(model) => Ok(gguf_tensors(model)),
            Model::Safetensors {
                folder,
                block_types,
            } => {
                let mut offset = 0;
                folder
                    .shards()
                    .flat_map(|(_, file)| file.tensors().map(move |v| (file, v)))
                    .map(|(file, v)| {
                        let (encoding, shape) = match block_types.get(v.name()) {
                            Some(&ty) => {
                                let dims = block_dims(&v, ty)?;
                                (Encoding::Ggml(dims.ty), dims.ne.into_iter().rev().collect())
                            }
                            None => (
                                Encoding::of_dtype(v.dtype()),
                                v.shape().iter().map(|&d| d as u64).collect(),
                            ),
                        };
                        let at = offset;
                        offset += v.data().len() as u64;
                        Ok(Tensor {
                            name: v.name(),
                            encoding,
                            shape,
                            data: v.data(),
                            pages: Pages::Safetensors(file),
                            stack: Vec::new(),
                            part: 0,
                            offset: at,
                            group: 1,
                            stored: None,
                        })
                    })
                    .collect()
            }
        }
    }
}

/// The tensors of a GGUF model, in model order.
fn gguf_tensors(model: &GgufModel) -> Vec<Tensor<'_>> {
    model
        .tensors()
        .map(|v| Tensor {
            name: v.name(),
            encoding: Encoding::Ggml(v.ty()),
            shape: v.shape(),
            data: v.data(),
            pages: Pages::Gguf(&model.parts()[v.part()], v.offset()),
            stack: Vec::new(),
            part: v.part(),
            offset: v.offset(),
            group: 1,
            stored: None,
        })
        .collect()
}

/// A model as a quantization reads it: GGUF metadata and tensors of GGUF types, whatever
/// the container. A safetensors model is read as the GGUF [`crate::convert`] makes of it
/// (the same keys, types, dimensions and bytes), without that GGUF being written.
pub trait ModelSource {
    /// The model's GGUF keys (for safetensors, those its conversion to GGUF would have).
    fn gguf_metadata(&self) -> Result<Cow<'_, Metadata>>;
    /// Every tensor, in the order of the model's GGUF.
    fn tensors(&self) -> Result<Vec<Tensor<'_>>>;
}

impl ModelSource for GgufModel {
    fn gguf_metadata(&self) -> Result<Cow<'_, Metadata>> {
        Ok(Cow::Borrowed(self.metadata()))
    }

    fn tensors(&self) -> Result<Vec<Tensor<'_>>> {
        Ok(gguf_tensors(self))
    }
}

impl ModelSource for Model {
    fn gguf_metadata(&self) -> Result<Cow<'_, Metadata>> {
        match self {
            Model::Gguf(model) => Ok(Cow::Borrowed(model.metadata())),
            Model::Safetensors { folder, .. } => {
                Ok(Cow::Owned(gguf_metadata_of_safetensors(folder)?))
            }
        }
    }

    fn tensors(&self) -> Result<Vec<Tensor<'_>>> {
        Model::tensors(self)
    }
}

/// A tensor's type and dimensions as a GGUF holds it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GgufDims {
    /// The ggml type.
    pub ty: GgmlType,
    /// The dimensions, ggml order (`ne[0]` the row length), at most [`MAX_DIMS`].
    pub ne: Vec<u64>,
}

impl GgufDims {
    /// All [`MAX_DIMS`] dimensions, unused ones 1.
    pub fn ne4(&self) -> [u64; MAX_DIMS] {
        let mut ne4 = [1; MAX_DIMS];
        ne4[..self.ne.len()].copy_from_slice(&self.ne);
        ne4
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
    /// Equal runs of whole rows stacked along the outermost axis, read in place of
    /// `data` (empty for a tensor held in one run).
    stack: Vec<(&'a [u8], Pages<'a>)>,
    part: usize,
    offset: u64,
    group: usize,
    /// Elements stored in another type than `encoding`, widened on reading.
    stored: Option<Stored>,
}

/// Elements stored in another type than the tensor's ggml type and widened to f32 on
/// reading (a Hugging Face checkpoint's FP8 weight, which the converter dequantizes to
/// f32 with its scale): the plan sees the ggml type, the reading the stored bytes.
#[derive(Clone, Debug)]
pub struct Stored {
    /// The element type of the bytes.
    pub dtype: Dtype,
    /// Per run of the data (one unless stacked): the scale multiplied in after widening,
    /// and the row of the scaled weight (outer axes flattened) the run begins at.
    pub scales: Vec<Option<(Arc<Scale>, usize)>>,
}

/// Where row `r` of a tensor read in interleaved groups of `group` rows is stored: row
/// `2i + j` of a group is stored row `j * group / 2 + i` of it (Llama's rotary Q/K
/// layout undone, one group per head).
pub fn interleaved_row(group: usize, r: usize) -> usize {
    if group <= 1 {
        return r;
    }
    let i = r % group;
    r - i + (i % 2) * (group / 2) + i / 2
}

/// The file holding a tensor's data, for page prefetch and release.
#[derive(Clone, Copy, Debug)]
enum Pages<'a> {
    /// A GGUF file and the data's offset in it.
    Gguf(&'a GgufFile, u64),
    /// A safetensors file (it finds the data's offset itself).
    Safetensors(&'a SafeTensors<'static>),
    /// Bytes in memory (a tensor widened while the model was opened): nothing to hint.
    Memory,
}

impl<'a> Tensor<'a> {
    /// A tensor of ggml type `ty` and row-major `shape` whose bytes are `data`: in the
    /// mapped safetensors file `file`, or in memory when `file` is `None`. `offset` places
    /// it in the order of the GGUF the model would be.
    pub fn of_bytes(
        name: &'a str,
        ty: GgmlType,
        shape: Vec<u64>,
        data: &'a [u8],
        file: Option<&'a SafeTensors<'static>>,
        offset: u64,
    ) -> Tensor<'a> {
        Tensor {
            name,
            encoding: Encoding::Ggml(ty),
            shape,
            data,
            pages: file.map_or(Pages::Memory, Pages::Safetensors),
            stack: Vec::new(),
            part: 0,
            offset,
            group: 1,
            stored: None,
        }
    }

    /// A tensor of ggml type `ty` and row-major `shape` whose data is `runs`: equal runs
    /// of whole rows in mapped safetensors files, stacked along the outermost axis (a MoE
    /// block's experts, one tensor per expert in the checkpoint). The runs are read where
    /// they are, never gathered into one buffer: through [`Tensor::len`],
    /// [`Tensor::bytes`] and the page hints, which is how a quantization reads tensors.
    pub fn stacked(
        name: &'a str,
        ty: GgmlType,
        shape: Vec<u64>,
        runs: Vec<(&'a [u8], &'a SafeTensors<'static>)>,
        offset: u64,
    ) -> Tensor<'a> {
        Tensor {
            name,
            encoding: Encoding::Ggml(ty),
            shape,
            data: &[],
            pages: Pages::Memory,
            stack: runs
                .into_iter()
                .map(|(b, f)| (b, Pages::Safetensors(f)))
                .collect(),
            part: 0,
            offset,
            group: 1,
            stored: None,
        }
    }

    /// Bytes of data.
    pub fn len(&self) -> usize {
        if self.stack.is_empty() {
            self.data.len()
        } else {
            self.stack.iter().map(|(b, _)| b.len()).sum()
        }
    }

    /// Whether the tensor has no data.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes of each run of a stacked tensor (see [`Tensor::stacked`]), which a read
    /// through [`Tensor::bytes`] may not cross; `None` for a tensor held in one run.
    pub fn run_bytes(&self) -> Option<usize> {
        self.stack.first().map(|(b, _)| b.len())
    }

    /// Bytes `range` of the data, within one run of a stacked tensor.
    pub fn bytes(&self, range: Range<usize>) -> Result<&'a [u8]> {
        let got = match self.run_bytes() {
            None => self.data.get(range.clone()),
            Some(0) => (range.is_empty() && range.start == 0).then_some(&[][..]),
            Some(n) => {
                let k = range.start / n;
                let at = k * n;
                self.stack
                    .get(k)
                    .and_then(|(b, _)| b.get(range.start - at..range.end.checked_sub(at)?))
            }
        };
        got.with_context(|| format!("tensor `{}`: bytes {range:?} out of range", self.name))
    }

    /// The same tensor with its rows read in groups of `rows` (even), each group
    /// interleaving its two halves: row `2i + j` of a group is stored row `j * rows / 2 + i`
    /// of it (how llama.cpp's converter undoes the Q/K rotary layout of Hugging Face
    /// checkpoints). Conversions read whole groups.
    pub fn with_row_groups(mut self, rows: usize) -> Tensor<'a> {
        self.group = rows.max(1);
        self
    }

    /// Rows per interleaved group (1: rows are read as stored).
    pub fn row_group(&self) -> usize {
        self.group
    }

    /// The same tensor with its elements stored as `stored` says (see [`Stored`]).
    pub fn with_stored(mut self, stored: Stored) -> Tensor<'a> {
        self.stored = Some(stored);
        self
    }

    /// Bytes of one row as stored, when the elements are stored in another type than
    /// the tensor's (see [`Stored`]).
    pub fn stored_row_bytes(&self) -> Option<usize> {
        let s = self.stored.as_ref()?;
        s.dtype.bytes_of(self.row_len())
    }

    /// Widens rows of a tensor with [`Stored`] elements, `x` holding rows from row
    /// `first_row` on in reading order (after any row-group reordering), into `out`, each
    /// multiplied by its scale at the position it is stored in.
    pub fn widen_stored(&self, x: &[u8], first_row: usize, out: &mut [f32]) -> Result<()> {
        let stored = self
            .stored
            .as_ref()
            .with_context(|| format!("tensor `{}` is not stored widened", self.name))?;
        st::decode_f32_into(self.name, stored.dtype, x, out)?;
        let row_len = self.row_len().max(1);
        let row_bytes = stored.dtype.bytes_of(row_len).unwrap_or(1).max(1);
        let run_rows = self
            .run_bytes()
            .map_or(usize::MAX, |b| (b / row_bytes).max(1));
        for (i, row) in out.chunks_mut(row_len).enumerate() {
            let at = interleaved_row(self.group, first_row + i);
            let run = at / run_rows;
            if let Some(Some((scale, first))) = stored.scales.get(run) {
                scale.apply_row(first + at - run * run_rows, row);
            }
        }
        Ok(())
    }

    /// Writes rows `rows` of `src` (whole groups of [`Tensor::row_group`] rows, each
    /// `row_bytes` long, stored order) into `dst` in the order they are read.
    pub fn reorder_groups(&self, src: &[u8], row_bytes: usize, dst: &mut Vec<u8>) {
        let g = self.group;
        dst.clear();
        if g <= 1 {
            dst.extend_from_slice(src);
            return;
        }
        for group in src.chunks(g * row_bytes) {
            let n = group.len() / row_bytes;
            for r in 0..n {
                let s = interleaved_row(g, r);
                dst.extend_from_slice(&group[s * row_bytes..(s + 1) * row_bytes]);
            }
        }
    }

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

    /// The raw bytes of a tensor held in one run (every tensor but the stacked ones a
    /// quantization reads through [`Tensor::bytes`]).
    pub fn data(&self) -> &'a [u8] {
        assert!(
            self.stack.is_empty(),
            "tensor `{}` is stacked: read it through Tensor::bytes",
            self.name
        );
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
        crate::slab::task_rows(self.row_len())
    }

    /// The GGUF type and dimensions (ggml order, unused ones 1) of the tensor as it is, or
    /// as [`crate::convert`] carries it in a GGUF (safetensors dtypes GGUF lacks).
    pub fn gguf_dims(&self) -> GgufDims {
        match self.encoding {
            Encoding::Ggml(ty) => GgufDims {
                ty,
                ne: ggml_ne(&self.shape),
            },
            Encoding::Safetensors(dtype) => {
                let shape: Vec<usize> = self.shape.iter().map(|&d| d as usize).collect();
                carrier(dtype, &shape)
            }
        }
    }

    /// Which file of a split set holds the data (0 for a single file).
    pub fn part(&self) -> usize {
        self.part
    }

    /// The data's offset in its file, as a GGUF of the model would have it in order.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// Asks the file to read bytes `bytes` of the data ahead of use.
    pub fn prefetch(&self, bytes: Range<usize>) -> Result<()> {
        self.hint(Hint::Prefetch, bytes)
    }

    /// Lets bytes `bytes` of the data leave the resident set (read again from the file if
    /// used again).
    pub fn release(&self, bytes: Range<usize>) -> Result<()> {
        self.hint(Hint::Release, bytes)
    }

    /// Passes `hint` on for bytes `bytes` of the data to the file that holds them (the
    /// runs they overlap, for a stacked tensor).
    fn hint(&self, hint: Hint, bytes: Range<usize>) -> Result<()> {
        let Some(n) = self.run_bytes() else {
            return pass_hint(self.pages, hint, bytes.start as u64, &self.data[bytes]);
        };
        if n == 0 {
            return Ok(());
        }
        let mut at = bytes.start;
        while at < bytes.end {
            let k = at / n;
            let end = bytes.end.min((k + 1) * n);
            let (run, pages) = self
                .stack
                .get(k)
                .with_context(|| format!("tensor `{}`: bytes {bytes:?} out of range", self.name))?;
            pass_hint(
                *pages,
                hint,
                (at - k * n) as u64,
                &run[at - k * n..end - k * n],
            )?;
            at = end;
        }
        Ok(())
    }
}

/// Passes `hint` on for `data`, bytes from `at` on of the run whose file is `pages`.
fn pass_hint(pages: Pages<'_>, hint: Hint, at: u64, data: &[u8]) -> Result<()> {
    match (pages, hint) {
        (Pages::Gguf(file, offset), Hint::Prefetch) => {
            file.prefetch_bytes(offset + at, data.len())?
        }
        (Pages::Gguf(file, offset), Hint::Release) => {
            file.release_bytes(offset + at, data.len())?
        }
        (Pages::Safetensors(file), Hint::Prefetch) => file.prefetch(data)?,
        (Pages::Safetensors(file), Hint::Release) => file.release(data)?,
        (Pages::Memory, _) => {}
    }
    Ok(())
}

/// What a slab's pages are about to be.
#[derive(Clone, Copy, Debug)]
enum Hint {
    /// Read soon: read them ahead.
    Prefetch,
    /// Done with: let them leave the resident set.
    Release,
}
