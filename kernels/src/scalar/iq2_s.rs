//! iq2_s: 256 weights per super-block, 2.5625 bits each. Groups of 8 weights are one of
//! 1024 points of [`IQ2S_GRID`] (8 low index bits in `qs`, 2 high bits in `qh`) with 8
//! explicit sign bits; each half of a sub-block of 32 has a 4-bit scale.
//! Mirrors ggml's `quantize_iq2_s` (`quantize_row_iq2_s_impl`, which runs with or without
//! an importance matrix) and `dequantize_row_iq2_s`.

use super::iq_grid::{IQ2S, IqSearch, IqWrite, Serial};
use super::iq2_xs::search_pair;
use super::iq2_xxs::{c_max, grid_index, max_of, scale_code};
use super::kquant::{importance_weights, sum_squares};
use super::tables::IQ2S_GRID;
use crate::blocks::{BlockIq2S, QK_K};
use crate::num::F16Le;

/// ggml's `GROUP_MAX_EPS_IQ2_S`: a group of 16 whose largest magnitude is below this is
/// stored as zeros.
const GROUP_MAX_EPS_IQ2_S: f32 = 1e-8;

/// One row as `quantize_iq2_s` does it (`quantize_row_iq2_s_impl` per row). Without an
/// importance matrix the weights are ggml's default `sigma2 / 4 + x * x`.
pub fn quantize_row(x: &[f32], imatrix: Option<&[f32]>, y: &mut [BlockIq2S]) {
    quantize_row_with::<Serial>(x, imatrix, y)
}

/// [`quantize_row`] with the neighbour search `S`.
#[inline(always)]
pub(crate) fn quantize_row_with<S: IqSearch>(
    x: &[f32],
    imatrix: Option<&[f32]>,
    y: &mut [BlockIq2S],
) {
    for (ibl, (xbl, block)) in x.chunks_exact(QK_K).zip(y).enumerate() {
        let qw = imatrix.map(|w| &w[ibl * QK_K..(ibl + 1) * QK_K]);
        quantize_block::<S>(xbl, qw, block);
    }
}

/// One super-block: each group of 16 searched by itself (as iq2_xs, with 8 stored sign
/// bits per 8 weights), then the 16 scales coded in 4 bits against `d = max_scale / 31`,
/// `d` itself stored shrunk by 0.9875.
#[inline(always)]
fn quantize_block<S: IqSearch>(xbl: &[f32], qw: Option<&[f32]>, block: &mut BlockIq2S) {
    *block = bytemuck::Zeroable::zeroed();
    // ggml's sigma2 here is twice the mean square of this super-block.
    let sigma2 = 2.0 * sum_squares(xbl) / QK_K as f32;
    let mut scales = [0.0f32; QK_K / 16];
    let mut max_scale = 0.0f32;
    for (ib, xb) in xbl.chunks_exact(16).enumerate() {
        let mut weight = [0.0f32; 16];
        match qw {
            Some(qw) => importance_weights(xb, &qw[16 * ib..16 * ib + 16], sigma2, &mut weight),
            None => {
                for (w, &v) in weight.iter_mut().zip(xb) {
                    *w = 0.25 * sigma2 + v * v;
                }
            }
        }
        let waux = weight.map(f32::sqrt);
        let mut xval = [0.0f32; 16];
        let mut signs = [0u8; 2];
        for (i, (v, &x)) in xval.iter_mut().zip(xb).enumerate() {
            if x >= 0.0 {
                *v = x;
            } else {
                *v = -x;
                signs[i / 8] |= 1 << (i % 8);
            }
        }
        let max = max_of(&xval);
        if max < GROUP_MAX_EPS_IQ2_S {
            continue;
        }
        let Some((mut scale, l)) = search_pair::<S>(&IQ2S, &xval, &weight, &waux, max) else {
            continue;
        };
        if scale < 0.0 {
            // The scale is stored unsigned, so every sign flips.
            scale = -scale;
            signs = signs.map(|s| !s);
        }
        for (k, (lk, &s)) in l.chunks_exact(8).zip(&signs).enumerate() {
            let i8 = 2 * ib + k;
            let index = grid_index(&IQ2S, lk);
            block.qs[i8] = index as u8;
            block.qh[i8 / 4] |= ((index >> 8) << (2 * (i8 % 4))) as u8;
            block.qs[QK_K / 8 + i8] = s;
        }
        scales[ib] = scale;
        max_scale = c_max(max_scale, scale);
    }
    // With every scale 0, ggml leaves the grid indices and signs already written (of
    // groups whose fit came out 0) in the block, with d = 0.
    if max_scale == 0.0 {
        return;
    }
    let d = max_scale / 31.0;
    block.d = F16Le::from_f32(d * 0.9875);
    let id = 1.0 / d;
    for (sc, pair) in block.scales.iter_mut().zip(scales.chunks_exact(2)) {
        *sc = (scale_code(id, pair[0]) | (scale_code(id, pair[1]) << 4)) as u8;
    }
}

