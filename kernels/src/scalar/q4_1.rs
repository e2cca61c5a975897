//! PLACEHOLDER q4_1

use crate::blocks::BlockQ4_1;

/// Quantizes one row.
pub fn quantize_row(_x: &[f32], _w: Option<&[f32]>, _y: &mut [BlockQ4_1]) {
    todo!()
}

/// Dequantizes.
pub fn dequantize_row(_x: &[BlockQ4_1], _y: &mut [f32]) {
    todo!()
}
