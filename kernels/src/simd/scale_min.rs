//! q4_K and q5_K quantization with one 32-value sub-block per lane: AVX2's 8 lanes are one
//! super-block, AVX-512's 16 two, NEON's 4 half of one. The search runs in lanes
//! ([`super::kquant::qkx_search`]); choosing the 6-bit codes of a super-block is the
//! scalar code itself (`choose_scale_min_codes`); the final re-rounding runs over
//! elements. Mirrors `scalar::kquant::quantize_scale_min_super_block`.

use super::kquant::{Level, importance_weights, qkx_search};
use super::lanes::{Lanes, MAX_LANES, Pair, from_fn, transpose32};
use crate::blocks::QK_K;
use crate::scalar::kquant::{
    ScaleMinFormat, ScaleMinSuperBlock, choose_scale_min_codes, get_scale_min_k4, search_sub_block,
};

/// Quantizes one row (`x.len()` a multiple of 256, `qw` its importance weights) and hands
/// each finished super-block to `emit` in order.
#[inline(always)]
pub(crate) fn quantize_row<V: Lanes>(
    x: &[f32],
    qw: Option<&[f32]>,
    format: &ScaleMinFormat,
    mut emit: impl FnMut(usize, ScaleMinSuperBlock),
) {
    let nb = x.len() / QK_K;
    let nsub = nb * 8;
    // Not `Option::map`: a closure would not inline the lane operations (see lanes.rs).
    #[allow(clippy::manual_map)]
    let sigma2 = match qw {
        Some(_) => Some(super_block_sigma2::<V>(x, 2.0)),
        None => None,
    };
    let mut scales = vec![0.0f32; nsub];
    let mut mins = vec![0.0f32; nsub];
    let mut sw = vec![0.0f32; nsub];
    // Groups of 2N sub-blocks run as `Pair<V>` (latency hidden), the rest as `V`.
    let mut g = 0;
    while g < nsub {
        let left = nsub - g;
        let count = if left >= Pair::<V>::N {
            search_group::<Pair<V>>(
                x,
                qw,
                sigma2.as_deref(),
                format,
                g,
                Pair::<V>::N,
                &mut scales,
                &mut mins,
                &mut sw,
            )
        } else {
            search_group::<V>(
                x,
                qw,
                sigma2.as_deref(),
                format,
                g,
                V::N.min(left),
                &mut scales,
                &mut mins,
                &mut sw,
            )
        };
        g += count;
    }
    for b in 0..nb {
        let sub = |v: &[f32]| -> [f32; 8] { v[8 * b..8 * b + 8].try_into().unwrap() };
        let sw_b = sub(&sw);
        let (d, dmin, packed) =
            choose_scale_min_codes(&sub(&scales), &sub(&mins), qw.map(|_| &sw_b), format);
        let (d_all, dmin_all) = (d.to_f32(), dmin.to_f32());
        let xb = &x[b * QK_K..(b + 1) * QK_K];
        let mut l = [0u8; QK_K];
        for (j, (xs, ls)) in xb.chunks_exact(32).zip(l.chunks_exact_mut(32)).enumerate() {
            let (sc, m) = get_scale_min_k4(j, &packed);
            let d = d_all * sc as f32;
            if d == 0.0 {
                // The search's own codes stay: get them from the scalar search.
                let ws = qw.zip(sigma2.as_ref()).map(|(qw, s2)| {
                    let at = b * QK_K + 32 * j;
                    (&qw[at..at + 32], s2[b])
                });
                search_sub_block(xs, ws, format, ls);
                continue;
            }
            requantize_with_min::<V>(xs, d, dmin_all * m as f32, format.nmax, ls);
        }
        emit(
            b,
            ScaleMinSuperBlock {
                d,
                dmin,
                scales: packed,
                l,
            },
        );
    }
}

/// The scale search of sub-blocks `g..g + count` (`count <= V::N`), one per lane; writes
/// their scales, mins and (weighted path) weight sums. Returns `count`.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn search_group<V: Lanes>(
    x: &[f32],
    qw: Option<&[f32]>,
    sigma2: Option<&[f32]>,
    format: &ScaleMinFormat,
    g: usize,
    count: usize,
    scales: &mut [f32],
    mins: &mut [f32],
    sw: &mut [f32],
) -> usize {
    let mut lane_buf = [0.0f32; MAX_LANES];
    let xt: [V; 32] = transpose32(&x[g * 32..], count);
    let zero = V::splat(0.0);
    let (scale, min) = match (qw, sigma2) {
        (Some(qw), Some(sigma2)) => {
            let wq: [V; 32] = transpose32(&qw[g * 32..], count);
            let s2: V = from_fn(|lane| sigma2.get((g + lane) / 8).copied().unwrap_or(0.0));
            let (w, sum_w) = importance_weights(&xt, &wq, s2);
            sum_w.store(&mut lane_buf);
            sw[g..g + count].copy_from_slice(&lane_buf[..count]);
            qkx_search::<V, 32, false>(&xt, &w, format.nmax, (-0.9, 0.05, 36), Level::Qkx3)
        }
        _ => {
            let mut ss = zero;
            for xi in &xt {
                ss = ss.add(xi.mul(*xi));
            }
            let av_x = ss.div(V::splat(32.0)).sqrt();
            let mut w = [zero; 32];
            for i in 0..32 {
                w[i] = av_x.add(xt[i].abs());
            }
            qkx_search::<V, 32, false>(&xt, &w, format.nmax, format.ref_search, Level::Qkx2)
        }
    };
    scale.store(&mut lane_buf);
    scales[g..g + count].copy_from_slice(&lane_buf[..count]);
    min.store(&mut lane_buf);
    mins[g..g + count].copy_from_slice(&lane_buf[..count]);
    count
}

/// `factor * sum(x²) / 256` of every super-block of the row, one super-block per lane
/// (each lane sums its 256 squares in order, as the scalar loop does; a factor of 1 leaves
/// the sum as it is).
#[inline(always)]
pub(crate) fn super_block_sigma2<V: Lanes>(x: &[f32], factor: f32) -> Vec<f32> {
    let nb = x.len() / QK_K;
    let mut out = vec![0.0f32; nb];
    let mut buf = [0.0f32; MAX_LANES];
    for g in (0..nb).step_by(V::N) {
        let count = V::N.min(nb - g);
        let mut acc = V::splat(0.0);
        for i in 0..QK_K {
            let v: V = from_fn(|lane| {
                if lane < count {
                    x[(g + lane) * QK_K + i]
                } else {
                    0.0
                }
            });
            acc = acc.add(v.mul(v));
        }
        V::splat(factor)
            .mul(acc)
            .div(V::splat(QK_K as f32))
            .store(&mut buf);
        out[g..g + count].copy_from_slice(&buf[..count]);
    }
    out
}

/// `l = clamp(nearest_int((x + dm) / d), 0, nmax)` over a sub-block (a whole number of
/// vectors: 16 or 32 values).
#[inline(always)]
pub(crate) fn requantize_with_min<V: Lanes>(x: &[f32], d: f32, dm: f32, nmax: i32, l: &mut [u8]) {
    let (dv, dmv) = (V::splat(d), V::splat(dm));
    for (xs, ls) in x.chunks_exact(V::N).zip(l.chunks_exact_mut(V::N)) {
        let q = V::load(xs).add(dmv).div(dv).nearest_int();
        V::store_u8(V::clamp_int(q, 0, nmax), ls);
    }
}
