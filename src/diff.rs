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
//! largest magnitude (the first element with it), and the sums of squared differences,
//! of products and of each side's squares, each added in f32 over runs of sixteen
//! elements and the runs' sums added in f64: a sum of squares is within about one part
//! in a million of the exact one (a sum of products, of the sum of their magnitudes),
//! and every CPU gets the same bits (see `Blocks`).
//! A row with a NaN or an infinity, or values whose squares overflow f32 (or a row of
//! 2^32 values or more), is measured in f64 (`|f64(a) - f64(b)|`, exact products), the
//! elements where either side is NaN or infinite counted apart and left out of the error
//! figures; two NaNs, or two equal infinities, count as the same value. Shapes compare
//! equal when they differ only by leading axes of 1 (GGUF writers may or may not drop
//! them).

use crate::error::Result;
use crate::model::{Encoding, Model, Tensor};
use crate::slab::{for_each_slab, tasks};
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

/// Lanes of the f32 sums: element `i` of a row goes to lane `i % 16`.
const LANES: usize = 16;

/// Terms each lane adds in f32 before the block's sums go into f64.
const BLOCK_TERMS: usize = 16;

/// Elements in a block.
const BLOCK: usize = LANES * BLOCK_TERMS;

/// The f32 sums of the rows whose values are all finite. Within a block of 256 elements,
/// each lane's four sums (the squared difference, the product, the two squares) are made
/// by fused multiply-adds in f32 in element order from 0, and its largest difference is
/// kept with the position where the lane first met it; at the block's end each sum's
/// sixteen lanes go into four f64 lanes (lane `j` taking `(p[j] + p[j+4]) + (p[j+8] +
/// p[j+12])`), added pairwise at the row's end. The vector code does the same operations
/// on the same lanes, so every CPU gets the same figures.
struct Blocks {
    /// `[sum][lane]` in f64: squared differences, products, squares of a, of b.
    acc: [[f64; 4]; 4],
    /// Each lane's largest difference so far (-1 before any), and the run of sixteen
    /// elements (from the row's start) where the lane first met it.
    max: [f32; LANES],
    run: [u32; LANES],
}

