//! iq1_s: 256 weights per super-block, 1.5625 bits each. Groups of 8 weights are one of
//! 2048 points of [`IQ1S_GRID`] (values -1, 0, 1), shifted by ±[`IQ1S_DELTA`]; each
//! sub-block of 32 has a 3-bit scale. Mirrors ggml's `dequantize_row_iq1_s`; there is no
//! quantizer here.

use super::tables::{IQ1S_DELTA, IQ1S_GRID};
use crate::blocks::{BlockIq1S, QK_K};

/// `dl * (grid[j] + delta)` for the 8 values of grid point `index`, its bytes read as `i8`;
/// the inner loop of ggml's iq1_s and iq1_m dequantizers.
#[inline(always)]
pub(super) fn put_shifted(y: &mut [f32], dl: f32, index: usize, delta: f32) {
    let grid = IQ1S_GRID[index].to_le_bytes();
    for (out, &g) in y[..8].iter_mut().zip(&grid) {
        *out = dl * (g as i8 as f32 + delta);
    }
}

/// `dequantize_row_iq1_s`: sub-block `ib` reads the little-endian u16 `qh[ib]`: bits
/// `3l..3l + 3` are index bits 8-10 of group `l`, bits 12-14 the scale `s` (sub-block
/// scale `d * (2s + 1)`), bit 15 the sign of the delta.
pub fn dequantize_row(x: &[BlockIq1S], y: &mut [f32]) {
    for (block, yb) in x.iter().zip(y.chunks_exact_mut(QK_K)) {
        let d = block.d.to_f32();
        for (ib, ys) in yb.chunks_exact_mut(32).enumerate() {
            let qh = u16::from_le_bytes(block.qh[ib]) as usize;
            let dl = d * (2 * ((qh >> 12) & 7) + 1) as f32;
            let delta = if qh & 0x8000 != 0 {
                -IQ1S_DELTA
            } else {
                IQ1S_DELTA
            };
            for (l, y8) in ys.chunks_exact_mut(8).enumerate() {
                let index = block.qs[4 * ib + l] as usize | (((qh >> (3 * l)) & 7) << 8);
                put_shifted(y8, dl, index, delta);
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
