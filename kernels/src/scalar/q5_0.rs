//! q5_0: 32 weights per block, 5-bit codes meaning `(q - 16) * d`.
//! Mirrors `quantize_row_q5_0_ref`, `quantize_row_q5_0_impl` and `dequantize_row_q5_0`.

use super::kquant::make_qx_quants;
use super::weighted_blocks;
use crate::blocks::BlockQ5_0;
use crate::num::{F16Le, c_byte};

const QK: usize = 32;

/// One row as `quantize_q5_0` does it.
pub fn quantize_row(x: &[f32], imatrix: Option<&[f32]>, y: &mut [BlockQ5_0]) {
    let Some(qw) = imatrix else {
        return quantize_ref(x, y);
    };
    weighted_blocks(x, qw, y, |xb, weight, block| {
        let mut l = [0i8; QK];
        let d = make_qx_quants(QK, 16, xb, &mut l, 1, Some(weight));
        block.d = F16Le::from_f32(d);
        let codes: [u8; QK] = std::array::from_fn(|j| l[j] as u8);
        pack5(&codes, &mut block.qs, &mut block.qh);
    });
}

/// `quantize_row_q5_0_ref`: the scale maps the signed absolute maximum to -16.
pub fn quantize_ref(x: &[f32], y: &mut [BlockQ5_0]) {
    for (xb, block) in x.chunks_exact(QK).zip(y.iter_mut()) {
        let mut amax = 0.0f32;
        let mut max = 0.0f32;
        for &v in xb {
            if amax < v.abs() {
                amax = v.abs();
                max = v;
            }
        }
        let d = max / -16.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        block.d = F16Le::from_f32(d);
        let codes: [u8; QK] =
            std::array::from_fn(|j| (c_byte(xb[j] * id + 16.5) as i8).min(31) as u8);
        pack5(&codes, &mut block.qs, &mut block.qh);
    }
}

/// Packs 5-bit codes: low nibbles two per byte (element j with j+16), fifth bits into `qh`
/// as a little-endian u32 with bit j for element j. Codes above 31 lose their extra bits,
/// as in ggml.
pub(crate) fn pack5(codes: &[u8; QK], qs: &mut [u8; 16], qh: &mut [u8; 4]) {
    let mut h = 0u32;
    for j in 0..QK / 2 {
        let (x0, x1) = (codes[j], codes[j + QK / 2]);
        qs[j] = (x0 & 0x0F) | ((x1 & 0x0F) << 4);
        h |= (((x0 & 0x10) >> 4) as u32) << j;
        h |= (((x1 & 0x10) >> 4) as u32) << (j + QK / 2);
    }
    *qh = h.to_le_bytes();
}

/// The 5-bit codes of elements j and j+16, as the `_0`/`_1` dequantizers rebuild them.
#[inline(always)]
pub(super) fn unpack5(qs: &[u8; 16], qh: &[u8; 4], j: usize) -> (u8, u8) {
    let h = u32::from_le_bytes(*qh);
    let xh0 = (((h >> j) << 4) & 0x10) as u8;
    let xh1 = ((h >> (j + 12)) & 0x10) as u8;
    ((qs[j] & 0x0F) | xh0, (qs[j] >> 4) | xh1)
}

/// `dequantize_row_q5_0`.
#[inline(always)]
pub fn dequantize_row(x: &[BlockQ5_0], y: &mut [f32]) {
    for (block, yb) in x.iter().zip(y.chunks_exact_mut(QK)) {
        let d = block.d.to_f32();
        for j in 0..QK / 2 {
            let (x0, x1) = unpack5(&block.qs, &block.qh, j);
            yb[j] = (x0 as i32 - 16) as f32 * d;
            yb[j + QK / 2] = (x1 as i32 - 16) as f32 * d;
        }
    }
}
