//! iq4_nl: 32 weights per block, 4-bit indices into the non-linear levels
//! [`KVALUES_IQ4NL`] times an fp16 scale. Mirrors ggml's `quantize_iq4_nl` and
//! `dequantize_row_iq4_nl`, and holds the search both iq4 formats share,
//! `quantize_row_iq4_nl_impl` with `best_index_int8`.

use super::kquant::{GROUP_MAX_EPS, signed_abs_max};
use super::tables::KVALUES_IQ4NL;
use crate::blocks::{BlockIq4Nl, QK_K};
use crate::num::{F16Le, nearest_int};

const QK: usize = 32;

/// The `ntry` that `quantize_iq4_nl` and `quantize_iq4_xs` pass: the scale search tries
/// `2 * NTRY + 1` candidates, and the indices are always re-derived from the final scale.
const NTRY: i32 = 7;

/// `best_index_int8`: the index of the level of the sorted `val` nearest to `x` (by
/// bisection; on an exact tie between two levels, the upper one).
#[inline(always)]
fn best_index_int8(val: &[i8], x: f32) -> usize {
    let n = val.len();
    if x <= val[0] as f32 {
        return 0;
    }
    if x >= val[n - 1] as f32 {
        return n - 1;
    }
    let (mut ml, mut mu) = (0, n - 1);
    while mu - ml > 1 {
        let mav = (ml + mu) / 2;
        if x < val[mav] as f32 {
            mu = mav;
        } else {
            ml = mav;
        }
    }
    if x - (val[mu - 1] as f32) < val[mu] as f32 - x {
        mu - 1
    } else {
        mu
    }
}

/// What [`quantize_impl`] stores besides the packed indices.
pub(crate) struct Iq4Scales {
    /// The (super-)block scale.
    pub d: F16Le,
    /// High 2 bits of the 6-bit sub-block scales (iq4_xs only; 0 for a single block).
    pub scales_h: u16,
    /// Low 4 bits of the sub-block scales, two per byte (iq4_xs only; 0 for a single block).
    pub scales_l: [u8; QK_K / 64],
}

/// `quantize_row_iq4_nl_impl` with `block_size = 32`, `values = kvalues_iq4nl` and
/// `ntry = 7`, over one (super-)block `x` of 32 (iq4_nl) or 256 (iq4_xs) weights, with the
/// importance weights `qw` of the same span if any. Writes the packed indices to `q4`
/// (`x.len() / 2` bytes: per 32 weights, element `j` in the low nibble of byte `j` and
/// element `j + 16` in its high nibble).
pub(super) fn quantize_impl(x: &[f32], qw: Option<&[f32]>, q4: &mut [u8]) -> Iq4Scales {
    let super_block_size = x.len();
    let nb = super_block_size / QK;

    let mut sigma2 = 0.0f32;
    for &v in x {
        sigma2 += v * v;
    }
    sigma2 *= 2.0 / super_block_size as f32;

    let mut scales = [0.0f32; QK_K / QK];
    let mut weight = [0.0f32; QK];
    for ib in 0..nb {
        let xb = &x[ib * QK..(ib + 1) * QK];
        match qw {
            Some(qw) => {
                let qw = &qw[ib * QK..(ib + 1) * QK];
                for j in 0..QK {
                    weight[j] = qw[j] * (sigma2 + xb[j] * xb[j]).sqrt();
                }
            }
            None => {
                for j in 0..QK {
                    weight[j] = xb[j] * xb[j];
                }
            }
        }
        scales[ib] = block_scale(xb, &weight);
    }

    let (out, inverse) = scale_codes(&scales[..nb]);
    for (ib, (xb, q)) in x
        .chunks_exact(QK)
        .zip(q4.chunks_exact_mut(QK / 2))
        .enumerate()
    {
        for j in 0..QK / 2 {
            let l1 = best_index_int8(&KVALUES_IQ4NL, inverse[ib] * xb[j]) as u8;
            let l2 = best_index_int8(&KVALUES_IQ4NL, inverse[ib] * xb[j + QK / 2]) as u8;
            q[j] = l1 | (l2 << 4);
        }
    }
    out
}

