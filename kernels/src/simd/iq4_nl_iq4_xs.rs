//! iq4_nl and iq4_xs with one 32-value block per lane: mirrors `scalar::iq4_nl` and
//! `scalar::iq4_xs` (`quantize_row_iq4_nl_impl` with `ntry = 7`). Each lane runs the
//! scalar sequence of its block: the weights, the first guess, the 15 trial scales and
//! their sums; iq4_xs's 6-bit scale codes are the scalar code (`scale_codes`); the final
//! indices run over elements.
//!
//! `best_index_int8`'s bisection becomes a branch-free binary search over the 16 sorted
//! levels (table lookups by lane): it ends on the same pair of neighbouring levels, and the
//! nearer one is chosen by the same two float differences.

use super::kquant::{
    SubBlockSearch, importance_weights, search_sub_blocks, signed_abs_max, store_lanes,
    sub_block_weights,
};
use super::lanes::{Lanes, store_as, transpose};
use super::q4_k_q5_k::super_block_sums;
use crate::blocks::{BlockIq4Nl, BlockIq4Xs, QK_K};
use crate::scalar::iq4_nl::scale_codes;
use crate::scalar::kquant::GROUP_MAX_EPS;
use crate::scalar::tables::KVALUES_IQ4NL;

const QK: usize = 32;

/// The levels as floats, and each level's upper neighbour (the last level's is itself).
struct Levels {
    at: [f32; 16],
    next: [f32; 16],
}

const LEVELS: Levels = {
    let mut at = [0.0f32; 16];
    let mut next = [0.0f32; 16];
    let mut k = 0;
    while k < 16 {
        at[k] = KVALUES_IQ4NL[k] as f32;
        next[k] = KVALUES_IQ4NL[if k < 15 { k + 1 } else { 15 }] as f32;
        k += 1;
    }
    Levels { at, next }
};

/// Level `k` in every lane.
#[inline(always)]
fn level<V: Lanes>(k: usize) -> V {
    V::splat(LEVELS.at[k])
}

/// `best_index_int8(16, kvalues_iq4nl, x)` per lane, as the index (a float) and its level.
///
/// The search finds the last level at most `x` (level 0 if none is), `lo`, and its upper
/// neighbour `hi`; `x - lo < hi - x` picks `lo`, else `hi`. The scalar bisection keeps
/// `val[ml] <= x < val[mu]` and ends with `mu = ml + 1` on the same pair. Its boundary
/// cases agree too: at or below level 0, `x - lo <= 0 < hi - x` gives 0; at or above the
/// last level (or NaN, which no comparison stops), `lo = hi = 113` and the index, capped
/// at 15, is 15, as C's `x >= val[15]` test (or its bisection, for NaN) gives.
#[inline(always)]
fn nearest_level<V: Lanes>(x: V) -> (V, V) {
    // The first two steps pick among constants: level 8, then level 4 or 12.
    let below = x.lt(level::<V>(8));
    let mut pos = V::select(below, V::splat(0.0), V::splat(8.0));
    let mut lo = V::select(below, level::<V>(0), level::<V>(8));
    let cand_pos = pos.add(V::splat(4.0));
    let cand = V::select(below, level::<V>(4), level::<V>(12));
    let below = x.lt(cand);
    pos = V::select(below, pos, cand_pos);
    lo = V::select(below, lo, cand);
    for step in [2.0f32, 1.0] {
        let cand_pos = pos.add(V::splat(step));
        let cand = V::lookup16(&LEVELS.at, cand_pos.c_int());
        let below = x.lt(cand);
        pos = V::select(below, pos, cand_pos);
        lo = V::select(below, lo, cand);
    }
    let hi = V::lookup16(&LEVELS.next, pos.c_int());
    let take_lo = x.sub(lo).lt(hi.sub(x));
    (
        V::select(take_lo, pos, pos.add(V::splat(1.0)).min(V::splat(15.0))),
        V::select(take_lo, lo, hi),
    )
}

/// The sums `(sum w*q*x, sum w*q*q)` over the levels `q` that `id*x` picks.
#[inline(always)]
fn level_sums<V: Lanes>(x: &[V; QK], w: &[V; QK], id: V) -> (V, V) {
    let mut sumqx = V::splat(0.0);
    let mut sumq2 = V::splat(0.0);
    for j in 0..QK {
        let (_, q) = nearest_level(id.mul(x[j]));
        let wq = w[j].mul(q);
        sumqx = sumqx.add(wq.mul(x[j]));
        sumq2 = sumq2.add(wq.mul(q));
    }
    (sumqx, sumq2)
}

