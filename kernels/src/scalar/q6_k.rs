//! PLACEHOLDER q6_k

use crate::blocks::BlockQ6K;

/// Quantizes one row.
pub fn quantize_row(_x: &[f32], _w: Option<&[f32]>, _y: &mut [BlockQ6K]) {
    todo!()
}

/// Dequantizes.
pub fn dequantize_row(_x: &[BlockQ6K], _y: &mut [f32]) {
    todo!()
}
