//! PLACEHOLDER tq1_0

use crate::blocks::BlockTq1_0;

/// Quantizes one row.
pub fn quantize_row(_x: &[f32], _w: Option<&[f32]>, _y: &mut [BlockTq1_0]) {
    todo!()
}

/// Dequantizes.
pub fn dequantize_row(_x: &[BlockTq1_0], _y: &mut [f32]) {
    todo!()
}
