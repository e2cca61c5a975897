//! Comparing two models tensor by tensor (`quantforge diff`): tensors are matched by
//! name; for each pair, whether the shapes, types and bytes are the same, and, with both
//! sides decoded to f32 a slab of rows at a time, the largest absolute difference (and
//! where), the RMSE and the NaN/infinite values met.
//!
//! The figures are made row by row ([`ErrorStats::of`] on one row) and the rows' figures
//! added in row order in f64 ([`ErrorStats::merge`]), so the figures of a tensor do not
//! depend on how its rows were cut into tasks: the quantizer's quality report (`quantize
//! --report`) computes them the same way while it runs and gets the same numbers.
//!
//! A row whose values are all finite is measured in f32, as fast as the values can be
//! read: the difference `a - b` rounded to f32 (exact whenever the two are within a
//! factor of two of each other, as a value and its quantized copy mostly are), its
//! largest magnitude (the first element with it), and the sums of squared differences
//! and of each side's squares, each added in f32 over runs of 32 elements and the
//! runs' sums added in f64: a sum of squares is within a few parts in a million of
//! the exact one. The sum of products is `(aa + bb - sq) / 2` of those, as close to the
//! exact one relative to the squares. Every CPU gets the same bits (see `Blocks`).
//! A row with a NaN or an infinity, or values whose squares overflow f32 (or a row of
//! 2^32 values or more), is measured in f64 (`|f64(a) - f64(b)|`, exact products), the
//! elements where either side is NaN or infinite counted apart and left out of the error
//! figures; two NaNs, or two equal infinities, count as the same value. Shapes compare
//! equal when they differ only by leading axes of 1 (GGUF writers may or may not drop
//! them).

use crate::error::Result;
use crate::model::{Encoding, Model, Tensor};
use crate::slab::{for_each_slab, tasks};
use quantforge_kernels::GgmlType;
use rayon::prelude::*;
use std::collections::HashMap;

/// Error figures over a set of elements.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ErrorStats {
    /// Elements where both values are finite: the ones the error figures cover.
    pub compared: u64,
    /// Sum of the squared differences over them.
    pub sum_squares: f64,
    /// Sum of the products of the two sides over them.
    pub sum_products: f64,
    /// Sum of the squares of A over them.
    pub sum_squares_a: f64,
    /// Sum of the squares of B over them.
    pub sum_squares_b: f64,
    /// The largest absolute difference (0 when nothing was compared).
    pub max_abs: f64,
    /// Row-major index of the first element with the largest difference.
    pub max_index: Option<u64>,
    /// NaN or infinite values in A.
    pub non_finite_a: u64,
    /// NaN or infinite values in B.
    pub non_finite_b: u64,
    /// Elements where a side is NaN or infinite and the two are not the same value.
    pub non_finite_mismatches: u64,
}

impl ErrorStats {
    /// The figures of `a` against `b` (one row, or any run of elements taken as one),
    /// elements numbered from `first`, as the module docs describe: in f32 blocks when
    /// every value is finite (and every block's sums stay finite), else in f64 with the
    /// pairs that are not both finite left out.
    pub fn of(a: &[f32], b: &[f32], first: u64) -> ErrorStats {
        let n = a.len().min(b.len());
        let (a, b) = (&a[..n], &b[..n]);
        // Values are almost always finite: the checking sums only when they are not.
        if let Some(s) = Blocks::of(a, b, first) {
            return s;
        }
        let mut s = Exact::run(a, b).stats(first);
        for (&x, &y) in a.iter().zip(b) {
            if !(x.is_finite() && y.is_finite()) {
                s.non_finite_a += u64::from(!x.is_finite());
                s.non_finite_b += u64::from(!y.is_finite());
                let same = x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan());
                s.non_finite_mismatches += u64::from(!same);
            }
        }
        s
    }

    /// The figures of each row of `row_len` elements of `a` against `b`, rows numbered
    /// from `first_row`: what [`ErrorStats::merge`] adds up in row order.
    pub fn of_rows(a: &[f32], b: &[f32], row_len: usize, first_row: u64) -> Vec<ErrorStats> {
        let row_len = row_len.max(1);
        a.chunks(row_len)
            .zip(b.chunks(row_len))
            .enumerate()
            .map(|(r, (x, y))| ErrorStats::of(x, y, (first_row + r as u64) * row_len as u64))
            .collect()
    }

    /// The figures of each row of `row_len` values of `x` against the same rows quantized
    /// to `ty` (`y`, whole rows), rows numbered from `first_row`, appended to `out`: what
    /// dequantizing `y` and [`ErrorStats::of_rows`] give, a few rows at a time in the
    /// first-level cache. An error from the dequantizer (bytes that are not whole rows of
    /// `ty`, a type it cannot read) leaves `out` as it was.
    pub fn of_quantized_rows(
        x: &[f32],
        ty: GgmlType,
        y: &[u8],
        row_len: usize,
        first_row: u64,
        out: &mut Vec<ErrorStats>,
    ) -> std::result::Result<(), quantforge_kernels::Error> {
        let row_len = row_len.max(1);
        let rows = x.len() / row_len;
        let row_bytes = ty.row_size(row_len)?;
        if y.len() != rows * row_bytes {
            return Err(quantforge_kernels::Error::LengthMismatch {
                what: "quantized bytes (the rows measured)",
                expected: rows * row_bytes,
                actual: y.len(),
            });
        }
        #[cfg(target_arch = "x86_64")]
        if let Some(path) = x86::Path::detect() {
            let x = &x[..rows * row_len];
            // SAFETY: `detect` found the path's features.
            if let Some(done) = unsafe { quantized_rows(path, x, ty, y, row_len, first_row, out) } {
                return done;
            }
        }
        let chunk_rows = (MEASURED_CHUNK / row_len).max(1);
        let start = out.len();
        let mut buf = DEQUANTIZED.take();
        let mut done = Ok(());
        for (c, (xs, ys)) in x[..rows * row_len]
            .chunks(chunk_rows * row_len)
            .zip(y.chunks(chunk_rows * row_bytes))
            .enumerate()
        {
            buf.resize(xs.len(), 0.0);
            done = quantforge_kernels::dequantize(ty, ys, &mut buf);
            if done.is_err() {
                out.truncate(start);
                break;
            }
            let first = first_row + (c * chunk_rows) as u64;
            out.extend(ErrorStats::of_rows(xs, &buf, row_len, first));
        }
        DEQUANTIZED.set(buf);
        done
    }

    /// Adds the figures of elements that come after these (ties keep the earlier index).
    pub fn merge(&mut self, later: &ErrorStats) {
        if later.max_index.is_some() && (self.max_index.is_none() || later.max_abs > self.max_abs) {
            self.max_abs = later.max_abs;
            self.max_index = later.max_index;
        }
        self.compared += later.compared;
        self.sum_squares += later.sum_squares;
        self.sum_products += later.sum_products;
        self.sum_squares_a += later.sum_squares_a;
        self.sum_squares_b += later.sum_squares_b;
        self.non_finite_a += later.non_finite_a;
        self.non_finite_b += later.non_finite_b;
        self.non_finite_mismatches += later.non_finite_mismatches;
    }

    /// Root of the mean squared difference, when anything was compared.
    pub fn rmse(&self) -> Option<f64> {
        (self.compared > 0).then(|| (self.sum_squares / self.compared as f64).sqrt())
    }

    /// Cosine similarity of the two sides, when anything was compared and neither side
    /// is all zeros.
    pub fn cosine(&self) -> Option<f64> {
        let norms = (self.sum_squares_a * self.sum_squares_b).sqrt();
        (self.compared > 0 && norms > 0.0).then(|| self.sum_products / norms)
    }
}

/// [`ErrorStats::of_quantized_rows`] with the quantized rows read by the vector code
/// itself, for the types it reads (`None` for the others); `y` holds whole rows of `x`.
///
/// # Safety
/// The CPU has the path's features.
#[cfg(target_arch = "x86_64")]
unsafe fn quantized_rows(
    path: x86::Path,
    x: &[f32],
    ty: GgmlType,
    y: &[u8],
    row_len: usize,
    first_row: u64,
    out: &mut Vec<ErrorStats>,
) -> Option<std::result::Result<(), quantforge_kernels::Error>> {
    // SAFETY: the caller checked the features.
    unsafe {
        match ty {
            GgmlType::Q8_0 => Some(block_rows::<x86::Q8_0>(path, x, y, row_len, first_row, out)),
            GgmlType::Q5_0 => Some(block_rows::<x86::Q5_0>(path, x, y, row_len, first_row, out)),
            _ => None,
        }
    }
}

/// [`quantized_rows`] of blocks of `B`; a row whose sums are not finite (a scale that
/// overflowed, say) is dequantized and measured as [`ErrorStats::of`] would.
///
/// # Safety
/// The CPU has the path's features.
#[cfg(target_arch = "x86_64")]
unsafe fn block_rows<B: x86::Block32>(
    path: x86::Path,
    x: &[f32],
    bytes: &[u8],
    row_len: usize,
    first_row: u64,
    out: &mut Vec<ErrorStats>,
) -> std::result::Result<(), quantforge_kernels::Error> {
    let row_bytes = row_len / 32 * B::BYTES;
    let side = x86::BlockRows::<B> {
        bytes,
        row_bytes,
        format: std::marker::PhantomData,
    };
    let start = out.len();
    let mut figures = FIGURES.take();
    figures.clear();
    figures.reserve(x.len() / row_len);
    if row_len <= u32::MAX as usize {
        // SAFETY: the caller checked the features.
        unsafe { path.rows(x, &side, row_len, &mut figures) };
    }
    for (r, xs) in x.chunks_exact(row_len).enumerate() {
        let first = (first_row + r as u64) * row_len as u64;
        match figures.get(r).and_then(|f| f.stats(row_len, first)) {
            Some(s) => out.push(s),
            None => {
                let mut ys = vec![0.0; row_len];
                let row = &bytes[r * row_bytes..][..row_bytes];
                if let Err(e) = quantforge_kernels::dequantize(B::TYPE, row, &mut ys) {
                    out.truncate(start);
                    FIGURES.set(figures);
                    return Err(e);
                }
                out.push(ErrorStats::of(xs, &ys, first));
            }
        }
    }
    FIGURES.set(figures);
    Ok(())
}

