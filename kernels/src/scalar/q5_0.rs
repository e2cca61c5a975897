//! PLACEHOLDER q5_0

use crate::blocks::BlockQ5_0;

/// Quantizes one row.
pub fn quantize_row(_x: &[f32], _w: Option<&[f32]>, _y: &mut [BlockQ5_0]) {
    todo!()
}

/// Dequantizes.
pub fn dequantize_row(_x: &[BlockQ5_0], _y: &mut [f32]) {
    todo!()
}
