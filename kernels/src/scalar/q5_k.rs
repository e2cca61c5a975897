//! q5_K: 256 values per super-block in 8 sub-blocks of 32, 5-bit codes meaning
//! `d*sc*q - dmin*m` with 6-bit sub-block scales `sc` and mins `m`; the low 4 bits of each
//! code go to `qs`, the fifth to `qh`.
//! Mirrors `quantize_row_q5_K_ref`, `quantize_row_q5_K_impl` (the path `quantize_q5_K`
//! takes with an importance matrix) and `dequantize_row_q5_K` of ggml 0.26.0; the search
//! itself is shared with q4_K in [`super::kquant`].

use super::kquant::{
    ScaleMinBlock, ScaleMinFormat, ScaleMinSuperBlock, get_scale_min_k4,
    quantize_scale_min_super_block,
};
use crate::blocks::{BlockQ5K, QK_K};

/// q5_K's parameters of the shared q4_K/q5_K search.
pub(crate) const FORMAT: ScaleMinFormat = ScaleMinFormat {
    nmax: 31,
    ref_search: (-0.5, 0.1, 15),
    clamp_weighted_codes: true,
};

/// One row as `quantize_q5_K` does it: `quantize_row_q5_K_ref` without an importance
/// matrix, `quantize_row_q5_K_impl` with one (`imatrix` holds one weight per column).
pub fn quantize_row(x: &[f32], imatrix: Option<&[f32]>, y: &mut [BlockQ5K]) {
    debug_assert_eq!(x.len(), y.len() * QK_K);
    for (i, (xb, block)) in x.chunks_exact(QK_K).zip(y.iter_mut()).enumerate() {
        let qw = imatrix.map(|w| &w[QK_K * i..QK_K * (i + 1)]);
        BlockQ5K::pack(&quantize_scale_min_super_block(xb, qw, &FORMAT), block);
    }
}

impl ScaleMinBlock for BlockQ5K {
    /// Stores a chosen super-block: scales as they are, codes packed as q5_K lays them out.
    #[inline(always)]
    fn pack(sb: &ScaleMinSuperBlock, block: &mut Self) {
        let l = &sb.l;
        block.d = sb.d;
        block.dmin = sb.dmin;
        block.scales = sb.scales;
        // Each 64 values share 32 bytes of `qs` (the first 32 in the low nibbles) and a bit
        // pair of `qh`.
        // (Whole arrays, so that the loops compile to a few vector operations.)
        let mut qh = [0u8; QK_K / 8];
        for n in 0..QK_K / 64 {
            let lo: &[u8; 32] = l[64 * n..64 * n + 32].try_into().unwrap();
            let hi: &[u8; 32] = l[64 * n + 32..64 * n + 64].try_into().unwrap();
            let qs: &mut [u8; 32] = (&mut block.qs[32 * n..32 * n + 32]).try_into().unwrap();
            // A code above 15 has bit 4 set and keeps its low four bits (C: `l -= 16`); the
            // bits go without branches.
            let (s1, s2) = (2 * n as u32, 2 * n as u32 + 1);
            for j in 0..32 {
                let (l1, l2) = (lo[j], hi[j]);
                qh[j] |= ((l1 >> 4) << s1) | ((l2 >> 4) << s2);
                qs[j] = (l1 & 15) | ((l2 & 15) << 4);
            }
        }
        block.qh = qh;
    }
}

/// `dequantize_row_q5_K`: `y = (d*sc)*(q + 16*high) - (dmin*m)`.
#[inline(always)]
pub fn dequantize_row(x: &[BlockQ5K], y: &mut [f32]) {
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
            let (u1, u2) = (1u8 << (2 * j), 2u8 << (2 * j));
            let (lo, hi) = ys.split_at_mut(32);
            for (((a, b), &q), &h) in lo.iter_mut().zip(hi).zip(qs).zip(&block.qh) {
                let q1 = (q & 0xF) as i32 + if h & u1 != 0 { 16 } else { 0 };
                let q2 = (q >> 4) as i32 + if h & u2 != 0 { 16 } else { 0 };
                *a = d1 * q1 as f32 - m1;
                *b = d2 * q2 as f32 - m2;
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
        let x = testing::wave(4 * QK_K, 21);
        let w: Vec<f32> = testing::wave(x.len(), 4)
            .iter()
            .map(|v| v.abs() + 0.1)
            .collect();
        for y in [round_trip(&x, None), round_trip(&x, Some(&w))] {
            let rmse = testing::rmse(&x, &y);
            // 5 bits over a range of 2: a step of ~0.065.
            assert!(rmse < 0.025, "rmse {rmse}");
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
        let x = vec![-2.0f32; QK_K];
        for v in round_trip(&x, None) {
            assert!((v + 2.0).abs() < 2e-3, "{v}");
        }
    }

    #[test]
    fn dequantize_hand_built_block() {
        let mut b = BlockQ5K::zeroed();
        b.d = F16Le::from_f32(0.5);
        b.dmin = F16Le::from_f32(0.25);
        let mut ls = [0u8; 8];
        let mut lm = [0u8; 8];
        (ls[0], lm[0], ls[7], lm[7]) = (3, 1, 63, 2);
        b.scales = pack_scale_min_k4(&ls, &lm);
        b.qs[0] = 0x0A; // element 0: low bits 10
        b.qh[0] = 0x01; // element 0: fifth bit
        b.qs[96] = 0x50; // element 192 + 32 = 224 (sub-block 7): low bits 5
        b.qh[0] |= 0x80; // element 224: fifth bit
        let mut y = [0.0f32; QK_K];
        dequantize_row(&[b], &mut y);
        assert_eq!(y[0], 0.5 * 3.0 * 26.0 - 0.25);
        assert_eq!(y[1], -0.25);
        assert_eq!(y[224], 0.5 * 63.0 * 21.0 - 0.5);
    }
}
