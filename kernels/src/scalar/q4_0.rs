//! q4_0: 32 weights per block, 4-bit codes 0..15 meaning `(q - 8) * d`.
//! Mirrors `quantize_row_q4_0_ref`, `quantize_row_q4_0_impl` and `dequantize_row_q4_0`.

use super::kquant::make_qx_quants;
use super::weighted_blocks;
use crate::blocks::BlockQ4_0;
use crate::num::{F16Le, c_byte};

const QK: usize = 32;

/// One row as `quantize_q4_0` does it: the reference path without weights, the
/// `make_qx_quants` search with them.
pub fn quantize_row(x: &[f32], imatrix: Option<&[f32]>, y: &mut [BlockQ4_0]) {
    let Some(qw) = imatrix else {
        return quantize_ref(x, y);
    };
    weighted_blocks(x, qw, y, |xb, weight, block| {
        let mut l = [0i8; QK];
        let d = make_qx_quants(QK, 8, xb, &mut l, 1, Some(weight));
        block.d = F16Le::from_f32(d);
        for j in 0..16 {
            block.qs[j] = (l[j] | (l[j + 16] << 4)) as u8;
        }
    });
}

/// `quantize_row_q4_0_ref`: the scale maps the signed absolute maximum to -8.
pub fn quantize_ref(x: &[f32], y: &mut [BlockQ4_0]) {
    for (xb, block) in x.chunks_exact(QK).zip(y.iter_mut()) {
        let mut amax = 0.0f32;
        let mut max = 0.0f32;
        for &v in xb {
            if amax < v.abs() {
                amax = v.abs();
                max = v;
            }
        }
        let d = max / -8.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        block.d = F16Le::from_f32(d);
        for j in 0..QK / 2 {
            let q0 = code(xb[j] * id);
            let q1 = code(xb[j + QK / 2] * id);
            block.qs[j] = q0 | (q1 << 4);
        }
    }
}

/// `MIN(15, (int8_t)(v + 8.5f))`.
#[inline(always)]
fn code(v: f32) -> u8 {
    (c_byte(v + 8.5) as i8).min(15) as u8
}

/// `dequantize_row_q4_0`.
pub fn dequantize_row(x: &[BlockQ4_0], y: &mut [f32]) {
    for (block, yb) in x.iter().zip(y.chunks_exact_mut(QK)) {
        let d = block.d.to_f32();
        for j in 0..QK / 2 {
            let x0 = (block.qs[j] & 0x0F) as i32 - 8;
            let x1 = (block.qs[j] >> 4) as i32 - 8;
            yb[j] = x0 as f32 * d;
            yb[j + QK / 2] = x1 as f32 * d;
        }
    }
}