/// The block scale `quantize_row_iq4_nl_impl` finds for 32 values per lane with weights
/// `w`: 0 where the absolute maximum is below `GROUP_MAX_EPS`.
#[inline(always)]
pub(crate) fn block_scale<V: Lanes>(x: &[V; QK], w: &[V; QK]) -> V {
    let zero = V::splat(0.0);
    let (amax, max) = signed_abs_max(x);
    let v0 = LEVELS.at[0];
    // `-max / values[0]`; the negation is a sign flip.
    let d0 = max.mul(V::splat(-1.0)).div(V::splat(v0));
    let (sumqx, sumq2) = level_sums(x, w, V::splat(1.0).div(d0));
    let mut d = V::select(sumq2.gt(zero), sumqx.div(sumq2), zero);
    let mut best = d.mul(sumqx);
    for itry in -7i32..=7 {
        let id = V::splat((itry + v0 as i32) as f32).div(max);
        let (sumqx, sumq2) = level_sums(x, w, id);
        let better = V::and(sumq2.gt(zero), sumqx.mul(sumqx).gt(best.mul(sumq2)));
        d = V::select(better, sumqx.div(sumq2), d);
        best = V::select(better, d.mul(sumqx), best);
    }
    V::select(amax.lt(V::splat(GROUP_MAX_EPS)), zero, d)
}

/// The block scales of a row: one 32-value block per lane, each block's `sigma2` from
/// its own values (iq4_nl) or from its super-block's (iq4_xs, in `sigma2`).
struct Search<'a> {
    x: &'a [f32],
    qw: Option<&'a [f32]>,
    /// iq4_xs with importance values: `2 * sum(x*x) / 256` per super-block.
    sigma2: Option<&'a [f32]>,
    scales: Vec<f32>,
}

impl SubBlockSearch for Search<'_> {
    #[inline(always)]
    fn group<W: Lanes>(&mut self, g: usize, count: usize) {
        let xt: [W; QK] = transpose(&self.x[g * QK..], count);
        let w = match (self.qw, self.sigma2) {
            (Some(qw), Some(s2)) => sub_block_weights(&xt, qw, s2, 8, g, count).0,
            (Some(qw), None) => {
                // iq4_nl: `2 * sum(x*x) / 32` of the block itself, summed in order.
                let mut ss = W::splat(0.0);
                for xi in &xt {
                    ss = ss.add(xi.mul(*xi));
                }
                let wq: [W; QK] = transpose(&qw[g * QK..], count);
                importance_weights(&xt, &wq, ss.mul(W::splat(2.0 / QK as f32))).0
            }
            (None, _) => {
                let mut w = [W::splat(0.0); QK];
                for (wi, xi) in w.iter_mut().zip(&xt) {
                    *wi = xi.mul(*xi);
                }
                w
            }
        };
        store_lanes(block_scale(&xt, &w), &mut self.scales[g..g + count]);
    }
}

/// The packed indices `best_index_int8(id * x)` of one block of 32 values into `q` (16
/// bytes: element `j` low, element `j + 16` high), over elements (`V::N` divides 16).
#[inline(always)]
fn block_codes<V: Lanes>(xb: &[f32], id: f32, q: &mut [u8]) {
    let id = V::splat(id);
    for k in (0..QK / 2).step_by(V::N) {
        let (l1, _) = nearest_level(id.mul(V::load(&xb[k..])));
        let (l2, _) = nearest_level(id.mul(V::load(&xb[QK / 2 + k..])));
        V::store_u8(l1.add(l2.mul(V::splat(16.0))).c_int(), &mut q[k..]);
    }
}

/// `quantize_iq4_nl` of one row (`x.len()` a multiple of 32), with importance values `qw`
/// if any.
#[inline(always)]
pub(crate) fn quantize_iq4_nl<V: Lanes>(x: &[f32], qw: Option<&[f32]>, y: &mut [BlockIq4Nl]) {
    let nb = x.len() / QK;
    let mut search = Search {
        x,
        qw,
        sigma2: None,
        scales: vec![0.0; nb],
    };
    search_sub_blocks::<V>(nb, &mut search, None);
    for ((block, xb), &scale) in y.iter_mut().zip(x.chunks_exact(QK)).zip(&search.scales) {
        let (out, inverse) = scale_codes(&[scale]);
        block.d = out.d;
        block_codes::<V>(xb, inverse[0], &mut block.qs);
    }
}