thread_local! {
    /// Each thread's dequantized rows for [`ErrorStats::of_quantized_rows`], kept between
    /// calls (a fresh buffer per call would be mapped and faulted in every time).
    static DEQUANTIZED: std::cell::Cell<Vec<f32>> = const { std::cell::Cell::new(Vec::new()) };
    /// Each thread's row figures for [`quantized_rows`], kept between calls.
    #[cfg(target_arch = "x86_64")]
    static FIGURES: std::cell::Cell<Vec<Figures>> = const { std::cell::Cell::new(Vec::new()) };
}

/// Values dequantized at a time by [`ErrorStats::of_quantized_rows`]: a chunk of rows
/// stays in the first-level cache between its dequantization and its measurement.
const MEASURED_CHUNK: usize = 4096;

/// Lanes of the f32 sums: element `i` of a row goes to lane `i % 16`.
const LANES: usize = 16;

/// Terms each lane adds in f32 before the block's sums go into f64: the more, the fewer
/// conversions to f64 a value pays for and the further an f32 sum may drift from the
/// exact one (at 32, by a few parts in a million at worst).
const BLOCK_TERMS: usize = 32;

/// Elements in a block.
const BLOCK: usize = LANES * BLOCK_TERMS;

/// The f32 sums of the rows whose values are all finite. Within a block of 512 elements,
/// each lane's three sums (the squared difference and the two squares) are made by fused
/// multiply-adds in f32 in element order from 0, and its largest difference is kept with
/// the position where the lane first met it; at the block's end each sum's sixteen lanes
/// go into four f64 lanes (lane `j` taking `(p[j] + p[j+4]) + (p[j+8] + p[j+12])`), added
/// pairwise at the row's end. The sum of products is then `(aa + bb - sq) / 2` in f64
/// (the identity `2ab = a^2 + b^2 - (a - b)^2`): as close to the exact one, relative to
/// the squares, as a sum of its own would be, for a quarter less work per element. The
/// vector code does the same operations on the same lanes, so every CPU gets the same
/// figures.
struct Blocks {
    /// `[sum][lane]` in f64: squared differences, squares of a, of b.
    acc: [[f64; 4]; SUMS],
    /// Each lane's largest difference so far (-1 before any), and the run of sixteen
    /// elements (from the row's start) where the lane first met it.
    max: [f32; LANES],
    run: [u32; LANES],
}

/// The sums a lane keeps: squared differences, squares of a, squares of b.
const SUMS: usize = 3;

impl Blocks {
    fn new() -> Blocks {
        Blocks {
            acc: [[0.0; 4]; SUMS],
            max: [-1.0; LANES],
            run: [0; LANES],
        }
    }

    /// The figures of `a` against `b` (the same length), elements numbered from `first`,
    /// or `None` when a sum is not finite (a value is NaN or infinite, or squares
    /// overflow f32) or there are 2^32 elements or more.
    fn of(a: &[f32], b: &[f32], first: u64) -> Option<ErrorStats> {
        let n = a.len().min(b.len());
        if n > u32::MAX as usize {
            // Positions are kept in 32 bits; a run this long is summed in f64 instead.
            return None;
        }
        let (a, b) = (&a[..n], &b[..n]);
        #[cfg(target_arch = "x86_64")]
        if let Some(path) = x86::Path::detect() {
            // SAFETY: `detect` found the CPU features of the path.
            if let Some(figures) = unsafe { path.row(a, b) } {
                return figures.stats(n, first);
            }
        }
        Blocks::run(a, b).stats(n, first)
    }

    /// The sums and largest differences of every block, one element at a time.
    fn run(a: &[f32], b: &[f32]) -> Blocks {
        let mut s = Blocks::new();
        for (k, (xs, ys)) in a.chunks(BLOCK).zip(b.chunks(BLOCK)).enumerate() {
            let mut p = [[0.0f32; LANES]; SUMS];
            let mut bm = [-1.0f32; LANES];
            let mut bj = [0u32; LANES];
            for (i, (&x, &y)) in xs.iter().zip(ys).enumerate() {
                let (l, j) = (i % LANES, (i / LANES) as u32);
                let d = x - y;
                p[0][l] = d.mul_add(d, p[0][l]);
                p[1][l] = x.mul_add(x, p[1][l]);
                p[2][l] = y.mul_add(y, p[2][l]);
                let d = d.abs();
                if d > bm[l] {
                    (bm[l], bj[l]) = (d, j);
                }
            }
            s.end_block(k, &p, &bm, &bj);
        }
        s
    }

    /// Block `k`'s lane sums `p` and largest differences `bm` (met first in the block's
    /// runs `bj`) taken in.
    #[inline(always)]
    fn end_block(
        &mut self,
        k: usize,
        p: &[[f32; LANES]; SUMS],
        bm: &[f32; LANES],
        bj: &[u32; LANES],
    ) {
        for (acc, p) in self.acc.iter_mut().zip(p) {
            fold(acc, p);
        }
        for l in 0..LANES {
            if bm[l] > self.max[l] {
                self.max[l] = bm[l];
                self.run[l] = (k * BLOCK_TERMS) as u32 + bj[l];
            }
        }
    }

    /// The row's sums and first largest difference: the sums' four f64 lanes added
    /// pairwise; the largest of the lanes' largest differences, and the earliest of the
    /// lanes' first positions of it. Halving trees over the lanes, which compile to a
    /// few vector operations (which lanes have it is random: no branches).
    fn figures(&self) -> Figures {
        let add = |v: [f64; 4]| (v[0] + v[1]) + (v[2] + v[3]);
        let mut m = self.max;
        for w in [8, 4, 2, 1] {
            for l in 0..w {
                m[l] = if m[l + w] > m[l] { m[l + w] } else { m[l] };
            }
        }
        let top = m[0];
        let mut at: [u32; LANES] = std::array::from_fn(|l| {
            let i = self.run[l] * LANES as u32 + l as u32;
            if self.max[l] == top { i } else { u32::MAX }
        });
        for w in [8, 4, 2, 1] {
            for l in 0..w {
                at[l] = at[l].min(at[l + w]);
            }
        }
        Figures {
            sums: self.acc.map(add),
            top,
            first: at[0],
        }
    }

    /// The figures of the sums of `n` elements numbered from `first`, or `None` when a
    /// sum is not finite.
    fn stats(&self, n: usize, first: u64) -> Option<ErrorStats> {
        self.figures().stats(n, first)
    }
}

/// A row's figures in [`Blocks`]'s terms: the sums of squared differences and of each
/// side's squares, the largest difference (-1 for no elements) and the first element
/// (from the row's start) with it.
struct Figures {
    sums: [f64; SUMS],
    top: f32,
    first: u32,
}

impl Figures {
    /// The figures of the row of `n` elements numbered from `first`, or `None` when a
    /// sum is not finite.
    #[inline]
    fn stats(&self, n: usize, first: u64) -> Option<ErrorStats> {
        let [sq, aa, bb] = self.sums;
        let ab = ((aa + bb) - sq) * 0.5;
        if !(sq.is_finite() && ab.is_finite()) {
            return None;
        }
        let found = self.top >= 0.0;
        Some(ErrorStats {
            compared: n as u64,
            sum_squares: sq,
            sum_products: ab,
            sum_squares_a: aa,
            sum_squares_b: bb,
            max_abs: if found { f64::from(self.top) } else { 0.0 },
            max_index: found.then(|| first + u64::from(self.first)),
            ..ErrorStats::default()
        })
    }
}

