//! q8_K: 256 values per block, signed 8-bit codes meaning `d*q` with an f32 scale and the
//! sums of each 16 codes (`bsums`), the intermediate format of ggml's K-quant dot products.
//! Mirrors `quantize_row_q8_K_ref` and `dequantize_row_q8_K` of ggml 0.26.0.

use crate::blocks::{BlockQ8K, QK_K};
use crate::num::nearest_int;

/// One row as `quantize_row_q8_K_ref` does it; q8_K takes no importance matrix, so
/// `_imatrix` is ignored.
///
/// As in ggml, an all-zero block gets `d = 0` and zero codes but keeps the `bsums` it had.
pub fn quantize_row(x: &[f32], _imatrix: Option<&[f32]>, y: &mut [BlockQ8K]) {
    debug_assert_eq!(x.len(), y.len() * QK_K);
    for (xb, block) in x.chunks_exact(QK_K).zip(y.iter_mut()) {
        let mut amax = 0.0f32;
        let mut max = 0.0f32;
        for &v in xb {
            if v.abs() > amax {
                amax = v.abs();
                max = v;
            }
        }
        if amax == 0.0 {
            block.d = 0.0f32.to_le_bytes();
            block.qs = [0; QK_K];
            continue;
        }
        // -127, not -128: ggml's IQ2_XXS AVX dot product needs the codes symmetric.
        let iscale = -127.0 / max;
        for (q, &v) in block.qs.iter_mut().zip(xb) {
            *q = nearest_int(iscale * v).min(127) as i8;
        }
        for (sum, qs) in block.bsums.iter_mut().zip(block.qs.chunks_exact(16)) {
            let mut s = 0i32;
            for &q in qs {
                s += q as i32;
            }
            *sum = (s as i16).to_le_bytes();
        }
        block.d = (1.0 / iscale).to_le_bytes();
    }
}

/// `dequantize_row_q8_K`: `y = d*q`.
#[inline(always)]
pub fn dequantize_row(x: &[BlockQ8K], y: &mut [f32]) {
    debug_assert_eq!(y.len(), x.len() * QK_K);
    for (block, yb) in x.iter().zip(y.chunks_exact_mut(QK_K)) {
        let d = f32::from_le_bytes(block.d);
        for (out, &q) in yb.iter_mut().zip(&block.qs) {
            *out = d * q as f32;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytemuck::Zeroable;

    #[test]
    fn round_trip_error_is_within_half_a_step() {
        let x: Vec<f32> = (0..2 * QK_K)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) * 0.02)
            .collect();
        let mut blocks = [BlockQ8K::zeroed(); 2];
        quantize_row(&x, None, &mut blocks);
        let mut y = vec![0.0; x.len()];
        dequantize_row(&blocks, &mut y);
        for (b, (xb, yb)) in blocks.iter().zip(x.chunks(QK_K).zip(y.chunks(QK_K))) {
            let d = f32::from_le_bytes(b.d).abs();
            for (a, c) in xb.iter().zip(yb) {
                assert!((a - c).abs() <= d * 0.5001, "{a} {c} {d}");
            }
            for (j, s) in b.bsums.iter().enumerate() {
                let want: i32 = b.qs[16 * j..16 * (j + 1)].iter().map(|&q| q as i32).sum();
                assert_eq!(i16::from_le_bytes(*s) as i32, want);
            }
        }
    }

    #[test]
    fn extreme_maps_to_minus_127() {
        // The first of +1 and -1 sets the sign of the scale.
        let mut x = vec![0.0f32; QK_K];
        x[5] = 1.0;
        x[9] = -1.0;
        let mut blocks = [BlockQ8K::zeroed()];
        quantize_row(&x, None, &mut blocks);
        assert_eq!(f32::from_le_bytes(blocks[0].d), -1.0 / 127.0);
        assert_eq!(blocks[0].qs[5], -127);
        assert_eq!(blocks[0].qs[9], 127);
        assert_eq!(i16::from_le_bytes(blocks[0].bsums[0]), 0);
    }

    #[test]
    fn zero_row_keeps_bsums() {
        let mut blocks = [BlockQ8K::zeroed()];
        blocks[0].qs[0] = 4;
        blocks[0].d = 2.0f32.to_le_bytes();
        blocks[0].bsums[3] = [7, 0];
        quantize_row(&[0.0; QK_K], None, &mut blocks);
        assert_eq!(blocks[0].qs, [0; QK_K]);
        assert_eq!(blocks[0].d, [0; 4]);
        assert_eq!(blocks[0].bsums[3], [7, 0]);
    }
}
