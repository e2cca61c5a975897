//! iq1_m: 256 weights per super-block, 1.75 bits each. Groups of 8 weights are one of
//! 2048 points of [`IQ1S_GRID`](super::tables::IQ1S_GRID), each group shifted by its own
//! ±[`IQ1S_DELTA`]; each half of a sub-block of 32 has a 3-bit scale, and the fp16
//! super-block scale is spread over the top nibbles of the four u16 scale words.
//! Mirrors ggml's `quantize_iq1_m` (`quantize_row_iq1_m_impl`, with or without an
//! importance matrix) and `dequantize_row_iq1_m`.
//!
//! As with iq1_s, ggml aborts the process on some extreme finite rows; such a sub-block
//! is written as one whose values are all near zero, and [`ggml_quantizes`] tells which
//! rows these are (see [`super::iq1_s`]).

use super::iq_grid::{IqSearch, IqWrite, Serial};
use super::iq1_s::{
    LEVELS_MINUS, LEVELS_PLUS, abs_max, c_max, improves, snap_to_grid, sorted_order, split_levels,
    sub_block_scale,
};
use super::kquant::{importance_weights, sum_squares};
use super::tables::IQ1S_DELTA;
use crate::blocks::{BlockIq1M, QK_K};
use crate::num::{F16Le, fp16_to_fp32};

/// `IQ1M_BLOCK_SIZE`: the values sharing one scale (two groups of 8, each with its own
/// delta sign).
pub(crate) const BLOCK: usize = 16;

/// `GROUP_MAX_EPS_IQ1_M`: a sub-block whose largest magnitude is below this is left empty.
const GROUP_MAX_EPS_IQ1_M: f32 = 1e-7;

/// The `qh` bits of the delta signs for each sign pair (ggml's `masks`): bit 3 makes the
/// first group's delta negative, bit 7 the second's.
const SIGN_BITS: [u8; 4] = [0x00, 0x80, 0x08, 0x88];

/// ggml's `cp1`, `cp2`, `cm1`, `cm2`: a split's sum of q^2 is `T*v[2]^2 + W1*c1 + W2*c2`
/// with `c1 = v[0]^2 - v[1]^2` and `c2 = v[1]^2 - v[2]^2`, for each value set.
pub(crate) const CP1: f32 = LEVELS_PLUS[0] * LEVELS_PLUS[0] - LEVELS_PLUS[1] * LEVELS_PLUS[1];
pub(crate) const CP2: f32 = LEVELS_PLUS[1] * LEVELS_PLUS[1] - LEVELS_PLUS[2] * LEVELS_PLUS[2];
pub(crate) const CM1: f32 = LEVELS_MINUS[0] * LEVELS_MINUS[0] - LEVELS_MINUS[1] * LEVELS_MINUS[1];
pub(crate) const CM2: f32 = LEVELS_MINUS[1] * LEVELS_MINUS[1] - LEVELS_MINUS[2] * LEVELS_MINUS[2];

/// One row as `quantize_iq1_m` does it, with `imatrix` (one weight per column) or,
/// without one, ggml's default weights `x^2`.
pub fn quantize_row(x: &[f32], imatrix: Option<&[f32]>, y: &mut [BlockIq1M]) {
    quantize_row_with::<Serial>(x, imatrix, y)
}

/// [`quantize_row`] with the neighbour search `S`.
#[inline(always)]
pub(crate) fn quantize_row_with<S: IqSearch>(
    x: &[f32],
    imatrix: Option<&[f32]>,
    y: &mut [BlockIq1M],
) {
    for (ibl, (xbl, block)) in x.chunks_exact(QK_K).zip(y).enumerate() {
        let qw = imatrix.map(|w| &w[ibl * QK_K..(ibl + 1) * QK_K]);
        quantize_super_block::<S>(xbl, qw, block);
    }
}

