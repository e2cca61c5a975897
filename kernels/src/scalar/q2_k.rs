//! q2_K: 256 values per super-block in 16 sub-blocks of 16, 2-bit codes meaning
//! `d*sc*q - dmin*m` with 4-bit sub-block scales `sc` and mins `m`.
//! Mirrors `quantize_row_q2_K_ref`, `quantize_row_q2_K_impl` (the path `quantize_q2_K`
//! takes with an importance matrix) and `dequantize_row_q2_K` of ggml 0.26.0.

use super::kquant::{
    importance_weights, largest, make_qkx2_quants, make_qkx3_quants, make_qp_quants, pack_2bit,
    requantize_with_min, sum, sum_squares,
};
use crate::blocks::{BlockQ2K, QK_K};
use crate::num::{F16Le, nearest_int};

/// Sub-blocks per super-block.
pub(crate) const SUB: usize = QK_K / 16;

/// One row as `quantize_q2_K` does it: `quantize_row_q2_K_ref` without an importance
/// matrix, `quantize_row_q2_K_impl` with one (`imatrix` holds one weight per column).
pub fn quantize_row(x: &[f32], imatrix: Option<&[f32]>, y: &mut [BlockQ2K]) {
    debug_assert_eq!(x.len(), y.len() * QK_K);
    for (i, (xb, block)) in x.chunks_exact(QK_K).zip(y.iter_mut()).enumerate() {
        let l = match imatrix {
            None => choose_scales_ref(xb, block),
            Some(w) => choose_scales_weighted(xb, &w[QK_K * i..QK_K * (i + 1)], block),
        };
        finish(xb, l, block);
    }
}

/// `quantize_row_q2_K_ref` up to the final re-rounding: a `|x|`-weighted
/// `make_qkx2_quants` per sub-block, then the scales and mins mapped linearly to 0..15.
/// Returns the codes the search chose.
fn choose_scales_ref(x: &[f32], block: &mut BlockQ2K) -> [u8; QK_K] {
    let mut l = [0u8; QK_K];
    let mut scales = [0.0f32; SUB];
    let mut mins = [0.0f32; SUB];
    for (j, (xs, ls)) in x.chunks_exact(16).zip(l.chunks_exact_mut(16)).enumerate() {
        (scales[j], mins[j]) = search_ref(xs, ls);
    }
    store_scales_ref(&scales, &mins, block);
    l
}

/// The search of `quantize_row_q2_K_ref` for one sub-block of 16: codes into `l`,
/// `(scale, the_min)` returned.
pub(crate) fn search_ref(xs: &[f32], l: &mut [u8]) -> (f32, f32) {
    let mut laux = [0u8; 16];
    let mut weights = [0.0f32; 16];
    for (w, &v) in weights.iter_mut().zip(xs) {
        *w = v.abs();
    }
    make_qkx2_quants(16, 3, xs, &weights, l, &mut laux, -0.5, 0.1, 15, true)
}

/// The sub-block scales and mins of `quantize_row_q2_K_ref`, each mapped linearly to
/// 0..15 against the largest, into `block` (`scales`, `d`, `dmin`).
pub(crate) fn store_scales_ref(scales: &[f32; SUB], mins: &[f32; SUB], block: &mut BlockQ2K) {
    let max_scale = largest(scales);
    let max_min = largest(mins);
    if max_scale > 0.0 {
        let iscale = 15.0 / max_scale;
        for (sc, &s) in block.scales.iter_mut().zip(scales) {
            *sc = nearest_int(iscale * s) as u8;
        }
        block.d = F16Le::from_f32(max_scale / 15.0);
    } else {
        block.scales = [0; SUB];
        block.d = F16Le::from_f32(0.0);
    }
    if max_min > 0.0 {
        let iscale = 15.0 / max_min;
        for (sc, &m) in block.scales.iter_mut().zip(mins) {
            *sc |= (nearest_int(iscale * m) << 4) as u8;
        }
        block.dmin = F16Le::from_f32(max_min / 15.0);
    } else {
        block.dmin = F16Le::from_f32(0.0);
    }
}

/// `quantize_row_q2_K_impl` up to the final re-rounding: an importance-weighted
/// `make_qkx3_quants` per sub-block, then `make_qp_quants` for the scales and the mins.
/// Returns the codes the search chose.
fn choose_scales_weighted(x: &[f32], qw: &[f32], block: &mut BlockQ2K) -> [u8; QK_K] {
    let mut l = [0u8; QK_K];
    let mut scales = [0.0f32; SUB];
    let mut mins = [0.0f32; SUB];
    let mut sw = [0.0f32; SUB];
    let sigma2 = sum_squares(x) / QK_K as f32;
    for (j, ((xs, ws), ls)) in x
        .chunks_exact(16)
        .zip(qw.chunks_exact(16))
        .zip(l.chunks_exact_mut(16))
        .enumerate()
    {
        (scales[j], mins[j], sw[j]) = search_weighted(xs, ws, sigma2, ls);
    }
    store_scales_weighted(&scales, &mins, &sw, block);
    l
}

/// The search of `quantize_row_q2_K_impl` for one sub-block of 16 with importance values
/// `ws` (`sigma2` being the super-block's mean square): codes into `l`,
/// `(scale, the_min, sum of the weights)` returned.
pub(crate) fn search_weighted(
    xs: &[f32],
    ws: &[f32],
    sigma2: f32,
    l: &mut [u8],
) -> (f32, f32, f32) {
    let mut laux = [0u8; 16];
    let mut weight = [0.0f32; 16];
    importance_weights(xs, ws, sigma2, &mut weight);
    let (scale, min) = make_qkx3_quants(
        16,
        3,
        xs,
        Some(&weight),
        l,
        &mut laux,
        -0.9,
        0.05,
        36,
        false,
    );
    (scale, min, sum(&weight))
}

