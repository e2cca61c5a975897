//! iq3_xxs: 256 weights per super-block, 3.0625 bits each. Groups of 4 weights are one
//! point of [`IQ3XXS_GRID`]; 8 weights share 7 stored sign bits; each sub-block of 32 has
//! a 4-bit scale. Mirrors ggml's `dequantize_row_iq3_xxs`; there is no quantizer here.

use super::iq2_xxs::put_signed;
use super::tables::{IQ3XXS_GRID, KSIGNS_IQ2XS};
use crate::blocks::{BlockIq3Xxs, QK_K};

/// The two 4-byte grid points `a` and `b` as one group of 8 bytes, `a` first.
#[inline(always)]
pub(super) fn grid_pair(a: u32, b: u32) -> [u8; 8] {
    (a as u64 | ((b as u64) << 32)).to_le_bytes()
}

/// `dequantize_row_iq3_xxs`: the first 64 bytes of `qs` are grid indices, 8 per sub-block;
/// the last 32 are one little-endian u32 per sub-block holding 4 x 7 sign bits and a 4-bit
/// scale `s` (top nibble), with sub-block scale `d * (0.5 + s) * 0.5`.
pub fn dequantize_row(x: &[BlockIq3Xxs], y: &mut [f32]) {
    for (block, yb) in x.iter().zip(y.chunks_exact_mut(QK_K)) {
        let d = block.d.to_f32();
        let (qs, scales_and_signs) = block.qs.split_at(QK_K / 4);
        for ((q8, aux), ys) in qs
            .chunks_exact(8)
            .zip(scales_and_signs.chunks_exact(4))
            .zip(yb.chunks_exact_mut(32))
        {
            let aux32 = u32::from_le_bytes([aux[0], aux[1], aux[2], aux[3]]);
            let db = d * (0.5 + (aux32 >> 28) as f32) * 0.5;
            for (l, y8) in ys.chunks_exact_mut(8).enumerate() {
                let signs = KSIGNS_IQ2XS[((aux32 >> (7 * l)) & 127) as usize];
                let grid = grid_pair(
                    IQ3XXS_GRID[q8[2 * l] as usize],
                    IQ3XXS_GRID[q8[2 * l + 1] as usize],
                );
                put_signed(y8, db, grid, signs);
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
        let mut block = BlockIq3Xxs {
            d: F16Le::from_f32(1.0),
            qs: [0; 96],
        };
        // Group 0 of sub-block 0: grids 255 (0x3e341c04: 4 28 52 62) and 1 (0x04040414:
        // 20 4 4 4), sign pattern 1 (elements 0 and 7 negative); scale nibble 1:
        // db = 1.5 * 0.5 = 0.75.
        block.qs[0] = 255;
        block.qs[1] = 1;
        block.qs[64..68].copy_from_slice(&(1u32 | (1 << 28)).to_le_bytes());
        let mut y = [0.0f32; QK_K];
        dequantize_row(&[block], &mut y);
        assert_eq!(y[..8], [-3.0, 21.0, 39.0, 46.5, 15.0, 3.0, 3.0, -3.0]);
        // Grid 0 is all 4s.
        assert!(y[8..32].iter().all(|&v| v == 3.0));
        // Scale nibble 0: db = 0.25.
        assert!(y[32..].iter().all(|&v| v == 1.0));
    }
}
