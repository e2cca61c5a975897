//! iq3_s: 256 weights per super-block, 3.4375 bits each. Groups of 4 weights are one of
//! 512 points of [`IQ3S_GRID`] (8 low index bits in `qs`, the ninth in `qh`); every
//! weight has an explicit sign bit; each sub-block of 32 has a 4-bit scale.
//! Mirrors ggml's `dequantize_row_iq3_s`; there is no quantizer here.

use super::iq2_xxs::put_signed;
use super::iq3_xxs::grid_pair;
use super::tables::IQ3S_GRID;
use crate::blocks::{BlockIq3S, QK_K};

/// `dequantize_row_iq3_s`: sub-block `k` (of 8) is scaled by `d * (1 + 2 * s)`, `s` the
/// low (even `k`) or high (odd `k`) nibble of `scales[k / 2]`; its 8 grid indices are
/// `qs[8k..8k + 8]`, index `i` taking bit 8 from bit `i` of `qh[k]`; its signs are
/// `signs[4k..4k + 4]`. (ggml walks the sub-blocks in pairs; the values are the same.)
pub fn dequantize_row(x: &[BlockIq3S], y: &mut [f32]) {
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
                put_signed(y8, db, grid, block.signs[4 * k + l]);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::num::F16Le;

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