/// [`Blocks::run`] in vectors: the same operations on the same lanes, sixteen lanes in one
/// AVX-512 register or two AVX2 ones, and the second side read as f32 rows or straight
/// from quantized blocks (whose values are dequantized in the registers, the codec's own
/// operations, instead of being written out and read back).
#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::{BLOCK, BLOCK_TERMS, Figures, GgmlType, LANES, SUMS};
    use std::arch::x86_64::*;

    /// The vector code this CPU runs.
    #[derive(Clone, Copy)]
    pub(super) enum Path {
        Avx512,
        Avx2,
    }

    impl Path {
        /// The widest path the CPU has (the kernels' choice, so `QUANTFORGE_ISA` caps
        /// this too), if any.
        pub(super) fn detect() -> Option<Path> {
            use quantforge_kernels::Isa;
            use std::arch::is_x86_feature_detected as has;
            // The kernels' AVX-512 needs F, BW, VL, AVX2 and F16C (FMA comes with F), their
            // AVX2 F16C; DQ and FMA are checked here.
            match Isa::detect() {
                Isa::Avx512 if has!("avx512dq") => Some(Path::Avx512),
                Isa::Avx512 | Isa::Avx2 if has!("fma") => Some(Path::Avx2),
                _ => None,
            }
        }

        /// [`Figures`] of the row `x` against the row `y`, if there are values.
        ///
        /// # Safety
        /// The CPU has the path's features ([`Path::detect`] returned it).
        pub(super) unsafe fn row(self, x: &[f32], y: &[f32]) -> Option<Figures> {
            let mut last = Last(None);
            // SAFETY: the caller checked the features.
            unsafe { self.rows(x, &F32Row(y), x.len(), &mut last) };
            last.0
        }

        /// [`Figures`] of each row of `row_len` values of `x` against the same row of
        /// `side`, appended to `out`.
        ///
        /// # Safety
        /// The CPU has the path's features ([`Path::detect`] returned it).
        pub(super) unsafe fn rows<S: Side>(
            self,
            x: &[f32],
            side: &S,
            row_len: usize,
            out: &mut impl Extend<Figures>,
        ) {
            let rows = x.len() / row_len.max(1);
            if rows == 0 {
                return;
            }
            side.check(rows - 1, row_len);
            // SAFETY: the caller checked the features; `check` the side's bounds.
            unsafe {
                match self {
                    Path::Avx512 => rows512(&x[..rows * row_len], side, row_len, out),
                    Path::Avx2 => rows256(&x[..rows * row_len], side, row_len, out),
                }
            }
        }
    }

    /// Keeps the last of the figures it is given.
    struct Last(Option<Figures>);

    impl Extend<Figures> for Last {
        fn extend<I: IntoIterator<Item = Figures>>(&mut self, figures: I) {
            if let Some(f) = figures.into_iter().last() {
                self.0 = Some(f);
            }
        }
    }

    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
    unsafe fn rows512<S: Side>(
        x: &[f32],
        side: &S,
        row_len: usize,
        out: &mut impl Extend<Figures>,
    ) {
        let rows = x.len() / row_len;
        let mut r = 0;
        // Rows with too few blocks to pair their own go two at a time.
        while row_len < 4 * BLOCK && r + 2 <= rows {
            let xs = [
                &x[r * row_len..][..row_len],
                &x[(r + 1) * row_len..][..row_len],
            ];
            // SAFETY: the features are enabled here; the caller checked the bounds.
            out.extend(unsafe { two_rows::<Zmm, S>(xs, side, [r, r + 1]) });
            r += 2;
        }
        for (r, xs) in x.chunks_exact(row_len).enumerate().skip(r) {
            // SAFETY: the features are enabled here; the caller checked the bounds.
            out.extend([unsafe { blocks::<Zmm, S>(xs, side, r) }]);
        }
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn rows256<S: Side>(
        x: &[f32],
        side: &S,
        row_len: usize,
        out: &mut impl Extend<Figures>,
    ) {
        for (r, xs) in x.chunks_exact(row_len).enumerate() {
            // SAFETY: the features are enabled here; the caller checked the bounds.
            out.extend([unsafe { blocks::<Ymm2, S>(xs, side, r) }]);
        }
    }

    /// Where the second side's rows come from, a vector of sixteen values at a time.
    pub(super) trait Side {
        /// Panics unless row `r` of `n` values is there (and `n` suits the side).
        fn check(&self, r: usize, n: usize);
        /// Value `i` of row `r`, as the vectors read it (by default, from its vector).
        ///
        /// # Safety
        /// The CPU has `V`'s features; the whole vector holding value `i` is in the row.
        #[inline(always)]
        unsafe fn value<V: V16>(&self, r: usize, i: usize) -> f32 {
            // SAFETY: the caller keeps the vector in the row.
            unsafe { self.load::<V>(r, i / LANES) }.to_array()[i % LANES]
        }
        /// Values `16v..16v + 16` of row `r`.
        ///
        /// # Safety
        /// The CPU has `V`'s features; the values are in the row.
        unsafe fn load<V: V16>(&self, r: usize, v: usize) -> V;
        /// Values `16v..` of row `r` in the lanes of `live`, zero in the others (past the
        /// row's end).
        ///
        /// # Safety
        /// The CPU has `V`'s features; the lanes of `live` are in the row.
        unsafe fn load_tail<V: V16>(&self, r: usize, v: usize, live: V::Mask) -> V;
        /// Vectors `v` and `v + 1` of row `r`, `v` even.
        ///
        /// # Safety
        /// As for [`Side::load`], for both.
        #[inline(always)]
        unsafe fn load2<V: V16>(&self, r: usize, v: usize) -> [V; 2] {
            // SAFETY: the caller keeps both vectors in the row.
            unsafe { [self.load(r, v), self.load(r, v + 1)] }
        }
    }

    /// One row of f32 values.
    pub(super) struct F32Row<'a>(pub(super) &'a [f32]);

    impl Side for F32Row<'_> {
        fn check(&self, r: usize, n: usize) {
            assert!(r == 0 && n <= self.0.len());
        }

        #[inline(always)]
        unsafe fn value<V: V16>(&self, _: usize, i: usize) -> f32 {
            // A row's last vector may be partial: the value itself.
            self.0[i]
        }

        #[inline(always)]
        unsafe fn load<V: V16>(&self, _: usize, v: usize) -> V {
            // SAFETY: the caller keeps the vector in the row.
            unsafe { V::load(self.0.as_ptr().add(v * LANES)) }
        }

        #[inline(always)]
        unsafe fn load_tail<V: V16>(&self, _: usize, v: usize, live: V::Mask) -> V {
            // SAFETY: the caller keeps the live lanes in the row.
            unsafe { V::load_tail(self.0.as_ptr().add(v * LANES), live) }
        }
    }

    /// A 32-value block format whose values the vector code decodes itself.
    pub(super) trait Block32 {
        /// The format's type.
        const TYPE: GgmlType;
        /// Bytes in a block.
        const BYTES: usize = Self::TYPE.type_size();
        /// The block's 32 values, in two vectors.
        ///
        /// # Safety
        /// The CPU has `V`'s features; `block` holds [`Block32::BYTES`] bytes.
        unsafe fn decode<V: V16>(block: &[u8]) -> [V; 2];
    }

    /// q8_0 (34 bytes: an fp16 scale, 32 signed codes): `y = q * d`, as
    /// `dequantize_row_q8_0`.
    pub(super) struct Q8_0;

    impl Block32 for Q8_0 {
        const TYPE: GgmlType = GgmlType::Q8_0;

        #[inline(always)]
        unsafe fn decode<V: V16>(block: &[u8]) -> [V; 2] {
            let d = V::splat_f16(u16::from_le_bytes([block[0], block[1]]));
            let q = block[2..34].as_ptr().cast::<i8>();
            // SAFETY: sixteen codes from byte 2 and sixteen from byte 18 of the block.
            unsafe { [V::load_i8(q).mul(d), V::load_i8(q.add(16)).mul(d)] }
        }
    }

    /// q5_0 (22 bytes: an fp16 scale, 32 high bits, 16 bytes of low nibbles): `y = ((q &
    /// 15 | high << 4) - 16) * d`, as `dequantize_row_q5_0`, the block's first 16 values
    /// from the low nibbles and bits 0-15, the last 16 from the high nibbles and bits
    /// 16-31.
    pub(super) struct Q5_0;

    impl Block32 for Q5_0 {
        const TYPE: GgmlType = GgmlType::Q5_0;

        #[inline(always)]
        unsafe fn decode<V: V16>(block: &[u8]) -> [V; 2] {
            let d = V::splat_f16(u16::from_le_bytes([block[0], block[1]]));
            let high = u32::from_le_bytes([block[2], block[3], block[4], block[5]]);
            // SAFETY: sixteen bytes from byte 6 of the block.
            let [lo, hi] = unsafe { V::load_q5(block[6..22].as_ptr(), high) };
            [lo.mul(d), hi.mul(d)]
        }
    }

    /// Rows of blocks of `B`, `row_bytes` each.
    pub(super) struct BlockRows<'a, B> {
        pub(super) bytes: &'a [u8],
        pub(super) row_bytes: usize,
        pub(super) format: std::marker::PhantomData<B>,
    }

    impl<B: Block32> Side for BlockRows<'_, B> {
        fn check(&self, r: usize, n: usize) {
            assert!(n.is_multiple_of(32) && n / 32 * B::BYTES == self.row_bytes);
            assert!((r + 1) * self.row_bytes <= self.bytes.len());
        }

        #[inline(always)]
        unsafe fn load<V: V16>(&self, r: usize, v: usize) -> V {
            // SAFETY: the caller keeps the vector in the row.
            unsafe { self.load2::<V>(r, v & !1)[v % 2] }
        }

        #[inline(always)]
        unsafe fn load2<V: V16>(&self, r: usize, v: usize) -> [V; 2] {
            let at = r * self.row_bytes + v / 2 * B::BYTES;
            // SAFETY: the caller has `V`'s features; the slice is the whole block.
            unsafe { B::decode(&self.bytes[at..][..B::BYTES]) }
        }

        #[inline(always)]
        unsafe fn load_tail<V: V16>(&self, r: usize, v: usize, _: V::Mask) -> V {
            // Rows are whole blocks, so every vector is whole.
            // SAFETY: as for `load`.
            unsafe { self.load(r, v) }
        }
    }

    /// Sixteen f32 lanes and what the measuring loop does with them. A value of a type
    /// implementing it exists only inside the functions that run with the type's CPU
    /// features enabled ([`rows512`], [`rows256`]); the loads
    /// take raw pointers and are unsafe for those alone.
    pub(super) trait V16: Copy {
        /// Whether two blocks' state fits in the registers at once (see [`blocks`]).
        const PAIRS: bool;
        /// Sixteen u32 lanes.
        type Int: Copy;
        /// A lane mask.
        type Mask: Copy;
        fn splat(v: f32) -> Self;
        /// The fp16 value `bits` (exactly) in every lane.
        fn splat_f16(bits: u16) -> Self;
        fn int_splat(v: u32) -> Self::Int;
        fn int_add(a: Self::Int, b: Self::Int) -> Self::Int;
        /// `b`'s lanes where `m` is set, `a`'s elsewhere.
        fn int_select(a: Self::Int, m: Self::Mask, b: Self::Int) -> Self::Int;
        /// The first `n` (below 16) lanes.
        fn first(n: usize) -> Self::Mask;
        unsafe fn load(p: *const f32) -> Self;
        /// The lanes of `live` from `p`, zero elsewhere (and not read).
        unsafe fn load_tail(p: *const f32, live: Self::Mask) -> Self;
        /// Sixteen signed bytes, widened exactly.
        unsafe fn load_i8(p: *const i8) -> Self;
        /// A q5_0 block's 32 codes minus 16, from the sixteen bytes at `p` (low nibbles
        /// first, then high ones) with bit `i` of `bits` as bit 4 of code `i`.
        unsafe fn load_q5(p: *const u8, bits: u32) -> [Self; 2];
        fn sub(self, o: Self) -> Self;
        fn mul(self, o: Self) -> Self;
        /// `a * b + c`, rounded once.
        fn fmadd(a: Self, b: Self, c: Self) -> Self;
        fn abs(self) -> Self;
        /// Raises the lanes of `self` (in `live` with `TAIL`, else all) where `a` is
        /// larger, and returns which lanes those are.
        fn raise<const TAIL: bool>(&mut self, a: Self, live: Self::Mask) -> Self::Mask;
        /// [`V16::raise`] by the magnitudes of `d`, `self` not negative.
        #[inline(always)]
        fn raise_abs<const TAIL: bool>(&mut self, d: Self, live: Self::Mask) -> Self::Mask {
            self.raise::<TAIL>(d.abs(), live)
        }
        /// Adds the block sums `p` into four f64 lanes as [`super::fold`] does.
        fn fold(p: Self, acc: &mut __m256d);
        /// The largest lane of `max`, which lanes hold it (bit `l` for lane `l`), and the
        /// lanes of `at`.
        fn top_runs(max: Self, at: Self::Int) -> (f32, u16, [u32; LANES]);
        /// The larger of each lane's two magnitudes.
        fn abs_max(a: Self, b: Self) -> Self;
        fn to_array(self) -> [f32; LANES];
    }

    /// One block's lane sums and largest differences (with the runs where each lane first
    /// met its own).
    struct Block<V: V16> {
        p: [V; SUMS],
        max: V,
        run: V::Int,
    }

    impl<V: V16> Block<V> {
        #[inline(always)]
        fn new() -> Block<V> {
            Block {
                p: [V::splat(0.0); SUMS],
                // Magnitudes start from 0, not -1 as in `Blocks::run`: a lane whose
                // differences are all 0 keeps run 0, where it first met its largest, so
                // the figures are the same.
                max: V::splat(0.0),
                run: V::int_splat(0),
            }
        }

        /// The elements `x` against `y` of run `j` (all lanes, or those of `live` with
        /// `TAIL`; the others are zero on both sides, adding nothing to the sums).
        #[inline(always)]
        fn add<const TAIL: bool>(&mut self, x: V, y: V, j: V::Int, live: V::Mask) {
            let d = self.sums(x, y);
            self.track::<TAIL>(d, j, live);
        }

        /// Runs `j` and `j + 1`, `x[k]` against `y[k]`, whole: their larger magnitude
        /// raises the lanes, with run `j` (the row's end settles which of the two).
        #[inline(always)]
        fn add2(&mut self, x: [V; 2], y: [V; 2], j: V::Int) {
            let d = [self.sums(x[0], y[0]), self.sums(x[1], y[1])];
            self.track::<false>(V::abs_max(d[0], d[1]), j, V::first(0));
        }

        /// Adds `x` against `y` to the sums; returns the differences.
        #[inline(always)]
        fn sums(&mut self, x: V, y: V) -> V {
            let d = x.sub(y);
            self.p[0] = V::fmadd(d, d, self.p[0]);
            self.p[1] = V::fmadd(x, x, self.p[1]);
            self.p[2] = V::fmadd(y, y, self.p[2]);
            d
        }

        /// Raises the lanes where `d`'s magnitude is larger, noting run `j`.
        #[inline(always)]
        fn track<const TAIL: bool>(&mut self, d: V, j: V::Int, live: V::Mask) {
            let more = self.max.raise_abs::<TAIL>(d, live);
            self.run = V::int_select(self.run, more, j);
        }
    }

    /// The row's sums so far in f64, and each lane's largest difference and the run
    /// (from the row's start) where it first met it.
    struct Row<V: V16> {
        acc: [__m256d; SUMS],
        max: V,
        at: V::Int,
    }

    impl<V: V16> Row<V> {
        #[inline(always)]
        fn new() -> Row<V> {
            Row {
                // SAFETY: `V` exists, so the CPU has AVX.
                acc: [unsafe { _mm256_setzero_pd() }; SUMS],
                max: V::splat(-1.0),
                at: V::int_splat(0),
            }
        }

        /// The row's figures once its last block is in, the row `x` against row `r` of
        /// `side`: a lane's run is that of the pair of vectors (or the lone vector) where
        /// it first met its largest, settled here by the element of the pair's first
        /// vector (if it holds the largest, it is the first).
        #[inline(always)]
        fn figures<S: Side>(&self, x: &[f32], side: &S, r: usize) -> Figures {
            let (top, lanes, runs) = V::top_runs(self.max, self.at);
            let mut first = u32::MAX;
            // No lanes to settle for no elements (top -1).
            let mut left = if top < 0.0 { 0 } else { lanes };
            while left != 0 {
                let l = left.trailing_zeros() as usize;
                left &= left - 1;
                let i = runs[l] as usize * LANES + l;
                if i >= x.len() {
                    // A lane past a short row's end, at 0 beside the row's own lanes.
                    continue;
                }
                // SAFETY: `V` exists, so the CPU has its features; a lane is settled
                // only where its pair (or lone vector) was read whole.
                let y = unsafe { side.value::<V>(r, i) };
                let at = if (x[i] - y).abs() == top {
                    i
                } else {
                    i + LANES
                };
                first = first.min(at as u32);
            }
            let mut sums = [0.0; SUMS];
            for (sum, &acc) in sums.iter_mut().zip(&self.acc) {
                // (v0 + v1) + (v2 + v3), as `Blocks::figures`.
                // SAFETY: `V` exists, so the CPU has AVX.
                *sum = unsafe {
                    let pairs = _mm256_hadd_pd(acc, acc);
                    let high = _mm256_extractf128_pd::<1>(pairs);
                    _mm_cvtsd_f64(_mm_add_sd(_mm256_castpd256_pd128(pairs), high))
                };
            }
            Figures { sums, top, first }
        }

        /// Block `k`'s figures taken in.
        #[inline(always)]
        fn end_block(&mut self, k: usize, b: &Block<V>) {
            for (acc, &p) in self.acc.iter_mut().zip(&b.p) {
                V::fold(p, acc);
            }
            let more = self.max.raise::<false>(b.max, V::first(0));
            let runs = V::int_add(b.run, V::int_splat((k * BLOCK_TERMS) as u32));
            self.at = V::int_select(self.at, more, runs);
        }
    }

    /// [`Figures`] of `x` against row `r` of `side`: where the registers hold them
    /// ([`V16::PAIRS`]), pairs of whole blocks side by side (a lane's sums are chains of
    /// 32 dependent additions per block, so two blocks' chains run together); then
    /// the blocks left one by one, the last vector of a partial one masked.
    #[inline(always)]
    unsafe fn blocks<V: V16, S: Side>(x: &[f32], side: &S, r: usize) -> Figures {
        let n = x.len();
        let px = x.as_ptr();
        // SAFETY: the caller has `V`'s features and checked that row `r` of the side has
        // `n` values; every load below is within the first `n`.
        unsafe {
            let (one, two) = (V::int_splat(1), V::int_splat(2));
            let mut row = Row::<V>::new();
            let full = n / BLOCK;
            let mut k = 0;
            while V::PAIRS && k + 2 <= full {
                let (mut b0, mut b1) = (Block::<V>::new(), Block::<V>::new());
                let mut j = V::int_splat(0);
                // Two vectors of each block at a time: a quantized side decodes a
                // 32-value block's scale once.
                for t in (0..BLOCK_TERMS).step_by(2) {
                    let v = k * BLOCK_TERMS + t;
                    let w = v + BLOCK_TERMS;
                    let [y0, y0n] = side.load2::<V>(r, v);
                    let [y1, y1n] = side.load2::<V>(r, w);
                    let x0 = [V::load(px.add(v * LANES)), V::load(px.add((v + 1) * LANES))];
                    let x1 = [V::load(px.add(w * LANES)), V::load(px.add((w + 1) * LANES))];
                    b0.add2(x0, [y0, y0n], j);
                    b1.add2(x1, [y1, y1n], j);
                    j = V::int_add(j, two);
                }
                row.end_block(k, &b0);
                row.end_block(k + 1, &b1);
                k += 2;
            }
            while k * BLOCK < n {
                let end = n.min((k + 1) * BLOCK);
                let mut b = Block::<V>::new();
                let mut j = V::int_splat(0);
                let mut v = k * BLOCK_TERMS;
                while (v + 2) * LANES <= end {
                    let y = side.load2::<V>(r, v);
                    let x = [V::load(px.add(v * LANES)), V::load(px.add((v + 1) * LANES))];
                    b.add2(x, y, j);
                    j = V::int_add(j, two);
                    v += 2;
                }
                if (v + 1) * LANES <= end {
                    let (x, y) = (V::load(px.add(v * LANES)), side.load::<V>(r, v));
                    b.add::<false>(x, y, j, V::first(0));
                    j = V::int_add(j, one);
                    v += 1;
                }
                if v * LANES < end {
                    let live = V::first(end - v * LANES);
                    let x = V::load_tail(px.add(v * LANES), live);
                    let y = side.load_tail::<V>(r, v, live);
                    b.add::<true>(x, y, j, live);
                }
                row.end_block(k, &b);
                k += 1;
            }
            row.figures(x, side, r)
        }
    }

    /// [`blocks`] of two rows of `n` values, `x[0]` against row `r[0]` of `side` and
    /// `x[1]` against row `r[1]`, their blocks side by side (for rows of one or two
    /// blocks, whose own blocks make no pairs, or an odd one).
    #[inline(always)]
    unsafe fn two_rows<V: V16, S: Side>(x: [&[f32]; 2], side: &S, r: [usize; 2]) -> [Figures; 2] {
        let n = x[0].len();
        assert_eq!(n, x[1].len());
        let px = [x[0].as_ptr(), x[1].as_ptr()];
        // SAFETY: the caller has `V`'s features and checked that rows `r` of the side
        // have `n` values; every load below is within the first `n`.
        unsafe {
            let (one, two) = (V::int_splat(1), V::int_splat(2));
            let mut rows = [Row::<V>::new(), Row::<V>::new()];
            let all = V::first(0);
            let mut k = 0;
            while k * BLOCK < n {
                let end = n.min((k + 1) * BLOCK);
                let mut b = [Block::<V>::new(), Block::<V>::new()];
                let mut j = V::int_splat(0);
                let mut v = k * BLOCK_TERMS;
                while (v + 2) * LANES <= end {
                    for i in 0..2 {
                        let y = side.load2::<V>(r[i], v);
                        let x = [
                            V::load(px[i].add(v * LANES)),
                            V::load(px[i].add((v + 1) * LANES)),
                        ];
                        b[i].add2(x, y, j);
                    }
                    j = V::int_add(j, two);
                    v += 2;
                }
                if (v + 1) * LANES <= end {
                    for i in 0..2 {
                        let (x, y) = (V::load(px[i].add(v * LANES)), side.load::<V>(r[i], v));
                        b[i].add::<false>(x, y, j, all);
                    }
                    j = V::int_add(j, one);
                    v += 1;
                }
                if v * LANES < end {
                    let live = V::first(end - v * LANES);
                    for i in 0..2 {
                        let x = V::load_tail(px[i].add(v * LANES), live);
                        let y = side.load_tail::<V>(r[i], v, live);
                        b[i].add::<true>(x, y, j, live);
                    }
                }
                for i in 0..2 {
                    rows[i].end_block(k, &b[i]);
                }
                k += 1;
            }
            [
                rows[0].figures(x[0], side, r[0]),
                rows[1].figures(x[1], side, r[1]),
            ]
        }
    }

    /// Sixteen lanes in one AVX-512 register.
    #[derive(Clone, Copy)]
    struct Zmm(__m512);

    // SAFETY (every `unsafe` block below): a `Zmm` exists only inside a function running
    // with AVX-512 F/BW/VL/DQ enabled (see [`V16`]), so the intrinsics are available;
    // the loads' callers keep their lanes in bounds.
    impl V16 for Zmm {
        /// Two blocks' state is 20 of the 32 registers.
        const PAIRS: bool = true;
        type Int = __m512i;
        /// Lane `i` in bit `i`; 0 stands for all sixteen in [`V16::first`].
        type Mask = __mmask16;

        #[inline(always)]
        fn splat(v: f32) -> Self {
            // SAFETY: see the impl comment.
            unsafe { Zmm(_mm512_set1_ps(v)) }
        }
        #[inline(always)]
        fn splat_f16(bits: u16) -> Self {
            // SAFETY: see the impl comment.
            unsafe { Zmm(_mm512_cvtph_ps(_mm256_set1_epi16(bits as i16))) }
        }
        #[inline(always)]
        fn int_splat(v: u32) -> __m512i {
            // SAFETY: see the impl comment.
            unsafe { _mm512_set1_epi32(v as i32) }
        }
        #[inline(always)]
        fn int_add(a: __m512i, b: __m512i) -> __m512i {
            // SAFETY: see the impl comment.
            unsafe { _mm512_add_epi32(a, b) }
        }
        #[inline(always)]
        fn int_select(a: __m512i, m: __mmask16, b: __m512i) -> __m512i {
            // SAFETY: see the impl comment.
            unsafe { _mm512_mask_mov_epi32(a, m, b) }
        }
        #[inline(always)]
        fn first(n: usize) -> __mmask16 {
            if n == 0 {
                0xffff
            } else {
                ((1u32 << n) - 1) as u16
            }
        }
        #[inline(always)]
        unsafe fn load(p: *const f32) -> Self {
            // SAFETY: see the impl comment.
            unsafe { Zmm(_mm512_loadu_ps(p)) }
        }
        #[inline(always)]
        unsafe fn load_tail(p: *const f32, live: __mmask16) -> Self {
            // SAFETY: see the impl comment.
            unsafe { Zmm(_mm512_maskz_loadu_ps(live, p)) }
        }
        #[inline(always)]
        unsafe fn load_i8(p: *const i8) -> Self {
            // SAFETY: see the impl comment.
            unsafe {
                let q = _mm_loadu_si128(p.cast());
                Zmm(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q)))
            }
        }
        #[inline(always)]
        unsafe fn load_q5(p: *const u8, bits: u32) -> [Self; 2] {
            // SAFETY: see the impl comment.
            unsafe {
                let b = _mm512_cvtepu8_epi32(_mm_loadu_si128(p.cast()));
                let lo = _mm512_and_si512(b, _mm512_set1_epi32(15));
                let hi = _mm512_srli_epi32::<4>(b);
                let sixteen = _mm512_set1_epi32(16);
                let lo = _mm512_mask_or_epi32(lo, bits as u16, lo, sixteen);
                let hi = _mm512_mask_or_epi32(hi, (bits >> 16) as u16, hi, sixteen);
                [
                    Zmm(_mm512_cvtepi32_ps(_mm512_sub_epi32(lo, sixteen))),
                    Zmm(_mm512_cvtepi32_ps(_mm512_sub_epi32(hi, sixteen))),
                ]
            }
        }
        #[inline(always)]
        fn sub(self, o: Self) -> Self {
            // SAFETY: see the impl comment.
            unsafe { Zmm(_mm512_sub_ps(self.0, o.0)) }
        }
        #[inline(always)]
        fn mul(self, o: Self) -> Self {
            // SAFETY: see the impl comment.
            unsafe { Zmm(_mm512_mul_ps(self.0, o.0)) }
        }
        #[inline(always)]
        fn fmadd(a: Self, b: Self, c: Self) -> Self {
            // SAFETY: see the impl comment.
            unsafe { Zmm(_mm512_fmadd_ps(a.0, b.0, c.0)) }
        }
        #[inline(always)]
        fn abs(self) -> Self {
            // SAFETY: see the impl comment.
            unsafe { Zmm(_mm512_abs_ps(self.0)) }
        }
        #[inline(always)]
        fn raise_abs<const TAIL: bool>(&mut self, d: Self, live: __mmask16) -> __mmask16 {
            // SAFETY: see the impl comment.
            unsafe {
                // The larger magnitude, sign cleared, in one operation.
                let raised = _mm512_mask_range_ps::<0b1011>(self.0, live, self.0, d.0);
                let more = _mm512_cmp_ps_mask::<_CMP_GT_OQ>(raised, self.0);
                self.0 = raised;
                more
            }
        }
        #[inline(always)]
        fn raise<const TAIL: bool>(&mut self, a: Self, live: __mmask16) -> __mmask16 {
            // SAFETY: see the impl comment.
            unsafe {
                let more = _mm512_mask_cmp_ps_mask::<_CMP_GT_OQ>(live, a.0, self.0);
                // The maximum, not a move under `more`: the next compare waits on one
                // operation instead of two.
                self.0 = _mm512_mask_max_ps(self.0, live, self.0, a.0);
                more
            }
        }
        #[inline(always)]
        fn fold(p: Self, acc: &mut __m256d) {
            // SAFETY: see the impl comment.
            unsafe {
                let low = _mm512_cvtps_pd(_mm512_castps512_ps256(p.0));
                let high = _mm512_cvtps_pd(_mm256_castsi256_ps(_mm512_extracti64x4_epi64::<1>(
                    _mm512_castps_si512(p.0),
                )));
                // Each f64 lane added to the one four lanes up.
                let low = _mm256_add_pd(
                    _mm512_castpd512_pd256(low),
                    _mm512_extractf64x4_pd::<1>(low),
                );
                let high = _mm256_add_pd(
                    _mm512_castpd512_pd256(high),
                    _mm512_extractf64x4_pd::<1>(high),
                );
                *acc = _mm256_add_pd(*acc, _mm256_add_pd(low, high));
            }
        }
        #[inline(always)]
        fn top_runs(max: Self, at: __m512i) -> (f32, u16, [u32; LANES]) {
            let mut runs = [0u32; LANES];
            // SAFETY: see the impl comment; `runs` holds sixteen u32.
            unsafe {
                let top = _mm512_reduce_max_ps(max.0);
                let holds = _mm512_cmpeq_ps_mask(max.0, _mm512_set1_ps(top));
                _mm512_storeu_si512(runs.as_mut_ptr().cast(), at);
                (top, holds, runs)
            }
        }
        #[inline(always)]
        fn abs_max(a: Self, b: Self) -> Self {
            // SAFETY: see the impl comment.
            unsafe { Zmm(_mm512_range_ps::<0b1011>(a.0, b.0)) }
        }
        #[inline(always)]
        fn to_array(self) -> [f32; LANES] {
            let mut out = [0.0; LANES];
            // SAFETY: see the impl comment; `out` holds sixteen f32.
            unsafe { _mm512_storeu_ps(out.as_mut_ptr(), self.0) };
            out
        }
    }

    /// Sixteen lanes in two AVX2 registers.
    #[derive(Clone, Copy)]
    struct Ymm2([__m256; 2]);

    /// `f` on each half of the `Ymm2` operands (a macro, not a closure: the intrinsic
    /// stays inline in the caller's enabled features).
    macro_rules! halves {
        ($f:ident, $($v:expr),+) => {
            Ymm2([$f($($v.0[0]),+), $f($($v.0[1]),+)])
        };
    }

    // SAFETY (every `unsafe` block below): a `Ymm2` exists only inside a function running
    // with AVX2 and FMA enabled (see [`V16`]), so the intrinsics are available; the loads'
    // callers keep their lanes in bounds.
    impl V16 for Ymm2 {
        /// Two blocks' state would be 20 of the 16 registers: spilled to the stack.
        const PAIRS: bool = false;
        type Int = [__m256i; 2];
        /// All ones in the lanes set.
        type Mask = [__m256; 2];

        #[inline(always)]
        fn splat(v: f32) -> Self {
            // SAFETY: see the impl comment.
            unsafe { Ymm2([_mm256_set1_ps(v); 2]) }
        }
        #[inline(always)]
        fn splat_f16(bits: u16) -> Self {
            // SAFETY: see the impl comment.
            unsafe { Ymm2([_mm256_cvtph_ps(_mm_set1_epi16(bits as i16)); 2]) }
        }
        #[inline(always)]
        fn int_splat(v: u32) -> [__m256i; 2] {
            // SAFETY: see the impl comment.
            unsafe { [_mm256_set1_epi32(v as i32); 2] }
        }
        #[inline(always)]
        fn int_add(a: [__m256i; 2], b: [__m256i; 2]) -> [__m256i; 2] {
            // SAFETY: see the impl comment.
            unsafe { [_mm256_add_epi32(a[0], b[0]), _mm256_add_epi32(a[1], b[1])] }
        }
        #[inline(always)]
        fn int_select(a: [__m256i; 2], m: [__m256; 2], b: [__m256i; 2]) -> [__m256i; 2] {
            // SAFETY: see the impl comment.
            unsafe {
                let mut out = a;
                for h in 0..2 {
                    out[h] = _mm256_castps_si256(_mm256_blendv_ps(
                        _mm256_castsi256_ps(a[h]),
                        _mm256_castsi256_ps(b[h]),
                        m[h],
                    ));
                }
                out
            }
        }
        #[inline(always)]
        fn first(n: usize) -> [__m256; 2] {
            // SAFETY: see the impl comment.
            unsafe {
                let n = if n == 0 { LANES } else { n };
                let n = _mm256_set1_epi32(n as i32);
                let low = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
                let high = _mm256_setr_epi32(8, 9, 10, 11, 12, 13, 14, 15);
                [
                    _mm256_castsi256_ps(_mm256_cmpgt_epi32(n, low)),
                    _mm256_castsi256_ps(_mm256_cmpgt_epi32(n, high)),
                ]
            }
        }
        #[inline(always)]
        unsafe fn load(p: *const f32) -> Self {
            // SAFETY: see the impl comment.
            unsafe { Ymm2([_mm256_loadu_ps(p), _mm256_loadu_ps(p.add(8))]) }
        }
        #[inline(always)]
        unsafe fn load_tail(p: *const f32, live: [__m256; 2]) -> Self {
            // SAFETY: see the impl comment.
            unsafe {
                {
                    Ymm2([
                        _mm256_maskload_ps(p, _mm256_castps_si256(live[0])),
                        _mm256_maskload_ps(p.add(8), _mm256_castps_si256(live[1])),
                    ])
                }
            }
        }
        #[inline(always)]
        unsafe fn load_i8(p: *const i8) -> Self {
            // SAFETY: see the impl comment.
            unsafe {
                let low = _mm256_cvtepi8_epi32(_mm_loadl_epi64(p.cast()));
                let high = _mm256_cvtepi8_epi32(_mm_loadl_epi64(p.add(8).cast()));
                Ymm2([_mm256_cvtepi32_ps(low), _mm256_cvtepi32_ps(high)])
            }
        }
        #[inline(always)]
        unsafe fn load_q5(p: *const u8, bits: u32) -> [Self; 2] {
            // SAFETY: see the impl comment.
            unsafe {
                let lane_bits = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
                let (fifteen, sixteen) = (_mm256_set1_epi32(15), _mm256_set1_epi32(16));
                let mut out = [Ymm2([_mm256_setzero_ps(); 2]); 2];
                for g in 0..2 {
                    let b = _mm256_cvtepu8_epi32(_mm_loadl_epi64(p.add(8 * g).cast()));
                    for (h, out) in out.iter_mut().enumerate() {
                        // Codes 16h + 8g.. : nibble h of bytes 8g.., bits 16h + 8g...
                        let q = if h == 0 {
                            _mm256_and_si256(b, fifteen)
                        } else {
                            _mm256_srli_epi32::<4>(b)
                        };
                        let set = _mm256_set1_epi32(((bits >> (16 * h + 8 * g)) & 0xff) as i32);
                        let set = _mm256_cmpeq_epi32(_mm256_and_si256(set, lane_bits), lane_bits);
                        let q = _mm256_or_si256(q, _mm256_and_si256(set, sixteen));
                        out.0[g] = _mm256_cvtepi32_ps(_mm256_sub_epi32(q, sixteen));
                    }
                }
                out
            }
        }
        #[inline(always)]
        fn sub(self, o: Self) -> Self {
            // SAFETY: see the impl comment.
            unsafe { halves!(_mm256_sub_ps, self, o) }
        }
        #[inline(always)]
        fn mul(self, o: Self) -> Self {
            // SAFETY: see the impl comment.
            unsafe { halves!(_mm256_mul_ps, self, o) }
        }
        #[inline(always)]
        fn fmadd(a: Self, b: Self, c: Self) -> Self {
            // SAFETY: see the impl comment.
            unsafe { halves!(_mm256_fmadd_ps, a, b, c) }
        }
        #[inline(always)]
        fn abs(self) -> Self {
            // SAFETY: see the impl comment.
            unsafe { halves!(_mm256_andnot_ps, Ymm2([_mm256_set1_ps(-0.0); 2]), self) }
        }
        #[inline(always)]
        fn raise<const TAIL: bool>(&mut self, a: Self, live: [__m256; 2]) -> [__m256; 2] {
            // SAFETY: see the impl comment.
            unsafe {
                let mut more = [_mm256_setzero_ps(); 2];
                for h in 0..2 {
                    more[h] = _mm256_cmp_ps::<_CMP_GT_OQ>(a.0[h], self.0[h]);
                    if TAIL {
                        more[h] = _mm256_and_ps(more[h], live[h]);
                        self.0[h] = _mm256_blendv_ps(self.0[h], a.0[h], more[h]);
                    } else {
                        // The maximum, not a blend under `more`: the next compare waits on
                        // one operation instead of two.
                        self.0[h] = _mm256_max_ps(self.0[h], a.0[h]);
                    }
                }
                more
            }
        }
        #[inline(always)]
        fn fold(p: Self, acc: &mut __m256d) {
            // SAFETY: see the impl comment.
            unsafe {
                let [a, b] = p.0;
                // Lanes j and j + 4 of each register added in f64.
                let low = _mm256_add_pd(
                    _mm256_cvtps_pd(_mm256_castps256_ps128(a)),
                    _mm256_cvtps_pd(_mm256_extractf128_ps::<1>(a)),
                );
                let high = _mm256_add_pd(
                    _mm256_cvtps_pd(_mm256_castps256_ps128(b)),
                    _mm256_cvtps_pd(_mm256_extractf128_ps::<1>(b)),
                );
                *acc = _mm256_add_pd(*acc, _mm256_add_pd(low, high));
            }
        }
        #[inline(always)]
        fn top_runs(max: Self, at: [__m256i; 2]) -> (f32, u16, [u32; LANES]) {
            let mut runs = [0u32; LANES];
            // SAFETY: see the impl comment; `runs` holds two halves of eight u32.
            unsafe {
                let [a, b] = max.0;
                let m = _mm256_max_ps(a, b);
                let m = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps::<1>(m));
                let m = _mm_max_ps(m, _mm_movehl_ps(m, m));
                let m = _mm_max_ss(m, _mm_shuffle_ps::<1>(m, m));
                let top = _mm_cvtss_f32(m);
                let t = _mm256_set1_ps(top);
                let low = _mm256_movemask_ps(_mm256_cmp_ps::<_CMP_EQ_OQ>(a, t)) as u32;
                let high = _mm256_movemask_ps(_mm256_cmp_ps::<_CMP_EQ_OQ>(b, t)) as u32;
                _mm256_storeu_si256(runs.as_mut_ptr().cast(), at[0]);
                _mm256_storeu_si256(runs[8..].as_mut_ptr().cast(), at[1]);
                (top, (low | high << 8) as u16, runs)
            }
        }
        #[inline(always)]
        fn abs_max(a: Self, b: Self) -> Self {
            let (a, b) = (a.abs(), b.abs());
            // SAFETY: see the impl comment.
            unsafe { halves!(_mm256_max_ps, a, b) }
        }
        #[inline(always)]
        fn to_array(self) -> [f32; LANES] {
            let mut out = [0.0; LANES];
            // SAFETY: see the impl comment; `out` holds two halves of eight f32.
            unsafe {
                _mm256_storeu_ps(out.as_mut_ptr(), self.0[0]);
                _mm256_storeu_ps(out[8..].as_mut_ptr(), self.0[1]);
            }
            out
        }
    }
}
/// A block's sixteen lane sums `p` added into four f64 lanes: lane `j` takes
/// `(p[j] + p[j+4]) + (p[j+8] + p[j+12])`.
#[inline(always)]
fn fold(acc: &mut [f64; 4], p: &[f32; LANES]) {
    for (j, acc) in acc.iter_mut().enumerate() {
        let w = |l: usize| f64::from(p[l]);
        *acc += (w(j) + w(j + 4)) + (w(j + 8) + w(j + 12));
    }
}

