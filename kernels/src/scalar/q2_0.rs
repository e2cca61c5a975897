//! q2_0: 64 weights per block, 2-bit codes meaning `(q - 1) * d` with `d` the absolute
//! maximum. Mirrors `quantize_row_q2_0_ref` (used with or without weights) and
//! `dequantize_row_q2_0`.

use crate::blocks::BlockQ2_0;
use crate::num::{F16Le, c_int};

const QK: usize = 64;

/// One row as `quantize_q2_0` does it: ggml ignores the importance matrix.
pub fn quantize_row(x: &[f32], _imatrix: Option<&[f32]>, y: &mut [BlockQ2_0]) {
    for (xb, block) in x.chunks_exact(QK).zip(y.iter_mut()) {
        let mut amax = 0.0f32;
        for &v in xb {
            if v.abs() > amax {
                amax = v.abs();
            }
        }
        let d = amax;
        let id = if d > 0.0 { 1.0 / d } else { 0.0 };
        block.d = F16Le::from_f32(d);
        block.qs = [0; QK / 4];
        for (j, &v) in xb.iter().enumerate() {
            let q = c_int((v * id).round()).wrapping_add(1).clamp(0, 3) as u8;
            block.qs[j / 4] |= q << ((j % 4) * 2);
        }
    }
}

/// `dequantize_row_q2_0`.
pub fn dequantize_row(x: &[BlockQ2_0], y: &mut [f32]) {
    for (block, yb) in x.iter().zip(y.chunks_exact_mut(QK)) {
        let d = block.d.to_f32();
        for (j, out) in yb.iter_mut().enumerate() {
            let q = (block.qs[j / 4] >> ((j % 4) * 2)) & 3;
            *out = (q as i32 - 1) as f32 * d;
        }
    }
}
