//! PLACEHOLDER iq4_nl

use crate::blocks::BlockIq4Nl;

/// Quantizes one row.
pub fn quantize_row(_x: &[f32], _w: Option<&[f32]>, _y: &mut [BlockIq4Nl]) {
    todo!()
}

/// Dequantizes.
pub fn dequantize_row(_x: &[BlockIq4Nl], _y: &mut [f32]) {
    todo!()
}
