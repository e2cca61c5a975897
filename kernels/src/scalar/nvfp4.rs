//! nvfp4: 64 weights per block in four groups of 16, E2M1 codes with a UE4M3 scale per
//! group. Mirrors `quantize_row_nvfp4_ref` (used with or without weights) and
//! `dequantize_row_nvfp4`.

use super::mxfp4::best_index;
use super::tables::KVALUES_MXFP4;
use crate::blocks::BlockNvfp4;
use crate::num::{fp32_to_ue4m3, ue4m3_to_fp32};

const QK_SUB: usize = 16;

/// One row as `quantize_nvfp4` does it: ggml ignores the importance matrix.
pub fn quantize_row(x: &[f32], _imatrix: Option<&[f32]>, y: &mut [BlockNvfp4]) {
    for (xb, block) in x.chunks_exact(64).zip(y.iter_mut()) {
        for (s, xs) in xb.chunks_exact(QK_SUB).enumerate() {
            let mut amax = 0.0f32;
            for &v in xs {
                if amax < v.abs() {
                    amax = v.abs();
                }
            }
            let ue = fp32_to_ue4m3(amax / 6.0);
            block.d[s] = ue;
            let d = ue4m3_to_fp32(ue);
            for j in 0..QK_SUB / 2 {
                block.qs[s * QK_SUB / 2 + j] =
                    best_index(xs[j], d) | (best_index(xs[j + QK_SUB / 2], d) << 4);
            }
        }
    }
}

/// `dequantize_row_nvfp4`.
pub fn dequantize_row(x: &[BlockNvfp4], y: &mut [f32]) {
    for (block, yb) in x.iter().zip(y.chunks_exact_mut(64)) {
        for (s, ys) in yb.chunks_exact_mut(QK_SUB).enumerate() {
            let d = ue4m3_to_fp32(block.d[s]);
            for j in 0..QK_SUB / 2 {
                let q = block.qs[s * QK_SUB / 2 + j];
                ys[j] = KVALUES_MXFP4[(q & 0x0F) as usize] as f32 * d;
                ys[j + QK_SUB / 2] = KVALUES_MXFP4[(q >> 4) as usize] as f32 * d;
            }
        }
    }
}
