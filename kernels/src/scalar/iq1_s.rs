//! iq1_s: 256 weights per super-block, 1.5625 bits each. Groups of 8 weights are one of
//! 2048 points of [`IQ1S_GRID`](super::tables::IQ1S_GRID) (values -1, 0, 1), shifted by
//! ±[`IQ1S_DELTA`]; each sub-block of 32 has a 3-bit scale. Mirrors ggml's `quantize_iq1_s`
//! (`quantize_row_iq1_s_impl`, which needs an importance matrix) and
//! `dequantize_row_iq1_s`, and holds the search steps iq1_s and iq1_m share
//! (`iq1_sort_helper`, `iq1_find_best_neighbour2`).
//!
//! ggml aborts the process (`GGML_ASSERT`) on some extreme finite rows: where a
//! sub-block's weighted sums overflow to a NaN scale, or no neighbour of an off-grid group
//! has a finite error (its full-grid retry then reads past the group, a ggml bug, and
//! finds nothing either, or finds what lies in memory there). Such a sub-block has no ggml
//! result; it is written here as ggml writes one whose values are all near zero (scale
//! 0, grid point 0), and [`ggml_quantizes`] tells which rows these are.

use super::iq_grid::{IQ1S, IqSearch, IqWrite, Lookup, Serial};
use super::kquant::{importance_weights, sum_squares};
use super::tables::{IQ1S_DELTA, IQ1S_POINTS, NGRID_IQ1S};
use crate::blocks::{BlockIq1S, QK_K};
use crate::num::{F16Le, nearest_int};

/// `IQ1S_BLOCK_SIZE`: the values sharing one scale and delta sign.
pub(crate) const BLOCK: usize = 32;

/// `GROUP_MAX_EPS_IQ1_S`: a sub-block whose largest magnitude is below this is left empty.
const GROUP_MAX_EPS_IQ1_S: f32 = 1e-12;

/// The three values of a group with a positive delta (ggml's `x_p`), for levels 0, 1, 2.
pub(crate) const LEVELS_PLUS: [f32; 3] = [-1.0 + IQ1S_DELTA, IQ1S_DELTA, 1.0 + IQ1S_DELTA];

/// The three values of a group with a negative delta (ggml's `x_m`).
pub(crate) const LEVELS_MINUS: [f32; 3] = [-1.0 - IQ1S_DELTA, -IQ1S_DELTA, 1.0 - IQ1S_DELTA];

/// One row as `quantize_iq1_s` does it, `imatrix` holding one weight per column.
///
/// # Panics
/// Without an importance matrix, as ggml aborts (`Codec::quantize` refuses such a call
/// with `Error::ImatrixRequired` first).
pub fn quantize_row(x: &[f32], imatrix: Option<&[f32]>, y: &mut [BlockIq1S]) {
    quantize_row_with::<Serial>(x, imatrix, y)
}

/// [`quantize_row`] with the neighbour search `S`.
#[inline(always)]
pub(crate) fn quantize_row_with<S: IqSearch>(
    x: &[f32],
    imatrix: Option<&[f32]>,
    y: &mut [BlockIq1S],
) {
    let qw = imatrix.expect("iq1_s quantization needs an importance matrix");
    for ((xbl, qbl), block) in x.chunks_exact(QK_K).zip(qw.chunks_exact(QK_K)).zip(y) {
        quantize_super_block::<S>(xbl, qbl, block);
    }
}

/// Whether ggml's `quantize_iq1_s` gives this row (`x`, with importance weights
/// `imatrix`) bytes at all: false without an importance matrix and where it aborts or
/// reads past a group (see the module docs); [`quantize_row`] writes the same bytes as
/// ggml wherever this is true.
pub fn ggml_quantizes(x: &[f32], imatrix: Option<&[f32]>) -> bool {
    let Some(qw) = imatrix else { return false };
    let mut block = bytemuck::Zeroable::zeroed();
    x.chunks_exact(QK_K)
        .zip(qw.chunks_exact(QK_K))
        .all(|(xbl, qbl)| quantize_super_block::<Serial>(xbl, qbl, &mut block))
}

