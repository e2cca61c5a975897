//! f32, f16 and bf16 rows: `ggml_fp32_to_fp16_row`, `ggml_fp32_to_bf16_row_ref` (the
//! conversions `ggml_quantize_chunk` uses) and their inverses, with little-endian output.

use crate::num::{bf16_to_fp32, fp16_to_fp32, fp32_to_bf16, fp32_to_fp16};

/// Copies f32 values as little-endian bytes.
pub fn quantize_f32(x: &[f32], y: &mut [u8]) {
    for (v, out) in x.iter().zip(y.chunks_exact_mut(4)) {
        out.copy_from_slice(&v.to_le_bytes());
    }
}

/// Rounds each value to fp16 (nearest even).
#[inline(always)]
pub fn quantize_f16(x: &[f32], y: &mut [u8]) {
    for (v, out) in x.iter().zip(y.chunks_exact_mut(2)) {
        out.copy_from_slice(&fp32_to_fp16(*v).to_le_bytes());
    }
}

/// Rounds each value to bf16 (nearest even).
#[inline(always)]
pub fn quantize_bf16(x: &[f32], y: &mut [u8]) {
    for (v, out) in x.iter().zip(y.chunks_exact_mut(2)) {
        out.copy_from_slice(&fp32_to_bf16(*v).to_le_bytes());
    }
}

/// Reads little-endian f32 values.
pub fn dequantize_f32(x: &[u8], y: &mut [f32]) {
    for (b, out) in x.chunks_exact(4).zip(y.iter_mut()) {
        *out = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
    }
}

/// Widens little-endian fp16 values.
#[inline(always)]
pub fn dequantize_f16(x: &[u8], y: &mut [f32]) {
    for (b, out) in x.chunks_exact(2).zip(y.iter_mut()) {
        *out = fp16_to_fp32(u16::from_le_bytes([b[0], b[1]]));
    }
}

/// Widens little-endian bf16 values.
#[inline(always)]
pub fn dequantize_bf16(x: &[u8], y: &mut [f32]) {
    for (b, out) in x.chunks_exact(2).zip(y.iter_mut()) {
        *out = bf16_to_fp32(u16::from_le_bytes([b[0], b[1]]));
    }
}
