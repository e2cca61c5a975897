//! A codec: one type's kernels on one code path, chosen once when the codec is made.
//!
//! The kernels come from the table of codecs (`crate::codecs`) for the ISA asked for
//! (`crate::isa`); a type without a path written for that ISA gets the scalar one.

use crate::codecs::{Kernels, QuantizeFn, scalar_kernels};
use crate::simd::Row;
use crate::{Error, GgmlType, Isa, Result};
#[cfg(feature = "rayon")]
use rayon::prelude::*;

/// A codec for one type on one code path. Holding a `Codec` proves the CPU supports the
/// path, so its methods need no further check.
#[derive(Clone, Copy)]
pub struct Codec {
    ty: GgmlType,
    isa: Isa,
    kernels: Kernels,
}

impl PartialEq for Codec {
    fn eq(&self, other: &Self) -> bool {
        (self.ty, self.isa) == (other.ty, other.isa)
    }
}

impl Eq for Codec {}

impl std::fmt::Debug for Codec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Codec")
            .field("ty", &self.ty)
            .field("isa", &self.isa)
            .finish()
    }
}

impl Codec {
    /// The codec for `ty` on `isa`, or `None` when this CPU lacks `isa`. A type with no
    /// path written for `isa` gets the scalar one; [`Codec::isa`] tells.
    pub fn new(ty: GgmlType, isa: Isa) -> Option<Codec> {
        isa.is_supported().then(|| Self::on(ty, isa))
    }

    /// The fastest codec for `ty` this CPU has (after `QUANTFORGE_ISA`).
    pub fn best(ty: GgmlType) -> Codec {
        Self::on(ty, Isa::detect())
    }

    /// `ty` on `isa` (which the CPU supports), or on scalar code.
    fn on(ty: GgmlType, isa: Isa) -> Codec {
        match isa.kernels(ty) {
            Some(kernels) => Codec { ty, isa, kernels },
            None => Codec {
                ty,
                isa: Isa::Scalar,
                kernels: scalar_kernels(ty),
            },
        }
    }

    /// Runs whole rows through `quantize`, a span of rows (at least `CHECK_FLOATS` values)
    /// at a time: the span is first checked for NaN and infinity, which also brings it
    /// into the cache, then quantized row by row. Stops at the first non-finite value and
    /// returns its index in `src`; the rows before it are quantized. A quantizer that
    /// finds such values itself checks its row as it reads it instead (a separate pass
    /// would cost a memory-bound quantizer much of its speed): then the row holding the
    /// value may have been written too.
    fn quantize_rows(
        &self,
        quantize: QuantizeFn,
        src: &[f32],
        n_per_row: usize,
        w: Option<&[f32]>,
        dst: &mut [u8],
        row_size: usize,
    ) -> std::result::Result<(), usize> {
        // SAFETY (both calls of `quantize`): the kernels were made for this codec's ISA,
        // which the CPU supports (`Codec::new` checked it; scalar code runs anywhere).
        if self.kernels.finds_non_finite {
            for (r, y) in dst.chunks_exact_mut(row_size).enumerate() {
                let at = r * n_per_row;
                let row = row_at(src, at, n_per_row);
                if !unsafe { quantize(row, w, y) }
                    && let Some(i) = self.first_non_finite(row.values)
                {
                    return Err(at + i);
                }
            }
            return Ok(());
        }
        let span = CHECK_FLOATS.div_ceil(n_per_row) * n_per_row;
        for (s, (xs, ys)) in src
            .chunks(span)
            .zip(dst.chunks_mut(span / n_per_row * row_size))
            .enumerate()
        {
            if let Some(i) = self.first_non_finite(xs) {
                return Err(s * span + i);
            }
            for (r, y) in ys.chunks_exact_mut(row_size).enumerate() {
                let row = row_at(src, s * span + r * n_per_row, n_per_row);
                unsafe { quantize(row, w, y) };
            }
        }
        Ok(())
    }

    /// Runs whole blocks through this codec's dequantizer.
    fn dequantize_blocks(&self, x: &[u8], y: &mut [f32], stream: bool) -> Result<()> {
        let dequantize = self.kernels.dequantize.ok_or(Error::Unsupported {
            ty: self.ty,
            op: "dequantize",
        })?;
        // SAFETY: as in `quantize_rows`.
        unsafe { dequantize(x, y, stream) };
        Ok(())
    }

    /// The first NaN or infinity in `src`, found with this codec's ISA.
    fn first_non_finite(&self, src: &[f32]) -> Option<usize> {
        // SAFETY: as in `quantize_rows`.
        unsafe { (self.kernels.first_non_finite)(src) }
    }

    /// The type.
    pub fn ty(&self) -> GgmlType {
        self.ty
    }

    /// The ISA whose code runs.
    pub fn isa(&self) -> Isa {
        self.isa
    }

    /// Quantizes as [`crate::quantize`] does, on this codec's path.
    pub fn quantize(
        &self,
        src: &[f32],
        n_per_row: usize,
        imatrix: Option<&[f32]>,
        dst: &mut [u8],
    ) -> Result<usize> {
        let Some((quantize, row_size)) = self.check_quantize(src, n_per_row, imatrix, dst)? else {
            return Ok(0);
        };
        self.quantize_rows(quantize, src, n_per_row, imatrix, dst, row_size)
            .map_err(|index| non_finite(src, index))?;
        Ok(dst.len())
    }

