//! Tensor descriptions (name, type, dimensions) and zero-copy views of their data.
//!
//! Dimensions are kept as the file gives them: ggml's `ne` order (`ne[0]` is the length
//! of a row, the fastest-varying dimension) and the file's own number of dimensions,
//! trailing ones included (gguf-py writes them, ggml does not). The checks are ggml's
//! (`gguf_init_from_reader`): at most 4 dimensions, each non-negative as an `int64_t`,
//! the element count representable, `ne[0]` a whole number of blocks of the type.

use super::error::{GgufError, Result};
use quantforge_kernels::GgmlType;

/// ggml's `GGML_MAX_DIMS`.
pub const MAX_DIMS: usize = 4;

/// One tensor's entry in the tensor directory: everything but its data and offset.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorInfo {
    name: String,
    ty: GgmlType,
    ne: [u64; MAX_DIMS],
    n_dims: usize,
    n_bytes: u64,
}

impl TensorInfo {
    /// A tensor of type `ty` with dimensions `ne` in ggml order (`ne[0]` = row length).
    ///
    /// Errors: more than 4 dimensions, a dimension above `i64::MAX`, an element count
    /// above `i64::MAX`, a row that is not a whole number of blocks, a byte size that
    /// overflows.
    pub fn new(name: impl Into<String>, ty: GgmlType, ne: &[u64]) -> Result<TensorInfo> {
        let name = name.into();
        let bad = |reason: String| GgufError::BadTensorShape {
            name: name.clone(),
            reason,
        };
        if ne.len() > MAX_DIMS {
            return Err(bad(format!(
                "{} dimensions, at most {MAX_DIMS} allowed",
                ne.len()
            )));
        }
        let mut full = [1u64; MAX_DIMS];
        full[..ne.len()].copy_from_slice(ne);
        let mut n_elements: u64 = 1;
        for (i, &d) in full.iter().enumerate() {
            if d > i64::MAX as u64 {
                return Err(bad(format!("dimension {i} is {d}, above i64::MAX")));
            }
            n_elements = n_elements
                .checked_mul(d)
                .filter(|&n| n <= i64::MAX as u64)
                .ok_or_else(|| bad(format!("shape {ne:?} has more than i64::MAX elements")))?;
        }
        let row = usize::try_from(full[0]).map_err(|_| bad("row too long".to_string()))?;
        let row_bytes = ty.row_size(row).map_err(|_| {
            bad(format!(
                "{} elements per row is not a whole number of {ty} blocks of {}",
                full[0],
                ty.block_size()
            ))
        })? as u64;
        // With no zero dimension, every partial product is <= n_elements: no overflow.
        let n_bytes = if n_elements == 0 {
            0
        } else {
            row_bytes
                .checked_mul(n_elements / full[0])
                .ok_or_else(|| bad(format!("{ty} shape {ne:?} overflows a 64-bit byte size")))?
        };
        Ok(TensorInfo {
            name,
            ty,
            ne: full,
            n_dims: ne.len(),
            n_bytes,
        })
    }

    /// The name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The ggml type.
    pub fn ty(&self) -> GgmlType {
        self.ty
    }

    /// Dimensions as the file gives them, ggml order (`ne[0]` = row length).
    pub fn ne(&self) -> &[u64] {
        &self.ne[..self.n_dims]
    }

    /// All four ggml dimensions, missing ones as 1.
    pub fn ne4(&self) -> [u64; MAX_DIMS] {
        self.ne
    }

    /// The logical row-major shape (outermost first): `ne` reversed, as numpy and
    /// safetensors write it.
    pub fn shape(&self) -> Vec<u64> {
        self.ne().iter().rev().copied().collect()
    }

    /// Number of elements.
    pub fn n_elements(&self) -> u64 {
        self.ne.iter().product()
    }

    /// Bytes of data (without padding).
    pub fn n_bytes(&self) -> u64 {
        self.n_bytes
    }

    /// Bytes of one row (`ne[0]` elements).
    pub fn row_bytes(&self) -> u64 {
        if self.ne[0] == 0 {
            return 0;
        }
        (self.ne[0] / self.ty.block_size() as u64) * self.ty.type_size() as u64
    }

    /// The same tensor under another name.
    pub fn renamed(&self, name: impl Into<String>) -> TensorInfo {
        TensorInfo {
            name: name.into(),
            ..self.clone()
        }
    }
}

/// A tensor's entry and its bytes, borrowed from the file (zero-copy under mmap).
#[derive(Clone, Copy, Debug)]
pub struct TensorView<'a> {
    info: &'a TensorInfo,
    part: usize,
    offset: u64,
    data: &'a [u8],
}

impl<'a> TensorView<'a> {
    pub(crate) fn new(info: &'a TensorInfo, offset: u64, data: &'a [u8]) -> TensorView<'a> {
        TensorView {
            info,
            part: 0,
            offset,
            data,
        }
    }

    pub(crate) fn in_part(self, part: usize) -> TensorView<'a> {
        TensorView { part, ..self }
    }

    /// Which file of a split set holds the data (0 for a single file).
    pub fn part(&self) -> usize {
        self.part
    }

    /// The directory entry.
    pub fn info(&self) -> &'a TensorInfo {
        self.info
    }

    /// The name.
    pub fn name(&self) -> &'a str {
        self.info.name()
    }

    /// The ggml type.
    pub fn ty(&self) -> GgmlType {
        self.info.ty()
    }

    /// Dimensions in ggml order.
    pub fn ne(&self) -> &'a [u64] {
        self.info.ne()
    }

    /// Logical row-major shape.
    pub fn shape(&self) -> Vec<u64> {
        self.info.shape()
    }

    /// Absolute offset of the data in its file (see [`TensorView::part`]).
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// The data: exactly [`TensorInfo::n_bytes`] bytes.
    pub fn data(&self) -> &'a [u8] {
        self.data
    }
}
