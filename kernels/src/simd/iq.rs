//! The i-quants' SIMD quantizers: the scalar searches of `scalar::iq*` (the same code,
//! compiled inside the ISA's entry point), with the neighbour search of an off-grid group,
//! where they spend most of their time, run over vectors of candidates.
//!
//! A candidate's error is `sum_i w[i] * (scale * q[l_i] - x[i])^2`, and each of its terms
//! depends only on the coordinate `i` and the candidate's level `l_i` there. So the search
//! first computes every term once per group, `(w[i] * diff) * diff` exactly as the scalar
//! loop does, into a table with one row of levels per coordinate. A vector of candidates
//! then takes its term for coordinate `i` from row `i`, indexed by the level bits of each
//! candidate's lattice index (`lookup4` / `lookup8`, one permute), and adds the terms in
//! coordinate order from 0, which is the scalar sum bit for bit. Each lane keeps its
//! least error and the position of the first candidate that reached it (a strict `<`, as
//! the scalar loop); the winner is the lowest position among the lanes holding the overall
//! least error,
//! the scalar loop's first minimum. The neighbour lists are padded by repeating their last
//! entry, which never wins a first-minimum search.

use std::marker::PhantomData;

use super::lanes::{Lanes, MAX_LANES, from_fn};
use crate::blocks::{BlockIq1M, BlockIq1S, BlockIq2S, BlockIq2Xs, BlockIq2Xxs};
use crate::blocks::{BlockIq3S, BlockIq3Xxs};
use crate::scalar::iq_grid::{IqGrid, IqSearch, Neighbours};
use crate::scalar::iq1_m::{self, CM1, CM2, CP1, CP2};
use crate::scalar::iq1_s::{BLOCK, LEVELS_MINUS, LEVELS_PLUS, improves};

/// [`IqSearch`] over vectors of `V`'s lanes.
pub(crate) struct LaneSearch<V>(PhantomData<V>);

impl<V: Lanes> IqSearch for LaneSearch<V> {
    /// Lanes over `i2` for each `i1`: every lane computes its split's sums as the scalar
    /// loop does, and each lane's test runs against the best score at the start of the
    /// vector. Where no lane of either sign passes, none would have in the scalar loop
    /// either (nothing changed the best score in between), so the vector is skipped;
    /// otherwise its lanes are replayed in the scalar order from their computed sums.
    #[inline(always)]
    fn iq1s_split(
        sumx: &[f32; 33],
        sumw: &[f32; 33],
        max: f32,
    ) -> (f32, Option<(usize, usize, i8)>) {
        // Zero-padded copies, so that a vector starting at any i2 <= 32 loads whole.
        let mut px = [0.0f32; BLOCK + 1 + MAX_LANES];
        let mut pw = [0.0f32; BLOCK + 1 + MAX_LANES];
        px[..BLOCK + 1].copy_from_slice(sumx);
        pw[..BLOCK + 1].copy_from_slice(sumw);
        let lane: V = from_fn(|j| j as f32);
        let (tx, tw) = (V::splat(sumx[BLOCK]), V::splat(sumw[BLOCK]));
        let (p, m) = (LEVELS_PLUS, LEVELS_MINUS);
        let zero = V::splat(0.0);
        let mut best_score = -f32::MAX;
        let mut scale = max;
        let mut best = None;
        let mut sums = [[0.0f32; MAX_LANES]; 4];
        for i1 in 0..=BLOCK {
            let ax = sumx[i1] - sumx[0];
            let aw = sumw[i1] - sumw[0];
            let (qx0_p, qx0_m) = (V::splat(ax * p[0]), V::splat(ax * m[0]));
            let (q20_p, q20_m) = (V::splat(aw * p[0] * p[0]), V::splat(aw * m[0] * m[0]));
            let (x1, w1) = (V::splat(sumx[i1]), V::splat(sumw[i1]));
            let mut i2 = i1;
            while i2 <= BLOCK {
                let valid = lane.lt(V::splat((BLOCK + 1 - i2) as f32));
                let x2 = V::load(&px[i2..]);
                let w2 = V::load(&pw[i2..]);
                let (bx, cx) = (x2.sub(x1), tx.sub(x2));
                let (bw, cw) = (w2.sub(w1), tw.sub(w2));
                let qx_p = qx0_p
                    .add(bx.mul(V::splat(p[1])))
                    .add(cx.mul(V::splat(p[2])));
                let qx_m = qx0_m
                    .add(bx.mul(V::splat(m[1])))
                    .add(cx.mul(V::splat(m[2])));
                let q2_p = q20_p
                    .add(bw.mul(V::splat(p[1])).mul(V::splat(p[1])))
                    .add(cw.mul(V::splat(p[2])).mul(V::splat(p[2])));
                let q2_m = q20_m
                    .add(bw.mul(V::splat(m[1])).mul(V::splat(m[1])))
                    .add(cw.mul(V::splat(m[2])).mul(V::splat(m[2])));
                let bs = V::splat(best_score);
                let pass_p = V::and(q2_p.gt(zero), qx_p.mul(qx_p).gt(bs.mul(q2_p)));
                let pass_m = V::and(q2_m.gt(zero), qx_m.mul(qx_m).gt(bs.mul(q2_m)));
                if V::any(V::and(V::or(pass_p, pass_m), valid)) {
                    qx_p.store(&mut sums[0]);
                    q2_p.store(&mut sums[1]);
                    qx_m.store(&mut sums[2]);
                    q2_m.store(&mut sums[3]);
                    // Lane j of the four sums, in the scalar order.
                    #[allow(clippy::needless_range_loop)]
                    for j in 0..V::N.min(BLOCK + 1 - i2) {
                        for (k, shift) in [(0, 1i8), (2, -1)] {
                            let (qx, q2) = (sums[k][j], sums[k + 1][j]);
                            if improves(qx, q2, &mut best_score, &mut scale) {
                                best = Some((i1, i2 + j, shift));
                            }
                        }
                    }
                }
                i2 += V::N;
            }
        }
        (scale, best)
    }

