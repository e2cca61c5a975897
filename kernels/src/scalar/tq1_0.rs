//! tq1_0: ternary weights {-1, 0, 1} * d, 256 per block, five trits per byte in 48 bytes
//! and four per byte in the last 4. Mirrors `quantize_row_tq1_0_ref` (used with or without
//! weights) and `dequantize_row_tq1_0`.

use super::tq2_0::{scale_absmax, trit};
use crate::blocks::BlockTq1_0;
use crate::num::F16Le;

/// One row as `quantize_tq1_0` does it: ggml ignores the importance matrix.
pub fn quantize_row(x: &[f32], _imatrix: Option<&[f32]>, y: &mut [BlockTq1_0]) {
    for (xb, block) in x.chunks_exact(256).zip(y.iter_mut()) {
        let (d, id) = scale_absmax(xb);
        block.d = F16Le::from_f32(d);
        // 32 bytes of 5 trits over elements 0..160, 16 bytes over 160..240.
        pack5(&xb[..160], id, &mut block.qs[..32]);
        pack5(&xb[160..240], id, &mut block.qs[32..]);
        // 4 bytes of 4 trits over 240..256, shifted to the top trit positions.
        for j in 0..4 {
            let mut q = 0u8;
            for m in 0..4 {
                q = q
                    .wrapping_mul(3)
                    .wrapping_add(trit(xb[240 + j + m * 4], id));
            }
            block.qh[j] = ceil_to_byte(q.wrapping_mul(3));
        }
    }
}

/// Packs `xs` (5 * out.len() elements, strided by out.len()) as base-3 digits.
fn pack5(xs: &[f32], id: f32, out: &mut [u8]) {
    let stride = out.len();
    for (m, byte) in out.iter_mut().enumerate() {
        let mut q = 0u8;
        for n in 0..5 {
            q = q.wrapping_mul(3).wrapping_add(trit(xs[m + n * stride], id));
        }
        *byte = ceil_to_byte(q);
    }
}

/// Maps a base-3 number below 243 to a byte so that multiplying by 3 moves each trit into
/// the top bits: `ceil(q * 256 / 243)`.
#[inline(always)]
fn ceil_to_byte(q: u8) -> u8 {
    (q as u32 * 256).div_ceil(243) as u8
}

/// `dequantize_row_tq1_0`.
pub fn dequantize_row(x: &[BlockTq1_0], y: &mut [f32]) {
    const POW3: [u8; 5] = [1, 3, 9, 27, 81];
    for (block, yb) in x.iter().zip(y.chunks_exact_mut(256)) {
        let d = block.d.to_f32();
        let mut out = yb.iter_mut();
        let mut emit = |bytes: &[u8], trits: usize| {
            for &p in &POW3[..trits] {
                for &b in bytes {
                    let q = b.wrapping_mul(p);
                    let xi = ((q as u16 * 3) >> 8) as i16;
                    if let Some(o) = out.next() {
                        *o = (xi - 1) as f32 * d;
                    }
                }
            }
        };
        emit(&block.qs[..32], 5);
        emit(&block.qs[32..], 5);
        emit(&block.qh, 4);
    }
}
