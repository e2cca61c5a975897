//! q4_1: 32 weights per block, 4-bit codes meaning `q * d + m`.
//! Mirrors `quantize_row_q4_1_ref`, `quantize_row_q4_1_impl` and `dequantize_row_q4_1`.

use super::kquant::make_qkx3_quants;
use super::weighted_blocks;
use crate::blocks::BlockQ4_1;
use crate::num::{F16Le, c_byte};

const QK: usize = 32;

/// One row as `quantize_q4_1` does it.
pub fn quantize_row(x: &[f32], imatrix: Option<&[f32]>, y: &mut [BlockQ4_1]) {
    let Some(qw) = imatrix else {
        return quantize_ref(x, y);
    };
    weighted_blocks(x, qw, y, |xb, weight, block| {
        let mut l = [0u8; QK];
        let mut laux = [0u8; QK];
        let (d, min) = make_qkx3_quants(
            QK,
            15,
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
        for j in 0..16 {
            block.qs[j] = l[j] | (l[j + 16] << 4);
        }
    });
}

/// `quantize_row_q4_1_ref`: the block's range split into 15 steps from its minimum.
pub fn quantize_ref(x: &[f32], y: &mut [BlockQ4_1]) {
    for (xb, block) in x.chunks_exact(QK).zip(y.iter_mut()) {
        let (min, max) = min_max(xb);
        let d = (max - min) / 15.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        block.d = F16Le::from_f32(d);
        block.m = F16Le::from_f32(min);
        for j in 0..QK / 2 {
            let q0 = (c_byte((xb[j] - min) * id + 0.5) as i8).min(15) as u8;
            let q1 = (c_byte((xb[j + QK / 2] - min) * id + 0.5) as i8).min(15) as u8;
            block.qs[j] = q0 | (q1 << 4);
        }
    }
}

/// The block minimum and maximum as the legacy `_1` quantizers find them.
pub(super) fn min_max(xb: &[f32]) -> (f32, f32) {
    let mut min = f32::MAX;
    let mut max = -f32::MAX;
    for &v in xb {
        if v < min {
            min = v;
        }
        if v > max {
            max = v;
        }
    }
    (min, max)
}

/// `dequantize_row_q4_1`.
pub fn dequantize_row(x: &[BlockQ4_1], y: &mut [f32]) {
    for (block, yb) in x.iter().zip(y.chunks_exact_mut(QK)) {
        let d = block.d.to_f32();
        let m = block.m.to_f32();
        for j in 0..QK / 2 {
            yb[j] = (block.qs[j] & 0x0F) as f32 * d + m;
            yb[j + QK / 2] = (block.qs[j] >> 4) as f32 * d + m;
        }
    }
}
