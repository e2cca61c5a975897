//! PLACEHOLDER q8_0

use crate::blocks::BlockQ8_0;

/// Quantizes one row.
pub fn quantize_row(_x: &[f32], _w: Option<&[f32]>, _y: &mut [BlockQ8_0]) {
    todo!()
}

/// Dequantizes.
pub fn dequantize_row(_x: &[BlockQ8_0], _y: &mut [f32]) {
    todo!()
}
