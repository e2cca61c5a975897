//! iq2_s: 256 weights per super-block, 2.5625 bits each. Groups of 8 weights are one of
//! 1024 points of [`IQ2S_GRID`] (8 low index bits in `qs`, 2 high bits in `qh`) with 8
//! explicit sign bits; each half of a sub-block of 32 has a 4-bit scale.
//! Mirrors ggml's `dequantize_row_iq2_s`; there is no quantizer here.

use super::iq2_xxs::put_signed;
use super::tables::IQ2S_GRID;
use crate::blocks::{BlockIq2S, QK_K};

/// `dequantize_row_iq2_s`: the first 32 bytes of `qs` are grid index low bits, the last
/// 32 the signs; group `l` of sub-block `ib32` takes index bits 8-9 from bits `2l..2l+2`
/// of `qh[ib32]` and scale `d * (0.5 + s) * 0.25` as in iq2_xs.
pub fn dequantize_row(x: &[BlockIq2S], y: &mut [f32]) {
    for (block, yb) in x.iter().zip(y.chunks_exact_mut(QK_K)) {
        let d = block.d.to_f32();
        let (qs, signs) = block.qs.split_at(QK_K / 8);
        for (ib32, ys) in yb.chunks_exact_mut(32).enumerate() {
            let sc = block.scales[ib32];
            let db = [
                d * (0.5 + (sc & 0xf) as f32) * 0.25,
                d * (0.5 + (sc >> 4) as f32) * 0.25,
            ];
            let qh = block.qh[ib32] as usize;
            for (l, y8) in ys.chunks_exact_mut(8).enumerate() {
                let index = qs[4 * ib32 + l] as usize | ((qh << (8 - 2 * l)) & 0x300);
                let grid = IQ2S_GRID[index].to_le_bytes();
                put_signed(y8, db[l / 2], grid, signs[4 * ib32 + l]);
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
