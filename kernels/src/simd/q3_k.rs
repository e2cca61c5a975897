//! q3_K with one 16-value sub-block per lane: the `make_q3_quants` search
//! ([`super::kquant::q3_scale`]) or, with an importance matrix, the `make_qx_quants` one
//! ([`super::kquant::qx_scale`]) in lanes; the 6-bit scales of a super-block in the scalar
//! code itself; the final re-rounding over elements. Mirrors `scalar::q3_k::quantize_row`.

use super::kquant::{importance_weights, q3_scale, qx_scale};
use super::lanes::{Lanes, MAX_LANES, Pair, transpose16};
use super::q6_k::requantize_symmetric;
use super::scale_min::super_block_sigma2;
use crate::blocks::{BlockQ3K, QK_K};
use crate::scalar::kquant::make_q3_quants;
use crate::scalar::q3_k::{
    SUB, pack_codes, scale, search_weighted, store_scales_ref, store_scales_weighted,
};

/// One row as `quantize_q3_K` does it (reference path without `qw`, `_impl` with it).
#[inline(always)]
pub(crate) fn quantize_row<V: Lanes>(x: &[f32], qw: Option<&[f32]>, y: &mut [BlockQ3K]) {
    let nsub = x.len() / 16;
    // Not `Option::map`: a closure would not inline the lane operations (see lanes.rs).
    #[allow(clippy::manual_map)]
    let sigma2 = match qw {
        Some(_) => Some(super_block_sigma2::<V>(x, 2.0)),
        None => None,
    };
    let mut scales = vec![0.0f32; nsub];
    let mut sw = vec![0.0f32; nsub];
    let mut g = 0;
    while g < nsub {
        let left = nsub - g;
        g += if left >= Pair::<V>::N {
            let count = Pair::<V>::N;
            search_group::<Pair<V>>(x, qw, sigma2.as_deref(), g, count, &mut scales, &mut sw)
        } else {
            let count = V::N.min(left);
            search_group::<V>(x, qw, sigma2.as_deref(), g, count, &mut scales, &mut sw)
        };
    }
    for (b, (xb, block)) in x.chunks_exact(QK_K).zip(y.iter_mut()).enumerate() {
        let of = |v: &[f32]| -> [f32; SUB] { v[SUB * b..SUB * (b + 1)].try_into().unwrap() };
        match (qw, sigma2.as_ref()) {
            (Some(_), Some(_)) => store_scales_weighted(&of(&scales), &of(&sw), block),
            _ => store_scales_ref(&of(&scales), block),
        }
        let d_all = block.d.to_f32();
        let mut l = [0i8; QK_K];
        for (j, (xs, ls)) in xb.chunks_exact(16).zip(l.chunks_exact_mut(16)).enumerate() {
            let d = d_all * scale(&block.scales, j) as f32;
            if d == 0.0 {
                // The search's own codes stay: get them from the scalar search.
                match (qw, sigma2.as_ref()) {
                    (Some(qw), Some(s2)) => {
                        let at = b * QK_K + 16 * j;
                        search_weighted(xs, &qw[at..at + 16], s2[b], ls);
                    }
                    _ => {
                        make_q3_quants(16, 4, xs, ls);
                    }
                }
                continue;
            }
            requantize_symmetric::<V>(xs, d, 4, ls);
        }
        pack_codes(l, block);
    }
}

/// The scales of sub-blocks `g..g + count` (`count <= V::N`), one per lane, and (weighted
/// path) their weight sums. Returns `count`.
#[inline(always)]
fn search_group<V: Lanes>(
    x: &[f32],
    qw: Option<&[f32]>,
    sigma2: Option<&[f32]>,
    g: usize,
    count: usize,
    scales: &mut [f32],
    sw: &mut [f32],
) -> usize {
    let mut lane_buf = [0.0f32; MAX_LANES];
    let xt: [V; 16] = transpose16(&x[g * 16..], count);
    let scale = match (qw, sigma2) {
        (Some(qw), Some(sigma2)) => {
            let wq: [V; 16] = transpose16(&qw[g * 16..], count);
            for (lane, s) in lane_buf.iter_mut().enumerate().take(count) {
                *s = sigma2[(g + lane) / SUB];
            }
            let (w, sum_w) = importance_weights(&xt, &wq, V::load(&lane_buf));
            sum_w.store(&mut lane_buf);
            sw[g..g + count].copy_from_slice(&lane_buf[..count]);
            qx_scale(&xt, Some(&w), 4)
        }
        _ => q3_scale(&xt, 4),
    };
    scale.store(&mut lane_buf);
    scales[g..g + count].copy_from_slice(&lane_buf[..count]);
    count
}