/// What ggml's search makes of one sub-block.
enum Fit {
    /// ggml's `continue`: all values near zero, or no split with a positive `sumq2`;
    /// scale 0, grid point 0, positive delta.
    Empty,
    /// ggml aborts or reads past the group here; written as [`Fit::Empty`].
    NoResult,
    /// The scale, the delta sign (`1` for [`LEVELS_PLUS`], `-1` for [`LEVELS_MINUS`]) and
    /// the grid point of each group of 8.
    Grid {
        scale: f32,
        shift: i8,
        index: [u16; BLOCK / 8],
    },
}

/// `quantize_row_iq1_s_impl` for one super-block, `qw` its importance weights. Returns
/// false when ggml has no result for it (a [`Fit::NoResult`] sub-block).
#[inline(always)]
fn quantize_super_block<S: IqSearch>(xbl: &[f32], qw: &[f32], block: &mut BlockIq1S) -> bool {
    block.d = F16Le::from_f32(0.0);
    block.qs = [0; QK_K / 8];
    block.qh = [[0; 2]; QK_K / BLOCK];

    let sigma2 = 2.0 * sum_squares(xbl) / QK_K as f32;
    let mut weight = [0.0f32; QK_K];
    importance_weights(xbl, qw, sigma2, &mut weight);

    let mut defined = true;
    let mut max_scale = 0.0f32;
    let mut scales = [0.0f32; QK_K / BLOCK];
    let mut shifts = [1i8; QK_K / BLOCK];
    for (ib, (xb, wb)) in xbl
        .chunks_exact(BLOCK)
        .zip(weight.chunks_exact(BLOCK))
        .enumerate()
    {
        match fit_sub_block::<S>(xb.try_into().unwrap(), wb.try_into().unwrap()) {
            Fit::Empty => {}
            Fit::NoResult => defined = false,
            Fit::Grid {
                scale,
                shift,
                index,
            } => {
                let mut h = 0u16;
                for (k, &g) in index.iter().enumerate() {
                    block.qs[(BLOCK / 8) * ib + k] = (g & 255) as u8;
                    h |= (g >> 8) << (3 * k);
                }
                block.qh[ib] = h.to_le_bytes();
                scales[ib] = scale;
                shifts[ib] = shift;
                max_scale = c_max(max_scale, scale);
            }
        }
    }
    if max_scale == 0.0 {
        return defined;
    }

    let d = max_scale / 15.0;
    // 1.125 is ggml's second fudge factor.
    block.d = F16Le::from_f32(d * 1.125);
    let id = 1.0 / d;
    for ((qh, &scale), &shift) in block.qh.iter_mut().zip(&scales).zip(&shifts) {
        let mut l = sub_block_scale(id, scale);
        if shift == -1 {
            l |= 8;
        }
        *qh = (u16::from_le_bytes(*qh) | (l << 12)).to_le_bytes();
    }
    defined
}

/// The search of `quantize_row_iq1_s_impl` for one sub-block of 32 with weights `weight`:
/// the best split of the sorted values into levels 0, 1, 2 for either delta sign, each
/// group then snapped to the grid.
#[inline(always)]
fn fit_sub_block<S: IqSearch>(xb: &[f32; BLOCK], weight: &[f32; BLOCK]) -> Fit {
    let max = abs_max(xb);
    if max < GROUP_MAX_EPS_IQ1_S {
        return Fit::Empty;
    }
    // ggml solves the weighted least-squares problem exactly: with 3 levels, a split is
    // two boundaries in the sorted values, and prefix sums give each split's scale and
    // score.
    let order = sorted_order(xb);
    let mut sumx = [0.0f32; BLOCK + 1];
    let mut sumw = [0.0f32; BLOCK + 1];
    for (j, &i) in order.iter().enumerate() {
        let i = i as usize;
        sumx[j + 1] = sumx[j] + weight[i] * xb[i];
        sumw[j + 1] = sumw[j] + weight[i];
    }
    let (mut scale, best) = S::iq1s_split(&sumx, &sumw, max);
    let Some((i1, i2, mut shift)) = best else {
        return Fit::Empty;
    };
    let mut l = split_levels(&order, i1, i2);
    if scale < 0.0 {
        for v in &mut l {
            *v = 2 - *v;
        }
        scale = -scale;
        shift = -shift;
    }
    let levels = if shift == 1 {
        &LEVELS_PLUS
    } else {
        &LEVELS_MINUS
    };
    match snap_to_grid::<S, { BLOCK / 8 }>(xb, weight, &l, scale, [levels; BLOCK / 8]) {
        Some((index, scale)) => Fit::Grid {
            scale,
            shift,
            index,
        },
        None => Fit::NoResult,
    }
}

