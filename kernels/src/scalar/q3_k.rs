//! PLACEHOLDER q3_k

use crate::blocks::BlockQ3K;

/// Quantizes one row.
pub fn quantize_row(_x: &[f32], _w: Option<&[f32]>, _y: &mut [BlockQ3K]) {
    todo!()
}

/// Dequantizes.
pub fn dequantize_row(_x: &[BlockQ3K], _y: &mut [f32]) {
    todo!()
}