/// `quantize_iq4_xs` of one row (`x.len()` a multiple of 256), with importance values
/// `qw` if any: the block scales in lanes, their 6-bit codes as the scalar code makes
/// them, the indices over elements.
#[inline(always)]
pub(crate) fn quantize_iq4_xs<V: Lanes>(x: &[f32], qw: Option<&[f32]>, y: &mut [BlockIq4Xs]) {
    let nb = x.len() / QK_K;
    // `sigma2 *= 2.f/super_block_size`, after the sum in order.
    let sigma2 = match qw {
        Some(_) => {
            let mut sums = super_block_sums::<V>(x);
            for s in &mut sums {
                *s *= 2.0 / QK_K as f32;
            }
            Some(sums)
        }
        None => None,
    };
    let mut search = Search {
        x,
        qw,
        sigma2: sigma2.as_deref(),
        scales: vec![0.0; nb * 8],
    };
    search_sub_blocks::<V>(nb * 8, &mut search, None);
    for (b, (block, xs)) in y.iter_mut().zip(x.chunks_exact(QK_K)).enumerate() {
        let (out, inverse) = scale_codes(&search.scales[8 * b..8 * b + 8]);
        block.d = out.d;
        block.scales_h = out.scales_h.to_le_bytes();
        block.scales_l = out.scales_l;
        for ((xb, q), &id) in xs
            .chunks_exact(QK)
            .zip(block.qs.chunks_exact_mut(QK / 2))
            .zip(&inverse)
        {
            block_codes::<V>(xb, id, q);
        }
    }
}

/// One run of 16 bytes of 4-bit indices at scale `dl`: `y[j] = dl * kvalues[q[j] & 15]`
/// and `y[j + 16] = dl * kvalues[q[j] >> 4]`, the scalar code's one product per value
/// (`dl` first, as there, which decides a NaN's payload). The nibbles are split in float
/// as q4_0's are (`hi = (int)(q/16)`, `lo = q - 16*hi`: exact), then pick their level by
/// lane. `STREAM` stores around the caches (the caller fences after the last).
#[inline(always)]
fn put_levels<V: Lanes, const STREAM: bool>(qs: &[u8], dl: f32, y: &mut [f32]) {
    let (dl, sixteenth, sixteen) = (V::splat(dl), V::splat(0.0625), V::splat(16.0));
    let (lo_out, hi_out) = y.split_at_mut(QK / 2);
    for k in (0..QK / 2).step_by(V::N) {
        let q = V::load_u8(&qs[k..]);
        let hi = q.mul(sixteenth).c_int();
        let lo = q.sub(V::int_to_f32(hi).mul(sixteen)).c_int();
        let (lo, hi) = (
            dl.mul(V::lookup16(&LEVELS.at, lo)),
            dl.mul(V::lookup16(&LEVELS.at, hi)),
        );
        store_as::<V, STREAM>(lo, &mut lo_out[k..]);
        store_as::<V, STREAM>(hi, &mut hi_out[k..]);
    }
}

/// `dequantize_row_iq4_nl` in lanes (the ISA's narrow ones: bound by its writes).
#[inline(always)]
fn dequantize_iq4_nl<V: Lanes>(x: &[BlockIq4Nl], y: &mut [f32], stream: bool) {
    #[inline(always)]
    fn run<V: Lanes, const STREAM: bool>(x: &[BlockIq4Nl], y: &mut [f32]) {
        for (block, yb) in x.iter().zip(y.chunks_exact_mut(QK)) {
            put_levels::<V, STREAM>(&block.qs, block.d.to_f32(), yb);
        }
        if STREAM {
            V::stream_fence();
        }
    }
    match stream {
        true => run::<V::Narrow, true>(x, y),
        false => run::<V::Narrow, false>(x, y),
    }
}

/// `dequantize_row_iq4_xs` in lanes: each sub-block's scale `d * (ls - 32)` as the
/// scalar code makes it, its 32 values by [`put_levels`].
#[inline(always)]
fn dequantize_iq4_xs<V: Lanes>(x: &[BlockIq4Xs], y: &mut [f32], stream: bool) {
    #[inline(always)]
    fn run<V: Lanes, const STREAM: bool>(x: &[BlockIq4Xs], y: &mut [f32]) {
        for (block, yb) in x.iter().zip(y.chunks_exact_mut(QK_K)) {
            let d = block.d.to_f32();
            let scales_h = u16::from_le_bytes(block.scales_h) as i32;
            for (ib, (qs, ys)) in block
                .qs
                .chunks_exact(QK / 2)
                .zip(yb.chunks_exact_mut(QK))
                .enumerate()
            {
                let ls = ((block.scales_l[ib / 2] as i32 >> (4 * (ib % 2))) & 0xf)
                    | (((scales_h >> (2 * ib)) & 3) << 4);
                put_levels::<V, STREAM>(qs, d * (ls - 32) as f32, ys);
            }
        }
        if STREAM {
            V::stream_fence();
        }
    }
    match stream {
        true => run::<V::Narrow, true>(x, y),
        false => run::<V::Narrow, false>(x, y),
    }
}

super::row_codec!(
    /// iq4_nl.
    IQ4_NL => quantize_iq4_nl, dequantize = dequantize_iq4_nl
);

super::row_codec!(
    /// iq4_xs.
    IQ4_XS => quantize_iq4_xs, dequantize = dequantize_iq4_xs
);