/// The best split of a sub-block's sorted values into levels 0, 1, 2 for either delta
/// sign, from the prefix sums `sumx` of `w * x` and `sumw` of `w` in sorted order: the
/// first `(i1, i2, shift)` (in the order `i1`, `i2`, plus before minus) whose
/// `sumqx^2 > best * sumq2` test last succeeded, and the scale `sumqx / sumq2` it set
/// (`max` if none did).
#[inline(always)]
pub(crate) fn best_split(
    sumx: &[f32; BLOCK + 1],
    sumw: &[f32; BLOCK + 1],
    max: f32,
) -> (f32, Option<(usize, usize, i8)>) {
    let mut best_score = -f32::MAX;
    let mut scale = max;
    let mut best = None;
    for i1 in 0..=BLOCK {
        for i2 in i1..=BLOCK {
            for (levels, shift) in [(&LEVELS_PLUS, 1i8), (&LEVELS_MINUS, -1)] {
                let sumqx = (sumx[i1] - sumx[0]) * levels[0]
                    + (sumx[i2] - sumx[i1]) * levels[1]
                    + (sumx[BLOCK] - sumx[i2]) * levels[2];
                let sumq2 = (sumw[i1] - sumw[0]) * levels[0] * levels[0]
                    + (sumw[i2] - sumw[i1]) * levels[1] * levels[1]
                    + (sumw[BLOCK] - sumw[i2]) * levels[2] * levels[2];
                if improves(sumqx, sumq2, &mut best_score, &mut scale) {
                    best = Some((i1, i2, shift));
                }
            }
        }
    }
    (scale, best)
}

/// The iq1 split searches' test of one split with sums `sumqx`, `sumq2`: whether it beats
/// `best_score` (`sumq2 > 0 && sumqx^2 > best_score * sumq2`), and if so the scale and
/// score it sets.
#[inline(always)]
pub(crate) fn improves(sumqx: f32, sumq2: f32, best_score: &mut f32, scale: &mut f32) -> bool {
    if sumq2 > 0.0 && sumqx * sumqx > *best_score * sumq2 {
        *scale = sumqx / sumq2;
        *best_score = *scale * sumqx;
        true
    } else {
        false
    }
}

/// C's `MAX(a, b)`: `a > b ? a : b`.
#[inline(always)]
pub(super) fn c_max(a: f32, b: f32) -> f32 {
    if a > b { a } else { b }
}

/// The largest magnitude, as ggml's `max = MAX(max, fabsf(xb[i]))` from `fabsf(xb[0])`.
#[inline(always)]
pub(super) fn abs_max(xb: &[f32]) -> f32 {
    xb[1..].iter().fold(xb[0].abs(), |m, v| c_max(m, v.abs()))
}

/// The 3-bit sub-block scale code `clamp(nearest_int((id*scale - 1) / 2), 0, 7)`.
#[inline(always)]
pub(super) fn sub_block_scale(id: f32, scale: f32) -> u16 {
    nearest_int(0.5 * (id * scale - 1.0)).clamp(0, 7) as u16
}

/// The positions of `xb` in ascending order of value, equal values keeping their order:
/// ggml sorts (value, position) pairs with `qsort` and `iq1_sort_helper`, and glibc's
/// `qsort` is a stable merge sort. `-0.0` and `0.0` compare equal, as in C.
#[inline(always)]
pub(super) fn sorted_order<const N: usize>(xb: &[f32; N]) -> [u8; N] {
    let mut order: [u8; N] = std::array::from_fn(|j| j as u8);
    order.sort_by(|&a, &b| {
        let (l, r) = (xb[a as usize], xb[b as usize]);
        if l < r {
            std::cmp::Ordering::Less
        } else if l > r {
            std::cmp::Ordering::Greater
        } else {
            std::cmp::Ordering::Equal
        }
    });
    order
}

/// The level of each position for the split at `i1 <= i2` of the sorted `order`: the
/// first `i1` sorted values get level 0, the next ones up to `i2` level 1, the rest 2.
#[inline(always)]
pub(super) fn split_levels<const N: usize>(order: &[u8; N], i1: usize, i2: usize) -> [i8; N] {
    let mut l = [0i8; N];
    for (j, &i) in order.iter().enumerate() {
        l[i as usize] = if j < i1 {
            0
        } else if j < i2 {
            1
        } else {
            2
        };
    }
    l
}

