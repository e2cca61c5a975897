//! PLACEHOLDER iq2_xxs

use crate::blocks::BlockIq2Xxs;

/// Dequantizes.
pub fn dequantize_row(_x: &[BlockIq2Xxs], _y: &mut [f32]) {
    todo!()
}
