//! q8_1: q8_0 plus the scaled sum of the codes; ggml-cpu's intermediate format for dot
//! products. Mirrors `quantize_row_q8_1_ref`; ggml has no dequantizer for it.

use super::q8_0::scale_127;
use crate::blocks::BlockQ8_1;
use crate::num::{F16Le, c_byte};

const QK: usize = 32;

/// `quantize_row_q8_1_ref` (ggml has no weighted path).
pub fn quantize_row(x: &[f32], _imatrix: Option<&[f32]>, y: &mut [BlockQ8_1]) {
    for (xb, block) in x.chunks_exact(QK).zip(y.iter_mut()) {
        let (d, id) = scale_127(xb);
        block.d = F16Le::from_f32(d);
        let mut sum = 0i32;
        for (q, &v) in block.qs.iter_mut().zip(xb) {
            *q = c_byte((v * id).round()) as i8;
            sum += *q as i32;
        }
        block.s = F16Le::from_f32(sum as f32 * d);
    }
}
