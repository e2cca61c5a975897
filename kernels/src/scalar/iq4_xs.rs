//! iq4_xs: 256 weights per super-block, 4-bit indices into the non-linear levels
//! [`KVALUES_IQ4NL`](super::tables::KVALUES_IQ4NL), one 6-bit scale per sub-block of 32
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
