//! PLACEHOLDER mxfp4

use crate::blocks::BlockMxfp4;

/// Quantizes one row.
pub fn quantize_row(_x: &[f32], _w: Option<&[f32]>, _y: &mut [BlockMxfp4]) {
    todo!()
}

/// Dequantizes.
pub fn dequantize_row(_x: &[BlockMxfp4], _y: &mut [f32]) {
    todo!()
}
