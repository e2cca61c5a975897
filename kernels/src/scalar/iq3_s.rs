//! iq3_s: 256 weights per super-block, 3.4375 bits each. Groups of 4 weights are one of
//! 512 points of [`IQ3S_GRID`] (8 low index bits in `qs`, the ninth in `qh`); every
//! weight has an explicit sign bit; each sub-block of 32 has a 4-bit scale.
//! Mirrors ggml's `quantize_iq3_s` (through the search shared with iq3_xxs,
//! [`super::iq3_xxs`]) and `dequantize_row_iq3_s`.

use super::iq_grid::{IQ3S, IqSearch, IqWrite, Serial};
use super::iq3_xxs::{Iq3Rules, grid_pair, scale_codes, search_super_block};
use super::tables::IQ3S_GRID;
use crate::blocks::{BlockIq3S, QK_K};
use crate::num::F16Le;

/// `quantize_row_iq3_s_impl` with `block_size = 32`.
static IQ3S_RULES: Iq3Rules = Iq3Rules {
    grid: &IQ3S,
    steps: 9,
    even_signs: false,
    // ggml's `if (!max)`: every xval is >= 0 here, so only an all-zero sub-block.
    zero_below: f32::from_bits(1),
    on_grid_before_search: false,
    refine_on_grid: true,
};

/// One row as `quantize_iq3_s` does it, with or without importance weights (ggml's
/// `quantize_row_iq3_s_ref` is the same without them).
///
/// ggml's behaviour, kept: the grid indices and signs of a sub-block go to the next free
/// slot of `qs` and `signs` (ggml advances its write pointers only past sub-blocks it
/// quantizes), so after a zero sub-block the later ones sit one slot early while their
/// `qh` bits and scales stay in place; and a super-block whose scales are all zero keeps
/// whatever was written, with `d = 0`.
pub fn quantize_row(x: &[f32], imatrix: Option<&[f32]>, y: &mut [BlockIq3S]) {
    quantize_row_with::<Serial>(x, imatrix, y)
}

/// [`quantize_row`] with the neighbour search `S`.
#[inline(always)]
pub(crate) fn quantize_row_with<S: IqSearch>(
    x: &[f32],
    imatrix: Option<&[f32]>,
    y: &mut [BlockIq3S],
) {
    debug_assert_eq!(x.len(), y.len() * QK_K);
    for (ibl, (xbl, block)) in x.chunks_exact(QK_K).zip(y.iter_mut()).enumerate() {
        let qw = imatrix.map(|w| &w[ibl * QK_K..(ibl + 1) * QK_K]);
        let subs = search_super_block::<S>(&IQ3S_RULES, xbl, qw);
        *block = bytemuck::Zeroable::zeroed();
        let quantized = subs
            .iter()
            .enumerate()
            .filter_map(|(ib, sub)| sub.map(|sub| (ib, sub)));
        for (slot, (ib, sub)) in quantized.enumerate() {
            for (k, &j) in sub.grid.iter().enumerate() {
                block.qs[8 * slot + k] = j as u8;
                block.qh[ib] |= ((j >> 8) as u8) << k;
            }
            block.signs[4 * slot..4 * slot + 4].copy_from_slice(&sub.signs);
        }
        let Some((d, codes)) = scale_codes(&subs) else {
            continue;
        };
        // ggml's fudge factor.
        block.d = F16Le::from_f32(d * 1.033);
        for (sc, pair) in block.scales.iter_mut().zip(codes.chunks_exact(2)) {
            *sc = pair[0] | (pair[1] << 4);
        }
    }
}

/// `dequantize_row_iq3_s`: sub-block `k` (of 8) is scaled by `d * (1 + 2 * s)`, `s` the
/// low (even `k`) or high (odd `k`) nibble of `scales[k / 2]`; its 8 grid indices are
/// `qs[8k..8k + 8]`, index `i` taking bit 8 from bit `i` of `qh[k]`; its signs are
/// `signs[4k..4k + 4]`. (ggml walks the sub-blocks in pairs; the values are the same.)
pub fn dequantize_row(x: &[BlockIq3S], y: &mut [f32]) {
    dequantize_row_with::<Serial>(x, y)
}

