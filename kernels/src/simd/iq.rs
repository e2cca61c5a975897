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

use super::kquant::qp_quants;
use super::lanes::{Lanes, MAX_LANES, from_fn, transpose};
use crate::blocks::{BlockIq1M, BlockIq1S, BlockIq2S, BlockIq2Xs, BlockIq2Xxs};
use crate::blocks::{BlockIq3S, BlockIq3Xxs, QK_K};
use crate::scalar::iq_grid::{IqGrid, IqSearch, IqWrite, Lookup, MAX_TRIALS, Neighbours, Trials};
use crate::scalar::iq1_m::{self, CM1, CM2, CP1, CP2};
use crate::scalar::iq1_s::{BLOCK, LEVELS_MINUS, LEVELS_PLUS, improves};
use crate::scalar::tables::{IQ1S_POINTS, NGRID_IQ1S};

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

    /// The sub-blocks in lanes ([`qp_quants`], each lane as the scalar function runs).
    #[inline(always)]
    fn qp_scales(x: &[f32; QK_K], w: &[f32; QK_K], nmax: i32) -> [f32; QK_K / 32] {
        let mut out = [0.0f32; QK_K / 32];
        for start in (0..QK_K / 32).step_by(V::N) {
            let count = V::N.min(QK_K / 32 - start);
            let xv = transpose::<V, 32>(&x[32 * start..], count);
            let wv = transpose::<V, 32>(&w[32 * start..], count);
            let (scale, _) = qp_quants::<V, 32>(&xv, &wv, nmax);
            let mut lanes = [0.0f32; MAX_LANES];
            scale.store(&mut lanes);
            out[start..start + count].copy_from_slice(&lanes[..count]);
        }
        out
    }

    /// Trials in lanes: each group's rounding and lattice index for `V::N` trials at once
    /// (the same IEEE operations per lane as the scalar loop), the neighbour searches of
    /// the off-grid ones once per run of trials that meet the same list (through
    /// [`Candidates`] for 8 coordinates, [`LaneSearch::run_exact`] for 4), and the fits of
    /// `V::N` trials at once, each lane summing its trial's terms in element order.
    #[inline(always)]
    fn trials<const D: usize, const G: usize>(
        grid: &IqGrid<D>,
        q: &[f32],
        xval: &[f32],
        weight: &[f32],
        waux: &[f32],
        ids: &[f32],
        out: &mut Trials<G>,
    ) {
        let nt = ids.len();
        let n = D * G;
        // The scratch's tables hold at most 8 groups and 32 elements.
        const { assert!(G <= 8 && D * G <= 32) };
        debug_assert!(nt <= MAX_TRIALS && MAX_TRIALS.is_multiple_of(V::N));
        let top = q.len() as i32 - 1;
        let base = if D == 8 { 4.0f32 } else { 8.0 };
        // Padded so that a vector of trials may start at any trial.
        let mut idp = [ids[nt - 1]; MAX_TRIALS + MAX_LANES];
        idp[..nt].copy_from_slice(ids);
        // Taken out of the thread's slot rather than borrowed in a closure, so that the
        // work stays in this function and its instruction set.
        let mut scratch = TRIAL_SCRATCH.take().unwrap_or_else(TrialScratch::new);
        let TrialScratch { qm, um, cands } = &mut *scratch;
        let (half, one, two) = (V::splat(0.5), V::splat(1.0), V::splat(2.0));
        for c in (0..nt).step_by(V::N) {
            let id = V::load(&idp[c..]);
            for k in 0..G {
                let mut u = V::splat(0.0);
                let mut place = 1.0f32;
                for i in 0..D {
                    let x = V::splat(xval[D * k + i]);
                    let l = V::clamp_int(half.mul(id.mul(x).sub(one)).nearest_int(), 0, top);
                    let lf = V::int_to_f32(l);
                    lf.mul(two).add(one).store(&mut qm[D * k + i][c..]);
                    u = u.add(lf.mul(V::splat(place)));
                    place *= base;
                }
                V::store_int(u.c_int(), &mut um[k][c..]);
            }
        }
        // `um[k]` is read at several trials at once: by index.
        #[allow(clippy::needless_range_loop)]
        for k in 0..G {
            let g = D * k..D * k + D;
            let (x, wa) = (&xval[g.clone()], &waux[g]);
            let in_range = D == 8 && Candidates::group_in_range(x, wa);
            let mut t = 0;
            while t < nt {
                let u = um[k][t] as usize;
                let nb = match grid.lookup(u) {
                    Lookup::On(j) => {
                        (out.index[t][k], out.on_grid[t][k]) = (j as u16, true);
                        t += 1;
                        continue;
                    }
                    Lookup::Off(nb) => nb,
                };
                // The trials that round to the same lattice point: a run, as each level
                // only grows with the inverse scale.
                let mut end = t + 1;
                while end < nt && um[k][end] as usize == u {
                    end += 1;
                }
                let (first, last) = (1.0 / ids[t], 1.0 / ids[end - 1]);
                // The scales fall along a run: its ends bound them all.
                let safe = in_range
                    && (1.0 / SAFE..=SAFE).contains(&first)
                    && (1.0 / SAFE..=SAFE).contains(&last);
                // Lists of 4-coordinate points are short: scoring them directly, the run's
                // trials in lanes, is cheaper than preparing their sums, and one trial is
                // scored over its candidates in lanes (measured on iq3_xxs and iq3_s).
                // Lists of 8-coordinate points are longer: prepared once for the run and
                // ranked at its ends, which settle the trials between when they agree.
                if D == 4 && end - t >= 2 {
                    let mut found = [0u16; MAX_TRIALS + MAX_LANES];
                    Self::run_exact::<D>(grid, nb, x, wa, q, &idp[t..end + V::N], &mut found);
                    for (e, &j) in found[..end - t].iter().enumerate() {
                        set_off_grid(out, qm, grid, t + e, k, j as usize);
                    }
                } else if safe && D == 8 {
                    cands.prepare::<V, D>(nb, x, wa, q);
                    let at_first = cands.certain::<V>(first);
                    let at_last = if end - t > 1 {
                        cands.certain::<V>(last)
                    } else {
                        at_first
                    };
                    match at_first {
                        Some(j) if at_last == Some(j) => {
                            for t in t..end {
                                set_off_grid(out, qm, grid, t, k, nb.at(j));
                            }
                        }
                        _ => {
                            // The ends' single survivors are what ranking them again
                            // would pick.
                            let ends = (t, end - 1);
                            for (t, &id) in ids.iter().enumerate().take(end).skip(t) {
                                let j = match (at_first, at_last) {
                                    (Some(j), _) if t == ends.0 => nb.at(j),
                                    (_, Some(j)) if t == ends.1 => nb.at(j),
                                    _ => cands.best::<V, D>(grid, x, wa, 1.0 / id, q),
                                };
                                set_off_grid(out, qm, grid, t, k, j);
                            }
                        }
                    }
                } else {
                    let mut prepared = false;
                    for (t, &id) in ids.iter().enumerate().take(end).skip(t) {
                        let scale = 1.0 / id;
                        let j = if D == 8 && in_range && (1.0 / SAFE..=SAFE).contains(&scale) {
                            if !prepared {
                                cands.prepare::<V, D>(nb, x, wa, q);
                                prepared = true;
                            }
                            cands.best::<V, D>(grid, x, wa, scale, q)
                        } else {
                            Self::best(grid, nb, x, wa, scale, q).unwrap_or_else(|| nb.at(0))
                        };
                        set_off_grid(out, qm, grid, t, k, j);
                    }
                }
                t = end;
            }
        }
        let mut sx = [0.0f32; MAX_TRIALS];
        let mut s2 = [0.0f32; MAX_TRIALS];
        for c in (0..nt).step_by(V::N) {
            let mut sumqx = V::splat(0.0);
            let mut sumq2 = V::splat(0.0);
            for i in 0..n {
                let qv = V::load(&qm[i][c..]);
                sumqx = sumqx.add(V::splat(weight[i] * xval[i]).mul(qv));
                sumq2 = sumq2.add(V::splat(weight[i]).mul(qv).mul(qv));
            }
            sumqx.store(&mut sx[c..]);
            sumq2.store(&mut s2[c..]);
        }
        for t in 0..nt {
            out.sums[t] = (sx[t], s2[t]);
        }
        TRIAL_SCRATCH.set(Some(scratch));
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

impl<V: Lanes> LaneSearch<V> {
    /// The neighbour each trial of a run picks (grid indices into `found`, one per trial),
    /// the trials in lanes: the run's trials share the list `nb`, so a vector of trials
    /// scores one candidate at a time, each lane at its own scale `1 / id` with the
    /// scalar loop's operations and its strict `<` in list order, which is
    /// [`IqSearch::best`] of each trial bit for bit (with `nb`'s first entry where no
    /// error is below `f32::MAX`). No horizontal step: a trial costs a few operations per
    /// candidate. `ids` holds the run's inverse scales padded to a whole vector.
    #[inline(always)]
    fn run_exact<const D: usize>(
        grid: &IqGrid<D>,
        nb: Neighbours,
        x: &[f32],
        w: &[f32],
        q: &[f32],
        ids: &[f32],
        found: &mut [u16],
    ) {
        let n = ids.len() - V::N;
        let mut pos = [0.0f32; MAX_LANES];
        for c0 in (0..n).step_by(V::N) {
            let scale = V::splat(1.0).div(V::load(&ids[c0..]));
            let mut least = V::splat(f32::MAX);
            let mut at = V::splat(0.0);
            for c in 0..nb.len() {
                let p = grid.point(nb.at(c));
                let mut d2 = V::splat(0.0);
                for i in 0..D {
                    let diff = scale
                        .mul(V::splat(q[((p[i] - 1) / 2) as usize]))
                        .sub(V::splat(x[i]));
                    d2 = d2.add(V::splat(w[i]).mul(diff).mul(diff));
                }
                let better = d2.lt(least);
                least = V::select(better, d2, least);
                at = V::select(better, V::splat(c as f32), at);
            }
            at.store(&mut pos);
            for (f, &c) in found[c0..n.min(c0 + V::N)].iter_mut().zip(&pos) {
                *f = nb.at(c as usize) as u16;
            }
        }
    }
}

/// Trial `t` of group `k` put on grid point `j`, a neighbour of its off-grid lattice point:
/// the point's coordinates replace the rounded ones in the fit's table.
#[inline(always)]
fn set_off_grid<const D: usize, const G: usize>(
    out: &mut Trials<G>,
    qm: &mut [[f32; MAX_TRIALS]; 32],
    grid: &IqGrid<D>,
    t: usize,
    k: usize,
    j: usize,
) {
    (out.index[t][k], out.on_grid[t][k]) = (j as u16, false);
    let p = grid.point(j);
    for i in 0..D {
        qm[D * k + i][t] = p[i] as f32;
    }
}

/// What a scale search's trials work in, kept per thread: zeroing it for every group of
/// a row cost more than the rounding it holds. Every entry a search reads, it has written.
struct TrialScratch {
    /// Per element, each trial's coordinate `2l + 1`.
    qm: [[f32; MAX_TRIALS]; 32],
    /// Per group (at most 8: groups of 4 or 8 in at most 32 elements), each trial's
    /// lattice index (at most 16 bits, summed exactly in float lanes).
    um: [[i32; MAX_TRIALS]; 8],
    /// The sums of the neighbour list last prepared.
    cands: Candidates,
}

impl TrialScratch {
    fn new() -> Box<TrialScratch> {
        Box::new(TrialScratch {
            qm: [[0.0; MAX_TRIALS]; 32],
            um: [[0; MAX_TRIALS]; 8],
            cands: Candidates::new(),
        })
    }
}

std::thread_local! {
    static TRIAL_SCRATCH: std::cell::Cell<Option<Box<TrialScratch>>> =
        const { std::cell::Cell::new(None) };
}

/// Neighbour lists hold at most this many candidates (iq2_xs's longest has 292), padded.
const MAX_CANDIDATES: usize = 304;

/// The scale-free parts of every candidate's error for one group and one neighbour list:
/// with search weights `w`, magnitudes `x` and candidate coordinates `q`,
/// `sum w (s q - x)^2 = s^2 a - 2 s b + c` for `a = sum w q^2`, `b = sum w q x` and
/// `c = sum w x^2`. A scale search meets the same list at many of its trial scales (the
/// rounded lattice point of a group changes only a few times as the scale moves), so
/// these are computed once per run of trials with the same list, and each trial then
/// ranks the candidates by `s^2 a - 2 s b` at a few operations per candidate.
///
/// That ranking is not the scalar search's float sum, so it is used only to rule
/// candidates out, with a bound on how far the two can differ: for groups whose values,
/// weights and scale lie within `2^±30`, the float sum of `(w * diff) * diff` over 8 or
/// fewer coordinates differs from the exact `s^2 a - 2 s b + c` by less than
/// `u (25 s^2 a + 24 c)`, and the ranking computed here (`a` and `b` in float, then
/// `s^2 a - 2 s b`) by less than `u (24 s^2 a + 12 c)`, plus terms below `2^-79` from
/// underflow (`u = 2^-24`; first-order bounds on each rounding, with
/// `|b| <= sqrt(a c)` and `2 s sqrt(a c) <= s^2 a + c`). With the margin
/// `e = 2^-18 (s^2 a + c) + 2^-60`, which exceeds both with room for its own rounding,
/// a candidate whose ranking minus `e` is above some other's ranking plus `e` has a
/// larger float error than that one and cannot be the first minimum. Whatever is not
/// ruled out (usually the winner alone, which needs no score) is then scored exactly as
/// the scalar loop does.
struct Candidates {
    a: [f32; MAX_CANDIDATES],
    b: [f32; MAX_CANDIDATES],
    c: f32,
    len: usize,
    /// The list's first entry, to read grid indices by position.
    list: Option<Neighbours>,
}

/// Values, weights and scales within this magnitude (and not below its inverse, for the
/// scale) keep every product of the bound analysis in [`Candidates`] normal and finite.
const SAFE: f32 = (1u64 << 30) as f32;

/// [`Candidates`]' margin: `2^-18` relative and `2^-60` absolute.
const MARGIN_REL: f32 = 1.0 / (1u32 << 18) as f32;
const MARGIN_ABS: f32 = 1.0 / (1u64 << 60) as f32;

impl Candidates {
    fn new() -> Self {
        Candidates {
            a: [0.0; MAX_CANDIDATES],
            b: [0.0; MAX_CANDIDATES],
            c: 0.0,
            len: 0,
            list: None,
        }
    }

    /// Whether a group's values and weights are in the range the bound holds for: the
    /// bound needs `w >= 0` (so that `|b| <= sqrt(a c)`), and NaN is never in range.
    #[inline(always)]
    fn group_in_range(x: &[f32], w: &[f32]) -> bool {
        x.iter().all(|v| v.abs() <= SAFE) && w.iter().all(|v| (0.0..=SAFE).contains(v))
    }

    /// The sums of the list `nb` for the group `x`, weights `w`, level values `q`.
    #[inline(always)]
    fn prepare<V: Lanes, const D: usize>(
        &mut self,
        nb: Neighbours,
        x: &[f32],
        w: &[f32],
        q: &[f32],
    ) {
        let (levels, bits) = if D == 8 { (4, 2) } else { (8, 3) };
        let mut qp = [0.0f32; 8];
        qp[..q.len()].copy_from_slice(q);
        let mut ta = [0.0f32; 32];
        let mut tb = [0.0f32; 32];
        let mut c = 0.0f32;
        for i in 0..D {
            for l in 0..levels {
                let wq = w[i] * qp[l];
                ta[levels * i + l] = wq * qp[l];
                tb[levels * i + l] = wq * x[i];
            }
            c += w[i] * x[i] * x[i];
        }
        for (v, codes) in nb.codes().chunks_exact(2 * V::N).enumerate() {
            let mut code = V::load_u16(codes);
            let mut a = V::splat(0.0);
            let mut b = V::splat(0.0);
            for i in 0..D {
                let (ra, rb) = if D == 8 {
                    let r = 4 * i..4 * i + 4;
                    (
                        V::lookup4(ta[r.clone()].try_into().unwrap(), code),
                        V::lookup4(tb[r].try_into().unwrap(), code),
                    )
                } else {
                    let r = 8 * i..8 * i + 8;
                    (
                        V::lookup8(ta[r.clone()].try_into().unwrap(), code),
                        V::lookup8(tb[r].try_into().unwrap(), code),
                    )
                };
                a = a.add(ra);
                b = b.add(rb);
                code = V::shr_int(code, bits);
            }
            a.store(&mut self.a[v * V::N..]);
            b.store(&mut self.b[v * V::N..]);
        }
        self.c = c;
        self.len = nb.len();
        self.list = Some(nb);
    }

    /// The candidates not ruled out at `scale` (within the safe range): the bound a
    /// candidate's ranking minus its margin must not exceed, the first one kept (its
    /// vector and position in the list) and how many are kept. The candidate with the
    /// least upper bound is always kept (in the range these sums are used for, nothing
    /// is NaN), so `None` only for an empty list.
    #[inline(always)]
    fn survivors<V: Lanes>(&self, scale: f32) -> (Ranking<'_, V>, V, Option<(usize, usize)>, u32) {
        let r = Ranking::<V>::new(self, scale);
        let vectors = self.len.div_ceil(V::N);
        let mut least_hi = V::splat(f32::MAX);
        for v in 0..vectors {
            let (rank, e, valid) = r.at(v);
            least_hi = least_hi.min(V::select(valid, rank.add(e), V::splat(f32::MAX)));
        }
        let zero = V::splat(0.0);
        let bound = V::splat(-zero.sub(least_hi).hmax());
        // The kept ones are found by ranking the list again rather than stored: storing
        // them (even without zeroing) measured no faster.
        let mut first = None;
        let mut count = 0;
        for v in 0..vectors {
            let bits = r.kept(v, bound);
            if bits != 0 {
                first.get_or_insert((v, v * V::N + bits.trailing_zeros() as usize));
                count += bits.count_ones();
            }
        }
        (r, bound, first, count)
    }

    /// The position in the prepared list of the one candidate left at `scale` (within the
    /// safe range), when only one is: then it has the least float error of all, by the
    /// margin. If the same candidate is the only one left at two scales, it is at every
    /// scale between them as well, so a run of trials needs a ranking only at its ends:
    /// with `d` the exact error of any other candidate less this one's, and `n` the sum of
    /// the two's error bounds (`u (25 s^2 a + 24 c)` each), `d / s` is linear in `s` and
    /// `n / s` convex, so `d > n` at both ends (which the margin, less the rankings' own
    /// error, gives) holds everywhere between.
    #[inline(always)]
    fn certain<V: Lanes>(&self, scale: f32) -> Option<usize> {
        match self.survivors::<V>(scale) {
            (_, _, Some((_, first)), 1) => Some(first),
            _ => None,
        }
    }

    /// The grid index [`IqSearch::best`] finds at `scale` (within the safe range) for the
    /// prepared list.
    #[inline(always)]
    fn best<V: Lanes, const D: usize>(
        &self,
        grid: &IqGrid<D>,
        x: &[f32],
        w: &[f32],
        scale: f32,
        q: &[f32],
    ) -> usize {
        let nb = self.list.expect("prepared");
        let (r, bound, first, count) = self.survivors::<V>(scale);
        let Some((start, first)) = first else {
            return nb.at(0);
        };
        // Usually one candidate is left: it is the winner, without scoring it.
        if count == 1 {
            return nb.at(first);
        }
        let mut best_d2 = f32::MAX;
        let mut best = nb.at(first);
        for v in start..self.len.div_ceil(V::N) {
            let mut bits = r.kept(v, bound);
            while bits != 0 {
                let j = nb.at(v * V::N + bits.trailing_zeros() as usize);
                bits &= bits - 1;
                let d2 = grid.error(j, x, w, scale, q);
                if d2 < best_d2 {
                    best_d2 = d2;
                    best = j;
                }
            }
        }
        best
    }
}

/// One trial's ranking of a prepared list ([`Candidates::best`]): the same operations on
/// every pass over the list, so the same bits. Methods marked `inline(always)` rather than
/// closures: a closure the compiler leaves out of line is built without the ISA's
/// features, and its vector operations become calls (docs/kernels.md).
struct Ranking<'a, V: Lanes> {
    cands: &'a Candidates,
    s2: V,
    ts: V,
    c: V,
    lane: V,
    len: V,
}

