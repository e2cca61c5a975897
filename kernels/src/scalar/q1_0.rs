//! q1_0: 128 weights per block, one sign bit each, all of magnitude `d`, the mean absolute
//! value. Mirrors `quantize_row_q1_0_ref` (used with or without weights) and
//! `dequantize_row_q1_0`.

use crate::blocks::BlockQ1_0;
use crate::num::F16Le;

const QK: usize = 128;

/// One row as `quantize_q1_0` does it: ggml ignores the importance matrix.
pub fn quantize_row(x: &[f32], _imatrix: Option<&[f32]>, y: &mut [BlockQ1_0]) {
    for (xb, block) in x.chunks_exact(QK).zip(y.iter_mut()) {
        let mut sum_abs = 0.0f32;
        for &v in xb {
            sum_abs += v.abs();
        }
        block.d = F16Le::from_f32(sum_abs / QK as f32);
        block.qs = [0; QK / 8];
        for (j, &v) in xb.iter().enumerate() {
            if v >= 0.0 {
                block.qs[j / 8] |= 1 << (j % 8);
            }
        }
    }
}

/// `dequantize_row_q1_0`.
pub fn dequantize_row(x: &[BlockQ1_0], y: &mut [f32]) {
    for (block, yb) in x.iter().zip(y.chunks_exact_mut(QK)) {
        let d = block.d.to_f32();
        for (j, out) in yb.iter_mut().enumerate() {
            *out = if (block.qs[j / 8] >> (j % 8)) & 1 != 0 {
                d
            } else {
                -d
            };
        }
    }
}
