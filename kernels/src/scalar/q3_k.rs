//! q3_K: 256 values per super-block in 16 sub-blocks of 16, 3-bit codes meaning
//! `d*(sc-32)*(q-4)` with 6-bit sub-block scales `sc`; the low 2 bits of each code go to
//! `qs`, the high bit to `hmask`.
//! Mirrors `quantize_row_q3_K_ref`, `quantize_row_q3_K_impl` (the path `quantize_q3_K`
//! takes with an importance matrix) and `dequantize_row_q3_K` of ggml 0.26.0.

use super::kquant::{
    importance_weights, make_q3_quants, make_qx_quants, pack_2bit, requantize_symmetric, sum,
    sum_squares,
};
use crate::blocks::{BlockQ3K, QK_K};
use crate::num::{F16Le, nearest_int};

/// Sub-blocks per super-block.
pub(crate) const SUB: usize = QK_K / 16;

/// One row as `quantize_q3_K` does it: `quantize_row_q3_K_ref` without an importance
/// matrix, `quantize_row_q3_K_impl` with one (`imatrix` holds one weight per column).
pub fn quantize_row(x: &[f32], imatrix: Option<&[f32]>, y: &mut [BlockQ3K]) {
    debug_assert_eq!(x.len(), y.len() * QK_K);
    for (i, (xb, block)) in x.chunks_exact(QK_K).zip(y.iter_mut()).enumerate() {
        let l = match imatrix {
            None => choose_scales_ref(xb, block),
            Some(w) => choose_scales_weighted(xb, &w[QK_K * i..QK_K * (i + 1)], block),
        };
        finish(xb, l, block);
    }
}

/// `quantize_row_q3_K_ref` up to the final re-rounding: `make_q3_quants` per sub-block,
/// then the scales mapped linearly to -32..31 against the one of largest magnitude.
/// Returns the codes (0..8) the search chose.
fn choose_scales_ref(x: &[f32], block: &mut BlockQ3K) -> [i8; QK_K] {
    let mut l = [0i8; QK_K];
    let mut scales = [0.0f32; SUB];
    for (s, (xs, ls)) in scales
        .iter_mut()
        .zip(x.chunks_exact(16).zip(l.chunks_exact_mut(16)))
    {
        *s = make_q3_quants(16, 4, xs, ls);
    }
    store_scales_ref(&scales, block);
    l
}

/// The sub-block scales of `quantize_row_q3_K_ref` mapped linearly to -32..31 against
/// the one of largest magnitude, into `block` (`scales`, `d`).
pub(crate) fn store_scales_ref(scales: &[f32; SUB], block: &mut BlockQ3K) {
    let mut amax = 0.0f32;
    let mut max_scale = 0.0f32;
    for &s in scales {
        if s.abs() > amax {
            amax = s.abs();
            max_scale = s;
        }
    }
    if max_scale != 0.0 {
        let iscale = -32.0 / max_scale;
        let codes =
            scales.map(|s| ((nearest_int(iscale * s) as i8 as i32).clamp(-32, 31) + 32) as u8);
        block.scales = pack_scales(&codes);
        block.d = F16Le::from_f32(1.0 / iscale);
    } else {
        block.scales = [0; 12];
        block.d = F16Le::from_f32(0.0);
    }
}

/// `quantize_row_q3_K_impl` up to the final re-rounding: an importance-weighted
/// `make_qx_quants` per sub-block, then another for the 16 scales.
/// Returns the codes (0..8) the search chose.
fn choose_scales_weighted(x: &[f32], qw: &[f32], block: &mut BlockQ3K) -> [i8; QK_K] {
    let mut l = [0i8; QK_K];
    let mut scales = [0.0f32; SUB];
    let mut sw = [0.0f32; SUB];
    let sigma2 = 2.0 * sum_squares(x) / QK_K as f32;
    for (j, ((xs, ws), ls)) in x
        .chunks_exact(16)
        .zip(qw.chunks_exact(16))
        .zip(l.chunks_exact_mut(16))
        .enumerate()
    {
        (scales[j], sw[j]) = search_weighted(xs, ws, sigma2, ls);
    }
    store_scales_weighted(&scales, &sw, block);
    l
}

/// The search of `quantize_row_q3_K_impl` for one sub-block of 16 with importance values
/// `ws` (`sigma2` from the super-block): codes (0..8) into `l`, `(scale, sum of the
/// weights)` returned.
pub(crate) fn search_weighted(xs: &[f32], ws: &[f32], sigma2: f32, l: &mut [i8]) -> (f32, f32) {
    let mut weight = [0.0f32; 16];
    importance_weights(xs, ws, sigma2, &mut weight);
    (make_qx_quants(16, 4, xs, l, 1, Some(&weight)), sum(&weight))
}

/// The sub-block scales of `quantize_row_q3_K_impl`, quantized to 6 bits by
/// `make_qx_quants` with the sub-blocks' weight sums `sw`, into `block`.
pub(crate) fn store_scales_weighted(scales: &[f32; SUB], sw: &[f32; SUB], block: &mut BlockQ3K) {
    let mut ls = [0i8; SUB];
    let d_block = make_qx_quants(SUB, 32, scales, &mut ls, 1, Some(sw));
    block.scales = pack_scales(&ls.map(|v| v as u8));
    block.d = F16Le::from_f32(d_block);
}

/// Packs 16 6-bit scale codes: low nibbles in bytes 0..8 (sub-blocks 8..16 in the high
/// nibbles), the high 2 bits of sub-block `j` in byte `8 + j%4` at bit `2*(j/4)`.
fn pack_scales(codes: &[u8; SUB]) -> [u8; 12] {
    let mut s = [0u8; 12];
    for (j, &c) in codes.iter().enumerate() {
        if j < 8 {
            s[j] = c & 0xF;
        } else {
            s[j - 8] |= (c & 0xF) << 4;
        }
        s[j % 4 + 8] |= (c >> 4) << (2 * (j / 4));
    }
    s
}

