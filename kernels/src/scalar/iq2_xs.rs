//! PLACEHOLDER iq2_xs

use crate::blocks::BlockIq2Xs;

/// Dequantizes.
pub fn dequantize_row(_x: &[BlockIq2Xs], _y: &mut [f32]) {
    todo!()
}
