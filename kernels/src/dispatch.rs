//! Choice of the code path (instruction set) a codec runs on, made once per process.
//!
//! `QUANTFORGE_ISA=scalar|avx2|avx512|neon` caps the choice; a type without a path for the
//! chosen ISA runs the next lower one, and [`Codec::isa`] says which.

use crate::{Error, GgmlType, Result, scalar, simd};
use rayon::prelude::*;
use std::sync::OnceLock;

/// An instruction set a codec path is written for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Isa {
    /// Portable safe Rust: the specification.
    Scalar,
    /// x86-64 AVX2 (with F16C, which every AVX2 CPU has).
    Avx2,
    /// x86-64 AVX-512 F, BW and VL.
    Avx512,
    /// aarch64 NEON.
    Neon,
}

impl Isa {
    /// Every ISA, narrowest first.
    pub const ALL: [Isa; 4] = [Isa::Scalar, Isa::Avx2, Isa::Avx512, Isa::Neon];

    /// The lowercase name used by `QUANTFORGE_ISA` and `--isa`.
    pub fn name(self) -> &'static str {
        match self {
            Isa::Scalar => "scalar",
            Isa::Avx2 => "avx2",
            Isa::Avx512 => "avx512",
            Isa::Neon => "neon",
        }
    }

    /// Parses a name as [`Isa::name`] gives it (case-insensitive).
    pub fn from_name(name: &str) -> Option<Isa> {
        Isa::ALL
            .into_iter()
            .find(|isa| isa.name().eq_ignore_ascii_case(name))
    }

    /// Whether this CPU can run code for the ISA.
    pub fn is_supported(self) -> bool {
        match self {
            Isa::Scalar => true,
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => {
                // cpufeatures has no F16C token; std's detection caches it too.
                cpufeatures::new!(has_avx2, "avx2");
                has_avx2::get() && std::arch::is_x86_feature_detected!("f16c")
            }
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => {
                // The entry points also enable AVX2 and F16C (their `Narrow` lanes).
                cpufeatures::new!(has_avx512, "avx512f", "avx512bw", "avx512vl", "avx2");
                has_avx512::get() && std::arch::is_x86_feature_detected!("f16c")
            }
            #[cfg(target_arch = "aarch64")]
            Isa::Neon => cfg!(target_feature = "neon"),
            #[allow(unreachable_patterns)]
            _ => false,
        }
    }

    /// The widest supported ISA, capped by `QUANTFORGE_ISA` when it is set (read once;
    /// an unknown value is ignored).
    pub fn detect() -> Isa {
        static DETECTED: OnceLock<Isa> = OnceLock::new();
        *DETECTED.get_or_init(|| {
            let cap = std::env::var("QUANTFORGE_ISA")
                .ok()
                .and_then(|v| Isa::from_name(v.trim()));
            [Isa::Avx512, Isa::Avx2, Isa::Neon, Isa::Scalar]
                .into_iter()
                .find(|isa| isa.is_supported() && cap.is_none_or(|cap| isa.within(cap)))
                .unwrap_or(Isa::Scalar)
        })
    }

    /// Whether code for `self` may run when the choice is capped at `cap`.
    fn within(self, cap: Isa) -> bool {
        match cap {
            Isa::Scalar => self == Isa::Scalar,
            Isa::Avx2 => matches!(self, Isa::Scalar | Isa::Avx2),
            Isa::Avx512 => matches!(self, Isa::Scalar | Isa::Avx2 | Isa::Avx512),
            Isa::Neon => matches!(self, Isa::Scalar | Isa::Neon),
        }
    }
}

impl std::fmt::Display for Isa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A codec for one type on one code path. Holding a `Codec` proves the CPU supports the
/// path, so its methods need no further check.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Codec {
    ty: GgmlType,
    isa: Isa,
}

impl Codec {
    /// The codec for `ty` on `isa`, or `None` when this CPU lacks `isa`. A type with no
    /// path written for `isa` gets the scalar one; [`Codec::isa`] tells.
    pub fn new(ty: GgmlType, isa: Isa) -> Option<Codec> {
        if !isa.is_supported() {
            return None;
        }
        Some(Codec {
            ty,
            isa: Self::path_for(ty, isa),
        })
    }