/// The signed scale (-32..31) of sub-block `j`, the inverse of [`pack_scales`] minus 32.
#[inline(always)]
pub(crate) fn scale(scales: &[u8; 12], j: usize) -> i32 {
    let low = if j < 8 {
        scales[j] & 0xF
    } else {
        scales[j - 8] >> 4
    };
    let high = (scales[8 + j % 4] >> (2 * (j / 4))) & 3;
    (low | (high << 4)) as i32 - 32
}

/// The steps both paths end with: every value re-rounded against its stored sub-block
/// scale (where it is not zero), the high bits split off into `hmask`, the rest packed.
fn finish(x: &[f32], mut l: [i8; QK_K], block: &mut BlockQ3K) {
    let d = block.d.to_f32();
    for (j, (xs, ls)) in x.chunks_exact(16).zip(l.chunks_exact_mut(16)).enumerate() {
        requantize_symmetric(xs, d * scale(&block.scales, j) as f32, 4, ls);
    }
    pack_codes(l, block);
}

/// The codes (0..8) into `block`: the high bits split off into `hmask`, the low two bits
/// packed into `qs`. Branch-free: whether a code has its high bit is data, and a
/// mispredicted branch per value costs more than the arithmetic.
pub(crate) fn pack_codes(l: [i8; QK_K], block: &mut BlockQ3K) {
    // The high bit of element j goes to byte j%32, bit j/32.
    for (i, h) in block.hmask.iter_mut().enumerate() {
        let mut bits = 0u8;
        for b in 0..8 {
            bits |= u8::from(l[32 * b + i] > 3) << b;
        }
        *h = bits;
    }
    // A code of 4..8 keeps l - 4 = l & 3 below its high bit.
    pack_2bit(&l.map(|v| (v & 3) as u8), &mut block.qs);
}

/// `dequantize_row_q3_K`: `y = (d*(sc-32)) * (q - (high bit ? 0 : 4))`.
#[inline(always)]
pub fn dequantize_row(x: &[BlockQ3K], y: &mut [f32]) {
    debug_assert_eq!(y.len(), x.len() * QK_K);
    for (block, yb) in x.iter().zip(y.chunks_exact_mut(QK_K)) {
        let d_all = block.d.to_f32();
        // Sub-block `sub` sits in half `sub/8`, bit pair `(sub%8)/2`, byte half `sub%2`.
        // Loops of constant length over fixed arrays, as in q2_K's dequantizer.
        for (half, (qs, yh)) in block
            .qs
            .chunks_exact(32)
            .zip(yb.chunks_exact_mut(128))
            .enumerate()
        {
            let qs: &[u8; 32] = qs.try_into().expect("32 bytes");
            for pair in 0..4 {
                let bit = 1u8 << (4 * half + pair);
                for byte_half in 0..2 {
                    let sub = 8 * half + 2 * pair + byte_half;
                    let dl = d_all * scale(&block.scales, sub) as f32;
                    let q = &qs[16 * byte_half..16 * byte_half + 16];
                    let hm = &block.hmask[16 * byte_half..16 * byte_half + 16];
                    let out = &mut yh[32 * pair + 16 * byte_half..][..16];
                    for ((o, &q), &h) in out.iter_mut().zip(q).zip(hm) {
                        let q = ((q >> (2 * pair)) & 3) as i32 - if h & bit != 0 { 0 } else { 4 };
                        *o = dl * q as f32;
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scalar::testing;
    use bytemuck::Zeroable;

    fn round_trip(x: &[f32], w: Option<&[f32]>) -> Vec<f32> {
        testing::round_trip(quantize_row, dequantize_row, x, w)
    }

    #[test]
    fn round_trip_error_is_bounded() {
        let x = testing::wave(4 * QK_K, 11);
        let w: Vec<f32> = testing::wave(x.len(), 5)
            .iter()
            .map(|v| v.abs() + 0.1)
            .collect();
        for y in [round_trip(&x, None), round_trip(&x, Some(&w))] {
            let rmse = testing::rmse(&x, &y);
            // 3 bits over a range of 2: a step of ~0.29.
            assert!(rmse < 0.12, "rmse {rmse}");
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
        let x = vec![-0.75f32; QK_K];
        for v in round_trip(&x, None) {
            assert!((v + 0.75).abs() < 2e-3, "{v}");
        }
    }

    #[test]
    fn scales_round_trip() {
        let codes: [u8; SUB] = std::array::from_fn(|j| (j * 37 % 64) as u8);
        let packed = pack_scales(&codes);
        for (j, &c) in codes.iter().enumerate() {
            assert_eq!(scale(&packed, j), c as i32 - 32);
        }
    }

    #[test]
    fn dequantize_hand_built_block() {
        let mut b = BlockQ3K::zeroed();
        b.d = F16Le::from_f32(0.5);
        let mut codes = [32u8; SUB];
        codes[0] = 34; // scale 2
        codes[13] = 29; // scale -3: half 1, bit pair 2, byte half 1
        b.scales = pack_scales(&codes);
        b.qs[0] = 0b11;
        b.hmask[0] = 1; // element 0: high bit set -> q = 3
        b.qs[48] = 0b01_0000; // element 128 + 64 + 16 = 208, bits 4..6
        let mut y = [0.0f32; QK_K];
        dequantize_row(&[b], &mut y);
        assert_eq!(y[0], 0.5 * 2.0 * 3.0);
        assert_eq!(y[1], 0.5 * 2.0 * -4.0);
        assert_eq!(y[208], 0.5 * -3.0 * (1.0 - 4.0));
    }
}
