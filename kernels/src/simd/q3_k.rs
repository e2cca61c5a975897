//! q3_K with one 16-value sub-block per lane: the `make_q3_quants` search
//! ([`super::kquant::q3_scale`]) or, with an importance matrix, the `make_qx_quants` one
//! ([`super::kquant::qx_scale`]) in lanes; the 6-bit scales of a super-block in the scalar
//! code itself; the final re-rounding over elements. Mirrors `scalar::q3_k::quantize_row`.

use super::kquant::{
    SubBlockSearch, q3_scale, qx_scale, search_sub_blocks, store_lanes, sub_block_weights,
};
use super::lanes::{Lanes, transpose};
use super::q4_k_q5_k::super_block_sigma2;
use super::q6_k::requantize_symmetric;
use crate::blocks::{BlockQ3K, QK_K};
use crate::scalar::kquant::make_q3_quants;
use crate::scalar::q3_k::{
    SUB, pack_codes, scale, search_weighted, store_scales_ref, store_scales_weighted,
};

/// One row as `quantize_q3_K` does it (reference path without `qw`, `_impl` with it).
#[inline(always)]
pub(crate) fn quantize_row<V: Lanes>(x: &[f32], qw: Option<&[f32]>, y: &mut [BlockQ3K]) {
    let nsub = x.len() / 16;
    let sigma2 = super_block_sigma2::<V>(x, qw, 2.0);
    let mut search = Search {
        x,
        qw,
        sigma2: sigma2.as_deref(),
        scales: vec![0.0f32; nsub],
        sw: vec![0.0f32; nsub],
    };
    search_sub_blocks::<V>(nsub, &mut search, None);
    let Search { scales, sw, .. } = search;
    for (b, (xb, block)) in x.chunks_exact(QK_K).zip(y.iter_mut()).enumerate() {
        let of = |v: &[f32]| -> [f32; SUB] { v[SUB * b..SUB * (b + 1)].try_into().unwrap() };
        match (qw, sigma2.as_ref()) {
            (Some(_), Some(_)) => store_scales_weighted(&of(&scales), &of(&sw), block),
            _ => store_scales_ref(&of(&scales), block),
        }
        let d_all = block.d.to_f32();
        let mut l = [0i8; QK_K];
        // An index loop: in a function this large the compiler may leave an iterator
        // adapter's constructor as a call.
        for j in 0..QK_K / 16 {
            let (xs, ls) = (&xb[16 * j..16 * j + 16], &mut l[16 * j..16 * j + 16]);
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

/// The searches of a row's 16-value sub-blocks: their scales and (weighted path) weight
/// sums.
struct Search<'a> {
    x: &'a [f32],
    qw: Option<&'a [f32]>,
    sigma2: Option<&'a [f32]>,
    scales: Vec<f32>,
    sw: Vec<f32>,
}

impl SubBlockSearch for Search<'_> {
    #[inline(always)]
    fn group<V: Lanes>(&mut self, g: usize, count: usize) {
        let xt: [V; 16] = transpose(&self.x[g * 16..], count);
        let scale = match (self.qw, self.sigma2) {
            (Some(qw), Some(sigma2)) => {
                let (w, sum_w) = sub_block_weights(&xt, qw, sigma2, SUB, g, count);
                store_lanes(sum_w, &mut self.sw[g..g + count]);
                qx_scale(&xt, Some(&w), 4)
            }
            _ => q3_scale(&xt, 4),
        };
        store_lanes(scale, &mut self.scales[g..g + count]);
    }
}

super::row_codec!(
    /// q3_K.
    Q3_K => quantize_row, q3_k
);
