//! iq2_xs: 256 weights per super-block, 2.3125 bits each. Each u16 of `qs` holds a 9-bit
//! index into [`IQ2XS_GRID`] (8 magnitudes) and 7 sign bits; each half of a sub-block of
//! 32 has a 4-bit scale. Mirrors ggml's `quantize_iq2_xs` (`quantize_row_iq2_xs_impl`)
//! and `dequantize_row_iq2_xs`, and holds the search of a half sub-block of 16 that iq2_s
//! shares.

use super::iq_grid::{IQ2XS, IqGrid, IqSearch, IqWrite, Q_IQ2, Serial, Trials};
use super::iq2_xxs::{
    K_MAX_Q, c_max, even_signs, fit, grid_index, max_of, scale_code, snap_to_grid,
};
use super::kquant::{GROUP_MAX_EPS, importance_weights, sum_squares};
use super::tables::{IQ2XS_GRID, KSIGNS_IQ2XS};
use crate::blocks::{BlockIq2Xs, QK_K};
use crate::num::F16Le;

/// One row as `quantize_iq2_xs` does it (`quantize_row_iq2_xs_impl` per row).
///
/// # Panics
///
/// Without an importance matrix: ggml refuses to quantize iq2_xs without one, and
/// [`crate::Codec::quantize`] returns an error before calling this.
pub fn quantize_row(x: &[f32], imatrix: Option<&[f32]>, y: &mut [BlockIq2Xs]) {
    quantize_row_with::<Serial>(x, imatrix, y)
}

/// [`quantize_row`] with the neighbour search `S`.
#[inline(always)]
pub(crate) fn quantize_row_with<S: IqSearch>(
    x: &[f32],
    imatrix: Option<&[f32]>,
    y: &mut [BlockIq2Xs],
) {
    let imatrix = imatrix.expect("iq2_xs needs an importance matrix");
    for ((xbl, qw), block) in x.chunks_exact(QK_K).zip(imatrix.chunks_exact(QK_K)).zip(y) {
        quantize_block::<S>(xbl, qw, block);
    }
}

/// One super-block: each group of 16 searched by itself, then the 16 scales coded in
/// 4 bits against `d = max_scale / 31`.
#[inline(always)]
fn quantize_block<S: IqSearch>(xbl: &[f32], qw: &[f32], block: &mut BlockIq2Xs) {
    // ggml's sigma2 is the mean square of this super-block (not of the row).
    let sigma2 = sum_squares(xbl) / QK_K as f32;
    let mut q2 = [0u16; QK_K / 8];
    let mut scales = [0.0f32; QK_K / 16];
    let mut max_scale = 0.0f32;
    for (ib, (xb, qwb)) in xbl.chunks_exact(16).zip(qw.chunks_exact(16)).enumerate() {
        let mut weight = [0.0f32; 16];
        importance_weights(xb, qwb, sigma2, &mut weight);
        let waux = weight.map(f32::sqrt);
        let mut xval = [0.0f32; 16];
        let mut signs = [0u8; 2];
        for (k, s) in signs.iter_mut().enumerate() {
            let g = 8 * k..8 * k + 8;
            *s = even_signs(&xb[g.clone()], &weight[g.clone()], &mut xval[g]);
        }
        let max = max_of(&xval);
        if max < GROUP_MAX_EPS {
            continue;
        }
        let Some((mut scale, l)) = search_pair::<S>(&IQ2XS, &xval, &weight, &waux, max) else {
            continue;
        };
        if scale < 0.0 {
            // The scale is stored unsigned, so every sign flips.
            scale = -scale;
            signs = signs.map(|s| !s & 127);
        }
        for (k, (lk, &s)) in l.chunks_exact(8).zip(&signs).enumerate() {
            q2[2 * ib + k] = grid_index(&IQ2XS, lk) as u16 | ((s as u16) << 9);
        }
        scales[ib] = scale;
        max_scale = c_max(max_scale, scale);
    }
    block.d = F16Le::from_f32(0.0);
    block.scales = [0; QK_K / 32];
    if max_scale == 0.0 {
        block.qs = [[0; 2]; 32];
        return;
    }
    let d = max_scale / 31.0;
    block.d = F16Le::from_f32(d);
    let id = 1.0 / d;
    for (sc, pair) in block.scales.iter_mut().zip(scales.chunks_exact(2)) {
        *sc = (scale_code(id, pair[0]) | (scale_code(id, pair[1]) << 4)) as u8;
    }
    for (q, &v) in block.qs.iter_mut().zip(&q2) {
        *q = v.to_le_bytes();
    }
}

