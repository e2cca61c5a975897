//! PLACEHOLDER q2_k

use crate::blocks::BlockQ2K;

/// Quantizes one row.
pub fn quantize_row(_x: &[f32], _w: Option<&[f32]>, _y: &mut [BlockQ2K]) {
    todo!()
}

/// Dequantizes.
pub fn dequantize_row(_x: &[BlockQ2K], _y: &mut [f32]) {
    todo!()
}
