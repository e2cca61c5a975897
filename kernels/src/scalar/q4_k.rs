//! q4_K: 256 values per super-block in 8 sub-blocks of 32, 4-bit codes meaning
//! `d*sc*q - dmin*m` with 6-bit sub-block scales `sc` and mins `m`.
//! Mirrors `quantize_row_q4_K_ref`, `quantize_row_q4_K_impl` (the path `quantize_q4_K`
//! takes with an importance matrix) and `dequantize_row_q4_K` of ggml 0.26.0; the search
//! itself is shared with q5_K in [`super::kquant`].

use super::kquant::{
    ScaleMinBlock, ScaleMinFormat, ScaleMinSuperBlock, get_scale_min_k4,
    quantize_scale_min_super_block,
};
use crate::blocks::{BlockQ4K, QK_K};

/// q4_K's parameters of the shared q4_K/q5_K search.
pub(crate) const FORMAT: ScaleMinFormat = ScaleMinFormat {
    nmax: 15,
    ref_search: (-1.0, 0.1, 20),
    clamp_weighted_codes: false,
};

/// One row as `quantize_q4_K` does it: `quantize_row_q4_K_ref` without an importance
/// matrix, `quantize_row_q4_K_impl` with one (`imatrix` holds one weight per column).
pub fn quantize_row(x: &[f32], imatrix: Option<&[f32]>, y: &mut [BlockQ4K]) {
    debug_assert_eq!(x.len(), y.len() * QK_K);
    for (i, (xb, block)) in x.chunks_exact(QK_K).zip(y.iter_mut()).enumerate() {
        let qw = imatrix.map(|w| &w[QK_K * i..QK_K * (i + 1)]);
        BlockQ4K::pack(&quantize_scale_min_super_block(xb, qw, &FORMAT), block);
    }
}

impl ScaleMinBlock for BlockQ4K {
    /// Stores a chosen super-block: scales as they are, codes packed as q4_K lays them out.
    #[inline(always)]
    fn pack(sb: &ScaleMinSuperBlock, block: &mut Self) {
        let l = &sb.l;
        block.d = sb.d;
        block.dmin = sb.dmin;
        block.scales = sb.scales;
        // Each 64 values share 32 bytes: the first 32 in the low nibbles. (Whole arrays, so
        // that the loop compiles to a few vector operations.)
        for j in 0..QK_K / 64 {
            let lo: &[u8; 32] = l[64 * j..64 * j + 32].try_into().unwrap();
            let hi: &[u8; 32] = l[64 * j + 32..64 * j + 64].try_into().unwrap();
            let qs: &mut [u8; 32] = (&mut block.qs[32 * j..32 * j + 32]).try_into().unwrap();
            for i in 0..32 {
                qs[i] = lo[i] | (hi[i] << 4);
            }
        }
    }
}

/// `dequantize_row_q4_K`: `y = (d*sc)*q - (dmin*m)`.
#[inline(always)]
pub fn dequantize_row(x: &[BlockQ4K], y: &mut [f32]) {
    debug_assert_eq!(y.len(), x.len() * QK_K);
    for (block, yb) in x.iter().zip(y.chunks_exact_mut(QK_K)) {
        let d = block.d.to_f32();
        let min = block.dmin.to_f32();
        for (j, (ys, qs)) in yb
            .chunks_exact_mut(64)
            .zip(block.qs.chunks_exact(32))
            .enumerate()
        {
            let (sc1, m1) = get_scale_min_k4(2 * j, &block.scales);
            let (sc2, m2) = get_scale_min_k4(2 * j + 1, &block.scales);
            let (d1, m1) = (d * sc1 as f32, min * m1 as f32);
            let (d2, m2) = (d * sc2 as f32, min * m2 as f32);
            let (lo, hi) = ys.split_at_mut(32);
            for ((a, b), &q) in lo.iter_mut().zip(hi).zip(qs) {
                *a = d1 * (q & 0xF) as f32 - m1;
                *b = d2 * (q >> 4) as f32 - m2;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::num::F16Le;
    use crate::scalar::kquant::pack_scale_min_k4;
    use crate::scalar::testing;
    use bytemuck::Zeroable;

    fn round_trip(x: &[f32], w: Option<&[f32]>) -> Vec<f32> {
        testing::round_trip(quantize_row, dequantize_row, x, w)
    }

    #[test]
    fn round_trip_error_is_bounded() {
        let x = testing::wave(4 * QK_K, 3);
        let w: Vec<f32> = testing::wave(x.len(), 8)
            .iter()
            .map(|v| v.abs() + 0.1)
            .collect();
        for y in [round_trip(&x, None), round_trip(&x, Some(&w))] {
            let rmse = testing::rmse(&x, &y);
            // 4 bits over a range of 2: a step of ~0.13.
            assert!(rmse < 0.05, "rmse {rmse}");
        }
    }

    #[test]
    fn zero_row_gives_zeros() {
        let x = vec![0.0f32; QK_K];
        assert!(round_trip(&x, None).iter().all(|&v| v == 0.0));
        assert!(round_trip(&x, Some(&[1.0; QK_K])).iter().all(|&v| v == 0.0));
    }

    #[test]
    fn constant_row_is_nearly_exact() {
        let x = vec![1.25f32; QK_K];
        for v in round_trip(&x, None) {
            assert!((v - 1.25).abs() < 2e-3, "{v}");
        }
    }

    #[test]
    fn dequantize_hand_built_block() {
        let mut b = BlockQ4K::zeroed();
        b.d = F16Le::from_f32(0.5);
        b.dmin = F16Le::from_f32(0.25);
        let mut ls = [0u8; 8];
        let mut lm = [0u8; 8];
        (ls[0], lm[0], ls[5], lm[5]) = (3, 1, 40, 50);
        b.scales = pack_scale_min_k4(&ls, &lm);
        b.qs[0] = 0x7A; // element 0: 10, element 32: 7
        b.qs[64] = 0x90; // element 128: 0, element 160 (sub-block 5): 9
        let mut y = [0.0f32; QK_K];
        dequantize_row(&[b], &mut y);
        assert_eq!(y[0], 0.5 * 3.0 * 10.0 - 0.25);
        assert_eq!(y[32], 0.0);
        assert_eq!(y[160], 0.5 * 40.0 * 9.0 - 0.25 * 50.0);
    }
}