/// The grid point of each group of 8 levels `l` (its lattice point if on the grid, else
/// the best neighbour for `scale`), then the scale refitted to those points when any group
/// was off the grid; group `k` has the values `levels[k]`. None where ggml has no result:
/// no neighbour with a finite error (`iq1_find_best_neighbour2` then retries over the
/// whole grid comparing every point with `xval[i]`, `i` the point's index, not the
/// coordinate, so it reads past the group and has no defined result), or a refitted scale
/// that is NaN (ggml's `GGML_ASSERT(scale >= 0)`).
#[inline(always)]
pub(super) fn snap_to_grid<S: IqSearch, const G: usize>(
    xb: &[f32],
    weight: &[f32],
    l: &[i8],
    mut scale: f32,
    levels: [&[f32; 3]; G],
) -> Option<([u16; G], f32)> {
    let mut index = [0u16; G];
    let mut all_on_grid = true;
    for (k, g) in index.iter_mut().enumerate() {
        let group: &[i8; 8] = l[8 * k..8 * k + 8].try_into().unwrap();
        *g = match IQ1S.lookup(IQ1S.index(group)) {
            Lookup::On(j) => j as u16,
            Lookup::Off(neighbours) => {
                all_on_grid = false;
                let range = 8 * k..8 * k + 8;
                S::best(
                    &IQ1S,
                    neighbours,
                    &xb[range.clone()],
                    &weight[range],
                    scale,
                    levels[k],
                )? as u16
            }
        };
    }
    if !all_on_grid {
        let mut sumqx = 0.0f32;
        let mut sumq2 = 0.0f32;
        for (k, &g) in index.iter().enumerate() {
            let point = IQ1S.point(g as usize);
            for (j, &p) in point.iter().enumerate() {
                let w = weight[8 * k + j];
                let q = levels[k][((p - 1) / 2) as usize];
                sumqx += w * q * xb[8 * k + j];
                sumq2 += w * q * q;
            }
        }
        if sumqx > 0.0 && sumq2 > 0.0 {
            scale = sumqx / sumq2;
        }
    }
    // ggml's GGML_ASSERT(scale >= 0) fails only for NaN here.
    (scale >= 0.0).then_some((index, scale))
}

/// `dl * (grid[j] + delta)` for the 8 values of grid point `index`, its bytes read as `i8`;
/// the inner loop of ggml's iq1_s and iq1_m dequantizers.
#[inline(always)]
pub(super) fn put_shifted(y: &mut [f32; 8], dl: f32, index: usize, delta: f32) {
    // Indices have 11 bits; the mask says so to the compiler (no bounds check).
    let grid = &IQ1S_POINTS[index & (NGRID_IQ1S - 1)];
    for (out, &g) in y.iter_mut().zip(grid) {
        *out = dl * (g as i8 as f32 + delta);
    }
}

/// `dequantize_row_iq1_s`: sub-block `ib` reads the little-endian u16 `qh[ib]`: bits
/// `3l..3l + 3` are index bits 8-10 of group `l`, bits 12-14 the scale `s` (sub-block
/// scale `d * (2s + 1)`), bit 15 the sign of the delta.
pub fn dequantize_row(x: &[BlockIq1S], y: &mut [f32]) {
    dequantize_row_with::<Serial>(x, y)
}