/// The sub-block scales and mins of `quantize_row_q2_K_impl`, each quantized to 4 bits by
/// `make_qp_quants` with the sub-blocks' weight sums `sw`, into `block`.
pub(crate) fn store_scales_weighted(
    scales: &[f32; SUB],
    mins: &[f32; SUB],
    sw: &[f32; SUB],
    block: &mut BlockQ2K,
) {
    let mut ls = [0u8; SUB];
    let mut lm = [0u8; SUB];
    let dm = make_qp_quants(SUB, 15, scales, &mut ls, sw);
    let mm = make_qp_quants(SUB, 15, mins, &mut lm, sw);
    block.d = F16Le::from_f32(dm);
    block.dmin = F16Le::from_f32(mm);
    for (sc, (&s, &m)) in block.scales.iter_mut().zip(ls.iter().zip(&lm)) {
        *sc = s | (m << 4);
    }
}

/// The steps both paths end with: every value re-rounded against its stored sub-block
/// scale and min (where the scale is not zero), then the codes packed.
fn finish(x: &[f32], mut l: [u8; QK_K], block: &mut BlockQ2K) {
    let d = block.d.to_f32();
    let dmin = block.dmin.to_f32();
    for ((xs, ls), &sc) in x
        .chunks_exact(16)
        .zip(l.chunks_exact_mut(16))
        .zip(&block.scales)
    {
        requantize_with_min(xs, d * (sc & 0xF) as f32, dmin * (sc >> 4) as f32, 3, ls);
    }
    pack_2bit(&l, &mut block.qs);
}

/// `dequantize_row_q2_K`: `y = d*sc*q - dmin*m`, evaluated as `(d*sc)*q - (dmin*m)`.
pub fn dequantize_row(x: &[BlockQ2K], y: &mut [f32]) {
    debug_assert_eq!(y.len(), x.len() * QK_K);
    for (block, yb) in x.iter().zip(y.chunks_exact_mut(QK_K)) {
        let d = block.d.to_f32();
        let min = block.dmin.to_f32();
        // Sub-block `sub` sits in half `sub/8`, bit pair `(sub%8)/2`, byte half `sub%2`:
        // each bit pair of a half is written by a call with the shift as a constant.
        for (half, (qs, yh)) in block
            .qs
            .as_chunks::<32>()
            .0
            .iter()
            .zip(yb.as_chunks_mut::<32>().0.chunks_exact_mut(4))
            .enumerate()
        {
            let scales = &block.scales[8 * half..8 * half + 8];
            put_pair::<0>(qs, &scales[0..2], d, min, &mut yh[0]);
            put_pair::<2>(qs, &scales[2..4], d, min, &mut yh[1]);
            put_pair::<4>(qs, &scales[4..6], d, min, &mut yh[2]);
            put_pair::<6>(qs, &scales[6..8], d, min, &mut yh[3]);
        }
    }
}

/// Two sub-blocks of 16 of q2_K: the bit pair at `SHIFT` of the 32 bytes `qs`, each half
/// with its scale byte.
#[inline(always)]
fn put_pair<const SHIFT: u32>(qs: &[u8; 32], scales: &[u8], d: f32, min: f32, y: &mut [f32; 32]) {
    for (&sc, (q, out)) in scales
        .iter()
        .zip(qs.as_chunks::<16>().0.iter().zip(y.as_chunks_mut::<16>().0))
    {
        let dl = d * (sc & 0xF) as f32;
        let ml = min * (sc >> 4) as f32;
        for (o, &q) in out.iter_mut().zip(q) {
            *o = dl * ((q >> SHIFT) & 3) as f32 - ml;
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
        let x = testing::wave(4 * QK_K, 7);
        let w: Vec<f32> = testing::wave(x.len(), 9)
            .iter()
            .map(|v| v.abs() + 0.1)
            .collect();
        for y in [round_trip(&x, None), round_trip(&x, Some(&w))] {
            let rmse = testing::rmse(&x, &y);
            // 2 bits over a range of 2: a step of ~0.67; rms error well under half of it.
            assert!(rmse < 0.25, "rmse {rmse}");
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
        let x = vec![0.5f32; QK_K];
        for v in round_trip(&x, None) {
            assert!((v - 0.5).abs() < 1e-3, "{v}");
        }
    }

    #[test]
    fn dequantize_hand_built_block() {
        let mut b = BlockQ2K::zeroed();
        b.d = F16Le::from_f32(0.5);
        b.dmin = F16Le::from_f32(0.25);
        b.scales[0] = 0x12; // sc 2, m 1
        b.scales[9] = 0x31; // sc 1, m 3: half 1, bit pair 0, byte half 1
        b.qs[0] = 0b11_10_01_11;
        b.qs[48] = 0b10;
        let mut y = [0.0f32; QK_K];
        dequantize_row(&[b], &mut y);
        assert_eq!(y[0], 0.5 * 2.0 * 3.0 - 0.25);
        assert_eq!(y[1], -0.25);
        assert_eq!(y[32], 0.5 * 2.0 * 0.0 - 0.0); // sub-block 2 has scale byte 0
        assert_eq!(y[144], 0.5 * 2.0 - 0.75);
    }
}
