//! iq1_m: 256 weights per super-block, 1.75 bits each. Groups of 8 weights are one of
//! 2048 points of [`IQ1S_GRID`](super::tables::IQ1S_GRID), each group shifted by its own
//! ±[`IQ1S_DELTA`]; each half of a sub-block of 32 has a 3-bit scale, and the fp16
//! super-block scale is spread over the top nibbles of the four u16 scale words.
//! Mirrors ggml's `dequantize_row_iq1_m`; there is no quantizer here.

use super::iq1_s::put_shifted;
use super::tables::IQ1S_DELTA;
use crate::blocks::{BlockIq1M, QK_K};
use crate::num::fp16_to_fp32;

/// `dequantize_row_iq1_m`: the scales are four little-endian u16 `sc`; the fp16 scale
/// `d` is the top nibbles of `sc[0..4]`, lowest first (ggml's `iq1m_scale_t` union);
/// sub-block `ib` has scales `d * (2s + 1)`, `s` the 3 bits of `sc[ib / 2]` from bit
/// `6 * (ib % 2)` (first half) and from bit `6 * (ib % 2) + 3` (second half). Each byte of `qh` holds
/// index bits 8-10 and the delta sign (bit 3) of one group in its low nibble, and of the
/// next group in its high nibble.
pub fn dequantize_row(x: &[BlockIq1M], y: &mut [f32]) {
    for (block, yb) in x.iter().zip(y.chunks_exact_mut(QK_K)) {
        let sc: [u16; 4] = std::array::from_fn(|k| {
            u16::from_le_bytes([block.scales[2 * k], block.scales[2 * k + 1]])
        });
        let scale =
            (sc[0] >> 12) | ((sc[1] >> 8) & 0x00f0) | ((sc[2] >> 4) & 0x0f00) | (sc[3] & 0xf000);
        let d = fp16_to_fp32(scale);
        for (ib, ys) in yb.chunks_exact_mut(32).enumerate() {
            let s = sc[ib / 2] as usize >> (6 * (ib % 2));
            let dl1 = d * (2 * (s & 0x7) + 1) as f32;
            let dl2 = d * (2 * ((s >> 3) & 0x7) + 1) as f32;
            let qs = &block.qs[4 * ib..4 * ib + 4];
            let qh = &block.qh[2 * ib..2 * ib + 2];
            for (l, y8) in ys.chunks_exact_mut(8).enumerate() {
                let h = qh[l / 2] as usize;
                let (high, negative) = if l % 2 == 0 {
                    ((h << 8) & 0x700, h & 0x08 != 0)
                } else {
                    ((h << 4) & 0x700, h & 0x80 != 0)
                };
                let delta = if negative { -IQ1S_DELTA } else { IQ1S_DELTA };
                let dl = if l < 2 { dl1 } else { dl2 };
                put_shifted(y8, dl, qs[l] as usize | high, delta);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