    /// The fastest codec for `ty` this CPU has (after `QUANTFORGE_ISA`).
    pub fn best(ty: GgmlType) -> Codec {
        Codec {
            ty,
            isa: Self::path_for(ty, Isa::detect()),
        }
    }

    /// The path that runs for `ty` when `isa` is asked for.
    fn path_for(ty: GgmlType, isa: Isa) -> Isa {
        if simd::has_path(ty) { isa } else { Isa::Scalar }
    }

    /// Runs whole rows through this codec's path, a span of rows (at least
    /// `CHECK_FLOATS` values) at a time: the span is first checked for NaN and infinity,
    /// which also brings it into the cache, then quantized row by row. Stops at the first
    /// non-finite value and returns its index in `src`; the rows before it are quantized.
    /// A SIMD quantizer of `simd::checks_finite` checks its row as it reads it instead
    /// (a separate pass would cost a memory-bound quantizer a third of its speed): then
    /// the row holding the value may have been written too.
    fn quantize_rows(
        &self,
        src: &[f32],
        n_per_row: usize,
        w: Option<&[f32]>,
        dst: &mut [u8],
        row_size: usize,
    ) -> std::result::Result<(), usize> {
        if self.isa != Isa::Scalar && simd::checks_finite(self.ty) {
            for (r, y) in dst.chunks_exact_mut(row_size).enumerate() {
                let at = r * n_per_row;
                let (x, next) = row_and_next(src, at, n_per_row);
                if !self.quantize_one_row((x, next), w, y)
                    && let Some(i) = self.first_non_finite(x)
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
                let rows = row_and_next(src, s * span + r * n_per_row, n_per_row);
                self.quantize_one_row(rows, w, y);
            }
        }
        Ok(())
    }

    /// Runs one row (`x.0`; `x.1` is the next one, or empty) through this codec's path;
    /// false when a quantizer of `simd::checks_finite` met a NaN or an infinity.
    fn quantize_one_row(&self, x: (&[f32], &[f32]), w: Option<&[f32]>, y: &mut [u8]) -> bool {
        match self.isa {
            Isa::Scalar => {
                scalar::quantize_row(self.ty, x.0, w, y);
                true
            }
            // SAFETY: a Codec with this ISA exists only when `Isa::is_supported` held.
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => unsafe { crate::x86::avx2::quantize_row(self.ty, x, w, y) },
            // SAFETY: as above.
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => unsafe { crate::x86::avx512::quantize_row(self.ty, x, w, y) },
            // SAFETY: as above.
            #[cfg(target_arch = "aarch64")]
            Isa::Neon => unsafe { crate::aarch64::neon::quantize_row(self.ty, x, w, y) },
            #[allow(unreachable_patterns)]
            _ => unreachable!("{} cannot be supported on this architecture", self.isa),
        }
    }

    /// Runs whole blocks through this codec's dequantizer.
    fn dequantize_blocks(&self, x: &[u8], y: &mut [f32], stream: bool) {
        match self.isa {
            Isa::Scalar => scalar::dequantize(self.ty, x, y),
            // SAFETY: a Codec with this ISA exists only when `Isa::is_supported` held.
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => unsafe { crate::x86::avx2::dequantize(self.ty, x, y, stream) },
            // SAFETY: as above.
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => unsafe { crate::x86::avx512::dequantize(self.ty, x, y, stream) },
            // SAFETY: as above.
            #[cfg(target_arch = "aarch64")]
            Isa::Neon => unsafe { crate::aarch64::neon::dequantize(self.ty, x, y, stream) },
            #[allow(unreachable_patterns)]
            _ => unreachable!("{} cannot be supported on this architecture", self.isa),
        }
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
        let Some(row_size) = self.check_quantize(src, n_per_row, imatrix, dst)? else {
            return Ok(0);
        };
        self.quantize_rows(src, n_per_row, imatrix, dst, row_size)
            .map_err(|index| non_finite(src, index))?;
        Ok(dst.len())
    }

