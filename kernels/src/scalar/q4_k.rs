//! PLACEHOLDER q4_k

use crate::blocks::BlockQ4K;

/// Quantizes one row.
pub fn quantize_row(_x: &[f32], _w: Option<&[f32]>, _y: &mut [BlockQ4K]) {
    todo!()
}

/// Dequantizes.
pub fn dequantize_row(_x: &[BlockQ4K], _y: &mut [f32]) {
    todo!()
}
