//! quantforge-kernels: ggml's block-format codecs.
//!
//! The scalar codecs in [`scalar`] are ports of ggml 0.26.0's reference quantizers
//! (`quantize_row_*_ref`), its importance-matrix quantizers (`quantize_*_impl`) and its
//! `dequantize_row_*`, and give the same bytes and the same f32 bits for every finite
//! input. They are the specification every SIMD path is tested against.
//!
//! The entry points are [`quantize`] (the semantics of `ggml_quantize_chunk`) and
//! [`dequantize`], which pick the fastest path this CPU supports; [`Codec`] names a
//! path explicitly.

#![forbid(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]

pub mod blocks;
mod codecs;
mod dispatch;
mod error;
mod isa;
pub mod num;
pub mod scalar;
mod simd;
mod types;

pub use dispatch::Codec;
pub use error::{Error, Result};
pub use isa::Isa;
pub use types::GgmlType;

/// Quantizes `src`, rows of `n_per_row` elements, into `dst` as ggml's
/// `ggml_quantize_chunk(ty, src, dst, 0, nrows, n_per_row, imatrix)` does, with the
/// fastest path this CPU has. `imatrix`, when given, holds one importance weight per
/// column. Returns the bytes written, which must be exactly `dst.len()`.
///
/// Errors: a row that is not a whole number of blocks, `src` not a whole number of rows,
/// `dst` of the wrong size, an importance matrix of the wrong length, a non-finite value
/// (named by its index), or a type ggml cannot quantize to. After a non-finite value the
/// rows before it may have been written to `dst` (and, with q8_0 and tq2_0, whose fast
/// paths look for such values as they read their input, the row holding it); nothing is
/// written after that row.
pub fn quantize(
    ty: GgmlType,
    src: &[f32],
    n_per_row: usize,
    imatrix: Option<&[f32]>,
    dst: &mut [u8],
) -> Result<usize> {
    Codec::best(ty).quantize(src, n_per_row, imatrix, dst)
}

/// Dequantizes `src`, a whole number of `ty` blocks, into `dst` as ggml's
/// `dequantize_row_*` (the type's `to_float`) does, with the fastest path this CPU has.
pub fn dequantize(ty: GgmlType, src: &[u8], dst: &mut [f32]) -> Result<()> {
    Codec::best(ty).dequantize(src, dst)
}

/// Whether [`quantize`] accepts `ty` as a target.
pub const fn can_quantize(ty: GgmlType) -> bool {
    codecs::capabilities(ty).quantize
}

/// Whether [`dequantize`] accepts `ty` as a source.
pub const fn can_dequantize(ty: GgmlType) -> bool {
    codecs::capabilities(ty).dequantize
}

/// Whether ggml's quantizer for `ty` uses an importance matrix when one is given (for
/// the others it is accepted and ignored, as ggml ignores it).
pub const fn uses_imatrix(ty: GgmlType) -> bool {
    codecs::capabilities(ty).imatrix
}

/// Whether ggml's quantizer for `ty` refuses to run without an importance matrix (its
/// `ggml_quantize_requires_imatrix`); [`quantize`] then returns
/// [`Error::ImatrixRequired`] when given none.
pub const fn requires_imatrix(ty: GgmlType) -> bool {
    codecs::capabilities(ty).requires_imatrix
}

/// Whether `ty` has SIMD code paths (both directions), so that a [`Codec`] asked for an
/// ISA other than scalar runs that ISA's code for it.
pub const fn has_simd_path(ty: GgmlType) -> bool {
    codecs::capabilities(ty).simd
}

/// The relative cost of quantizing one element to `ty`, in units of about one widening
/// pass over it (0 for a type without a quantizer): a rough figure for ordering work,
/// which changes no output.
pub const fn quantize_cost(ty: GgmlType) -> f64 {
    codecs::capabilities(ty).cost
}