/// Lanes of the f64 sums of [`Exact`].
const EXACT_LANES: usize = 8;

/// The f64 sums of the rows with a value that is not finite: element `i` in lane
/// `i % 8`, each term added with one fused multiply-add (`s + x * y` rounded once; the
/// products of two f32 values are exact in f64), the pairs that are not both finite left
/// out, the lanes added pairwise at the end.
struct Exact {
    compared: u64,
    sq: [f64; EXACT_LANES],
    ab: [f64; EXACT_LANES],
    aa: [f64; EXACT_LANES],
    bb: [f64; EXACT_LANES],
    /// Each lane's largest difference (-1 before any) and its element.
    max: [f64; EXACT_LANES],
    at: [u64; EXACT_LANES],
}

impl Exact {
    /// Every element of `a` against `b`, one at a time.
    fn run(a: &[f32], b: &[f32]) -> Exact {
        let mut s = Exact {
            compared: 0,
            sq: [0.0; EXACT_LANES],
            ab: [0.0; EXACT_LANES],
            aa: [0.0; EXACT_LANES],
            bb: [0.0; EXACT_LANES],
            max: [-1.0; EXACT_LANES],
            at: [0; EXACT_LANES],
        };
        for (i, (&x, &y)) in a.iter().zip(b).enumerate() {
            if !(x.is_finite() && y.is_finite()) {
                continue;
            }
            let l = i % EXACT_LANES;
            let (x, y) = (f64::from(x), f64::from(y));
            let d = x - y;
            s.sq[l] = d.mul_add(d, s.sq[l]);
            s.ab[l] = x.mul_add(y, s.ab[l]);
            s.aa[l] = x.mul_add(x, s.aa[l]);
            s.bb[l] = y.mul_add(y, s.bb[l]);
            if d.abs() > s.max[l] {
                s.max[l] = d.abs();
                s.at[l] = i as u64;
            }
            s.compared += 1;
        }
        s
    }

