//! iq4_xs: 256 weights per super-block, 4-bit indices into the non-linear levels
//! [`KVALUES_IQ4NL`], one 6-bit scale per sub-block of 32
//! and an fp16 super-block scale. Mirrors ggml's `quantize_iq4_xs` (through the search
//! shared with iq4_nl, [`super::iq4_nl`]) and `dequantize_row_iq4_xs`.

use super::iq4_nl::quantize_impl;
use super::tables::KVALUES_IQ4NL;
use crate::blocks::{BlockIq4Xs, QK_K};

/// One row as `quantize_iq4_xs` does it, with or without importance weights (ggml's
/// `quantize_row_iq4_xs_ref` is the same without them).
pub fn quantize_row(x: &[f32], imatrix: Option<&[f32]>, y: &mut [BlockIq4Xs]) {
    for (ibl, (xb, block)) in x.chunks_exact(QK_K).zip(y.iter_mut()).enumerate() {
        let qw = imatrix.map(|w| &w[ibl * QK_K..(ibl + 1) * QK_K]);
        let scales = quantize_impl(xb, qw, &mut block.qs);
        block.d = scales.d;
        block.scales_h = scales.scales_h.to_le_bytes();
        block.scales_l = scales.scales_l;
    }
}

/// `dequantize_row_iq4_xs`: sub-block `ib` is scaled by `d * (ls - 32)`, `ls` the 6-bit
/// scale from nibble `ib % 2` of `scales_l[ib / 2]` and bits `2ib..2ib + 2` of `scales_h`.
#[inline(always)]
pub fn dequantize_row(x: &[BlockIq4Xs], y: &mut [f32]) {
    for (block, yb) in x.iter().zip(y.chunks_exact_mut(QK_K)) {
        let d = block.d.to_f32();
        let scales_h = u16::from_le_bytes(block.scales_h) as i32;
        for (ib, (qs, ys)) in block
            .qs
            .chunks_exact(16)
            .zip(yb.chunks_exact_mut(32))
            .enumerate()
        {
            let ls = ((block.scales_l[ib / 2] as i32 >> (4 * (ib % 2))) & 0xf)
                | (((scales_h >> (2 * ib)) & 3) << 4);
            let dl = d * (ls - 32) as f32;
            for j in 0..16 {
                ys[j] = dl * KVALUES_IQ4NL[(qs[j] & 0xf) as usize] as f32;
                ys[j + 16] = dl * KVALUES_IQ4NL[(qs[j] >> 4) as usize] as f32;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::iq4_nl::tests::noise;
    use super::*;

    fn zero_block() -> BlockIq4Xs {
        bytemuck::Zeroable::zeroed()
    }

    #[test]
    fn zero_row_gives_negative_zero_scale() {
        // ggml's d = -max_scale / 32 is -0.0 when every sub-block scale is 0; every 6-bit
        // scale is then nearest_int(0) + 32 = 32 (high bits 0b10, low nibble 0).
        let x = [0.0f32; QK_K];
        let mut y = [zero_block()];
        quantize_row(&x, None, &mut y);
        assert_eq!(y[0].d.bits(), 0x8000);
        assert_eq!(u16::from_le_bytes(y[0].scales_h), 0xaaaa);
        assert_eq!(y[0].scales_l, [0; 4]);
        assert_eq!(y[0].qs, [0x88; 128]);
        let mut back = [1.0f32; QK_K];
        dequantize_row(&y, &mut back);
        assert!(back.iter().all(|&v| v == 0.0));
    }

    #[test]
    fn representable_block_round_trips_exactly() {
        // Sub-block ib holds every level times (ib + 1) / 16, so its scale is (ib + 1) / 16,
        // d = -0.5 / 32 = -1/64 and the 6-bit scale is ls - 32 = -4 (ib + 1): all exact.
        let x: Vec<f32> = (0..QK_K)
            .map(|j| {
                let ib = j / 32;
                KVALUES_IQ4NL[(j * 5 + ib) % 16] as f32 * (ib + 1) as f32 / 16.0
            })
            .collect();
        let mut y = [zero_block()];
        quantize_row(&x, None, &mut y);
        assert_eq!(y[0].d.to_f32(), -1.0 / 64.0);
        let mut back = [0.0f32; QK_K];
        dequantize_row(&y, &mut back);
        assert_eq!(back[..], x[..]);
    }

    #[test]
    fn dequantize_assembles_six_bit_scales() {
        let mut block = zero_block();
        block.d = crate::num::F16Le::from_f32(0.25);
        // Sub-block 0: ls = 0x3f (low 0xf, high 3) -> 31; sub-block 1: ls = 0x05 -> -27;
        // sub-block 7: ls = 0x20 | 0x1 -> 1; the rest ls = 0 -> -32.
        block.scales_l = [0x5f, 0, 0, 0x10];
        block.scales_h = (3u16 | (2 << 14)).to_le_bytes();
        // Element 0: level 15 (113); element 16: level 0 (-127).
        block.qs[0] = 0x0f;
        block.qs[1..].fill(0x88);
        let mut y = [0.0f32; QK_K];
        dequantize_row(&[block], &mut y);
        assert_eq!(y[0], 0.25 * 31.0 * 113.0);
        assert_eq!(y[16], 0.25 * 31.0 * -127.0);
        assert_eq!(y[1], 0.25 * 31.0);
        assert_eq!(y[32], 0.25 * -27.0);
        assert_eq!(y[64], 0.25 * -32.0);
        assert_eq!(y[224], 0.25);
    }

    #[test]
    fn round_trip_error_is_small() {
        let x = noise(QK_K * 8, 4242, 2.0);
        let w: Vec<f32> = noise(x.len(), 17, 1.0)
            .iter()
            .map(|v| v.abs() + 0.1)
            .collect();
        for imatrix in [None, Some(&w[..])] {
            let mut y = vec![zero_block(); 8];
            quantize_row(&x, imatrix, &mut y);
            let mut back = vec![0.0f32; x.len()];
            dequantize_row(&y, &mut back);
            for (xb, bb) in x.chunks(32).zip(back.chunks(32)) {
                let amax = xb.iter().fold(0.0f32, |m, v| m.max(v.abs()));
                let err2: f32 = xb.iter().zip(bb).map(|(a, b)| (a - b) * (a - b)).sum();
                let rms = (err2 / 32.0).sqrt();
                assert!(rms < 0.07 * amax, "rms {rms} amax {amax}");
            }
        }
    }
}
