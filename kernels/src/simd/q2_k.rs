//! q2_K with one 16-value sub-block per lane: the `make_qkx2_quants` (absolute errors) or,
//! with an importance matrix, `make_qkx3_quants` search in lanes
//! ([`super::kquant::qkx_search`]); the 4-bit scales and mins of a super-block in the
//! scalar code itself; the final re-rounding over elements. Mirrors
//! `scalar::q2_k::quantize_row`.

use super::kquant::{
    Level, SubBlockSearch, qkx_search, search_sub_blocks, store_lanes, sub_block_weights,
};
use super::lanes::{Lanes, store_as, transpose};
use super::q4_k_q5_k::{requantize_with_min, super_block_sigma2};
use crate::blocks::{BlockQ2K, QK_K};
use crate::scalar::kquant::pack_2bit;
use crate::scalar::q2_k::{
    SUB, search_ref, search_weighted, store_scales_ref, store_scales_weighted,
};

/// One row as `quantize_q2_K` does it (reference path without `qw`, `_impl` with it).
#[inline(always)]
pub(crate) fn quantize_row<V: Lanes>(x: &[f32], qw: Option<&[f32]>, y: &mut [BlockQ2K]) {
    let nsub = x.len() / 16;
    let sigma2 = super_block_sigma2::<V>(x, qw, 1.0);
    let mut search = Search {
        x,
        qw,
        sigma2: sigma2.as_deref(),
        scales: vec![0.0f32; nsub],
        mins: vec![0.0f32; nsub],
        sw: vec![0.0f32; nsub],
    };
    search_sub_blocks::<V>(nsub, &mut search, None);
    let Search {
        scales, mins, sw, ..
    } = search;
    for (b, (xb, block)) in x.chunks_exact(QK_K).zip(y.iter_mut()).enumerate() {
        let of = |v: &[f32]| -> [f32; SUB] { v[SUB * b..SUB * (b + 1)].try_into().unwrap() };
        match (qw, sigma2.as_ref()) {
            (Some(_), Some(_)) => store_scales_weighted(&of(&scales), &of(&mins), &of(&sw), block),
            _ => store_scales_ref(&of(&scales), &of(&mins), block),
        }
        let d_all = block.d.to_f32();
        let dmin_all = block.dmin.to_f32();
        let mut l = [0u8; QK_K];
        // An index loop: in a function this large the compiler may leave an iterator
        // adapter's constructor as a call.
        for j in 0..QK_K / 16 {
            let (xs, ls) = (&xb[16 * j..16 * j + 16], &mut l[16 * j..16 * j + 16]);
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

/// The searches of a row's 16-value sub-blocks: their scales, mins and (weighted path)
/// weight sums.
struct Search<'a> {
    x: &'a [f32],
    qw: Option<&'a [f32]>,
    sigma2: Option<&'a [f32]>,
    scales: Vec<f32>,
    mins: Vec<f32>,
    sw: Vec<f32>,
}

impl SubBlockSearch for Search<'_> {
    #[inline(always)]
    fn group<V: Lanes>(&mut self, g: usize, count: usize) {
        let xt: [V; 16] = transpose(&self.x[g * 16..], count);
        let (scale, min) = match (self.qw, self.sigma2) {
            (Some(qw), Some(sigma2)) => {
                let (w, sum_w) = sub_block_weights(&xt, qw, sigma2, SUB, g, count);
                store_lanes(sum_w, &mut self.sw[g..g + count]);
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
        store_lanes(scale, &mut self.scales[g..g + count]);
        store_lanes(min, &mut self.mins[g..g + count]);
    }
}

/// `dequantize_row_q2_K` in lanes (the ISA's narrow ones: bound by its writes), with
/// streaming stores for large outputs. Each half-block's 32 bytes are widened to integers
/// once; the bit pair of each quarter is picked from them by a shift and a four-entry
/// table (its value, exact in float), then `dl * q - ml` as the scalar code computes it.
#[inline(always)]
fn dequantize<V: Lanes>(x: &[BlockQ2K], y: &mut [f32], stream: bool) {
    match stream {
        true => dequantize_with::<V::Narrow, true>(x, y),
        false => dequantize_with::<V::Narrow, false>(x, y),
    }
}

#[inline(always)]
fn dequantize_with<V: Lanes, const STREAM: bool>(x: &[BlockQ2K], y: &mut [f32]) {
    const { assert!(V::N <= 16 && 16 % V::N == 0) };
    const LEVELS: [f32; 4] = [0.0, 1.0, 2.0, 3.0];
    for (block, yb) in x.iter().zip(y.chunks_exact_mut(QK_K)) {
        let (d, min) = (block.d.to_f32(), block.dmin.to_f32());
        for (half, (qs, yh)) in block
            .qs
            .chunks_exact(32)
            .zip(yb.chunks_exact_mut(128))
            .enumerate()
        {
            let mut q = [V::splat(0.0).c_int(); 32];
            for (k, qk) in q.iter_mut().take(32 / V::N).enumerate() {
                *qk = V::load_u8(&qs[k * V::N..]).c_int();
            }
            // Quarter p takes bit pair p; its first 16 values the scale byte 2p, the
            // next 16 the byte 2p + 1 (of this half's 8).
            for (p, y32) in yh.chunks_exact_mut(32).enumerate() {
                for (h, y16) in y32.chunks_exact_mut(16).enumerate() {
                    let sc = block.scales[8 * half + 2 * p + h];
                    let dl = V::splat(d * (sc & 0xF) as f32);
                    let ml = V::splat(min * (sc >> 4) as f32);
                    for k in (0..16).step_by(V::N) {
                        let bits = V::shr_int(q[(16 * h + k) / V::N], 2 * p as u32);
                        let v = dl.mul(V::lookup4(&LEVELS, bits)).sub(ml);
                        store_as::<V, STREAM>(v, &mut y16[k..]);
                    }
                }
            }
        }
    }
    if STREAM {
        V::stream_fence();
    }
}

super::row_codec!(
    /// q2_K.
    Q2_K => quantize_row, dequantize = dequantize
);