    /// The figures, elements numbered from `first`.
    fn stats(&self, first: u64) -> ErrorStats {
        let add = |v: [f64; EXACT_LANES]| {
            ((v[0] + v[1]) + (v[2] + v[3])) + ((v[4] + v[5]) + (v[6] + v[7]))
        };
        let mut s = ErrorStats {
            compared: self.compared,
            sum_squares: add(self.sq),
            sum_products: add(self.ab),
            sum_squares_a: add(self.aa),
            sum_squares_b: add(self.bb),
            ..ErrorStats::default()
        };
        // The largest difference, the first element of it on ties.
        for l in 0..EXACT_LANES {
            let at = first + self.at[l];
            if self.max[l] >= 0.0
                && (s.max_index.is_none()
                    || self.max[l] > s.max_abs
                    || (self.max[l] == s.max_abs && Some(at) < s.max_index))
            {
                s.max_abs = self.max[l];
                s.max_index = Some(at);
            }
        }
        s
    }
}

/// One side of a compared tensor.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Side {
    /// How its elements are stored.
    pub encoding: Encoding,
    /// Its row-major shape.
    pub shape: Vec<u64>,
}

impl Side {
    fn of(t: &Tensor<'_>) -> Side {
        Side {
            encoding: t.encoding(),
            shape: t.shape().to_vec(),
        }
    }
}