    /// As [`LaneSearch::iq1s_split`], with iq1_m's four pairs of delta signs per split.
    #[inline(always)]
    fn iq1m_split(
        px: &[[f32; 17]; 2],
        pw: &[[f32; 17]; 2],
        max: f32,
    ) -> (f32, Option<(usize, usize, usize)>) {
        const B: usize = iq1_m::BLOCK;
        let mut padded = [[[0.0f32; B + 1 + MAX_LANES]; 2]; 2];
        for h in 0..2 {
            padded[0][h][..B + 1].copy_from_slice(&px[h]);
            padded[1][h][..B + 1].copy_from_slice(&pw[h]);
        }
        let lane: V = from_fn(|j| j as f32);
        let (p2, m2) = (LEVELS_PLUS[2], LEVELS_MINUS[2]);
        let zero = V::splat(0.0);
        let mut best_score = -f32::MAX;
        let mut scale = max;
        let mut best = None;
        let mut sums = [[0.0f32; MAX_LANES]; 8];
        for i1 in 0..=B {
            // Per half: the terms that depend on i1 only.
            let mut x1 = [zero; 2];
            let mut w1_p = [zero; 2];
            let mut w1_m = [zero; 2];
            let mut tx_p = [zero; 2];
            let mut tx_m = [zero; 2];
            for h in 0..2 {
                let (txs, tws) = (px[h][B], pw[h][B]);
                x1[h] = V::splat(px[h][i1]);
                tx_p[h] = V::splat(txs * p2);
                tx_m[h] = V::splat(txs * m2);
                w1_p[h] = V::splat(tws * p2 * p2 + pw[h][i1] * CP1);
                w1_m[h] = V::splat(tws * m2 * m2 + pw[h][i1] * CM1);
            }
            let mut i2 = i1;
            while i2 <= B {
                let valid = lane.lt(V::splat((B + 1 - i2) as f32));
                let mut qx_p = [zero; 2];
                let mut qx_m = [zero; 2];
                let mut q2_p = [zero; 2];
                let mut q2_m = [zero; 2];
                for h in 0..2 {
                    let sx = x1[h].add(V::load(&padded[0][h][i2..]));
                    let w2 = V::load(&padded[1][h][i2..]);
                    qx_p[h] = tx_p[h].sub(sx);
                    qx_m[h] = tx_m[h].sub(sx);
                    q2_p[h] = w1_p[h].add(w2.mul(V::splat(CP2)));
                    q2_m[h] = w1_m[h].add(w2.mul(V::splat(CM2)));
                }
                let sumqx = [
                    qx_p[0].add(qx_p[1]),
                    qx_p[0].add(qx_m[1]),
                    qx_m[0].add(qx_p[1]),
                    qx_m[0].add(qx_m[1]),
                ];
                let sumq2 = [
                    q2_p[0].add(q2_p[1]),
                    q2_p[0].add(q2_m[1]),
                    q2_m[0].add(q2_p[1]),
                    q2_m[0].add(q2_m[1]),
                ];
                let bs = V::splat(best_score);
                let mut pass = V::not(V::all());
                for k in 0..4 {
                    let ok = V::and(
                        sumq2[k].gt(zero),
                        sumqx[k].mul(sumqx[k]).gt(bs.mul(sumq2[k])),
                    );
                    pass = V::or(pass, ok);
                }
                if V::any(V::and(pass, valid)) {
                    for k in 0..4 {
                        sumqx[k].store(&mut sums[2 * k]);
                        sumq2[k].store(&mut sums[2 * k + 1]);
                    }
                    // Lane j of the eight sums, in the scalar order.
                    #[allow(clippy::needless_range_loop)]
                    for j in 0..V::N.min(B + 1 - i2) {
                        for k in 0..4 {
                            let (qx, q2) = (sums[2 * k][j], sums[2 * k + 1][j]);
                            if improves(qx, q2, &mut best_score, &mut scale) {
                                best = Some((i1, i2 + j, k));
                            }
                        }
                    }
                }
                i2 += V::N;
            }
        }
        (scale, best)
    }

