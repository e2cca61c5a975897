//! PLACEHOLDER iq4_xs

use crate::blocks::BlockIq4Xs;

/// Quantizes one row.
pub fn quantize_row(_x: &[f32], _w: Option<&[f32]>, _y: &mut [BlockIq4Xs]) {
    todo!()
}

/// Dequantizes.
pub fn dequantize_row(_x: &[BlockIq4Xs], _y: &mut [f32]) {
    todo!()
}