/// A tensor present in one model only.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unmatched {
    /// Its name.
    pub name: String,
    /// Its type and shape.
    pub side: Side,
}

impl Unmatched {
    fn of(t: &Tensor<'_>) -> Unmatched {
        Unmatched {
            name: t.name().to_owned(),
            side: Side::of(t),
        }
    }
}

/// What the values of a tensor pair came to.
#[derive(Clone, Debug, PartialEq)]
pub enum Values {
    /// Both decoded and compared.
    Compared(ErrorStats),
    /// The shapes differ, so the values were not compared.
    ShapesDiffer,
    /// A side's type cannot be decoded to f32 (the first such side's encoding).
    CannotDecode(Encoding),
}

/// A tensor present in both models.
#[derive(Clone, Debug, PartialEq)]
pub struct TensorDiff {
    /// Its name.
    pub name: String,
    /// In A.
    pub a: Side,
    /// In B.
    pub b: Side,
    /// Same type, same shape, same bytes.
    pub identical_bytes: bool,
    /// The value comparison.
    pub values: Values,
}

impl TensorDiff {
    /// Whether the shapes are the same (leading axes of 1 aside).
    pub fn shapes_equal(&self) -> bool {
        same_shape(&self.a.shape, &self.b.shape)
    }
}

/// The comparison of two models.
#[derive(Clone, Debug, PartialEq)]
pub struct Report {
    /// Tensors in both, in A's order.
    pub both: Vec<TensorDiff>,
    /// Tensors only in A, in A's order.
    pub only_in_a: Vec<Unmatched>,
    /// Tensors only in B, in B's order.
    pub only_in_b: Vec<Unmatched>,
}