/// The scale search of one block of 32 weights `xb` with weights `weight`: the block's
/// scale (0 when its absolute maximum is below `GROUP_MAX_EPS`).
pub(crate) fn block_scale(xb: &[f32], weight: &[f32; QK]) -> f32 {
    let values = &KVALUES_IQ4NL;
    let (amax, max) = signed_abs_max(xb);
    if amax < GROUP_MAX_EPS {
        return 0.0;
    }
    // ggml also records the indices of this first pass, but with ntry > 0 they are
    // always recomputed from the final scale.
    let (sumqx, sumq2) = level_sums(xb, weight, 1.0 / (-max / values[0] as f32));
    let mut d = if sumq2 > 0.0 { sumqx / sumq2 } else { 0.0 };
    let mut best = d * sumqx;
    for itry in -NTRY..=NTRY {
        let id = (itry + values[0] as i32) as f32 / max;
        let (sumqx, sumq2) = level_sums(xb, weight, id);
        if sumq2 > 0.0 && sumqx * sumqx > best * sumq2 {
            d = sumqx / sumq2;
            best = d * sumqx;
        }
    }
    d
}

/// `(sum w*q*x, sum w*q*q)` over the levels `q` nearest to `id * x`.
fn level_sums(xb: &[f32], weight: &[f32; QK], id: f32) -> (f32, f32) {
    let values = &KVALUES_IQ4NL;
    let mut sumqx = 0.0f32;
    let mut sumq2 = 0.0f32;
    for (&x, &w) in xb.iter().zip(weight) {
        let q = values[best_index_int8(values, id * x)] as f32;
        sumqx += w * q * x;
        sumq2 += w * q * q;
    }
    (sumqx, sumq2)
}

/// From the block scales of a (super-)block: the stored scales, and per block the inverse
/// scale its indices are derived with (`best_index_int8(inverse * x)`). One block stores
/// its scale as the fp16 `d`; several store `d = -max/32` (the first scale of largest
/// magnitude) and 6-bit codes `nearest_int(scale/d)`, each block's indices then following
/// from its coded scale `d * code`.
pub(crate) fn scale_codes(scales: &[f32]) -> (Iq4Scales, [f32; QK_K / QK]) {
    let mut max_scale = 0.0f32;
    let mut amax_scale = 0.0f32;
    for &d in scales {
        if d.abs() > amax_scale {
            amax_scale = d.abs();
            max_scale = d;
        }
    }
    let mut out = Iq4Scales {
        d: F16Le::from_f32(0.0),
        scales_h: 0,
        scales_l: [0; QK_K / 64],
    };
    let mut inverse = [0.0f32; QK_K / QK];
    if scales.len() > 1 {
        let d = -max_scale / 32.0;
        out.d = F16Le::from_f32(d);
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        for (ib, &scale) in scales.iter().enumerate() {
            let mut l = nearest_int(id * scale).clamp(-32, 31);
            let dl = d * l as f32;
            inverse[ib] = if dl != 0.0 { 1.0 / dl } else { 0.0 };
            l += 32;
            let l_l = (l & 0xf) as u8;
            let l_h = (l >> 4) as u16;
            out.scales_l[ib / 2] |= l_l << (4 * (ib % 2));
            out.scales_h |= l_h << (2 * (ib % 8));
        }
    } else {
        out.d = F16Le::from_f32(scales[0]);
        inverse[0] = if scales[0] != 0.0 {
            1.0 / scales[0]
        } else {
            0.0
        };
    }
    (out, inverse)
}

/// One row as `quantize_iq4_nl` does it (with or without importance weights; ggml's
/// `quantize_row_iq4_nl_ref`, which searches differently, is not what
/// `ggml_quantize_chunk` runs).
pub fn quantize_row(x: &[f32], imatrix: Option<&[f32]>, y: &mut [BlockIq4Nl]) {
    for (ib, (xb, block)) in x.chunks_exact(QK).zip(y.iter_mut()).enumerate() {
        let qw = imatrix.map(|w| &w[ib * QK..(ib + 1) * QK]);
        block.d = quantize_impl(xb, qw, &mut block.qs).d;
    }
}