impl<'a, V: Lanes> Ranking<'a, V> {
    #[inline(always)]
    fn new(cands: &'a Candidates, scale: f32) -> Self {
        Ranking {
            cands,
            s2: V::splat(scale * scale),
            ts: V::splat(2.0 * scale),
            c: V::splat(cands.c),
            lane: from_fn(|j| j as f32),
            len: V::splat(cands.len as f32),
        }
    }

    /// Vector `v`'s rankings, their margins, and which of its lanes are list entries.
    #[inline(always)]
    fn at(&self, v: usize) -> (V, V, V::Mask) {
        let a = V::load(&self.cands.a[v * V::N..]);
        let b = V::load(&self.cands.b[v * V::N..]);
        let s2a = self.s2.mul(a);
        let rank = s2a.sub(self.ts.mul(b));
        let e = V::splat(MARGIN_REL)
            .mul(s2a.add(self.c))
            .add(V::splat(MARGIN_ABS));
        let valid = self.lane.add(V::splat((v * V::N) as f32)).lt(self.len);
        (rank, e, valid)
    }

    /// The candidates of vector `v` not ruled out by `bound`, as lane bits.
    #[inline(always)]
    fn kept(&self, v: usize, bound: V) -> u64 {
        let (rank, e, valid) = self.at(v);
        V::mask_bits(V::and_not(valid, rank.sub(e).gt(bound)))
    }
}