/// The search of one group of 16 magnitudes `xval` (largest `max`, at least the type's
/// epsilon) with weights `weight` and their square roots `waux`, as iq2_xs and iq2_s do it:
/// 19 inverse scales around `5 / max` are tried, each half rounded onto `grid`; if the best
/// fit had a half off the grid, those halves are re-rounded at its scale and the scale
/// refitted. Returns the scale, still signed (the caller stores its magnitude and flips
/// the signs if it is negative), and the levels; or `None` where ggml aborts: a NaN
/// scale, which only weights that overflowed to infinity give.
#[inline(always)]
pub(super) fn search_pair<S: IqSearch>(
    grid: &IqGrid<8>,
    xval: &[f32; 16],
    weight: &[f32; 16],
    waux: &[f32; 16],
    max: f32,
) -> Option<(f32, [i8; 16])> {
    let ids: [f32; 19] =
        std::array::from_fn(|n| ((2 * K_MAX_Q - 1) as f32 + (n as i32 - 9) as f32 * 0.1) / max);
    let mut trials = Trials::<2>::new();
    S::trials(grid, &Q_IQ2, xval, weight, waux, &ids, &mut trials);
    let mut l = [0i8; 16];
    let mut on_grid = [true; 2];
    let mut best = 0.0f32;
    let mut scale = max / (2 * K_MAX_Q - 1) as f32;
    for (t, &(sumqx, sumq2)) in trials.sums[..ids.len()].iter().enumerate() {
        if sumq2 > 0.0 && sumqx * sumqx > best * sumq2 {
            scale = sumqx / sumq2;
            best = scale * sumqx;
            trials.levels(grid, t, &mut l);
            on_grid = trials.on_grid[t];
        }
    }
    if on_grid.contains(&false) && scale > 0.0 {
        let id = 1.0 / scale;
        for (k, lk) in l.chunks_exact_mut(8).enumerate() {
            if on_grid[k] {
                continue;
            }
            let g = 8 * k..8 * k + 8;
            lk.copy_from_slice(&snap_to_grid::<S>(grid, &xval[g.clone()], &waux[g], id, scale).0);
        }
        let (sumqx, sumq2) = fit(weight, xval, &l);
        if sumq2 > 0.0 {
            scale = sumqx / sumq2;
        }
    }
    // ggml asserts the stored scale is `>= 0`, which a NaN fails.
    (!scale.is_nan()).then_some((scale, l))
}

/// `dequantize_row_iq2_xs`: group `l` of sub-block `ib32` is scaled by
/// `d * (0.5 + s) * 0.25`, `s` the low (groups 0, 1) or high (groups 2, 3) nibble of
/// `scales[ib32]`.
pub fn dequantize_row(x: &[BlockIq2Xs], y: &mut [f32]) {
    dequantize_row_with::<Serial>(x, y)
}