    /// [`Codec::quantize`] with the rows spread over the threads of the current rayon
    /// pool (run it inside `ThreadPool::install` to choose the count). Each row is
    /// quantized by itself, so the output is the same whatever the thread count.
    #[cfg(feature = "rayon")]
    pub fn quantize_par(
        &self,
        src: &[f32],
        n_per_row: usize,
        imatrix: Option<&[f32]>,
        dst: &mut [u8],
    ) -> Result<usize> {
        let Some((quantize, row_size)) = self.check_quantize(src, n_per_row, imatrix, dst)? else {
            return Ok(0);
        };
        // Rows per task: about `PAR_TASK_BYTES` of input each, at least one row.
        let rows = (PAR_TASK_BYTES / 4 / n_per_row).max(1);
        // Each task stops at its first non-finite value; the first of those is the first
        // of the whole source.
        let first_bad = src
            .par_chunks(rows * n_per_row)
            .zip(dst.par_chunks_mut(rows * row_size))
            .enumerate()
            .filter_map(|(t, (xs, ys))| {
                self.quantize_rows(quantize, xs, n_per_row, imatrix, ys, row_size)
                    .err()
                    .map(|index| t * rows * n_per_row + index)
            })
            .min();
        match first_bad {
            Some(index) => Err(non_finite(src, index)),
            None => Ok(dst.len()),
        }
    }

    /// Checks the arguments of a quantization; `Ok(None)` for an empty source, else the
    /// quantizer and the bytes of one row.
    fn check_quantize(
        &self,
        src: &[f32],
        n_per_row: usize,
        imatrix: Option<&[f32]>,
        dst: &[u8],
    ) -> Result<Option<(QuantizeFn, usize)>> {
        let ty = self.ty;
        let Some(quantize) = self.kernels.quantize else {
            return Err(Error::Unsupported { ty, op: "quantize" });
        };
        if src.is_empty() {
            check_len("destination bytes", 0, dst.len())?;
            return Ok(None);
        }
        if n_per_row == 0 || !src.len().is_multiple_of(n_per_row) {
            return Err(Error::LengthMismatch {
                what: "source length (a whole number of rows)",
                expected: src.len().next_multiple_of(n_per_row.max(1)),
                actual: src.len(),
            });
        }
        let row_size = ty.row_size(n_per_row)?;
        let nrows = src.len() / n_per_row;
        let total = nrows
            .checked_mul(row_size)
            .ok_or(Error::TooLarge { ty, n: src.len() })?;
        check_len("destination bytes", total, dst.len())?;
        if imatrix.is_none() && crate::requires_imatrix(ty) {
            return Err(Error::ImatrixRequired { ty });
        }
        if let Some(w) = imatrix {
            check_len(
                "importance matrix length (one weight per column)",
                n_per_row,
                w.len(),
            )?;
            if let Some(index) = w.iter().position(|v| !v.is_finite()) {
                return Err(Error::NonFiniteWeight {
                    index,
                    value: w[index],
                });
            }
        }
        Ok(Some((quantize, row_size)))
    }

    /// Dequantizes as [`crate::dequantize`] does, on this codec's path.
    pub fn dequantize(&self, src: &[u8], dst: &mut [f32]) -> Result<()> {
        self.check_dequantize(src, dst)?;
        self.dequantize_blocks(src, dst, dst.len() >= STREAM_FLOATS)
    }

    /// [`Codec::dequantize`] spread over the threads of the current rayon pool.
    #[cfg(feature = "rayon")]
    pub fn dequantize_par(&self, src: &[u8], dst: &mut [f32]) -> Result<()> {
        self.check_dequantize(src, dst)?;
        let ty = self.ty;
        let blocks = (PAR_TASK_BYTES / 4 / ty.block_size()).max(1);
        let stream = dst.len() >= STREAM_FLOATS;
        src.par_chunks(blocks * ty.type_size())
            .zip(dst.par_chunks_mut(blocks * ty.block_size()))
            .try_for_each(|(x, y)| self.dequantize_blocks(x, y, stream))
    }

    fn check_dequantize(&self, src: &[u8], dst: &[f32]) -> Result<()> {
        let ty = self.ty;
        if self.kernels.dequantize.is_none() {
            return Err(Error::Unsupported {
                ty,
                op: "dequantize",
            });
        }
        if !src.len().is_multiple_of(ty.type_size()) {
            return Err(Error::LengthMismatch {
                what: "source bytes (a whole number of blocks)",
                expected: src.len().next_multiple_of(ty.type_size()),
                actual: src.len(),
            });
        }
        let n = src.len() / ty.type_size() * ty.block_size();
        check_len("destination elements", n, dst.len())
    }
}

/// The row of `n` values at `src[at..]` and the one after it (possibly in the next span;
/// empty after the last), which the search may prefetch.
fn row_at(src: &[f32], at: usize, n: usize) -> Row<'_> {
    Row {
        values: &src[at..at + n],
        next: src.get(at + n..at + 2 * n).unwrap_or(&[]),
    }
}

/// Dequantized outputs of at least this many floats (32 MiB, as large as a large
/// last-level cache: they would not stay in it) are written with streaming stores where
/// the path has them.
const STREAM_FLOATS: usize = 8 << 20;

/// Input bytes (f32) per parallel task: small enough to balance, large enough to amortize.
#[cfg(feature = "rayon")]
const PAR_TASK_BYTES: usize = 256 << 10;

/// The values a quantizer checks for NaN and infinity before quantizing them (rounded up
/// to whole rows): few enough that they are still in the cache when quantized.
const CHECK_FLOATS: usize = 4096;

/// The error for the non-finite value at `src[index]`.
fn non_finite(src: &[f32], index: usize) -> Error {
    Error::NonFinite {
        index,
        value: src[index],
    }
}

fn check_len(what: &'static str, expected: usize, actual: usize) -> Result<()> {
    if expected == actual {
        Ok(())
    } else {
        Err(Error::LengthMismatch {
            what,
            expected,
            actual,
        })
    }
}