/// `SIGN_BITS[s][j]`: -0.0 where bit `j` of the sign byte `s` is set, else +0.0: the sign
/// bits that ggml's factor `signs & kmask_iq2xs[j] ? -1.f : 1.f` flips (a product with -1,
/// which its compiler and ours make a negation, NaNs included).
static SIGN_BITS: [[f32; 8]; 256] = {
    let mut t = [[0.0f32; 8]; 256];
    let mut s = 0;
    while s < 256 {
        let mut j = 0;
        while j < 8 {
            if s & (1 << j) != 0 {
                t[s][j] = -0.0;
            }
            j += 1;
        }
        s += 1;
    }
    t
};

/// The i-quant dequantizers' groups of 8 values in vectors of `V` (at most 8 lanes: the
/// ISAs' narrow lanes; dequantizing is bound by memory writes). The scalar code's
/// operations in its order per lane, so the same bits.
pub(crate) struct LaneWrite<V>(PhantomData<V>);

impl<V: Lanes> IqWrite for LaneWrite<V> {
    #[inline(always)]
    fn signed(y: &mut [f32], db: f32, grid: [u8; 8], signs: u8) {
        const { assert!(V::N <= 8 && 8 % V::N == 0) };
        let db = V::splat(db);
        let sign_bits = &SIGN_BITS[signs as usize];
        for k in (0..8).step_by(V::N) {
            let g = V::load_u8(&grid[k..]);
            db.mul(g)
                .xor_bits(V::load(&sign_bits[k..]))
                .store(&mut y[k..]);
        }
    }