/// Whether ggml's `quantize_iq1_m` gives this row (`x`, with importance weights
/// `imatrix` if any) bytes at all: false where it aborts or reads past a group (see the
/// module docs of [`super::iq1_s`]); [`quantize_row`] writes the same bytes as ggml
/// wherever this is true.
pub fn ggml_quantizes(x: &[f32], imatrix: Option<&[f32]>) -> bool {
    let mut block = bytemuck::Zeroable::zeroed();
    x.chunks_exact(QK_K).enumerate().all(|(ibl, xbl)| {
        let qw = imatrix.map(|w| &w[ibl * QK_K..(ibl + 1) * QK_K]);
        quantize_super_block::<Serial>(xbl, qw, &mut block)
    })
}

/// What ggml's search makes of one sub-block.
enum Fit {
    /// ggml's `continue`: all values near zero, or no split with a positive `sumq2`;
    /// scale 0, grid point 0, positive deltas.
    Empty,
    /// ggml aborts or reads past a group here; written as [`Fit::Empty`].
    NoResult,
    /// The scale, the delta signs (ggml's `best_k`: bit 1 a negative delta for the first
    /// group, bit 0 for the second) and the grid point of each group of 8.
    Grid {
        scale: f32,
        signs: usize,
        index: [u16; BLOCK / 8],
    },
}

/// The values of each group for delta signs `signs` (see [`Fit::Grid`]).
fn group_levels(signs: usize) -> [&'static [f32; 3]; BLOCK / 8] {
    let pick = |negative: bool| {
        if negative {
            &LEVELS_MINUS
        } else {
            &LEVELS_PLUS
        }
    };
    [pick(signs >= 2), pick(signs % 2 == 1)]
}

/// `quantize_row_iq1_m_impl` for one super-block, `qw` its importance weights if any.
/// Returns false when ggml has no result for it (a [`Fit::NoResult`] sub-block).
#[inline(always)]
fn quantize_super_block<S: IqSearch>(
    xbl: &[f32],
    qw: Option<&[f32]>,
    block: &mut BlockIq1M,
) -> bool {
    block.qs = [0; QK_K / 8];
    block.qh = [0; QK_K / 16];
    block.scales = [0; QK_K / 32];

    let mut weight = [0.0f32; QK_K];
    match qw {
        Some(qw) => {
            let sigma2 = 2.0 * sum_squares(xbl) / QK_K as f32;
            importance_weights(xbl, qw, sigma2, &mut weight);
        }
        None => {
            for (w, &v) in weight.iter_mut().zip(xbl) {
                *w = v * v;
            }
        }
    }

    let mut defined = true;
    let mut max_scale = 0.0f32;
    let mut scales = [0.0f32; QK_K / BLOCK];
    let mut signs = [0usize; QK_K / BLOCK];
    let mut indices = [[0u16; BLOCK / 8]; QK_K / BLOCK];
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
                signs: s,
                index,
            } => {
                block.qs[2 * ib] = (index[0] & 255) as u8;
                block.qs[2 * ib + 1] = (index[1] & 255) as u8;
                block.qh[ib] = ((index[0] >> 8) | ((index[1] >> 8) << 4)) as u8;
                scales[ib] = scale;
                signs[ib] = s;
                indices[ib] = index;
                max_scale = c_max(max_scale, scale);
            }
        }
    }
    if max_scale == 0.0 {
        return defined;
    }

    // The 3-bit scales against max_scale / 15, then the super-block scale refitted to
    // the chosen points and scales.
    let mut sc = [0u16; 4];
    let mut d = max_scale / 15.0;
    let id = 1.0 / d;
    let mut sumqx = 0.0f32;
    let mut sumq2 = 0.0f32;
    for ib in 0..QK_K / BLOCK {
        let l = sub_block_scale(id, scales[ib]);
        sc[ib / 4] |= l << (3 * (ib % 4));
        block.qh[ib] |= SIGN_BITS[signs[ib]];
        let m = (2 * l + 1) as f32;
        for (k, levels) in group_levels(signs[ib]).into_iter().enumerate() {
            let at = BLOCK * ib + 8 * k;
            let point = super::iq_grid::IQ1S.point(indices[ib][k] as usize);
            for (j, &p) in point.iter().enumerate() {
                let w = weight[at + j];
                let q = levels[((p - 1) / 2) as usize] * m;
                sumqx += w * q * xbl[at + j];
                sumq2 += w * q * q;
            }
        }
    }
    if sumq2 > 0.0 {
        d = sumqx / sumq2;
    }
    // 1.1125 is ggml's second fudge factor.
    let s = F16Le::from_f32(d * 1.1125).bits();
    sc[0] |= (s & 0x000f) << 12;
    sc[1] |= (s & 0x00f0) << 8;
    sc[2] |= (s & 0x0f00) << 4;
    sc[3] |= s & 0xf000;
    for (bytes, v) in block.scales.chunks_exact_mut(2).zip(sc) {
        bytes.copy_from_slice(&v.to_le_bytes());
    }
    defined
}

