//! q2_K with one 16-value sub-block per lane: the `make_qkx2_quants` (absolute errors) or,
//! with an importance matrix, `make_qkx3_quants` search in lanes
//! ([`super::kquant::qkx_search`]); the 4-bit scales and mins of a super-block in the
//! scalar code itself; the final re-rounding over elements. Mirrors
//! `scalar::q2_k::quantize_row`.

use super::kquant::{Level, importance_weights, qkx_search};
use super::lanes::{Lanes, MAX_LANES, Pair, transpose16};
use super::scale_min::{requantize_with_min, super_block_sigma2};
use crate::blocks::{BlockQ2K, QK_K};
use crate::scalar::kquant::pack_2bit;
use crate::scalar::q2_k::{
    SUB, search_ref, search_weighted, store_scales_ref, store_scales_weighted,
};

/// One row as `quantize_q2_K` does it (reference path without `qw`, `_impl` with it).
#[inline(always)]
pub(crate) fn quantize_row<V: Lanes>(x: &[f32], qw: Option<&[f32]>, y: &mut [BlockQ2K]) {
    let nsub = x.len() / 16;
    // Not `Option::map`: a closure would not inline the lane operations (see lanes.rs).
    #[allow(clippy::manual_map)]
    let sigma2 = match qw {
        Some(_) => Some(super_block_sigma2::<V>(x, 1.0)),
        None => None,
    };
    let mut scales = vec![0.0f32; nsub];
    let mut mins = vec![0.0f32; nsub];
    let mut sw = vec![0.0f32; nsub];
    let mut g = 0;
    while g < nsub {
        let left = nsub - g;
        g += if left >= Pair::<V>::N {
            search_group::<Pair<V>>(
                x,
                qw,
                sigma2.as_deref(),
                g,
                Pair::<V>::N,
                [&mut scales, &mut mins, &mut sw],
            )
        } else {
            search_group::<V>(
                x,
                qw,
                sigma2.as_deref(),
                g,
                V::N.min(left),
                [&mut scales, &mut mins, &mut sw],
            )
        };
    }
    for (b, (xb, block)) in x.chunks_exact(QK_K).zip(y.iter_mut()).enumerate() {
        let of = |v: &[f32]| -> [f32; SUB] { v[SUB * b..SUB * (b + 1)].try_into().unwrap() };
        match (qw, sigma2.as_ref()) {
            (Some(_), Some(_)) => store_scales_weighted(&of(&scales), &of(&mins), &of(&sw), block),
            _ => store_scales_ref(&of(&scales), &of(&mins), block),
        }
        let d_all = block.d.to_f32();
        let dmin_all = block.dmin.to_f32();
        let mut l = [0u8; QK_K];
        for (j, (xs, ls)) in xb.chunks_exact(16).zip(l.chunks_exact_mut(16)).enumerate() {
            let sc = block.scales[j];
            let d = d_all * (sc & 0xF) as f32;
            if d == 0.0 {
                // The search's own codes stay: get them from the scalar search.
                match (qw, sigma2.as_ref()) {
                    (Some(qw), Some(s2)) => {
                        let at = b * QK_K + 16 * j;
                        search_weighted(xs, &qw[at..at + 16], s2[b], ls);
                    }
                    _ => {
                        search_ref(xs, ls);
                    }
                }
                continue;
            }
            requantize_with_min::<V>(xs, d, dmin_all * (sc >> 4) as f32, 3, ls);
        }
        pack_2bit(&l, &mut block.qs);
    }
}

/// The searches of sub-blocks `g..g + count` (`count <= V::N`), one per lane; writes
/// their scales, mins and (weighted path) weight sums into `out`. Returns `count`.
#[inline(always)]
fn search_group<V: Lanes>(
    x: &[f32],
    qw: Option<&[f32]>,
    sigma2: Option<&[f32]>,
    g: usize,
    count: usize,
    out: [&mut [f32]; 3],
) -> usize {
    let mut lane_buf = [0.0f32; MAX_LANES];
    let xt: [V; 16] = transpose16(&x[g * 16..], count);
    let (scale, min) = match (qw, sigma2) {
        (Some(qw), Some(sigma2)) => {
            let wq: [V; 16] = transpose16(&qw[g * 16..], count);
            for (lane, s) in lane_buf.iter_mut().enumerate().take(count) {
                *s = sigma2[(g + lane) / SUB];
            }
            let (w, sum_w) = importance_weights(&xt, &wq, V::load(&lane_buf));
            sum_w.store(&mut lane_buf);
            out[2][g..g + count].copy_from_slice(&lane_buf[..count]);
            qkx_search::<V, 16, false>(&xt, &w, 3, (-0.9, 0.05, 36), Level::Qkx3)
        }
        _ => {
            let mut w = [V::splat(0.0); 16];
            for i in 0..16 {
                w[i] = xt[i].abs();
            }
            qkx_search::<V, 16, true>(&xt, &w, 3, (-0.5, 0.1, 15), Level::Qkx2)
        }
    };
    scale.store(&mut lane_buf);
    out[0][g..g + count].copy_from_slice(&lane_buf[..count]);
    min.store(&mut lane_buf);
    out[1][g..g + count].copy_from_slice(&lane_buf[..count]);
    count
}
