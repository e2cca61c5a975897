//! q8_0: 32 weights per block, signed 8-bit codes times an f16 scale.
//! Mirrors `quantize_row_q8_0_ref` (which `quantize_q8_0` uses with or without weights)
//! and `dequantize_row_q8_0`.

use crate::blocks::BlockQ8_0;
use crate::num::{F16Le, c_byte};

const QK: usize = 32;

/// One row as `quantize_q8_0` does it: ggml ignores the importance matrix.
pub fn quantize_row(x: &[f32], _imatrix: Option<&[f32]>, y: &mut [BlockQ8_0]) {
    for (xb, block) in x.chunks_exact(QK).zip(y.iter_mut()) {
        let (d, id) = scale_127(xb);
        block.d = F16Le::from_f32(d);
        for (q, &v) in block.qs.iter_mut().zip(xb) {
            *q = c_byte((v * id).round()) as i8;
        }
    }
}

/// The scale mapping the absolute maximum to 127, and its inverse (0 for an all-zero block).
#[inline(always)]
pub(super) fn scale_127(xb: &[f32]) -> (f32, f32) {
    let mut amax = 0.0f32;
    for &v in xb {
        let a = v.abs();
        amax = if amax > a { amax } else { a };
    }
    let d = amax / 127.0;
    (d, if d != 0.0 { 1.0 / d } else { 0.0 })
}

/// `dequantize_row_q8_0`.
#[inline(always)]
pub fn dequantize_row(x: &[BlockQ8_0], y: &mut [f32]) {
    for (block, yb) in x.iter().zip(y.chunks_exact_mut(QK)) {
        let d = block.d.to_f32();
        for (out, &q) in yb.iter_mut().zip(&block.qs) {
            *out = q as f32 * d;
        }
    }
}
