//! PLACEHOLDER q5_k

use crate::blocks::BlockQ5K;

/// Quantizes one row.
pub fn quantize_row(_x: &[f32], _w: Option<&[f32]>, _y: &mut [BlockQ5K]) {
    todo!()
}

/// Dequantizes.
pub fn dequantize_row(_x: &[BlockQ5K], _y: &mut [f32]) {
    todo!()
}
