//! PLACEHOLDER iq1_s

use crate::blocks::BlockIq1S;

/// Dequantizes.
pub fn dequantize_row(_x: &[BlockIq1S], _y: &mut [f32]) {
    todo!()
}