impl Blocks {
    fn new() -> Blocks {
        Blocks {
            acc: [[0.0; 4]; 4],
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
        #[cfg(target_arch = "x86_64")]
        {
            use quantforge_kernels::Isa;
            // The kernels' choice, so `QUANTFORGE_ISA` caps this too.
            match Isa::detect() {
                // SAFETY: the CPU has AVX-512 F (whose fused multiply-adds these are).
                Isa::Avx512 => return unsafe { x86::blocks512(a, b) }.stats(n, first),
                Isa::Avx2 if std::arch::is_x86_feature_detected!("fma") => {
                    // SAFETY: the CPU has AVX2 and FMA.
                    return unsafe { x86::blocks(a, b) }.stats(n, first);
                }
                _ => {}
            }
        }
        Blocks::run(a, b).stats(n, first)
    }

    /// The sums and largest differences of every block, one element at a time.
    fn run(a: &[f32], b: &[f32]) -> Blocks {
        let mut s = Blocks::new();
        for (k, (xs, ys)) in a.chunks(BLOCK).zip(b.chunks(BLOCK)).enumerate() {
            let mut p = [[0.0f32; LANES]; 4];
            let mut bm = [-1.0f32; LANES];
            let mut bj = [0u32; LANES];
            for (i, (&x, &y)) in xs.iter().zip(ys).enumerate() {
                let (l, j) = (i % LANES, (i / LANES) as u32);
                Blocks::term(&mut p, &mut bm, &mut bj, l, j, x, y);
            }
            s.end_block(k, &p, &bm, &bj);
        }
        s
    }

    /// Block `k`'s lane sums `p` and largest differences `bm` (met first in the block's
    /// runs `bj`) taken in.
    #[inline(always)]
    fn end_block(&mut self, k: usize, p: &[[f32; LANES]; 4], bm: &[f32; LANES], bj: &[u32; LANES]) {
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

    /// One element, in lane `l` and run `j` of a block.
    #[inline(always)]
    fn term(
        p: &mut [[f32; LANES]; 4],
        bm: &mut [f32; LANES],
        bj: &mut [u32; LANES],
        l: usize,
        j: u32,
        x: f32,
        y: f32,
    ) {
        let d = x - y;
        p[0][l] = d.mul_add(d, p[0][l]);
        p[1][l] = x.mul_add(y, p[1][l]);
        p[2][l] = x.mul_add(x, p[2][l]);
        p[3][l] = y.mul_add(y, p[3][l]);
        let d = d.abs();
        if d > bm[l] {
            (bm[l], bj[l]) = (d, j);
        }
    }

    /// The figures of the sums of `n` elements numbered from `first`, or `None` when a
    /// sum is not finite.
    fn stats(&self, n: usize, first: u64) -> Option<ErrorStats> {
        let add = |v: [f64; 4]| (v[0] + v[1]) + (v[2] + v[3]);
        let [sq, ab, aa, bb] = self.acc.map(add);
        if !(sq.is_finite() && ab.is_finite() && aa.is_finite() && bb.is_finite()) {
            return None;
        }
        let mut stats = ErrorStats {
            compared: n as u64,
            sum_squares: sq,
            sum_products: ab,
            sum_squares_a: aa,
            sum_squares_b: bb,
            ..ErrorStats::default()
        };
        // The largest difference, and the first element with it: the earliest of the
        // lanes' first positions of it. Halving trees over the lanes, which compile to
        // a few vector operations (which lanes have it is random: no branches).
        let mut m = self.max;
        for w in [8, 4, 2, 1] {
            for l in 0..w {
                m[l] = if m[l + w] > m[l] { m[l + w] } else { m[l] };
            }
        }
        let top = m[0];
        if top >= 0.0 {
            let mut at: [u32; LANES] = std::array::from_fn(|l| {
                let i = self.run[l] * LANES as u32 + l as u32;
                if self.max[l] == top { i } else { u32::MAX }
            });
            for w in [8, 4, 2, 1] {
                for l in 0..w {
                    at[l] = at[l].min(at[l + w]);
                }
            }
            stats.max_index = Some(first + u64::from(at[0]));
            stats.max_abs = f64::from(top);
        }
        Some(stats)
    }
}

/// [`Blocks::run`] in vectors: the same operations on the same lanes.
#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::{BLOCK, BLOCK_TERMS, Blocks, LANES};
    use std::arch::x86_64::*;

    /// Sixteen lanes in two registers of eight f32; the blocks' sums in one register of
    /// four f64 per sum.
    #[target_feature(enable = "avx2,fma")]
    pub(super) fn blocks(a: &[f32], b: &[f32]) -> Blocks {
        let n = a.len().min(b.len());
        let sign = _mm256_set1_ps(-0.0);
        let none = _mm256_set1_ps(-1.0);
        let mut acc = [_mm256_setzero_pd(); 4];
        let mut max = [none; 2];
        let mut at = [_mm256_setzero_si256(); 2];
        for (k, (xs, ys)) in a[..n].chunks(BLOCK).zip(b[..n].chunks(BLOCK)).enumerate() {
            let mut p = [[_mm256_setzero_ps(); 2]; 4];
            let mut bm = [none; 2];
            let mut bj = [_mm256_setzero_si256(); 2];
            let mut xc = xs.chunks_exact(LANES);
            let mut yc = ys.chunks_exact(LANES);
            let mut j = _mm256_setzero_si256();
            for (x, y) in (&mut xc).zip(&mut yc) {
                for h in 0..2 {
                    // SAFETY: each chunk holds sixteen f32, two halves of eight.
                    let (x, y) = unsafe {
                        (
                            _mm256_loadu_ps(x.as_ptr().add(8 * h)),
                            _mm256_loadu_ps(y.as_ptr().add(8 * h)),
                        )
                    };
                    let d = _mm256_sub_ps(x, y);
                    p[0][h] = _mm256_fmadd_ps(d, d, p[0][h]);
                    p[1][h] = _mm256_fmadd_ps(x, y, p[1][h]);
                    p[2][h] = _mm256_fmadd_ps(x, x, p[2][h]);
                    p[3][h] = _mm256_fmadd_ps(y, y, p[3][h]);
                    let d = _mm256_andnot_ps(sign, d);
                    let more = _mm256_cmp_ps::<_CMP_GT_OQ>(d, bm[h]);
                    bm[h] = _mm256_blendv_ps(bm[h], d, more);
                    bj[h] = blend_int(bj[h], j, more);
                }
                j = _mm256_add_epi32(j, _mm256_set1_epi32(1));
            }
            if !xc.remainder().is_empty() {
                // The row's last few elements, one at a time in their lanes.
                let mut ps = [[0.0f32; LANES]; 4];
                let mut bms = [0.0f32; LANES];
                let mut bjs = [0u32; LANES];
                for (s, ps) in p.iter().zip(&mut ps) {
                    store(ps, s);
                }
                store(&mut bms, &bm);
                store_int(&mut bjs, &bj);
                let last = (xs.len() / LANES) as u32;
                for (l, (&x, &y)) in xc.remainder().iter().zip(yc.remainder()).enumerate() {
                    Blocks::term(&mut ps, &mut bms, &mut bjs, l, last, x, y);
                }
                for (s, ps) in p.iter_mut().zip(&ps) {
                    *s = load(ps);
                }
                bm = load(&bms);
                bj = load_int(&bjs);
            }
            for (acc, p) in acc.iter_mut().zip(&p) {
                let low = _mm256_add_pd(widen(p[0], false), widen(p[0], true));
                let high = _mm256_add_pd(widen(p[1], false), widen(p[1], true));
                *acc = _mm256_add_pd(*acc, _mm256_add_pd(low, high));
            }
            let base = _mm256_set1_epi32((k * BLOCK_TERMS) as i32);
            for h in 0..2 {
                let more = _mm256_cmp_ps::<_CMP_GT_OQ>(bm[h], max[h]);
                max[h] = _mm256_blendv_ps(max[h], bm[h], more);
                at[h] = blend_int(at[h], _mm256_add_epi32(base, bj[h]), more);
            }
        }
        let mut s = Blocks::new();
        for (out, acc) in s.acc.iter_mut().zip(&acc) {
            // SAFETY: each array holds four f64.
            unsafe { _mm256_storeu_pd(out.as_mut_ptr(), *acc) };
        }
        store(&mut s.max, &max);
        store_int(&mut s.run, &at);
        s
    }

    /// Four f64 of the low or high half of `v`.
    #[inline]
    #[target_feature(enable = "avx2")]
    fn widen(v: __m256, high: bool) -> __m256d {
        _mm256_cvtps_pd(if high {
            _mm256_extractf128_ps::<1>(v)
        } else {
            _mm256_castps256_ps128(v)
        })
    }

    /// `b`'s lanes where `mask` is set, `a`'s elsewhere.
    #[inline]
    #[target_feature(enable = "avx2")]
    fn blend_int(a: __m256i, b: __m256i, mask: __m256) -> __m256i {
        _mm256_castps_si256(_mm256_blendv_ps(
            _mm256_castsi256_ps(a),
            _mm256_castsi256_ps(b),
            mask,
        ))
    }

    /// [`blocks`] with the sixteen lanes in one register, two blocks at a time: a lane's
    /// sums are chains of sixteen dependent additions per block, so the two blocks'
    /// chains run side by side.
    #[target_feature(enable = "avx512f")]
    pub(super) fn blocks512(a: &[f32], b: &[f32]) -> Blocks {
        let n = a.len().min(b.len());
        let (a, b) = (&a[..n], &b[..n]);
        let mut acc = [_mm256_setzero_pd(); 4];
        let mut max = _mm512_set1_ps(-1.0);
        let mut at = _mm512_setzero_si512();
        let full = n / BLOCK;
        let mut k = 0;
        while k + 2 <= full {
            let (x0, y0) = (&a[k * BLOCK..][..BLOCK], &b[k * BLOCK..][..BLOCK]);
            let (x1, y1) = (
                &a[(k + 1) * BLOCK..][..BLOCK],
                &b[(k + 1) * BLOCK..][..BLOCK],
            );
            let mut s0 = Sums512::new();
            let mut s1 = Sums512::new();
            for j in 0..BLOCK_TERMS {
                s0.add(x0, y0, j, 0xffff);
                s1.add(x1, y1, j, 0xffff);
            }
            s0.end(k, &mut acc, &mut max, &mut at);
            s1.end(k + 1, &mut acc, &mut max, &mut at);
            k += 2;
        }
        while k * BLOCK < n {
            // A block left over, whole or not; a vector of its last few elements masked.
            let end = n.min((k + 1) * BLOCK);
            let (x, y) = (&a[k * BLOCK..end], &b[k * BLOCK..end]);
            let mut s = Sums512::new();
            for j in 0..x.len().div_ceil(LANES) {
                let left = x.len() - j * LANES;
                let mask = if left >= LANES {
                    0xffff
                } else {
                    (1u16 << left) - 1
                };
                s.add(x, y, j, mask);
            }
            s.end(k, &mut acc, &mut max, &mut at);
            k += 1;
        }
        let mut s = Blocks::new();
        for (out, acc) in s.acc.iter_mut().zip(&acc) {
            // SAFETY: each array holds four f64.
            unsafe { _mm256_storeu_pd(out.as_mut_ptr(), *acc) };
        }
        // SAFETY: each array holds sixteen f32 or u32.
        unsafe {
            _mm512_storeu_ps(s.max.as_mut_ptr(), max);
            _mm512_storeu_si512(s.run.as_mut_ptr().cast(), at);
        }
        s
    }

    /// One block's sixteen lanes of the four sums and of the largest difference, with
    /// the run where each lane first met it.
    struct Sums512 {
        p: [__m512; 4],
        max: __m512,
        run: __m512i,
    }

    impl Sums512 {
        #[inline]
        #[target_feature(enable = "avx512f")]
        fn new() -> Sums512 {
            Sums512 {
                p: [_mm512_setzero_ps(); 4],
                max: _mm512_set1_ps(-1.0),
                run: _mm512_setzero_si512(),
            }
        }

        /// Run `j` (elements `16j..16j + 16`) of `x` against `y`, the lanes in `mask`
        /// (which are in the slices).
        #[inline]
        #[target_feature(enable = "avx512f")]
        fn add(&mut self, x: &[f32], y: &[f32], j: usize, mask: u16) {
            let at = j * LANES;
            let end = at + (16 - mask.leading_zeros() as usize);
            assert!(end <= x.len() && end <= y.len());
            // SAFETY: the lanes in `mask` are in both slices (checked above); masked-off
            // lanes are not read.
            let (x, y) = unsafe {
                (
                    _mm512_maskz_loadu_ps(mask, x.as_ptr().add(at)),
                    _mm512_maskz_loadu_ps(mask, y.as_ptr().add(at)),
                )
            };
            let d = _mm512_sub_ps(x, y);
            let [sq, xy, xx, yy] = &mut self.p;
            *sq = _mm512_mask3_fmadd_ps(d, d, *sq, mask);
            *xy = _mm512_mask3_fmadd_ps(x, y, *xy, mask);
            *xx = _mm512_mask3_fmadd_ps(x, x, *xx, mask);
            *yy = _mm512_mask3_fmadd_ps(y, y, *yy, mask);
            let d = _mm512_abs_ps(d);
            let more = _mm512_mask_cmp_ps_mask::<_CMP_GT_OQ>(mask, d, self.max);
            self.max = _mm512_mask_mov_ps(self.max, more, d);
            self.run = _mm512_mask_mov_epi32(self.run, more, _mm512_set1_epi32(j as i32));
        }

        /// Block `k`'s sums added into the f64 lanes `acc` as [`super::fold`] does, and
        /// its largest differences into `max` (with their runs in `at`).
        #[inline]
        #[target_feature(enable = "avx512f")]
        fn end(&self, k: usize, acc: &mut [__m256d; 4], max: &mut __m512, at: &mut __m512i) {
            for (acc, &p) in acc.iter_mut().zip(&self.p) {
                let low = _mm512_cvtps_pd(_mm512_castps512_ps256(p));
                let high = _mm512_cvtps_pd(_mm256_castsi256_ps(_mm512_extracti64x4_epi64::<1>(
                    _mm512_castps_si512(p),
                )));
                *acc = _mm256_add_pd(*acc, _mm256_add_pd(pairs(low), pairs(high)));
            }
            let more = _mm512_cmp_ps_mask::<_CMP_GT_OQ>(self.max, *max);
            *max = _mm512_mask_mov_ps(*max, more, self.max);
            let run = _mm512_add_epi32(self.run, _mm512_set1_epi32((k * BLOCK_TERMS) as i32));
            *at = _mm512_mask_mov_epi32(*at, more, run);
        }
    }

    /// Each of the four f64 lanes added to the one four lanes up.
    #[inline]
    #[target_feature(enable = "avx512f")]
    fn pairs(v: __m512d) -> __m256d {
        _mm256_add_pd(_mm512_castpd512_pd256(v), _mm512_extractf64x4_pd::<1>(v))
    }

    /// Sixteen lanes from two registers.
    #[inline(always)]
    fn store(out: &mut [f32; LANES], v: &[__m256; 2]) {
        for h in 0..2 {
            // SAFETY: each half holds eight f32.
            unsafe { _mm256_storeu_ps(out[8 * h..].as_mut_ptr(), v[h]) };
        }
    }

    /// Sixteen integer lanes from two registers.
    #[inline(always)]
    fn store_int(out: &mut [u32; LANES], v: &[__m256i; 2]) {
        for h in 0..2 {
            // SAFETY: each half holds eight u32.
            unsafe { _mm256_storeu_si256(out[8 * h..].as_mut_ptr().cast(), v[h]) };
        }
    }

    /// Two registers from sixteen lanes.
    #[inline(always)]
    fn load(v: &[f32; LANES]) -> [__m256; 2] {
        // SAFETY: each half holds eight f32.
        std::array::from_fn(|h| unsafe { _mm256_loadu_ps(v[8 * h..].as_ptr()) })
    }

    /// Two integer registers from sixteen lanes.
    #[inline(always)]
    fn load_int(v: &[u32; LANES]) -> [__m256i; 2] {
        // SAFETY: each half holds eight u32.
        std::array::from_fn(|h| unsafe { _mm256_loadu_si256(v[8 * h..].as_ptr().cast()) })
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
        let mut acc = [[0.0f64; 4]; 4];
        for (xs, ys) in a.chunks(BLOCK).zip(b.chunks(BLOCK)) {
            let mut p = [[0.0f32; LANES]; 4];
            for (i, (&x, &y)) in xs.iter().zip(ys).enumerate() {
                let d = x - y;
                for (s, (u, v)) in [(d, d), (x, y), (x, x), (y, y)].into_iter().enumerate() {
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
        let mut s = ErrorStats {
            compared: a.len() as u64,
            sum_squares: add(acc[0]),
            sum_products: add(acc[1]),
            sum_squares_a: add(acc[2]),
            sum_squares_b: add(acc[3]),
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

    /// Every way the figures of `a` against `b` are made on this CPU: dispatched (vectors
    /// where the CPU has them) and compiled for the baseline CPU.
    fn every_path(a: &[f32], b: &[f32], first: u64) -> Vec<Option<ErrorStats>> {
        #[allow(unused_mut)]
        let mut paths = vec![
            Blocks::of(a, b, first),
            Blocks::run(a, b).stats(a.len(), first),
        ];
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::is_x86_feature_detected as has;
            if has!("avx2") && has!("fma") {
                // SAFETY: the CPU has AVX2 and FMA.
                paths.push(unsafe { x86::blocks(a, b) }.stats(a.len(), first));
            }
            if has!("avx512f") {
                // SAFETY: the CPU has AVX-512 F.
                paths.push(unsafe { x86::blocks512(a, b) }.stats(a.len(), first));
            }
        }
        paths
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