/// [`dequantize_row`], each group of 8 values written by `W`.
#[inline(always)]
pub(crate) fn dequantize_row_with<W: IqWrite>(x: &[BlockIq3S], y: &mut [f32]) {
    for (block, yb) in x.iter().zip(y.chunks_exact_mut(QK_K)) {
        let d = block.d.to_f32();
        for (k, ys) in yb.chunks_exact_mut(32).enumerate() {
            let sc = block.scales[k / 2];
            let s = if k % 2 == 0 { sc & 0xf } else { sc >> 4 };
            let db = d * (1 + 2 * s as i32) as f32;
            let qh = block.qh[k] as usize;
            let qs = &block.qs[8 * k..8 * k + 8];
            for (l, y8) in ys.chunks_exact_mut(8).enumerate() {
                let index1 = qs[2 * l] as usize | ((qh << (8 - 2 * l)) & 256);
                let index2 = qs[2 * l + 1] as usize | ((qh << (7 - 2 * l)) & 256);
                let grid = grid_pair(IQ3S_GRID[index1], IQ3S_GRID[index2]);
                W::signed(y8, db, grid, block.signs[4 * k + l]);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing;
    use super::*;

    fn round_trip(x: &[f32], w: Option<&[f32]>) -> Vec<f32> {
        testing::round_trip(quantize_row, dequantize_row, x, w)
    }

    #[test]
    fn round_trip_error_is_bounded() {
        let x = testing::wave(4 * QK_K, 13);
        let w: Vec<f32> = testing::wave(x.len(), 2)
            .iter()
            .map(|v| v.abs() + 0.01)
            .collect();
        for y in [round_trip(&x, None), round_trip(&x, Some(&w))] {
            let rmse = testing::rmse(&x, &y);
            assert!(rmse < 0.15, "rmse {rmse}");
        }
    }

    #[test]
    fn zero_row_is_a_zero_block() {
        let mut y = [bytemuck::Zeroable::zeroed()];
        quantize_row(&[0.0; QK_K], None, &mut y);
        assert_eq!(y[0], bytemuck::Zeroable::zeroed());
    }

    #[test]
    fn sub_blocks_after_a_zero_one_move_up_a_slot() {
        // Sub-block 0 is zero: sub-block 1's grid indices and signs land in slot 0 (as
        // ggml writes them), the last slot stays empty, qh and scales stay in place.
        let mut x = testing::wave(QK_K, 21);
        x[..32].fill(0.0);
        let mut shifted = [bytemuck::Zeroable::zeroed()];
        quantize_row(&x, None, &mut shifted);
        let mut plain = [bytemuck::Zeroable::zeroed()];
        quantize_row(&x[32..64].repeat(8), None, &mut plain);
        let s: &BlockIq3S = &shifted[0];
        assert_eq!(s.qs[..8], plain[0].qs[..8]);
        assert_eq!(s.signs[..4], plain[0].signs[..4]);
        assert_eq!(s.qs[56..], [0; 8]);
        assert_eq!(s.signs[28..], [0; 4]);
        assert_eq!((s.qh[0], s.qh[1]), (0, plain[0].qh[0]));
        assert_eq!(s.scales[0] & 0xf, 0);
    }

    #[test]
    fn huge_values_do_not_panic() {
        let x: Vec<f32> = testing::wave(QK_K, 8).iter().map(|v| v * 3e38).collect();
        for w in [None, Some(&[0.0; QK_K][..]), Some(&[1e4; QK_K][..])] {
            round_trip(&x, w);
        }
    }

    #[test]
    fn hand_built_block() {
        let mut block = BlockIq3S {
            d: F16Le::from_f32(0.5),
            qs: [0; 64],
            qh: [0; 8],
            signs: [0; 32],
            scales: [0; 4],
        };
        // Sub-block 0: 0.5 * (1 + 2) = 1.5; sub-block 1: 0.5 * (1 + 4) = 2.5.
        block.scales[0] = 0x21;
        // Group 0: grids 0 (1 1 1 1) and 256 + 1 = 257 (0x05090705: 5 7 9 5), elements 0
        // and 4 negative. Group 3: first grid 256 + 0 (0x05090507: 7 5 9 5).
        block.qs[1] = 1;
        block.qh[0] = (1 << 1) | (1 << 6);
        block.signs[0] = 0x11;
        let mut y = [0.0f32; QK_K];
        dequantize_row(&[block], &mut y);
        assert_eq!(y[..8], [-1.5, 1.5, 1.5, 1.5, -7.5, 10.5, 13.5, 7.5]);
        assert!(y[8..24].iter().all(|&v| v == 1.5));
        assert_eq!(y[24..32], [10.5, 7.5, 13.5, 7.5, 1.5, 1.5, 1.5, 1.5]);
        assert!(y[32..64].iter().all(|&v| v == 2.5));
        assert!(y[64..].iter().all(|&v| v == 0.5));
    }
}
