//! PLACEHOLDER nvfp4

use crate::blocks::BlockNvfp4;

/// Quantizes one row.
pub fn quantize_row(_x: &[f32], _w: Option<&[f32]>, _y: &mut [BlockNvfp4]) {
    todo!()
}

/// Dequantizes.
pub fn dequantize_row(_x: &[BlockNvfp4], _y: &mut [f32]) {
    todo!()
}