/// [`dequantize_row`], each group of 8 values written by `W`.
#[inline(always)]
pub(crate) fn dequantize_row_with<W: IqWrite>(x: &[BlockIq1S], y: &mut [f32]) {
    for (block, yb) in x.iter().zip(y.chunks_exact_mut(QK_K)) {
        let d = block.d.to_f32();
        for ((qh, q4), ys) in block
            .qh
            .iter()
            .zip(block.qs.as_chunks::<4>().0)
            .zip(yb.as_chunks_mut::<32>().0)
        {
            let qh = u16::from_le_bytes(*qh) as usize;
            let dl = d * (2 * ((qh >> 12) & 7) + 1) as f32;
            let delta = if qh & 0x8000 != 0 {
                -IQ1S_DELTA
            } else {
                IQ1S_DELTA
            };
            for (l, (&q, y8)) in q4.iter().zip(ys.as_chunks_mut::<8>().0).enumerate() {
                let index = q as usize | (((qh >> (3 * l)) & 7) << 8);
                W::shifted(y8, dl, index, delta);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{rmse, round_trip, wave};
    use super::*;
    use crate::num::F16Le;

    fn importance(n: usize) -> Vec<f32> {
        wave(n, 99).iter().map(|v| v.abs() + 0.1).collect()
    }

    #[test]
    fn zero_row_is_an_empty_block() {
        let x = [0.0f32; QK_K];
        let mut y = [BlockIq1S {
            d: F16Le::from_f32(1.0),
            qs: [0xff; 32],
            qh: [[0xff; 2]; 8],
        }];
        quantize_row(&x, Some(&[1.0; QK_K]), &mut y);
        assert_eq!(y[0].d.bits(), 0);
        assert_eq!(y[0].qs, [0; 32]);
        assert_eq!(y[0].qh, [[0; 2]; 8]);
    }

    #[test]
    fn round_trip_error_is_small() {
        // Uniform values in [-1, 1] have an rms of 0.58; 1.56 bits per weight keep about
        // two thirds of it.
        let x = wave(QK_K * 4, 7);
        let back = round_trip(quantize_row, dequantize_row, &x, Some(&importance(x.len())));
        let e = rmse(&x, &back);
        assert!(e < 0.4, "rmse {e}");
    }

    #[test]
    fn sort_is_stable_and_signed_zeros_are_equal() {
        let mut xb = [1.0f32; 8];
        xb[1] = 0.0;
        xb[3] = -0.0;
        xb[5] = 0.0;
        xb[7] = -2.0;
        assert_eq!(sorted_order(&xb), [7, 1, 3, 5, 0, 2, 4, 6]);
    }

    #[test]
    fn split_levels_follow_the_sorted_order() {
        let order = [3u8, 0, 2, 1];
        assert_eq!(split_levels(&order, 1, 3), [1, 2, 1, 0]);
        assert_eq!(split_levels(&order, 0, 0), [2; 4]);
    }

    #[test]
    fn ggml_has_no_result_where_weights_overflow() {
        let w = [1.0f32; QK_K];
        let ordinary = wave(QK_K, 3);
        assert!(ggml_quantizes(&ordinary, Some(&w)));
        assert!(!ggml_quantizes(&ordinary, None));
        // 1e20 squared overflows: every weight is infinite, and an all-positive sub-block
        // gets the scale inf/inf = NaN, where ggml's GGML_ASSERT(scale >= 0) fails.
        let mut x = [0.5f32; QK_K];
        x[0] = 1e20;
        assert!(!ggml_quantizes(&x, Some(&w)));
        let mut y = [bytemuck::Zeroable::zeroed()];
        quantize_row(&x, Some(&w), &mut y);
        assert_eq!(y[0].d.bits(), 0);
        assert_eq!(y[0].qh, [[0; 2]; 8]);
    }

    #[test]
    fn hand_built_block() {
        let mut block = BlockIq1S {
            d: F16Le::from_f32(1.0),
            qs: [0; 32],
            qh: [[0; 2]; 8],
        };
        // Sub-block 0: scale 2 -> dl = 5, negative delta; group 1 -> grid 0x701
        // (0x01000001010000ff: -1 0 0 1 1 0 0 1).
        block.qh[0] = ((2u16 << 12) | 0x8000 | (7 << 3)).to_le_bytes();
        block.qs[1] = 1;
        // Sub-block 7: scale 0 -> dl = 1, positive delta; group 3 -> grid 0x700
        // (0x010000010100ff01: 1 -1 0 1 1 0 0 1).
        block.qh[7] = (7u16 << 9).to_le_bytes();
        let mut y = [0.0f32; QK_K];
        dequantize_row(&[block], &mut y);
        // Grid 0 is all -1.
        assert!(y[..8].iter().all(|&v| v == -5.625));
        assert_eq!(
            y[8..16],
            [-5.625, -0.625, -0.625, 4.375, 4.375, -0.625, -0.625, 4.375]
        );
        assert!(y[16..32].iter().all(|&v| v == -5.625));
        assert!(y[32..248].iter().all(|&v| v == -0.875));
        assert_eq!(
            y[248..],
            [1.125, -0.875, 0.125, 1.125, 1.125, 0.125, 0.125, 1.125]
        );
    }
}
