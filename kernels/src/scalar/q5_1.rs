//! q5_1: 32 weights per block, 5-bit codes meaning `q * d + m`.
//! Mirrors `quantize_row_q5_1_ref`, `quantize_row_q5_1_impl` and `dequantize_row_q5_1`.

use super::kquant::make_qkx3_quants;
use super::q4_1::min_max;
use super::q5_0::{pack5, unpack5};
use super::weighted_blocks;
use crate::blocks::BlockQ5_1;
use crate::num::{F16Le, c_byte};

const QK: usize = 32;

/// One row as `quantize_q5_1` does it.
pub fn quantize_row(x: &[f32], imatrix: Option<&[f32]>, y: &mut [BlockQ5_1]) {
    let Some(qw) = imatrix else {
        return quantize_ref(x, y);
    };
    weighted_blocks(x, qw, y, |xb, weight, block| {
        let mut l = [0u8; QK];
        let mut laux = [0u8; QK];
        let (d, min) = make_qkx3_quants(
            QK,
            31,
            xb,
            Some(weight),
            &mut l,
            &mut laux,
            -0.9,
            0.05,
            36,
            false,
        );
        block.d = F16Le::from_f32(d);
        block.m = F16Le::from_f32(-min);
        pack5(&l, &mut block.qs, &mut block.qh);
    });
}

/// `quantize_row_q5_1_ref`: the block's range split into 31 steps from its minimum.
pub fn quantize_ref(x: &[f32], y: &mut [BlockQ5_1]) {
    for (xb, block) in x.chunks_exact(QK).zip(y.iter_mut()) {
        let (min, max) = min_max(xb);
        let d = (max - min) / 31.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        block.d = F16Le::from_f32(d);
        block.m = F16Le::from_f32(min);
        let codes: [u8; QK] = std::array::from_fn(|j| c_byte((xb[j] - min) * id + 0.5));
        pack5(&codes, &mut block.qs, &mut block.qh);
    }
}

/// `dequantize_row_q5_1`.
pub fn dequantize_row(x: &[BlockQ5_1], y: &mut [f32]) {
    for (block, yb) in x.iter().zip(y.chunks_exact_mut(QK)) {
        let d = block.d.to_f32();
        let m = block.m.to_f32();
        for j in 0..QK / 2 {
            let (x0, x1) = unpack5(&block.qs, &block.qh, j);
            yb[j] = x0 as f32 * d + m;
            yb[j + QK / 2] = x1 as f32 * d + m;
        }
    }
}