    #[inline(always)]
    fn best<const D: usize>(
        _grid: &IqGrid<D>,
        nb: Neighbours,
        x: &[f32],
        w: &[f32],
        scale: f32,
        q: &[f32],
    ) -> Option<usize> {
        // 8 coordinates of 2 bits (at most 4 levels) or 4 coordinates of 3 bits (8).
        let (levels, bits) = if D == 8 { (4, 2) } else { (8, 3) };
        // The level values padded with zeros: terms of levels no candidate has (iq2's and
        // iq1's fourth) are computed and never read. Fixed trip counts let the compiler
        // vectorize the table over the levels.
        let mut qp = [0.0f32; 8];
        qp[..q.len()].copy_from_slice(q);
        let mut table = [0.0f32; 32];
        for i in 0..D {
            for l in 0..levels {
                let diff = scale * qp[l] - x[i];
                table[levels * i + l] = w[i] * diff * diff;
            }
        }
        let lane: V = from_fn(|j| j as f32);
        let mut least = V::splat(f32::MAX);
        let mut pos = V::splat(0.0);
        for (v, codes) in nb.codes().chunks_exact(2 * V::N).enumerate() {
            let mut c = V::load_u16(codes);
            let mut d2 = V::splat(0.0);
            for i in 0..D {
                let term = if D == 8 {
                    V::lookup4(table[4 * i..4 * i + 4].try_into().unwrap(), c)
                } else {
                    V::lookup8(table[8 * i..8 * i + 8].try_into().unwrap(), c)
                };
                d2 = d2.add(term);
                c = V::shr_int(c, bits);
            }
            let better = d2.lt(least);
            least = V::select(better, d2, least);
            pos = V::select(better, lane.add(V::splat((v * V::N) as f32)), pos);
        }
        // Minima as negated maxima: the errors are never NaN here (NaN never replaced
        // f32::MAX), and only compared for equality (-0 and +0 alike).
        let zero = V::splat(0.0);
        let min = -zero.sub(least).hmax();
        // No error below f32::MAX (NaN or overflow): no winner, as in the scalar loop.
        if min == f32::MAX {
            return None;
        }
        let at_min = V::select(least.eq(V::splat(min)), pos, V::splat(f32::MAX));
        let first = -zero.sub(at_min).hmax() as usize;
        Some(nb.at(first))
    }
}

/// Declares the SIMD codec of an i-quant: its scalar quantizer with [`LaneSearch`]
/// (`$quantize`, a lane function for [`super::row_codec!`]), its scalar dequantizer, both
/// compiled for the ISA.
macro_rules! iq_codec {
    ($(#[$doc:meta])* $name:ident => $quantize:ident, $module:ident, $block:ty) => {
        #[inline(always)]
        fn $quantize<V: Lanes>(x: &[f32], w: Option<&[f32]>, y: &mut [$block]) {
            crate::scalar::$module::quantize_row_with::<LaneSearch<V>>(x, w, y)
        }

        super::row_codec!($(#[$doc])* $name => $quantize, $module);
    };
}

iq_codec!(
    /// iq2_xxs.
    IQ2_XXS => quantize_iq2_xxs, iq2_xxs, BlockIq2Xxs
);
iq_codec!(
    /// iq2_xs.
    IQ2_XS => quantize_iq2_xs, iq2_xs, BlockIq2Xs
);
iq_codec!(
    /// iq2_s.
    IQ2_S => quantize_iq2_s, iq2_s, BlockIq2S
);
iq_codec!(
    /// iq3_xxs.
    IQ3_XXS => quantize_iq3_xxs, iq3_xxs, BlockIq3Xxs
);
iq_codec!(
    /// iq3_s.
    IQ3_S => quantize_iq3_s, iq3_s, BlockIq3S
);
iq_codec!(
    /// iq1_s.
    IQ1_S => quantize_iq1_s, iq1_s, BlockIq1S
);
iq_codec!(
    /// iq1_m.
    IQ1_M => quantize_iq1_m, iq1_m, BlockIq1M
);