impl Report {
    /// Tensors in both with identical bytes.
    pub fn identical(&self) -> usize {
        self.both.iter().filter(|t| t.identical_bytes).count()
    }

    /// The error figures of every compared tensor together.
    pub fn overall(&self) -> ErrorStats {
        let mut all = ErrorStats::default();
        for t in &self.both {
            if let Values::Compared(stats) = &t.values {
                all.merge(stats);
            }
        }
        all
    }
}

/// Compares `a` with `b` (see the module docs), on the current rayon pool.
pub fn diff(a: &Model, b: &Model) -> Result<Report> {
    let tensors_a = a.tensors()?;
    let tensors_b = b.tensors()?;
    let in_b: HashMap<&str, &Tensor<'_>> = tensors_b.iter().map(|t| (t.name(), t)).collect();
    let mut report = Report {
        both: Vec::new(),
        only_in_a: Vec::new(),
        only_in_b: Vec::new(),
    };
    for ta in &tensors_a {
        match in_b.get(ta.name()) {
            Some(tb) => report.both.push(compare(ta, tb)?),
            None => report.only_in_a.push(Unmatched::of(ta)),
        }
    }
    let in_a: HashMap<&str, ()> = tensors_a.iter().map(|t| (t.name(), ())).collect();
    for tb in tensors_b.iter().filter(|t| !in_a.contains_key(t.name())) {
        report.only_in_b.push(Unmatched::of(tb));
    }
    Ok(report)
}

/// One tensor pair: bytes compared and values decoded slab by slab.
fn compare(a: &Tensor<'_>, b: &Tensor<'_>) -> Result<TensorDiff> {
    let mut diff = TensorDiff {
        name: a.name().to_owned(),
        a: Side::of(a),
        b: Side::of(b),
        identical_bytes: false,
        values: Values::ShapesDiffer,
    };
    let same_layout = diff.shapes_equal() && a.encoding() == b.encoding();
    if !diff.shapes_equal() {
        return Ok(diff);
    }
    if let Some(t) = [a, b].into_iter().find(|t| !t.encoding().can_decode()) {
        diff.identical_bytes = same_layout && a.data() == b.data();
        diff.values = Values::CannotDecode(t.encoding());
        return Ok(diff);
    }
    let (row_a, row_b) = (a.row_bytes()?, b.row_bytes()?);
    let (row_len, task_rows) = (a.row_len() as u64, a.task_rows());
    let mut identical = same_layout;
    let mut stats = ErrorStats::default();
    for_each_slab(&[a, b], 0, |rows| {
        let bytes_a = &a.data()[rows.start * row_a..rows.end * row_a];
        identical = identical && bytes_a == &b.data()[rows.start * row_b..rows.end * row_b];
        let parts = tasks(rows, task_rows)
            .into_par_iter()
            .map_init(
                || (Vec::new(), Vec::new()),
                |(x, y), rows| {
                    let first = rows.start as u64;
                    let x = a.decode_rows(rows.clone(), x)?;
                    let y = b.decode_rows(rows, y)?;
                    Ok(ErrorStats::of_rows(x, y, row_len as usize, first))
                },
            )
            .collect::<Result<Vec<_>>>()?;
        parts.iter().flatten().for_each(|p| stats.merge(p));
        Ok(())
    })?;
    diff.identical_bytes = identical;
    diff.values = Values::Compared(stats);
    Ok(diff)
}

