//! iq2_xxs: 256 weights per super-block, 2.0625 bits each. Groups of 8 weights are one
//! point of [`IQ2XXS_GRID`] with 7 stored sign bits; each sub-block of 32 has a 4-bit scale.
//! Mirrors ggml's `dequantize_row_iq2_xxs`; there is no quantizer here.

use super::tables::{IQ2XXS_GRID, KMASK_IQ2XS, KSIGNS_IQ2XS};
use crate::blocks::{BlockIq2Xxs, QK_K};

/// Writes the 8 values `db * grid[j] * (signs & kmask_iq2xs[j] ? -1.f : 1.f)`, in that
/// order of operations, as every ggml iq2/iq3 dequantizer does.
#[inline(always)]
pub(super) fn put_signed(y: &mut [f32], db: f32, grid: [u8; 8], signs: u8) {
    for ((out, &g), &mask) in y[..8].iter_mut().zip(&grid).zip(&KMASK_IQ2XS) {
        let sign = if signs & mask != 0 { -1.0f32 } else { 1.0 };
        *out = db * g as f32 * sign;
    }
}

/// `dequantize_row_iq2_xxs`: per sub-block of 32, eight bytes read as two little-endian
/// u32: the first holds 4 grid indices, the second 4 x 7 sign bits and a 4-bit scale `s`
/// (top nibble), with sub-block scale `d * (0.5 + s) * 0.25`.
pub fn dequantize_row(x: &[BlockIq2Xxs], y: &mut [f32]) {
    for (block, yb) in x.iter().zip(y.chunks_exact_mut(QK_K)) {
        let d = block.d.to_f32();
        for (aux, ys) in block.qs.chunks_exact(4).zip(yb.chunks_exact_mut(32)) {
            let aux8 = aux.as_flattened();
            let aux1 = u32::from_le_bytes([aux8[4], aux8[5], aux8[6], aux8[7]]);
            let db = d * (0.5 + (aux1 >> 28) as f32) * 0.25;
            for (l, y8) in ys.chunks_exact_mut(8).enumerate() {
                let grid = IQ2XXS_GRID[aux8[l] as usize].to_le_bytes();
                let signs = KSIGNS_IQ2XS[((aux1 >> (7 * l)) & 127) as usize];
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
        let mut block = BlockIq2Xxs {
            d: F16Le::from_f32(1.0),
            qs: [[0; 2]; 32],
        };
        // Sub-block 0: grid indices 0, 1, 0, 0; group 0 has sign pattern 1 (ksigns -> 129:
        // elements 0 and 7 negative), group 1 sign pattern 0; scale nibble 1:
        // db = (0.5 + 1) * 0.25 = 0.375.
        block.qs[0] = [0, 1];
        block.qs[2] = [1, 0];
        block.qs[3] = [0, 0x10];
        let mut y = [0.0f32; QK_K];
        dequantize_row(&[block], &mut y);
        // Grid 0 is all 8s: 0.375 * 8 = 3.
        assert_eq!(y[..8], [-3.0, 3.0, 3.0, 3.0, 3.0, 3.0, 3.0, -3.0]);
        // Grid 1 is 43 then seven 8s: 0.375 * 43 = 16.125.
        assert_eq!(y[8..16], [16.125, 3.0, 3.0, 3.0, 3.0, 3.0, 3.0, 3.0]);
        assert!(y[16..32].iter().all(|&v| v == 3.0));
        // Other sub-blocks: scale nibble 0 -> db = 0.125, grid 0 -> 1.0.
        assert!(y[32..].iter().all(|&v| v == 1.0));
    }
}
