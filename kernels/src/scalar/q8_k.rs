//! PLACEHOLDER q8_k

use crate::blocks::BlockQ8K;

/// Quantizes one row.
pub fn quantize_row(_x: &[f32], _w: Option<&[f32]>, _y: &mut [BlockQ8K]) {
    todo!()
}

/// Dequantizes.
pub fn dequantize_row(_x: &[BlockQ8K], _y: &mut [f32]) {
    todo!()
}