/// [`dequantize_row`], each group of 8 values written by `W`.
#[inline(always)]
pub(crate) fn dequantize_row_with<W: IqWrite>(x: &[BlockIq2Xs], y: &mut [f32]) {
    for (block, yb) in x.iter().zip(y.chunks_exact_mut(QK_K)) {
        let d = block.d.to_f32();
        for ((qs, &sc), ys) in block
            .qs
            .chunks_exact(4)
            .zip(&block.scales)
            .zip(yb.chunks_exact_mut(32))
        {
            let db = [
                d * (0.5 + (sc & 0xf) as f32) * 0.25,
                d * (0.5 + (sc >> 4) as f32) * 0.25,
            ];
            for (l, (q, y8)) in qs.iter().zip(ys.chunks_exact_mut(8)).enumerate() {
                let q = u16::from_le_bytes(*q);
                let grid = IQ2XS_GRID[(q & 511) as usize].to_le_bytes();
                let signs = KSIGNS_IQ2XS[(q >> 9) as usize];
                W::signed(y8, db[l / 2], grid, signs);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::num::F16Le;
    use crate::scalar::testing;

    #[test]
    fn zero_row_gives_an_empty_block() {
        let mut y = [bytemuck::Zeroable::zeroed()];
        quantize_row(&[0.0; QK_K], Some(&[1.0; QK_K]), &mut y);
        let block: BlockIq2Xs = y[0];
        assert_eq!(block.d.bits(), 0);
        assert_eq!(block.qs, [[0; 2]; 32]);
        assert_eq!(block.scales, [0; 8]);
    }

    #[test]
    fn grid_points_keep_their_signs() {
        // Each group of 8 is a grid point (magnitudes 1, 3, 5) with an even number of
        // negatives, so all 8 signs fit in the 7 stored bits.
        let mut x = [0.0f32; QK_K];
        for (g, xg) in x.chunks_exact_mut(8).enumerate() {
            let p = IQ2XS.point((g * 37) % IQ2XS.len());
            for (i, (v, &c)) in xg.iter_mut().zip(&p).enumerate() {
                let sign = if (g + i) % 4 == 0 { -1.0 } else { 1.0 };
                *v = sign * c as f32;
            }
            // Fix the parity: an odd count of negatives flips one more.
            if xg.iter().filter(|v| **v < 0.0).count() % 2 == 1 {
                xg[7] = -xg[7];
            }
        }
        let y = testing::round_trip(quantize_row, dequantize_row, &x, Some(&[1.0; QK_K]));
        // Levels 1, 3, 5 dequantize as 8, 25, 43 times the scale: close, not exact, and
        // the 4-bit sub-block scales add their rounding (magnitudes here are up to 5).
        let rmse = testing::rmse(&x, &y);
        assert!(rmse < 0.3, "rmse {rmse}");
        for (a, b) in x.iter().zip(&y) {
            assert_eq!(a.signum(), b.signum(), "{a} {b}");
        }
    }

    #[test]
    fn round_trip_error_is_bounded() {
        let x = testing::wave(4 * QK_K, 33);
        let w: Vec<f32> = testing::wave(x.len(), 8)
            .iter()
            .map(|v| v.abs() + 0.1)
            .collect();
        let y = testing::round_trip(quantize_row, dequantize_row, &x, Some(&w));
        let rmse = testing::rmse(&x, &y);
        assert!(rmse < 0.28, "rmse {rmse}");
    }

    #[test]
    fn hand_built_block() {
        let mut block = BlockIq2Xs {
            d: F16Le::from_f32(2.0),
            qs: [[0; 2]; 32],
            scales: [0; 8],
        };
        // Sub-block 0: low nibble 1 -> 2 * 1.5 * 0.25 = 0.75, high nibble 3 -> 1.75.
        block.scales[0] = 0x31;
        // Grid 511 (all 43) with sign pattern 1 (elements 0 and 7 negative).
        block.qs[0] = (511u16 | (1 << 9)).to_le_bytes();
        // Grid 1 (43, then 8s), no signs.
        block.qs[1] = 1u16.to_le_bytes();
        // Grid 0 (all 8s), sign pattern 127 (ksigns -> 255: all negative), high scale.
        block.qs[2] = (127u16 << 9).to_le_bytes();
        let mut y = [0.0f32; QK_K];
        dequantize_row(&[block], &mut y);
        assert_eq!(y[0], -32.25);
        assert!(y[1..7].iter().all(|&v| v == 32.25));
        assert_eq!(y[7], -32.25);
        assert_eq!(y[8], 32.25);
        assert!(y[9..16].iter().all(|&v| v == 6.0));
        assert!(y[16..24].iter().all(|&v| v == -14.0));
        assert!(y[24..32].iter().all(|&v| v == 14.0));
        // Scale nibble 0: 2 * 0.5 * 0.25 = 0.25, times 8.
        assert!(y[32..].iter().all(|&v| v == 2.0));
    }
}