/// Shapes equal once leading axes of 1 are dropped.
fn same_shape(a: &[u64], b: &[u64]) -> bool {
    let trim = |s: &[u64]| s.iter().position(|&d| d != 1).map_or(0, |i| s.len() - i);
    let (a, b) = (&a[a.len() - trim(a)..], &b[b.len() - trim(b)..]);
    a == b
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stats_cover_finite_pairs_and_count_the_rest() {
        let a = [1.0f32, 2.0, f32::NAN, f32::INFINITY, 5.0, -1.0];
        let b = [1.0f32, 2.5, f32::NAN, 3.0, 4.5, f32::NEG_INFINITY];
        let s = ErrorStats::of(&a, &b, 10);
        assert_eq!(s.compared, 3);
        assert_eq!(s.max_abs, 0.5);
        assert_eq!(s.max_index, Some(11), "the first of the tied maxima");
        assert_eq!(s.sum_squares, 0.5);
        assert_eq!((s.non_finite_a, s.non_finite_b), (2, 2));
        assert_eq!(s.non_finite_mismatches, 2);
        assert_eq!(s.rmse(), Some((0.5f64 / 3.0).sqrt()));
    }

    #[test]
    fn merging_in_order_equals_one_pass() {
        let a: Vec<f32> = (0..100).map(|i| (i as f32 * 0.37).sin()).collect();
        let b: Vec<f32> = (0..100).map(|i| (i as f32 * 0.37).cos()).collect();
        let whole = ErrorStats::of(&a, &b, 0);
        let mut parts = ErrorStats::default();
        for k in (0..100).step_by(7) {
            let end = (k + 7).min(100);
            parts.merge(&ErrorStats::of(&a[k..end], &b[k..end], k as u64));
        }
        assert_eq!(parts.max_index, whole.max_index);
        assert_eq!(parts.max_abs, whole.max_abs);
        assert_eq!(parts.compared, 100);
        // Sums in f32 over different runs of elements: equal to a few parts in ten million.
        assert!((parts.sum_squares - whole.sum_squares).abs() < 1e-6 * whole.sum_squares);
        assert_eq!(ErrorStats::default().rmse(), None);
    }

    /// The figures by the definition in the module docs, one element at a time.
    fn by_definition(a: &[f32], b: &[f32], first: u64) -> ErrorStats {
        let mut acc = [[0.0f64; 4]; 3];
        for (xs, ys) in a.chunks(BLOCK).zip(b.chunks(BLOCK)) {
            let mut p = [[0.0f32; LANES]; 3];
            for (i, (&x, &y)) in xs.iter().zip(ys).enumerate() {
                let d = x - y;
                for (s, (u, v)) in [(d, d), (x, x), (y, y)].into_iter().enumerate() {
                    p[s][i % LANES] = u.mul_add(v, p[s][i % LANES]);
                }
            }
            for (acc, p) in acc.iter_mut().zip(&p) {
                for (j, acc) in acc.iter_mut().enumerate() {
                    let w = |l: usize| f64::from(p[l]);
                    *acc += (w(j) + w(j + 4)) + (w(j + 8) + w(j + 12));
                }
            }
        }
        let add = |v: [f64; 4]| (v[0] + v[1]) + (v[2] + v[3]);
        let [sq, aa, bb] = acc.map(add);
        let mut s = ErrorStats {
            compared: a.len() as u64,
            sum_squares: sq,
            sum_products: ((aa + bb) - sq) / 2.0,
            sum_squares_a: aa,
            sum_squares_b: bb,
            ..ErrorStats::default()
        };
        for (i, (&x, &y)) in a.iter().zip(b).enumerate() {
            let d = f64::from((x - y).abs());
            if s.max_index.is_none() || d > s.max_abs {
                (s.max_abs, s.max_index) = (d, Some(first + i as u64));
            }
        }
        s
    }

    /// The vector paths this CPU has.
    #[cfg(target_arch = "x86_64")]
    fn vector_paths() -> Vec<x86::Path> {
        use std::arch::is_x86_feature_detected as has;
        let mut paths = vec![];
        if has!("avx2") && has!("fma") && has!("f16c") {
            paths.push(x86::Path::Avx2);
        }
        if has!("avx512f")
            && has!("avx512bw")
            && has!("avx512vl")
            && has!("avx512dq")
            && has!("f16c")
        {
            paths.push(x86::Path::Avx512);
        }
        paths
    }

    /// Every way the figures of `a` against `b` are made on this CPU: dispatched (vectors
    /// where the CPU has them) and compiled for the baseline CPU.
    fn every_path(a: &[f32], b: &[f32], first: u64) -> Vec<Option<ErrorStats>> {
        #[allow(unused_mut)]
        let mut paths = vec![
            Blocks::of(a, b, first),
            Blocks::run(a, b).stats(a.len(), first),
        ];
        #[cfg(target_arch = "x86_64")]
        for path in vector_paths() {
            // SAFETY: the CPU has the path's features.
            let figures = unsafe { path.row(a, b) }.expect("values");
            paths.push(figures.stats(a.len(), first));
        }
        paths
    }

    /// Rows measured straight from q8_0 and q5_0 blocks, on every vector path, give the
    /// figures of the rows dequantized first, rows whose scale overflowed fp16 included.
    #[test]
    fn quantized_rows_give_the_figures_of_their_dequantized_rows() {
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 40) as f32 / (1u64 << 24) as f32 - 0.5
        };
        for ty in [GgmlType::Q8_0, GgmlType::Q5_0] {
            for row_len in [32usize, 96, 256, 640, 4096] {
                let rows = 5;
                let mut x: Vec<f32> = (0..rows * row_len).map(|_| next()).collect();
                // Row 1: ties and zeros; row 3: a scale past fp16's range.
                x[row_len..2 * row_len]
                    .iter_mut()
                    .enumerate()
                    .for_each(|(i, v)| *v = (i % 3) as f32);
                x[3 * row_len + row_len / 2] = 3e9;
                let mut y = vec![0u8; ty.row_size(row_len).unwrap() * rows];
                quantforge_kernels::quantize(ty, &x, row_len, None, &mut y).unwrap();
                let mut ys = vec![0.0; x.len()];
                quantforge_kernels::dequantize(ty, &y, &mut ys).unwrap();
                let want: Vec<ErrorStats> = x
                    .chunks(row_len)
                    .zip(ys.chunks(row_len))
                    .enumerate()
                    .map(|(r, (x, y))| ErrorStats::of(x, y, ((7 + r) * row_len) as u64))
                    .collect();
                assert!(!want[3].sum_squares.is_finite() || want[3].non_finite_b > 0);
                let mut got = vec![];
                ErrorStats::of_quantized_rows(&x, ty, &y, row_len, 7, &mut got).unwrap();
                assert_eq!(got, want, "{ty:?} {row_len}, dispatched");
                #[cfg(target_arch = "x86_64")]
                for path in vector_paths() {
                    let mut got = vec![];
                    // SAFETY: the CPU has the path's features.
                    let done = unsafe { quantized_rows(path, &x, ty, &y, row_len, 7, &mut got) };
                    done.expect("a type the vector code reads").unwrap();
                    assert_eq!(got, want, "{ty:?} {row_len}");
                }
            }
        }
    }

    #[test]
    fn every_path_gives_the_figures_of_the_definition() {
        // Odd lengths (partial blocks and vectors), ties, signs, tiny values.
        for n in [
            1usize, 7, 15, 16, 17, 127, 128, 129, 255, 256, 257, 512, 640, 768, 1001, 4096,
        ] {
            let a: Vec<f32> = (0..n)
                .map(|i| ((i * 7919 % 613) as f32 - 300.0) * [1e-3, 1e15, 1e-30][i % 3])
                .collect();
            let b: Vec<f32> = a
                .iter()
                .enumerate()
                .map(|(i, x)| if i % 5 == 0 { *x } else { x * 0.75 + 1e-4 })
                .collect();
            let want = by_definition(&a, &b, 3);
            for got in every_path(&a, &b, 3) {
                let got = got.expect("finite sums");
                assert_eq!(want.sum_squares.to_bits(), got.sum_squares.to_bits(), "{n}");
                assert_eq!(want.sum_products.to_bits(), got.sum_products.to_bits());
                assert_eq!(want.sum_squares_a.to_bits(), got.sum_squares_a.to_bits());
                assert_eq!(want.sum_squares_b.to_bits(), got.sum_squares_b.to_bits());
                assert_eq!((want.max_abs, want.max_index), (got.max_abs, got.max_index));
                assert_eq!(want.compared, got.compared);
            }
        }
    }

    /// The first largest difference, where differences repeat within and across lanes
    /// and blocks (few distinct values, runs of equal ones, odd lengths).
    #[test]
    fn every_path_finds_the_first_largest_difference() {
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for n in [8usize, 64, 65, 72, 127, 128, 136, 640, 1000, 4096] {
            for levels in [1u64, 2, 3, 17] {
                let a: Vec<f32> = (0..n).map(|_| (next() % levels) as f32).collect();
                let b: Vec<f32> = (0..n).map(|_| -((next() % levels) as f32)).collect();
                let want = by_definition(&a, &b, 9);
                for got in every_path(&a, &b, 9) {
                    let got = got.expect("finite sums");
                    assert_eq!(
                        (want.max_abs, want.max_index),
                        (got.max_abs, got.max_index),
                        "n {n}, {levels} levels"
                    );
                }
            }
        }
    }

    /// Squares past f32's range leave the f32 sums for the f64 ones, which hold them.
    #[test]
    fn squares_too_large_for_f32_are_summed_in_f64() {
        let a = [3e20f32, 1.0, -2e25, 4.0];
        let b = [3e20f32, 2.0, -1e25, 4.0];
        assert!(every_path(&a, &b, 0).iter().all(Option::is_none));
        let s = ErrorStats::of(&a, &b, 0);
        assert_eq!(s.compared, 4);
        assert_eq!(s.max_index, Some(2));
        assert_eq!(s.max_abs, f64::from(2e25f32) - f64::from(1e25f32));
        assert!(s.sum_squares.is_finite() && s.sum_squares > 1e49);
        assert_eq!(s.non_finite_a + s.non_finite_b, 0);
        let mut a = vec![1.0f32; 20];
        a[4] = f32::INFINITY;
        assert!(Blocks::of(&a, &a, 0).is_none());
    }

    #[test]
    fn rows_are_measured_apart_and_cosine_is_the_normalised_product() {
        let a = [1.0f32, 0.0, 3.0, 4.0];
        let b = [1.0f32, 0.0, 0.0, 4.0];
        let rows = ErrorStats::of_rows(&a, &b, 2, 5);
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[1].max_index, Some(12), "row 6 starts at element 12");
        let mut all = ErrorStats::default();
        rows.iter().for_each(|r| all.merge(r));
        assert_eq!(all.cosine(), Some(17.0 / (26f64 * 17.0).sqrt()));
        assert_eq!(ErrorStats::of(&[0.0], &[0.0], 0).cosine(), None);
    }

    #[test]
    fn shapes_ignore_leading_ones_only() {
        assert!(same_shape(&[1, 256], &[256]));
        assert!(same_shape(&[1, 1, 4, 8], &[4, 8]));
        assert!(same_shape(&[], &[1]));
        assert!(!same_shape(&[256, 1], &[256]));
        assert!(!same_shape(&[4, 8], &[8, 4]));
    }
}
