//! Comparing two models tensor by tensor (`quantforge diff`): tensors are matched by
//! name; for each pair, whether the shapes, types and bytes are the same, and, with both
//! sides decoded to f32 a slab of rows at a time, the largest absolute difference (and
//! where), the RMSE and the NaN/infinite values met.
//!
//! Differences are taken in f64 (`|f64(a) - f64(b)|`). Elements where either side is NaN
//! or infinite are counted apart and left out of the error figures; two NaNs, or two
//! equal infinities, count as the same value. Shapes compare equal when they differ only
//! by leading axes of 1 (GGUF writers may or may not drop them).
//!
//! The sums are made row by row ([`ErrorStats::of`] on one row, in a fixed order of
//! eight lanes) and the rows' figures added in row order ([`ErrorStats::merge`]), so the
//! figures of a tensor do not depend on how its rows were cut into tasks: the quantizer's
//! quality report (`quantize --report`) computes them the same way while it runs and gets
//! the same numbers.

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
    /// elements numbered from `first`. Each sum is kept in eight lanes (element `i` in lane
    /// `i % 8`) added pairwise at the end, an order vector registers of any width keep.
    pub fn of(a: &[f32], b: &[f32], first: u64) -> ErrorStats {
        let n = a.len().min(b.len());
        let (a, b) = (&a[..n], &b[..n]);
        // Values are almost always finite: the checking sums only when they are not.
        let (finite, lanes) = match Lanes::of_finite(a, b) {
            Some(lanes) => (true, lanes),
            None => (false, Lanes::of_any(a, b)),
        };
        let mut s = lanes.stats(first);
        if !finite {
            for (&x, &y) in a.iter().zip(b) {
                if !(x.is_finite() && y.is_finite()) {
                    s.non_finite_a += u64::from(!x.is_finite());
                    s.non_finite_b += u64::from(!y.is_finite());
                    let same = x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan());
                    s.non_finite_mismatches += u64::from(!same);
                }
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

/// Lanes of [`ErrorStats::of`]'s sums.
const LANES: usize = 8;

/// The per-lane sums of [`ErrorStats::of`]: element `i` goes to lane `i % 8`. Each term
/// is added with one fused multiply-add (`s + x * y` rounded once); the products of two
/// f32 values are exact in f64, so only the squared difference's term differs from a
/// separate multiply and add.
struct Lanes {
    compared: u64,
    sq: [f64; LANES],
    ab: [f64; LANES],
    aa: [f64; LANES],
    bb: [f64; LANES],
    /// Each lane's largest difference (-1 before any) and its element.
    max: [f64; LANES],
    at: [u64; LANES],
}

impl Lanes {
    fn new() -> Lanes {
        Lanes {
            compared: 0,
            sq: [0.0; LANES],
            ab: [0.0; LANES],
            aa: [0.0; LANES],
            bb: [0.0; LANES],
            max: [-1.0; LANES],
            at: [0; LANES],
        }
    }

    /// One element (its index `i`, in lane `l`), if both values are finite.
    #[inline(always)]
    fn add(&mut self, i: u64, l: usize, x: f32, y: f32, check: bool) {
        let ok = !check || (x.is_finite() && y.is_finite());
        let (x, y) = if ok {
            (f64::from(x), f64::from(y))
        } else {
            (0.0, 0.0)
        };
        let d = x - y;
        self.sq[l] = d.mul_add(d, self.sq[l]);
        self.ab[l] = x.mul_add(y, self.ab[l]);
        self.aa[l] = x.mul_add(x, self.aa[l]);
        self.bb[l] = y.mul_add(y, self.bb[l]);
        let d = d.abs();
        let more = ok && d > self.max[l];
        self.max[l] = if more { d } else { self.max[l] };
        self.at[l] = if more { i } else { self.at[l] };
        self.compared += u64::from(ok);
    }

    /// Every element of `a` against `b`, one at a time; `check`: leave out those not both
    /// finite.
    #[inline(always)]
    fn run(a: &[f32], b: &[f32], check: bool) -> Lanes {
        let mut s = Lanes::new();
        for (i, (&x, &y)) in a.iter().zip(b).enumerate() {
            s.add(i as u64, i % LANES, x, y, check);
        }
        s
    }

    /// [`Lanes::run`] when every value is finite (else `None`), in the widest vectors the
    /// CPU has (the same operations in the same order whatever their width).
    fn of_finite(a: &[f32], b: &[f32]) -> Option<Lanes> {
        let n = a.len().min(b.len());
        let (a, b) = (&a[..n], &b[..n]);
        #[allow(unused_mut)]
        let mut lanes = None;
        #[cfg(target_arch = "x86_64")]
        {
            if std::arch::is_x86_feature_detected!("avx512f") {
                // SAFETY: the CPU has AVX-512F.
                lanes = Some(unsafe { x86::avx512(a, b) });
            } else if std::arch::is_x86_feature_detected!("avx2")
                && std::arch::is_x86_feature_detected!("fma")
            {
                // SAFETY: the CPU has AVX2 and FMA.
                lanes = Some(unsafe { x86::avx2(a, b) });
            }
        }
        let lanes = match lanes {
            Some(lanes) => lanes.finish(a, b),
            None => Lanes::run(a, b, false),
        };
        // A NaN or an infinity on either side makes that side's sum of squares NaN or
        // infinite (finite f32 values squared and summed stay far inside f64's range).
        let all_finite = lanes.aa.iter().chain(&lanes.bb).all(|s| s.is_finite());
        all_finite.then_some(lanes)
    }

    /// After the vectors took the whole groups of eight: the rest, lane by lane.
    fn finish(mut self, a: &[f32], b: &[f32]) -> Lanes {
        let n = a.len().min(b.len());
        for i in n / LANES * LANES..n {
            self.add(i as u64, i % LANES, a[i], b[i], false);
        }
        self
    }

    /// [`Lanes::run`] leaving out the elements where a side is NaN or infinite.
    fn of_any(a: &[f32], b: &[f32]) -> Lanes {
        Lanes::run(a, b, true)
    }

    /// The figures, elements numbered from `first`.
    fn stats(&self, first: u64) -> ErrorStats {
        let add =
            |v: [f64; LANES]| ((v[0] + v[1]) + (v[2] + v[3])) + ((v[4] + v[5]) + (v[6] + v[7]));
        let mut s = ErrorStats {
            compared: self.compared,
            sum_squares: add(self.sq),
            sum_products: add(self.ab),
            sum_squares_a: add(self.aa),
            sum_squares_b: add(self.bb),
            ..ErrorStats::default()
        };
        // The largest difference, the first element of it on ties.
        for l in 0..LANES {
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

/// [`Lanes::run`] without checks over the whole groups of eight elements, in vectors:
/// each lane's sums by fused multiply-adds in element order, its largest difference
/// (only a strictly larger one replaces it, so the first is kept) and where it is.
#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::{LANES, Lanes};
    use std::arch::x86_64::*;

    /// Eight lanes in one register of eight f64.
    #[target_feature(enable = "avx512f")]
    pub(super) fn avx512(a: &[f32], b: &[f32]) -> Lanes {
        let whole = a.len().min(b.len()) / LANES * LANES;
        let zero = _mm512_setzero_pd();
        let (mut sq, mut ab, mut aa, mut bb) = (zero, zero, zero, zero);
        let mut max = _mm512_set1_pd(-1.0);
        let mut at = _mm512_setzero_si512();
        let mut idx = _mm512_setr_epi64(0, 1, 2, 3, 4, 5, 6, 7);
        let step = _mm512_set1_epi64(LANES as i64);
        for (xs, ys) in a[..whole]
            .chunks_exact(LANES)
            .zip(b[..whole].chunks_exact(LANES))
        {
            // SAFETY: each chunk holds eight f32.
            let (x, y) = unsafe { (_mm256_loadu_ps(xs.as_ptr()), _mm256_loadu_ps(ys.as_ptr())) };
            let (x, y) = (_mm512_cvtps_pd(x), _mm512_cvtps_pd(y));
            let d = _mm512_sub_pd(x, y);
            sq = _mm512_fmadd_pd(d, d, sq);
            ab = _mm512_fmadd_pd(x, y, ab);
            aa = _mm512_fmadd_pd(x, x, aa);
            bb = _mm512_fmadd_pd(y, y, bb);
            let d = _mm512_abs_pd(d);
            let more = _mm512_cmp_pd_mask::<_CMP_GT_OQ>(d, max);
            max = _mm512_max_pd(d, max);
            at = _mm512_mask_mov_epi64(at, more, idx);
            idx = _mm512_add_epi64(idx, step);
        }
        let mut s = Lanes::new();
        s.compared = whole as u64;
        // SAFETY: each array holds eight f64 (or u64).
        unsafe {
            _mm512_storeu_pd(s.sq.as_mut_ptr(), sq);
            _mm512_storeu_pd(s.ab.as_mut_ptr(), ab);
            _mm512_storeu_pd(s.aa.as_mut_ptr(), aa);
            _mm512_storeu_pd(s.bb.as_mut_ptr(), bb);
            _mm512_storeu_pd(s.max.as_mut_ptr(), max);
            _mm512_storeu_si512(s.at.as_mut_ptr().cast(), at);
        }
        s
    }

    /// Eight lanes in two registers of four f64.
    #[target_feature(enable = "avx2,fma")]
    pub(super) fn avx2(a: &[f32], b: &[f32]) -> Lanes {
        let whole = a.len().min(b.len()) / LANES * LANES;
        let zero = _mm256_setzero_pd();
        let (mut sq, mut ab, mut aa, mut bb) = ([zero; 2], [zero; 2], [zero; 2], [zero; 2]);
        let mut max = [_mm256_set1_pd(-1.0); 2];
        let mut at = [zero; 2];
        let mut idx = [
            _mm256_setr_epi64x(0, 1, 2, 3),
            _mm256_setr_epi64x(4, 5, 6, 7),
        ];
        let step = _mm256_set1_epi64x(LANES as i64);
        let sign = _mm256_set1_pd(-0.0);
        for (xs, ys) in a[..whole]
            .chunks_exact(LANES)
            .zip(b[..whole].chunks_exact(LANES))
        {
            for h in 0..2 {
                // SAFETY: each chunk holds eight f32, two halves of four.
                let (x, y) = unsafe {
                    (
                        _mm_loadu_ps(xs.as_ptr().add(4 * h)),
                        _mm_loadu_ps(ys.as_ptr().add(4 * h)),
                    )
                };
                let (x, y) = (_mm256_cvtps_pd(x), _mm256_cvtps_pd(y));
                let d = _mm256_sub_pd(x, y);
                sq[h] = _mm256_fmadd_pd(d, d, sq[h]);
                ab[h] = _mm256_fmadd_pd(x, y, ab[h]);
                aa[h] = _mm256_fmadd_pd(x, x, aa[h]);
                bb[h] = _mm256_fmadd_pd(y, y, bb[h]);
                let d = _mm256_andnot_pd(sign, d);
                let more = _mm256_cmp_pd::<_CMP_GT_OQ>(d, max[h]);
                max[h] = _mm256_max_pd(d, max[h]);
                at[h] = _mm256_blendv_pd(at[h], _mm256_castsi256_pd(idx[h]), more);
                idx[h] = _mm256_add_epi64(idx[h], step);
            }
        }
        let mut s = Lanes::new();
        s.compared = whole as u64;
        for h in 0..2 {
            let r = 4 * h..4 * h + 4;
            // SAFETY: each range holds four f64 (or u64).
            unsafe {
                _mm256_storeu_pd(s.sq[r.clone()].as_mut_ptr(), sq[h]);
                _mm256_storeu_pd(s.ab[r.clone()].as_mut_ptr(), ab[h]);
                _mm256_storeu_pd(s.aa[r.clone()].as_mut_ptr(), aa[h]);
                _mm256_storeu_pd(s.bb[r.clone()].as_mut_ptr(), bb[h]);
                _mm256_storeu_pd(s.max[r.clone()].as_mut_ptr(), max[h]);
                _mm256_storeu_pd(s.at[r].as_mut_ptr().cast(), at[h]);
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
        assert!((parts.sum_squares - whole.sum_squares).abs() < 1e-9);
        assert_eq!(ErrorStats::default().rmse(), None);
    }

    /// The lanes of `a` against `b` (all finite) by the widest vectors the CPU has and by
    /// each vector width it has, forced.
    fn every_width(a: &[f32], b: &[f32]) -> Vec<Lanes> {
        #[allow(unused_mut)]
        let mut all = vec![Lanes::of_finite(a, b).expect("finite")];
        #[cfg(target_arch = "x86_64")]
        {
            if std::arch::is_x86_feature_detected!("avx512f") {
                // SAFETY: the CPU has AVX-512F.
                all.push(unsafe { x86::avx512(a, b) }.finish(a, b));
            }
            if std::arch::is_x86_feature_detected!("avx2")
                && std::arch::is_x86_feature_detected!("fma")
            {
                // SAFETY: the CPU has AVX2 and FMA.
                all.push(unsafe { x86::avx2(a, b) }.finish(a, b));
            }
        }
        all
    }

    #[test]
    fn every_vector_width_gives_the_same_figures() {
        // Odd lengths (a tail after the last whole chunk), ties, signs, tiny and huge values.
        for n in [1usize, 7, 8, 9, 63, 255, 256, 257, 640, 1001, 4096] {
            let a: Vec<f32> = (0..n)
                .map(|i| ((i * 7919 % 613) as f32 - 300.0) * [1e-3, 1e30, 1e-30][i % 3])
                .collect();
            let b: Vec<f32> = a
                .iter()
                .enumerate()
                .map(|(i, x)| if i % 5 == 0 { *x } else { x * 0.75 + 1e-4 })
                .collect();
            let plain = Lanes::run(&a, &b, false).stats(3);
            let mut others: Vec<ErrorStats> =
                every_width(&a, &b).iter().map(|l| l.stats(3)).collect();
            others.push(Lanes::of_any(&a, &b).stats(3));
            for other in &others {
                assert_eq!(
                    plain.sum_squares.to_bits(),
                    other.sum_squares.to_bits(),
                    "{n}"
                );
                assert_eq!(plain.sum_products.to_bits(), other.sum_products.to_bits());
                assert_eq!(plain.sum_squares_a.to_bits(), other.sum_squares_a.to_bits());
                assert_eq!(plain.sum_squares_b.to_bits(), other.sum_squares_b.to_bits());
                assert_eq!(
                    (plain.max_abs, plain.max_index),
                    (other.max_abs, other.max_index)
                );
                assert_eq!(plain.compared, other.compared);
            }
        }
        let mut a = vec![1.0f32; 20];
        a[4] = f32::INFINITY;
        assert!(Lanes::of_finite(&a, &a).is_none());
    }

    /// Each lane's largest difference and its first place, where differences repeat
    /// within and across lanes (few distinct values, runs of equal ones, odd lengths), in
    /// every vector width against one element at a time.
    #[test]
    fn every_vector_width_finds_each_lanes_first_largest_difference() {
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
                let plain = Lanes::run(&a, &b, false);
                for other in &every_width(&a, &b) {
                    assert_eq!(plain.max, other.max, "n {n}, {levels} levels");
                    assert_eq!(plain.at, other.at, "n {n}, {levels} levels");
                }
            }
        }
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
