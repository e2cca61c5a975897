//! PLACEHOLDER tq2_0

use crate::blocks::BlockTq2_0;

/// Quantizes one row.
pub fn quantize_row(_x: &[f32], _w: Option<&[f32]>, _y: &mut [BlockTq2_0]) {
    todo!()
}

/// Dequantizes.
pub fn dequantize_row(_x: &[BlockTq2_0], _y: &mut [f32]) {
    todo!()
}
