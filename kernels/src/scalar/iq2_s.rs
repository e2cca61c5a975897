//! PLACEHOLDER iq2_s

use crate::blocks::BlockIq2S;

/// Dequantizes.
pub fn dequantize_row(_x: &[BlockIq2S], _y: &mut [f32]) {
    todo!()
}
