//! mxfp4: 32 weights per block, E2M1 codes with one E8M0 exponent.
//! Mirrors `quantize_row_mxfp4_ref` (used with or without weights), `best_index_mxfp4` and
//! `dequantize_row_mxfp4`.

use super::tables::KVALUES_MXFP4;
use crate::blocks::BlockMxfp4;
use crate::num::{c_byte, e8m0_to_fp32_half};

const QK: usize = 32;

/// One row as `quantize_mxfp4` does it: ggml ignores the importance matrix.
pub fn quantize_row(x: &[f32], _imatrix: Option<&[f32]>, y: &mut [BlockMxfp4]) {
    for (xb, block) in x.chunks_exact(QK).zip(y.iter_mut()) {
        let mut amax = 0.0f32;
        for &v in xb {
            if amax < v.abs() {
                amax = v.abs();
            }
        }
        let e = if amax > 0.0 {
            c_byte(amax.log2().floor() - 2.0 + 127.0)
        } else {
            0
        };
        let d = e8m0_to_fp32_half(e);
        block.e = e;
        for j in 0..QK / 2 {
            block.qs[j] = best_index(xb[j], d) | (best_index(xb[j + QK / 2], d) << 4);
        }
    }
}

/// `best_index_mxfp4`: the code whose value times `d` is nearest to `x`, the first on ties.
#[inline(always)]
pub(super) fn best_index(x: f32, d: f32) -> u8 {
    let mut best = 0u8;
    let mut best_err = (KVALUES_MXFP4[0] as f32 * d - x).abs();
    for (i, &k) in KVALUES_MXFP4.iter().enumerate().skip(1) {
        let err = (k as f32 * d - x).abs();
        if err < best_err {
            best = i as u8;
            best_err = err;
        }
    }
    best
}

/// `dequantize_row_mxfp4`.
pub fn dequantize_row(x: &[BlockMxfp4], y: &mut [f32]) {
    for (block, yb) in x.iter().zip(y.chunks_exact_mut(QK)) {
        let d = e8m0_to_fp32_half(block.e);
        for j in 0..QK / 2 {
            yb[j] = KVALUES_MXFP4[(block.qs[j] & 0x0F) as usize] as f32 * d;
            yb[j + QK / 2] = KVALUES_MXFP4[(block.qs[j] >> 4) as usize] as f32 * d;
        }
    }
}