/// `dequantize_row_iq2_s`: the first 32 bytes of `qs` are grid index low bits, the last
/// 32 the signs; group `l` of sub-block `ib32` takes index bits 8-9 from bits `2l..2l+2`
/// of `qh[ib32]` and scale `d * (0.5 + s) * 0.25` as in iq2_xs.
pub fn dequantize_row(x: &[BlockIq2S], y: &mut [f32]) {
    dequantize_row_with::<Serial>(x, y)
}

/// [`dequantize_row`], each group of 8 values written by `W`.
#[inline(always)]
pub(crate) fn dequantize_row_with<W: IqWrite>(x: &[BlockIq2S], y: &mut [f32]) {
    for (block, yb) in x.iter().zip(y.chunks_exact_mut(QK_K)) {
        let d = block.d.to_f32();
        let (qs, signs) = block.qs.split_at(QK_K / 8);
        for (((q4, s4), (&sc, &qh)), ys) in qs
            .chunks_exact(4)
            .zip(signs.chunks_exact(4))
            .zip(block.scales.iter().zip(&block.qh))
            .zip(yb.chunks_exact_mut(32))
        {
            let db = [
                d * (0.5 + (sc & 0xf) as f32) * 0.25,
                d * (0.5 + (sc >> 4) as f32) * 0.25,
            ];
            let qh = qh as usize;
            for (l, ((&q, &s), y8)) in q4.iter().zip(s4).zip(ys.chunks_exact_mut(8)).enumerate() {
                // At most 10 bits; the mask says so to the compiler (no bounds check).
                let index = (q as usize | ((qh << (8 - 2 * l)) & 0x300)) & 0x3ff;
                let grid = IQ2S_GRID[index].to_le_bytes();
                W::signed(y8, db[l / 2], grid, s);
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
        for imatrix in [None, Some(&[1.0f32; QK_K][..])] {
            let mut y = [bytemuck::Zeroable::zeroed()];
            quantize_row(&[0.0; QK_K], imatrix, &mut y);
            let block: BlockIq2S = y[0];
            assert_eq!(bytemuck::bytes_of(&block), &[0u8; 82][..]);
        }
    }

    #[test]
    fn signs_are_stored_as_given() {
        // 8 explicit sign bits: an odd number of negatives is kept.
        let mut x = testing::wave(QK_K, 3);
        for v in &mut x {
            *v = v.abs() + 0.5;
        }
        x[0] = -x[0];
        let y = testing::round_trip(quantize_row, dequantize_row, &x, None);
        assert!(y[0] < 0.0 && y[1..].iter().all(|&v| v > 0.0));
    }

    #[test]
    fn round_trip_error_is_bounded() {
        let x = testing::wave(4 * QK_K, 13);
        let w: Vec<f32> = testing::wave(x.len(), 2)
            .iter()
            .map(|v| v.abs() + 0.1)
            .collect();
        for imatrix in [None, Some(&w[..])] {
            let y = testing::round_trip(quantize_row, dequantize_row, &x, imatrix);
            let rmse = testing::rmse(&x, &y);
            assert!(rmse < 0.25, "rmse {rmse}");
        }
    }

    #[test]
    fn hand_built_block() {
        let mut block = BlockIq2S {
            d: F16Le::from_f32(1.0),
            qs: [0; 64],
            qh: [0; 8],
            scales: [0; 8],
        };
        // Sub-block 0: scales 0.5 * 0.25 = 0.125 (groups 0, 1), 1.5 * 0.25 = 0.375 (2, 3).
        block.scales[0] = 0x10;
        // Group 1 -> grid 0x100, group 3 -> grid 0x300.
        block.qh[0] = (1 << 2) | (3 << 6);
        // Group 0: element 7 negative; group 3: element 1 negative.
        block.qs[32] = 0x80;
        block.qs[35] = 0x02;
        let mut y = [0.0f32; QK_K];
        dequantize_row(&[block], &mut y);
        // Grid 0 is all 8s.
        assert_eq!(y[..8], [1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, -1.0]);
        // Grid 0x100 = 0x0819081919191919: bytes 25 25 25 25 25 8 25 8.
        assert_eq!(
            y[8..16],
            [3.125, 3.125, 3.125, 3.125, 3.125, 1.0, 3.125, 1.0]
        );
        assert!(y[16..24].iter().all(|&v| v == 3.0));
        // Grid 0x300 = 0x192b080819082b08: bytes 8 43 8 25 8 8 43 25.
        assert_eq!(
            y[24..32],
            [3.0, -16.125, 3.0, 9.375, 3.0, 3.0, 16.125, 9.375]
        );
        assert!(y[32..].iter().all(|&v| v == 1.0));
    }
}