/// The search of `quantize_row_iq1_m_impl` for one sub-block of 16 with weights
/// `weight`: the best split of the sorted values into levels 0, 1, 2 for each of the four
/// delta sign pairs, each group then snapped to the grid.
#[inline(always)]
fn fit_sub_block<S: IqSearch>(xb: &[f32; BLOCK], weight: &[f32; BLOCK]) -> Fit {
    let max = abs_max(xb);
    if max < GROUP_MAX_EPS_IQ1_M {
        return Fit::Empty;
    }
    let order = sorted_order(xb);
    // Prefix sums over the sorted values, kept per half of the sub-block (each half has
    // its own delta sign). Since v[0] - v[1] = v[1] - v[2] = -1 for both value sets, a
    // split's sum of q*x collapses to T*v[2] - px[i1] - px[i2] (ggml's formulation).
    let mut px = [[0.0f32; BLOCK + 1]; 2];
    let mut pw = [[0.0f32; BLOCK + 1]; 2];
    for (j, &i) in order.iter().enumerate() {
        let i = i as usize;
        let h = usize::from(i >= BLOCK / 2);
        px[h][j + 1] = px[h][j] + weight[i] * xb[i];
        px[1 - h][j + 1] = px[1 - h][j];
        pw[h][j + 1] = pw[h][j] + weight[i];
        pw[1 - h][j + 1] = pw[1 - h][j];
    }
    let (mut scale, best) = S::iq1m_split(&px, &pw, max);
    let Some((i1, i2, mut signs)) = best else {
        return Fit::Empty;
    };
    let mut l = split_levels(&order, i1, i2);
    if scale < 0.0 {
        for v in &mut l {
            *v = 2 - *v;
        }
        scale = -scale;
        // Mirrored levels swap both delta signs.
        signs = 3 - signs;
    }
    match snap_to_grid::<S, { BLOCK / 8 }>(xb, weight, &l, scale, group_levels(signs)) {
        Some((index, scale)) => Fit::Grid {
            scale,
            signs,
            index,
        },
        None => Fit::NoResult,
    }
}

/// The best split of a sub-block's sorted values into levels 0, 1, 2 for each pair of
/// delta signs (one per half), from the prefix sums `px` of `w * x` and `pw` of `w` in
/// sorted order, per half: the `(i1, i2, signs)` (in the order `i1`, `i2`, `signs` 0-3)
/// whose test last succeeded and the scale it set (`max` if none did).
#[inline(always)]
pub(crate) fn best_split(
    px: &[[f32; BLOCK + 1]; 2],
    pw: &[[f32; BLOCK + 1]; 2],
    max: f32,
) -> (f32, Option<(usize, usize, usize)>) {
    let txs = [px[0][BLOCK], px[1][BLOCK]];
    let tws = [pw[0][BLOCK], pw[1][BLOCK]];
    let (p2, m2) = (LEVELS_PLUS[2], LEVELS_MINUS[2]);

    let mut best_score = -f32::MAX;
    let mut scale = max;
    let mut best = None;
    for i1 in 0..=BLOCK {
        for i2 in i1..=BLOCK {
            let mut qx_p = [0.0f32; 2];
            let mut qx_m = [0.0f32; 2];
            let mut q2_p = [0.0f32; 2];
            let mut q2_m = [0.0f32; 2];
            for h in 0..2 {
                let sx = px[h][i1] + px[h][i2];
                qx_p[h] = txs[h] * p2 - sx;
                qx_m[h] = txs[h] * m2 - sx;
                q2_p[h] = tws[h] * p2 * p2 + pw[h][i1] * CP1 + pw[h][i2] * CP2;
                q2_m[h] = tws[h] * m2 * m2 + pw[h][i1] * CM1 + pw[h][i2] * CM2;
            }
            let sumqx = [
                qx_p[0] + qx_p[1],
                qx_p[0] + qx_m[1],
                qx_m[0] + qx_p[1],
                qx_m[0] + qx_m[1],
            ];
            let sumq2 = [
                q2_p[0] + q2_p[1],
                q2_p[0] + q2_m[1],
                q2_m[0] + q2_p[1],
                q2_m[0] + q2_m[1],
            ];
            for k in 0..4 {
                if improves(sumqx[k], sumq2[k], &mut best_score, &mut scale) {
                    best = Some((i1, i2, k));
                }
            }
        }
    }
    (scale, best)
}