    #[inline(always)]
    fn shifted(y: &mut [f32; 8], dl: f32, index: usize, delta: f32) {
        const { assert!(V::N <= 8 && 8 % V::N == 0) };
        // Indices have 11 bits; the mask says so to the compiler (no bounds check).
        let grid: &[i8; 8] = bytemuck::cast_ref(&IQ1S_POINTS[index & (NGRID_IQ1S - 1)]);
        let (dl, delta) = (V::splat(dl), V::splat(delta));
        for k in (0..8).step_by(V::N) {
            dl.mul(V::load_i8(&grid[k..]).add(delta)).store(&mut y[k..]);
        }
    }
}

/// Declares the SIMD codec of an i-quant: its scalar quantizer with [`LaneSearch`]
/// and its scalar dequantizer with [`LaneWrite`] on the ISA's narrow lanes,
/// both compiled for the ISA. `search = V::Narrow` runs the search on the narrow lanes
/// too: iq1_s's splits and iq3_xxs's short neighbour lists leave most of sixteen lanes
/// idle, and their AVX-512 paths were slower than AVX2's on Zen 4 (BENCHMARKS.md).
macro_rules! iq_codec {
    ($(#[$doc:meta])* $name:ident => $module:ident, $block:ty) => {
        iq_codec!($(#[$doc])* $name => $module, $block, search = V);
    };
    ($(#[$doc:meta])* $name:ident => $module:ident, $block:ty, search = $search:ty) => {
        $(#[$doc])*
        #[allow(non_camel_case_types)]
        pub(crate) struct $name;

        impl super::SimdCodec for $name {
            #[inline(always)]
            fn quantize<V: Lanes>(
                row: super::Row<'_>,
                w: Option<&[f32]>,
                y: &mut [u8],
                _: &mut super::Scratch<V>,
            ) -> bool {
                let y = super::blocks_mut::<$block>(y);
                crate::scalar::$module::quantize_row_with::<LaneSearch<$search>>(
                    row.values, w, y,
                );
                true
            }

            #[inline(always)]
            fn dequantize<V: Lanes>(x: &[u8], y: &mut [f32], _: bool) {
                let x = super::blocks::<$block>(x);
                crate::scalar::$module::dequantize_row_with::<LaneWrite<V::Narrow>>(x, y)
            }
        }
    };
}

iq_codec!(
    /// iq2_xxs.
    IQ2_XXS => iq2_xxs, BlockIq2Xxs
);
iq_codec!(
    /// iq2_xs.
    IQ2_XS => iq2_xs, BlockIq2Xs
);
iq_codec!(
    /// iq2_s.
    IQ2_S => iq2_s, BlockIq2S
);
iq_codec!(
    /// iq3_xxs.
    IQ3_XXS => iq3_xxs, BlockIq3Xxs, search = V::Narrow
);
iq_codec!(
    /// iq3_s.
    IQ3_S => iq3_s, BlockIq3S
);
iq_codec!(
    /// iq1_s.
    IQ1_S => iq1_s, BlockIq1S, search = V::Narrow
);
iq_codec!(
    /// iq1_m.
    IQ1_M => iq1_m, BlockIq1M
);
