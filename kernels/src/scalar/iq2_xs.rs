//! iq2_xs: 256 weights per super-block, 2.3125 bits each. Each u16 of `qs` holds a 9-bit
//! index into [`IQ2XS_GRID`] (8 magnitudes) and 7 sign bits; each half of a sub-block of
//! 32 has a 4-bit scale. Mirrors ggml's `dequantize_row_iq2_xs`; there is no quantizer here.

use super::iq2_xxs::put_signed;
use super::tables::{IQ2XS_GRID, KSIGNS_IQ2XS};
use crate::blocks::{BlockIq2Xs, QK_K};

/// `dequantize_row_iq2_xs`: group `l` of sub-block `ib32` is scaled by
/// `d * (0.5 + s) * 0.25`, `s` the low (groups 0, 1) or high (groups 2, 3) nibble of
/// `scales[ib32]`.
pub fn dequantize_row(x: &[BlockIq2Xs], y: &mut [f32]) {
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
                put_signed(y8, db[l / 2], grid, signs);
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