/// `dequantize_row_iq1_m`: the scales are four little-endian u16 `sc`; the fp16 scale
/// `d` is the top nibbles of `sc[0..4]`, lowest first (ggml's `iq1m_scale_t` union);
/// sub-block `ib` has scales `d * (2s + 1)`, `s` the 3 bits of `sc[ib / 2]` from bit
/// `6 * (ib % 2)` (first half) and from bit `6 * (ib % 2) + 3` (second half). Each byte of `qh` holds
/// index bits 8-10 and the delta sign (bit 3) of one group in its low nibble, and of the
/// next group in its high nibble.
pub fn dequantize_row(x: &[BlockIq1M], y: &mut [f32]) {
    dequantize_row_with::<Serial>(x, y)
}

/// [`dequantize_row`], each group of 8 values written by `W`.
#[inline(always)]
pub(crate) fn dequantize_row_with<W: IqWrite>(x: &[BlockIq1M], y: &mut [f32]) {
    for (block, yb) in x.iter().zip(y.chunks_exact_mut(QK_K)) {
        let sc: [u16; 4] = std::array::from_fn(|k| {
            u16::from_le_bytes([block.scales[2 * k], block.scales[2 * k + 1]])
        });
        let scale =
            (sc[0] >> 12) | ((sc[1] >> 8) & 0x00f0) | ((sc[2] >> 4) & 0x0f00) | (sc[3] & 0xf000);
        let d = fp16_to_fp32(scale);
        for (ib, ys) in yb.as_chunks_mut::<32>().0.iter_mut().enumerate() {
            let s = sc[ib / 2] as usize >> (6 * (ib % 2));
            let dl1 = d * (2 * (s & 0x7) + 1) as f32;
            let dl2 = d * (2 * ((s >> 3) & 0x7) + 1) as f32;
            let qs = &block.qs[4 * ib..4 * ib + 4];
            let qh = &block.qh[2 * ib..2 * ib + 2];
            for (l, y8) in ys.as_chunks_mut::<8>().0.iter_mut().enumerate() {
                let h = qh[l / 2] as usize;
                // Group l's bits of qh: index bits 8-10, then the sign of its delta.
                let bits = if l % 2 == 0 { h } else { h >> 4 };
                let high = (bits << 8) & 0x700;
                // The delta's sign as a bit flip: -IQ1S_DELTA exactly, and no branch on
                // a bit that random data sets half the time.
                let delta = f32::from_bits(IQ1S_DELTA.to_bits() ^ ((bits as u32 & 0x08) << 28));
                let dl = if l < 2 { dl1 } else { dl2 };
                W::shifted(y8, dl, qs[l] as usize | high, delta);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{rmse, round_trip, wave};
    use super::*;

    #[test]
    fn zero_row_is_an_empty_block() {
        let x = [0.0f32; QK_K];
        let mut y = [BlockIq1M {
            qs: [0xff; 32],
            qh: [0xff; 16],
            scales: [0xff; 8],
        }];
        quantize_row(&x, None, &mut y);
        assert_eq!(y[0].qs, [0; 32]);
        assert_eq!(y[0].qh, [0; 16]);
        assert_eq!(y[0].scales, [0; 8]);
    }

    #[test]
    fn round_trip_error_is_small() {
        // Uniform values in [-1, 1] have an rms of 0.58.
        let x = wave(QK_K * 4, 11);
        let w: Vec<f32> = wave(x.len(), 5).iter().map(|v| v.abs() + 0.1).collect();
        for imatrix in [None, Some(&w[..])] {
            let back = round_trip(quantize_row, dequantize_row, &x, imatrix);
            let e = rmse(&x, &back);
            assert!(e < 0.35, "rmse {e} imatrix {}", imatrix.is_some());
        }
    }

    #[test]
    fn delta_signs_pick_each_groups_values() {
        for (signs, &bits) in SIGN_BITS.iter().enumerate() {
            let [a, b] = group_levels(signs);
            assert_eq!(a[1] < 0.0, signs & 2 != 0);
            assert_eq!(b[1] < 0.0, signs & 1 != 0);
            // The qh bits the dequantizer reads as negative deltas.
            assert_eq!(bits & 0x08 != 0, a[1] < 0.0);
            assert_eq!(bits & 0x80 != 0, b[1] < 0.0);
        }
    }

    #[test]
    fn ggml_has_no_result_where_weights_overflow() {
        let ordinary = wave(QK_K, 3);
        assert!(ggml_quantizes(&ordinary, None));
        // 1e20 squared overflows: its weight is infinite, and its all-positive sub-block
        // gets the scale inf/inf = NaN, where ggml's GGML_ASSERT(scale >= 0) fails.
        let mut x = [0.5f32; QK_K];
        x[0] = 1e20;
        assert!(!ggml_quantizes(&x, None));
        assert!(!ggml_quantizes(&x, Some(&[1.0; QK_K])));
    }

    fn block_with_scales(sc: [u16; 4]) -> BlockIq1M {
        let mut scales = [0u8; 8];
        for (k, s) in sc.iter().enumerate() {
            scales[2 * k..2 * k + 2].copy_from_slice(&s.to_le_bytes());
        }
        BlockIq1M {
            qs: [0; 32],
            qh: [0; 16],
            scales,
        }
    }

    #[test]
    fn hand_built_block() {
        // d = 1.0 = fp16 0x3c00: nibble 0xc at the top of sc[2], 0x3 at the top of sc[3].
        // Sub-block 0: scales 1 -> 3, 2 -> 5; sub-block 1: scales 0 -> 1, 3 -> 7.
        let sc0 = 1 | (2 << 3) | (3 << 9);
        let mut block = block_with_scales([sc0, 0, 0xc000, 0x3000]);
        // Group 0: grid 0, negative delta; group 1: grid 0x701 (-1 0 0 1 1 0 0 1),
        // positive delta; group 3: grid 0, negative delta.
        block.qh[0] = 0x08 | 0x70;
        block.qh[1] = 0x80;
        block.qs[1] = 1;
        let mut y = [0.0f32; QK_K];
        dequantize_row(&[block], &mut y);
        // Grid 0 is all -1.
        assert!(y[..8].iter().all(|&v| v == -3.375));
        assert_eq!(
            y[8..16],
            [-2.625, 0.375, 0.375, 3.375, 3.375, 0.375, 0.375, 3.375]
        );
        assert!(y[16..24].iter().all(|&v| v == -4.375));
        assert!(y[24..32].iter().all(|&v| v == -5.625));
        assert!(y[32..48].iter().all(|&v| v == -0.875));
        assert!(y[48..64].iter().all(|&v| v == -6.125));
        assert!(y[64..].iter().all(|&v| v == -0.875));
    }

    #[test]
    fn scale_nibbles_assemble_lowest_first() {
        // fp16 0x3b21 = 0.89111328125: nibbles 1, 2, 0xb, 3 from sc[0], sc[1], sc[2], sc[3].
        // All sub-block scales 0 -> dl = d; grid 0 (all -1) + 0.125 = -0.875; 1825/2048 * -7/8.
        let block = block_with_scales([0x1000, 0x2000, 0xb000, 0x3000]);
        let mut y = [0.0f32; QK_K];
        dequantize_row(&[block], &mut y);
        assert!(y.iter().all(|&v| v == -12775.0 / 16384.0), "{}", y[0]);
    }
}
