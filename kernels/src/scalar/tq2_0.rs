//! tq2_0: ternary weights {-1, 0, 1} * d, 256 per block, 2 bits each.
//! Mirrors `quantize_row_tq2_0_ref` (used with or without weights) and
//! `dequantize_row_tq2_0`.

use crate::blocks::BlockTq2_0;
use crate::num::{F16Le, c_lround};

/// One row as `quantize_tq2_0` does it: ggml ignores the importance matrix.
pub fn quantize_row(x: &[f32], _imatrix: Option<&[f32]>, y: &mut [BlockTq2_0]) {
    for (xb, block) in x.chunks_exact(256).zip(y.iter_mut()) {
        let (d, id) = scale_absmax(xb);
        block.d = F16Le::from_f32(d);
        for (qs, xs) in block.qs.chunks_exact_mut(32).zip(xb.chunks_exact(128)) {
            for (m, byte) in qs.iter_mut().enumerate() {
                let mut q = 0u8;
                for n in 0..4 {
                    q = q.wrapping_add((trit(xs[m + n * 32], id) & 3) << (2 * n));
                }
                *byte = q;
            }
        }
    }
}

/// The absolute maximum of a block (ggml's `MAX` order) and its inverse.
#[inline(always)]
pub(super) fn scale_absmax(xb: &[f32]) -> (f32, f32) {
    let mut amax = 0.0f32;
    for &v in xb {
        let a = v.abs();
        amax = if amax > a { amax } else { a };
    }
    (amax, if amax != 0.0 { 1.0 / amax } else { 0.0 })
}

/// `lroundf(v * id) + 1` as ggml computes it (an `int`), kept to its low byte.
#[inline(always)]
pub(super) fn trit(v: f32, id: f32) -> u8 {
    (c_lround(v * id) as i32).wrapping_add(1) as u8
}

/// `dequantize_row_tq2_0`.
#[inline(always)]
pub fn dequantize_row(x: &[BlockTq2_0], y: &mut [f32]) {
    for (block, yb) in x.iter().zip(y.chunks_exact_mut(256)) {
        let d = block.d.to_f32();
        for (qs, ys) in block.qs.chunks_exact(32).zip(yb.chunks_exact_mut(128)) {
            for l in 0..4 {
                for m in 0..32 {
                    let q = ((qs[m] >> (l * 2)) & 3) as i32;
                    ys[l * 32 + m] = (q - 1) as f32 * d;
                }
            }
        }
    }
}
