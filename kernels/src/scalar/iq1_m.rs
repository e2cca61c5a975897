//! PLACEHOLDER iq1_m

use crate::blocks::BlockIq1M;

/// Dequantizes.
pub fn dequantize_row(_x: &[BlockIq1M], _y: &mut [f32]) {
    todo!()
}