    /// [`Codec::quantize`] with the rows spread over the threads of the current rayon
    /// pool (run it inside `ThreadPool::install` to choose the count). Each row is
    /// quantized by itself, so the output is the same whatever the thread count.
    pub fn quantize_par(
        &self,
        src: &[f32],
        n_per_row: usize,
        imatrix: Option<&[f32]>,
        dst: &mut [u8],
    ) -> Result<usize> {
        let Some(row_size) = self.check_quantize(src, n_per_row, imatrix, dst)? else {
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
                self.quantize_rows(xs, n_per_row, imatrix, ys, row_size)
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
    /// bytes of one row.
    fn check_quantize(
        &self,
        src: &[f32],
        n_per_row: usize,
        imatrix: Option<&[f32]>,
        dst: &[u8],
    ) -> Result<Option<usize>> {
        let ty = self.ty;
        if !scalar::can_quantize(ty) {
            return Err(Error::Unsupported { ty, op: "quantize" });
        }
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
        Ok(Some(row_size))
    }

    /// The first NaN or infinity in `src`, found with this codec's ISA.
    fn first_non_finite(&self, src: &[f32]) -> Option<usize> {
        match self.isa {
            // SAFETY: a Codec with this ISA exists only when `Isa::is_supported` held.
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => unsafe { crate::x86::avx2::first_non_finite(src) },
            // SAFETY: as above.
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => unsafe { crate::x86::avx512::first_non_finite(src) },
            // SAFETY: as above.
            #[cfg(target_arch = "aarch64")]
            Isa::Neon => unsafe { crate::aarch64::neon::first_non_finite(src) },
            _ => first_non_finite(src),
        }
    }

    /// Dequantizes as [`crate::dequantize`] does, on this codec's path.
    pub fn dequantize(&self, src: &[u8], dst: &mut [f32]) -> Result<()> {
        self.check_dequantize(src, dst)?;
        self.dequantize_blocks(src, dst, dst.len() >= STREAM_FLOATS);
        Ok(())
    }

    /// [`Codec::dequantize`] spread over the threads of the current rayon pool.
    pub fn dequantize_par(&self, src: &[u8], dst: &mut [f32]) -> Result<()> {
        self.check_dequantize(src, dst)?;
        let ty = self.ty;
        let blocks = (PAR_TASK_BYTES / 4 / ty.block_size()).max(1);
        let stream = dst.len() >= STREAM_FLOATS;
        src.par_chunks(blocks * ty.type_size())
            .zip(dst.par_chunks_mut(blocks * ty.block_size()))
            .for_each(|(x, y)| self.dequantize_blocks(x, y, stream));
        Ok(())
    }

    fn check_dequantize(&self, src: &[u8], dst: &[f32]) -> Result<()> {
        let ty = self.ty;
        if !scalar::can_dequantize(ty) {
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
fn row_and_next(src: &[f32], at: usize, n: usize) -> (&[f32], &[f32]) {
    let next = src.get(at + n..at + 2 * n).unwrap_or(&[]);
    (&src[at..at + n], next)
}

/// Dequantized outputs of at least this many floats (32 MiB, as large as a large
/// last-level cache: they would not stay in it) are written with streaming stores where
/// the path has them.
const STREAM_FLOATS: usize = 8 << 20;

/// Input bytes (f32) per parallel task: small enough to balance, large enough to amortize.
const PAR_TASK_BYTES: usize = 256 << 10;

/// The values a quantizer checks for NaN and infinity before quantizing them (rounded up
/// to whole rows): few enough that they are still in the cache when quantized.
const CHECK_FLOATS: usize = 4096;

/// The index of the first NaN or infinity. Scans in chunks with a branch-free test the
/// compiler vectorizes, and looks for the exact index only in a chunk that has one.
fn first_non_finite(src: &[f32]) -> Option<usize> {
    const CHUNK: usize = 4096;
    src.chunks(CHUNK).enumerate().find_map(|(c, chunk)| {
        let bad = chunk.iter().fold(0u32, |acc, v| {
            acc | u32::from(v.to_bits() & 0x7f80_0000 == 0x7f80_0000)
        });
        (bad != 0).then(|| c * CHUNK + chunk.iter().position(|v| !v.is_finite()).unwrap_or(0))
    })
}

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