/// `dequantize_row_iq4_nl`: `d * kvalues_iq4nl[index]`.
#[inline(always)]
pub fn dequantize_row(x: &[BlockIq4Nl], y: &mut [f32]) {
    for (block, yb) in x.iter().zip(y.chunks_exact_mut(QK)) {
        let d = block.d.to_f32();
        for j in 0..QK / 2 {
            yb[j] = d * KVALUES_IQ4NL[(block.qs[j] & 0xf) as usize] as f32;
            yb[j + QK / 2] = d * KVALUES_IQ4NL[(block.qs[j] >> 4) as usize] as f32;
        }
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// A deterministic pseudo-random row, roughly uniform in [-scale, scale).
    pub(in crate::scalar) fn noise(n: usize, seed: u32, scale: f32) -> Vec<f32> {
        let mut s = seed.max(1);
        (0..n)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 17;
                s ^= s << 5;
                (s as f32 / u32::MAX as f32 * 2.0 - 1.0) * scale
            })
            .collect()
    }

    #[test]
    fn best_index_picks_nearest_level() {
        let v = &KVALUES_IQ4NL;
        assert_eq!(best_index_int8(v, -1000.0), 0);
        assert_eq!(best_index_int8(v, 1000.0), 15);
        assert_eq!(best_index_int8(v, 0.0), 8);
        assert_eq!(best_index_int8(v, -4.6), 7);
        assert_eq!(best_index_int8(v, -4.4), 8);
        // Exact midpoint of -10 and 1: the upper level.
        assert_eq!(best_index_int8(v, -4.5), 8);
        assert_eq!(best_index_int8(v, 100.0), 14);
        assert_eq!(best_index_int8(v, 102.0), 15);
        for (i, &k) in v.iter().enumerate() {
            assert_eq!(best_index_int8(v, k as f32), i);
        }
    }

    #[test]
    fn zero_row_gives_zero_scale_and_middle_indices() {
        let x = [0.0f32; 64];
        let mut y = [<BlockIq4Nl as bytemuck::Zeroable>::zeroed(); 2];
        quantize_row(&x, None, &mut y);
        for block in &y {
            assert_eq!(block.d.bits(), 0);
            // best_index_int8(0) = 8 (level 1).
            assert_eq!(block.qs, [0x88; 16]);
        }
        let mut back = [1.0f32; 64];
        dequantize_row(&y, &mut back);
        assert!(back.iter().all(|&v| v == 0.0));
    }

    #[test]
    fn zero_importance_gives_zero_scale() {
        let x = noise(32, 7, 1.0);
        let mut y = [<BlockIq4Nl as bytemuck::Zeroable>::zeroed()];
        quantize_row(&x, Some(&[0.0; 32]), &mut y);
        assert_eq!(y[0].d.bits(), 0);
        assert_eq!(y[0].qs, [0x88; 16]);
        quantize_row(&x, None, &mut y);
        assert_ne!(y[0].d.bits(), 0);
    }

    #[test]
    fn representable_block_round_trips_exactly() {
        // Every level once, times 0.5, in a scrambled order, twice.
        let x: Vec<f32> = (0..32)
            .map(|j| KVALUES_IQ4NL[(j * 7 + 3) % 16] as f32 * 0.5)
            .collect();
        for w in [None, Some(&[1.0f32; 32][..])] {
            let mut y = [<BlockIq4Nl as bytemuck::Zeroable>::zeroed()];
            quantize_row(&x, w, &mut y);
            assert_eq!(y[0].d.to_f32(), 0.5);
            let mut back = [0.0f32; 32];
            dequantize_row(&y, &mut back);
            assert_eq!(back[..], x[..]);
        }
    }

    #[test]
    fn round_trip_error_is_small() {
        let x = noise(32 * 64, 12345, 3.0);
        let w: Vec<f32> = noise(x.len(), 99, 1.0)
            .iter()
            .map(|v| v.abs() + 0.1)
            .collect();
        for imatrix in [None, Some(&w[..])] {
            let mut y = vec![<BlockIq4Nl as bytemuck::Zeroable>::zeroed(); 64];
            quantize_row(&x, imatrix, &mut y);
            let mut back = vec![0.0f32; x.len()];
            dequantize_row(&y, &mut back);
            for (xb, bb) in x.chunks(32).zip(back.chunks(32)) {
                let amax = xb.iter().fold(0.0f32, |m, v| m.max(v.abs()));
                let err2: f32 = xb.iter().zip(bb).map(|(a, b)| (a - b) * (a - b)).sum();
                let rms = (err2 / 32.0).sqrt();
                assert!(rms < 0.06 * amax, "rms {rms} amax {amax}");
                for (a, b) in xb.iter().zip(bb) {
                    assert!((a - b).abs() <= 0.2 * amax, "{a} -> {b}");
                }
            }
        }
    }
}
