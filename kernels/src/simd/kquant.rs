//! The K-quant scale searches with one sub-block per lane: each lane runs exactly the
//! sequence of `scalar::kquant::make_qkx2_quants` / `make_qkx3_quants` /
//! `make_qx_quants` for its own sub-block, with data-dependent branches turned into
//! masks. Only the scales come out; the rare sub-blocks whose search codes are kept
//! (a zero stored scale) get them from the scalar search, which is the same computation.

use super::lanes::{Lanes, MAX_LANES, Pair, from_fn, opaque_one, transpose_into};

/// A search over a row's sub-blocks, one sub-block per lane, run a group at a time.
pub(crate) trait SubBlockSearch {
    /// Searches sub-blocks `g..g + count` (`count <= W::N`) with the lanes of `W`.
    fn group<W: Lanes>(&mut self, g: usize, count: usize);

    /// Searches the two whole groups of sub-blocks `g..g + 2 * W::N` with the arrays of
    /// `scratch`; a search whose trials can be interleaved does so (see
    /// [`qkx_search_two`]).
    #[inline(always)]
    fn two_groups<W: Lanes>(&mut self, g: usize, scratch: &mut PairScratch<W>) {
        let _ = scratch;
        self.group::<W>(g, W::N);
        self.group::<W>(g + W::N, W::N);
    }
}

/// The arrays a pair of groups of 32-value sub-blocks is searched in (values, weights and
/// trial codes of each group), made once per thread and ISA and reused from one pair and
/// one row to the next (zeroing 24 KiB per pair of groups was a measurable part of q4_K's
/// time).
///
/// The arrays are 4 KiB each with AVX-512, and a load whose address matches a pending
/// store's in the low 12 bits waits for it on some CPUs: a pass that loads one group's
/// arrays right after the other group's codes were stored slowed the search
/// noticeably when they were laid out exactly 4 KiB apart. So they are not: each is followed by a
/// gap of a few vectors, a different one for each.
#[repr(C)]
pub(crate) struct PairScratch<V: Lanes> {
    /// The first group's values, transposed.
    pub xa: [V; 32],
    gap_xa: [V; 1],
    /// The first group's weights.
    pub wa: [V; 32],
    gap_wa: [V; 2],
    /// The second group's values, transposed.
    pub xb: [V; 32],
    gap_xb: [V; 3],
    /// The second group's weights.
    pub wb: [V; 32],
    gap_wb: [V; 4],
    /// The first group's codes in the current trial.
    pub la: [V; 32],
    gap_la: [V; 5],
    /// The second group's codes in the current trial.
    pub lb: [V; 32],
}

impl<V: Lanes> PairScratch<V> {
    /// Zeroed arrays.
    #[inline(always)]
    pub(crate) fn new() -> Box<Self> {
        let zero = V::splat(0.0);
        let z = [zero; 32];
        Box::new(PairScratch {
            xa: z,
            gap_xa: [zero; 1],
            wa: z,
            gap_wa: [zero; 2],
            xb: z,
            gap_xb: [zero; 3],
            wb: z,
            gap_wb: [zero; 4],
            la: z,
            gap_la: [zero; 5],
            lb: z,
        })
    }
}

/// Runs `search` over sub-blocks `0..n`: groups of `Pair<V>::N` (two vectors per step, so
/// that the serial per-lane sums overlap), the rest in groups of at most `V::N`. With a
/// `scratch`, whole pairs of groups go to [`SubBlockSearch::two_groups`].
#[inline(always)]
pub(crate) fn search_sub_blocks<V: Lanes>(
    n: usize,
    search: &mut impl SubBlockSearch,
    scratch: Option<&mut PairScratch<Pair<V>>>,
) {
    let mut g = 0;
    if let Some(scratch) = scratch {
        while n - g >= 2 * Pair::<V>::N {
            search.two_groups::<Pair<V>>(g, scratch);
            g += 2 * Pair::<V>::N;
        }
    }
    while g < n {
        let count = if n - g >= Pair::<V>::N {
            search.group::<Pair<V>>(g, Pair::<V>::N);
            Pair::<V>::N
        } else {
            let count = V::N.min(n - g);
            search.group::<V>(g, count);
            count
        };
        g += count;
    }
}

/// The first `out.len()` lanes of `v` into `out`.
#[inline(always)]
pub(crate) fn store_lanes<V: Lanes>(v: V, out: &mut [f32]) {
    if out.len() == V::N {
        v.store(out);
        return;
    }
    let mut buf = [0.0f32; MAX_LANES];
    v.store(&mut buf);
    out.copy_from_slice(&buf[..out.len()]);
}

/// How a trial scale turns into a code during the search (see the scalar `level_qkx2` /
/// `level_qkx3`).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Level {
    /// `clamp(nearest_int(v), 0, nmax)`.
    Qkx2,
    /// `v > 0 ? nearest_int(MIN(v, nmax)) : 0`.
    Qkx3,
}

/// The search of `make_qkx2_quants`/`make_qkx3_quants` over `N` values per lane (`x[i]`,
/// `w[i]` hold element `i` of every lane's sub-block), with absolute errors when `MAD`
/// (`use_mad`), squared ones otherwise. Returns `(scale, the_min)` per lane.
#[inline(always)]
pub(crate) fn qkx_search<V: Lanes, const N: usize, const MAD: bool>(
    x: &[V; N],
    w: &[V; N],
    nmax: i32,
    (rmin, rdelta, nstep): (f32, f32, i32),
    level: Level,
) -> (V, V) {
    let mut s = QkxSearch::<V>::start::<N, MAD>(x, w, nmax);
    if nstep >= 1 {
        let mut laux = [V::splat(0.0); N];
        for is in 0..=nstep {
            let num = rmin + rdelta * is as f32 + nmax as f32;
            s.sums(x, w, nmax, num, level, &mut laux);
            s.judge::<N, MAD>(x, w, &laux);
        }
    }
    s.finish()
}

/// [`qkx_search`] for two groups of sub-blocks at once, `(x, w)` each, interleaved half a
/// trial apart: each trial ends in a chain of dependent steps (the divisions that give the
/// trial's scale and min; the comparison that decides the next trial's min and the
/// division of its scale) that would leave the CPU waiting, and the other group's pass
/// over its values fills that wait. Each group computes exactly what it would alone.
/// The groups' trial codes go to `la` and `lb`. The cache lines of `ahead` (values to be
/// quantized next) are prefetched a few per trial, spread over the search: asked for all
/// at once they would wait on each other.
#[inline(always)]
pub(crate) fn qkx_search_two<V: Lanes, const N: usize, const MAD: bool>(
    (xa, wa, la): (&[V; N], &[V; N], &mut [V; N]),
    (xb, wb, lb): (&[V; N], &[V; N], &mut [V; N]),
    nmax: i32,
    (rmin, rdelta, nstep): (f32, f32, i32),
    level: Level,
    ahead: &[f32],
) -> [(V, V); 2] {
    let mut a = QkxSearch::<V>::start::<N, MAD>(xa, wa, nmax);
    let mut b = QkxSearch::<V>::start::<N, MAD>(xb, wb, nmax);
    if nstep >= 1 {
        let per_trial = ahead.len().div_ceil(16 * (nstep as usize + 1));
        for is in 0..=nstep {
            let num = rmin + rdelta * is as f32 + nmax as f32;
            let first = is as usize * per_trial * 16;
            for line in ahead.get(first..).unwrap_or(&[]).chunks(16).take(per_trial) {
                V::prefetch(line);
            }
            a.sums(xa, wa, nmax, num, level, la);
            if is > 0 {
                b.judge::<N, MAD>(xb, wb, lb);
            }
            a.judge::<N, MAD>(xa, wa, la);
            b.sums(xb, wb, nmax, num, level, lb);
        }
        b.judge::<N, MAD>(xb, wb, lb);
    }
    [a.finish(), b.finish()]
}

/// One group's state in the search of [`qkx_search`]: the first guess, then per trial
/// [`QkxSearch::sums`] (the codes, into the caller's `laux`, and their fit) and
/// [`QkxSearch::judge`] (its error against the best so far).
struct QkxSearch<V: Lanes> {
    min: V,
    max: V,
    xmin: V,
    sum_w: V,
    sum_x: V,
    flat: V::Mask,
    live: V::Mask,
    flat_min: V,
    scale: V,
    best_error: V,
    /// The current trial's scale and min, and whether its system was solvable.
    this_scale: V,
    this_min: V,
    solvable: V::Mask,
}

impl<V: Lanes> QkxSearch<V> {
    /// The ranges, weight sums and the first guess (`iscale = nmax/(max - min)`).
    #[inline(always)]
    fn start<const N: usize, const MAD: bool>(x: &[V; N], w: &[V; N], nmax: i32) -> Self {
        let zero = V::splat(0.0);
        let mut min = x[0];
        let mut max = x[0];
        let mut sum_w = w[0];
        let mut sum_x = sum_w.mul(x[0]);
        for i in 1..N {
            min = x[i].min_or_keep(min);
            max = x[i].max_or_keep(max);
            sum_w = sum_w.add(w[i]);
            sum_x = sum_x.add(w[i].mul(x[i]));
        }
        // The smallest value (the running minimum before it is capped at 0).
        let xmin = min;
        min = V::select(min.gt(zero), zero, min);
        let flat = max.eq(min);
        let live = max.gt(min);
        let range = max.sub(min);
        let iscale = V::splat(nmax as f32).div(range);
        let scale = V::splat(1.0).div(iscale);
        let mut best_error = zero;
        // Every value lies in [min, max], so v = iscale*(x - min) lies in [-0, iscale*range]
        // and iscale*range is nmax within rounding: where that holds for every live lane
        // (no infinite iscale), v rounds in float to a code in [0, nmax] without a clamp
        // (a code of -0 acts as 0; see `sums`). Otherwise ggml's integer trick.
        let limit = V::splat(nmax as f32 + 0.25);
        if V::any(V::and_not(live, iscale.mul(range).lt(limit))) {
            for i in 0..N {
                let l = V::int_to_f32(V::clamp_int(
                    iscale.mul(x[i].sub(min)).nearest_int(),
                    0,
                    nmax,
                ));
                let diff = scale.mul(l).add(min).sub(x[i]);
                best_error = best_error.add(w[i].mul(error_of::<V, MAD>(diff)));
            }
        } else {
            for i in 0..N {
                let l = iscale.mul(x[i].sub(min)).round_even();
                let diff = scale.mul(l).add(min).sub(x[i]);
                best_error = best_error.add(w[i].mul(error_of::<V, MAD>(diff)));
            }
        }
        QkxSearch {
            min,
            max,
            xmin,
            sum_w,
            sum_x,
            flat,
            live,
            flat_min: min,
            scale,
            best_error,
            this_scale: zero,
            this_min: zero,
            solvable: live,
        }
    }

    /// A trial: `iscale = num/(max - min)` (`num = rmin + rdelta*is + nmax`), its codes into
    /// `laux`, and the least-squares scale and min they give.
    #[inline(always)]
    fn sums<const N: usize>(
        &mut self,
        x: &[V; N],
        w: &[V; N],
        nmax: i32,
        num: f32,
        level: Level,
        laux: &mut [V; N],
    ) {
        debug_assert!(num > 0.0);
        let zero = V::splat(0.0);
        let (min, max, xmin) = (self.min, self.max, self.xmin);
        // `min` moves with each better fit, and the next trial scale uses it, as in C.
        let iscale = V::splat(num).div(max.sub(min));
        // v = iscale*(x - min) is monotonic in x, so every lane's v lies between its
        // values at x = xmin and x = max. When each lane that matters (not flat) keeps
        // both below 2^22 in magnitude (no NaN, no infinity), rounding in float is exact
        // and cheaper; otherwise ggml's integer trick reproduces it for any v.
        // `iscale` is positive (every search's `num` is), so v at xmin is at most v at
        // max, and both lie in (-2^22, 2^22) exactly when the first is above -2^22 and
        // the second below 2^22 (a NaN fails both). A lane that is not flat is live: the
        // values are finite, and `min` starts at most the smallest value.
        let limit = V::splat(4_194_304.0);
        let lo_signed = iscale.mul(xmin.sub(min));
        let hi_signed = iscale.mul(max.sub(min));
        let safe = V::and(lo_signed.gt(V::splat(-4_194_304.0)), hi_signed.lt(limit));
        let unsafe_lanes = V::and_not(self.live, safe);
        // With every v of every live lane at least -1/2, or every v below nmax + 1/2
        // (rounding to at most nmax), that bound of the clamp is left out. Above the
        // lower bound it changes no code but a -0 (a v in [-1/2, 0) rounds to -0), and a
        // code of -0 gives the same sums and error as 0: every product with it is a zero,
        // adding a zero of either sign to the sums (which start at +0 and so are never
        // -0) or to a nonzero value changes nothing, and a zero `diff` is squared (or
        // made absolute) before it is added.
        let below = V::any(V::and(self.live, lo_signed.lt(V::splat(-0.5))));
        let above = V::any(V::and(
            self.live,
            hi_signed.gt(V::splat(f32::from_bits((nmax as f32 + 0.5).to_bits() - 1))),
        ));
        let (sum_l, sum_l2, sum_xl) = match (V::any(unsafe_lanes), below, above) {
            (true, _, _) => {
                search_sums::<V, N, false, true, true>(x, w, iscale, min, nmax, level, laux)
            }
            (false, true, true) => {
                search_sums::<V, N, true, true, true>(x, w, iscale, min, nmax, level, laux)
            }
            (false, true, false) => {
                search_sums::<V, N, true, true, false>(x, w, iscale, min, nmax, level, laux)
            }
            (false, false, true) => {
                search_sums::<V, N, true, false, true>(x, w, iscale, min, nmax, level, laux)
            }
            (false, false, false) => {
                search_sums::<V, N, true, false, false>(x, w, iscale, min, nmax, level, laux)
            }
        };
        let (sum_w, sum_x) = (self.sum_w, self.sum_x);
        let det = sum_w.mul(sum_l2).sub(sum_l.mul(sum_l));
        self.solvable = det.gt(zero);
        let this_scale = sum_w.mul(sum_xl).sub(sum_x.mul(sum_l)).div(det);
        let this_min = sum_l2.mul(sum_x).sub(sum_l.mul(sum_xl)).div(det);
        let positive = this_min.gt(zero);
        self.this_min = V::select(positive, zero, this_min);
        // A positive fit (a lane whose values all sit well above 0) is rare: its division
        // is left out when no lane has one.
        self.this_scale = if V::any(positive) {
            V::select(positive, sum_xl.div(sum_l2), this_scale)
        } else {
            this_scale
        };
    }

    /// The trial's error, and the trial kept where it beats the best so far.
    #[inline(always)]
    fn judge<const N: usize, const MAD: bool>(&mut self, x: &[V; N], w: &[V; N], laux: &[V; N]) {
        let (this_scale, this_min) = (self.this_scale, self.this_min);
        let mut cur_error = V::splat(0.0);
        for i in 0..N {
            let diff = this_scale.mul(laux[i]).add(this_min).sub(x[i]);
            cur_error = cur_error.add(w[i].mul(error_of::<V, MAD>(diff)));
        }
        let better = V::and(self.solvable, cur_error.lt(self.best_error));
        self.best_error = V::select(better, cur_error, self.best_error);
        self.scale = V::select(better, this_scale, self.scale);
        self.min = V::select(better, this_min, self.min);
    }

    /// `(scale, the_min)`.
    #[inline(always)]
    fn finish(self) -> (V, V) {
        let zero = V::splat(0.0);
        let scale = V::select(self.flat, zero, self.scale);
        let min = V::select(self.flat, self.flat_min, self.min);
        // `-min` is a sign flip (0 becomes -0, as in C).
        (scale, min.mul(V::splat(-1.0)))
    }
}

/// `|diff|` with `MAD`, else `diff*diff`.
#[inline(always)]
fn error_of<V: Lanes, const MAD: bool>(diff: V) -> V {
    if MAD { diff.abs() } else { diff.mul(diff) }
}

/// One trial of the search: the codes of `v = iscale*(x - min)` into `laux` and the
/// weighted sums `(sum w*l, sum w*l*l, sum w*l*x)`. `FLOAT_ROUND` rounds `v` in float
/// (exact only for |v| < 2^22, which the caller checks); otherwise ggml's integer trick.
/// In float, `CLAMP_LO` / `CLAMP_HI` false leave out the bound at 0 / at `nmax`, which the
/// caller may do only when no code of a lane that matters would reach it (every `v >= 0`
/// / every `v < nmax + 1/2`).
#[inline(always)]
fn search_sums<
    V: Lanes,
    const N: usize,
    const FLOAT_ROUND: bool,
    const CLAMP_LO: bool,
    const CLAMP_HI: bool,
>(
    x: &[V; N],
    w: &[V; N],
    iscale: V,
    min: V,
    nmax: i32,
    level: Level,
    laux: &mut [V; N],
) -> (V, V, V) {
    let zero = V::splat(0.0);
    let nmax_f = V::splat(nmax as f32);
    let one = opaque_one::<V>();
    let mut sum_l = zero;
    let mut sum_l2 = zero;
    let mut sum_xl = zero;
    for i in 0..N {
        let v = iscale.mul(x[i].sub(min));
        let q = match (level, FLOAT_ROUND) {
            // In float both levels are `max(min(round(v), nmax), 0)`: rounding is monotonic
            // and fixes the integer `nmax`, so rounding the capped value (qkx3) is capping
            // the rounded one, and every `v <= 0` rounds to at most 0. The bounds are taken
            // on the bits (see `Lanes::min_bits`): no lane rounded in float is NaN.
            (_, true) => {
                let r = v.round_even();
                let r = if CLAMP_HI { r.min_bits(nmax_f) } else { r };
                if CLAMP_LO { r.max_zero_bits() } else { r }
            }
            (Level::Qkx2, false) => V::int_to_f32(V::clamp_int(v.nearest_int(), 0, nmax)),
            (Level::Qkx3, false) => {
                let capped = V::select(v.lt(nmax_f), v, nmax_f);
                V::select(v.gt(zero), V::int_to_f32(capped.nearest_int()), zero)
            }
        };
        laux[i] = q;
        let wq = w[i].mul(q);
        sum_l = wq.add_on_mul_unit(sum_l, one);
        sum_l2 = sum_l2.add(wq.mul(q));
        sum_xl = sum_xl.add(wq.mul(x[i]));
    }
    (sum_l, sum_l2, sum_xl)
}

/// The largest magnitude of each lane's values and the first value that has it (C's
/// `if (ax > amax) { amax = ax; max = x[i]; }` from 0).
#[inline(always)]
pub(crate) fn signed_abs_max<V: Lanes, const N: usize>(x: &[V; N]) -> (V, V) {
    let zero = V::splat(0.0);
    let mut amax = zero;
    let mut max = zero;
    for &xi in x {
        let ax = xi.abs();
        let bigger = ax.gt(amax);
        amax = V::select(bigger, ax, amax);
        max = V::select(bigger, xi, max);
    }
    (amax, max)
}

/// The importance weights `qw[i] * sqrt(sigma2 + x[i]*x[i])` of each lane's sub-block
/// (`sigma2` per lane) and their sum in order, as the scalar `importance_weights` and
/// `sum`.
#[inline(always)]
pub(crate) fn importance_weights<V: Lanes, const N: usize>(
    x: &[V; N],
    qw: &[V; N],
    sigma2: V,
) -> ([V; N], V) {
    let mut w = *qw;
    let sum_w = weigh_in_place(x, sigma2, &mut w);
    (w, sum_w)
}

/// [`importance_weights`] with the importance values in `w`, replaced by the weights;
/// returns their sum.
#[inline(always)]
fn weigh_in_place<V: Lanes, const N: usize>(x: &[V; N], sigma2: V, w: &mut [V; N]) -> V {
    let mut sum_w = V::splat(0.0);
    for i in 0..N {
        w[i] = w[i].mul(sigma2.add(x[i].mul(x[i])).sqrt());
        sum_w = sum_w.add(w[i]);
    }
    sum_w
}

/// The importance weights of sub-blocks `g..g + count` (`N` values each, the values `xt`
/// transposed), whose importance values start at `qw[g * N]` and whose `sigma2` is that
/// of their super-block (`sigma2[s]` for super-block `s`, `per_super` sub-blocks each),
/// with their sums: [`importance_weights`] for the lanes of one group.
#[inline(always)]
pub(crate) fn sub_block_weights<V: Lanes, const N: usize>(
    xt: &[V; N],
    qw: &[f32],
    sigma2: &[f32],
    per_super: usize,
    g: usize,
    count: usize,
) -> ([V; N], V) {
    let mut w = [V::splat(0.0); N];
    let sum_w = sub_block_weights_into(xt, qw, sigma2, per_super, g, count, &mut w);
    (w, sum_w)
}

/// [`sub_block_weights`] into `w`; returns their sums.
#[inline(always)]
pub(crate) fn sub_block_weights_into<V: Lanes, const N: usize>(
    xt: &[V; N],
    qw: &[f32],
    sigma2: &[f32],
    per_super: usize,
    g: usize,
    count: usize,
    w: &mut [V; N],
) -> V {
    transpose_into(&qw[g * N..], count, w);
    let s2: V = from_fn(|lane| sigma2.get((g + lane) / per_super).copied().unwrap_or(0.0));
    weigh_in_place(xt, s2, w)
}

/// The scale `make_qx_quants(16, nmax, x, L, 1, qw)` returns, for 16 values per lane;
/// `w` holds the importance weights, or `None` for the `x²` weights of `rmse_type` 1.
#[inline(always)]
pub(crate) fn qx_scale<V: Lanes>(x: &[V; 16], w: Option<&[V; 16]>, nmax: i32) -> V {
    qx_search(x, w, nmax).scale
}

/// What `make_qx_quants(N, nmax, x, L, 1, qw)` finds for one lane.
pub(crate) struct QxFit<V: Lanes> {
    /// The returned scale (0 for an all-zero group).
    pub scale: V,
    /// The trial `iscale` whose codes `L` holds: `clamp(nearest_int(iscale*x), -nmax,
    /// nmax - 1) + nmax`; 0 for an all-zero group, whose `L` is all zeros (every other
    /// group's `iscale`, `-(nmax + 0.1*is)/max` with `max` at least `GROUP_MAX_EPS`, is
    /// not 0).
    pub iscale: V,
}

/// `make_qx_quants(N, nmax, x, L, 1, qw)` over `N` values per lane: the first guess, then
/// the 18 trial scales, keeping the first of the best fits as C does.
#[inline(always)]
pub(crate) fn qx_search<V: Lanes, const N: usize>(
    x: &[V; N],
    w: Option<&[V; N]>,
    nmax: i32,
) -> QxFit<V> {
    let zero = V::splat(0.0);
    let (amax, max) = signed_abs_max(x);
    let all_zero = amax.lt(V::splat(crate::scalar::kquant::GROUP_MAX_EPS));
    let mut weight = [zero; N];
    let mut wx = [zero; N];
    for i in 0..N {
        weight[i] = match w {
            Some(w) => w[i],
            None => x[i].mul(x[i]),
        };
        wx[i] = weight[i].mul(x[i]);
    }
    let nmax_f = nmax as f32;
    let mut best_iscale = V::splat(-nmax_f).div(max);
    let (sumlx, suml2) = qx_fit(x, &weight, &wx, best_iscale, nmax);
    let mut scale = V::select(suml2.eq(zero), zero, sumlx.div(suml2));
    let mut best = scale.mul(sumlx);
    for is in (-9..=9).filter(|&is| is != 0) {
        let iscale = V::splat(-(nmax_f + 0.1 * is as f32)).div(max);
        let (sumlx, suml2) = qx_fit(x, &weight, &wx, iscale, nmax);
        let better = V::and(suml2.gt(zero), sumlx.mul(sumlx).gt(best.mul(suml2)));
        scale = V::select(better, sumlx.div(suml2), scale);
        best = V::select(better, scale.mul(sumlx), best);
        best_iscale = V::select(better, iscale, best_iscale);
    }
    QxFit {
        scale: V::select(all_zero, zero, scale),
        iscale: V::select(all_zero, zero, best_iscale),
    }
}

/// The weighted sums of `x*l` and `l*l` for the codes `iscale` gives (`make_qx_quants`);
/// `wx[i]` is `w[i]*x[i]`, the first product of C's `w*x*l`.
///
/// The codes are rounded in float (to nearest, ties to even) and clamped: for the lanes
/// whose result is kept (absolute maximum at least `GROUP_MAX_EPS`) `|v| = |iscale*x|` is
/// at most `nmax + 1`, where this equals `nearest_int(v)` exactly (lanes below that
/// threshold return 0 whatever their sums are). A code rounded to -0 instead of
/// `nearest_int`'s 0 changes no sum: the sums start at +0 and adding a signed zero to any
/// value leaves it as it is, unless that value is -0, which no sum of these ever is.
#[inline(always)]
fn qx_fit<V: Lanes, const N: usize>(
    x: &[V; N],
    w: &[V; N],
    wx: &[V; N],
    iscale: V,
    nmax: i32,
) -> (V, V) {
    let (lo, hi) = (V::splat(-nmax as f32), V::splat((nmax - 1) as f32));
    let mut sumlx = V::splat(0.0);
    let mut suml2 = V::splat(0.0);
    for i in 0..N {
        let q = iscale.mul(x[i]).round_even().max(lo).min(hi);
        sumlx = sumlx.add(wx[i].mul(q));
        suml2 = suml2.add(w[i].mul(q).mul(q));
    }
    (sumlx, suml2)
}

/// The scale `make_q3_quants(16, nmax, x, L, true)` returns, for 16 values per lane: the
/// first code guess, then up to five passes that move one code at a time while that
/// raises `(sum w*x*l)^2 / sum w*l*l` (`w = x*x`), each lane exactly as the scalar loop
/// runs for its sub-block. A pass in which a lane changes nothing leaves its state as it
/// was, so the lanes that C would have stopped run on unchanged until no lane changes.
#[inline(always)]
pub(crate) fn q3_scale<V: Lanes>(x: &[V; 16], nmax: i32) -> V {
    let zero = V::splat(0.0);
    let one = V::splat(1.0);
    let (amax, max) = signed_abs_max(x);
    let all_zero = amax.lt(V::splat(crate::scalar::kquant::GROUP_MAX_EPS));
    let iscale = V::splat(-(nmax as f32)).div(max);
    let mut w = [zero; 16];
    let mut wx = [zero; 16];
    let mut l = [zero; 16];
    let mut sumlx = zero;
    let mut suml2 = zero;
    for i in 0..16 {
        w[i] = x[i].mul(x[i]);
        wx[i] = w[i].mul(x[i]);
        let q = V::int_to_f32(V::clamp_int(
            iscale.mul(x[i]).nearest_int(),
            -nmax,
            nmax - 1,
        ));
        l[i] = q;
        sumlx = sumlx.add(wx[i].mul(q));
        suml2 = suml2.add(w[i].mul(q).mul(q));
    }
    for _ in 0..5 {
        let mut changed = zero;
        for i in 0..16 {
            let old = l[i];
            let slx = sumlx.sub(wx[i].mul(old));
            let sl2 = suml2.sub(w[i].mul(old).mul(old));
            let new = V::int_to_f32(V::clamp_int(
                x[i].mul(sl2).div(slx).nearest_int(),
                -nmax,
                nmax - 1,
            ));
            let slx_new = slx.add(wx[i].mul(new));
            let sl2_new = sl2.add(w[i].mul(new).mul(new));
            let differs = V::not(new.eq(old));
            let better = slx_new
                .mul(slx_new)
                .mul(suml2)
                .gt(sumlx.mul(sumlx).mul(sl2_new));
            let accept = V::and(
                V::and(slx.gt(zero), differs),
                V::and(sl2_new.gt(zero), better),
            );
            l[i] = V::select(accept, new, old);
            sumlx = V::select(accept, slx_new, sumlx);
            suml2 = V::select(accept, sl2_new, suml2);
            changed = V::select(accept, one, changed);
        }
        if !V::any(changed.gt(zero)) {
            break;
        }
    }
    let scale = V::select(suml2.gt(zero), sumlx.div(suml2), zero);
    V::select(all_zero, zero, scale)
}

/// C's `(uint8_t)i` as a float: the low byte of each lane's integer.
#[inline(always)]
fn low_byte<V: Lanes>(i: V::Int) -> V {
    let b = V::int_to_f32(V::sext8(i));
    V::select(b.lt(V::splat(0.0)), b.add(V::splat(256.0)), b)
}

/// `nearest_int(v)` capped at `nmax` (C's `MIN(nmax, nearest_int(v))`), as a float.
#[inline(always)]
fn nearest_capped<V: Lanes>(v: V, nmax: i32) -> (V::Int, V) {
    let q = V::clamp_int(v.nearest_int(), i32::MIN, nmax);
    (q, V::int_to_f32(q))
}

/// `make_qp_quants(N, nmax, x, L, w)` with one group of `N` values per lane (`x[i]` and
/// `w[i]` hold element `i` of every lane's group): the returned scale and the codes
/// (`L[i]`, the bytes C stores, as floats), each lane exactly as the scalar function runs
/// for its group. A pass of the final refinement in which a lane changes nothing leaves
/// it as it was, so lanes that C would have stopped run on unchanged until none changes.
#[inline(always)]
pub(crate) fn qp_quants<V: Lanes, const N: usize>(
    x: &[V; N],
    w: &[V; N],
    nmax: i32,
) -> (V, [V; N]) {
    let zero = V::splat(0.0);
    let nmax_f = nmax as f32;
    let mut max = zero;
    for &xi in x {
        max = max.max_or_keep(xi);
    }
    let all_zero = max.lt(V::splat(crate::scalar::kquant::GROUP_MAX_EPS));
    let mut iscale = V::splat(nmax_f).div(max);
    let mut l = [zero; N];
    let scale = V::splat(1.0).div(iscale);
    let mut best_mse = zero;
    for i in 0..N {
        l[i] = low_byte::<V>(iscale.mul(x[i]).nearest_int());
        let diff = x[i].sub(scale.mul(l[i]));
        best_mse = best_mse.add(w[i].mul(diff).mul(diff));
    }
    for is in (-4..=4).filter(|&is| is != 0) {
        let iscale_is = V::splat(0.1 * is as f32 + nmax_f).div(max);
        let scale_is = V::splat(1.0).div(iscale_is);
        let mut mse = zero;
        for i in 0..N {
            let (_, q) = nearest_capped(iscale_is.mul(x[i]), nmax);
            let diff = x[i].sub(scale_is.mul(q));
            mse = mse.add(w[i].mul(diff).mul(diff));
        }
        let better = mse.lt(best_mse);
        best_mse = V::select(better, mse, best_mse);
        iscale = V::select(better, iscale_is, iscale);
    }
    let mut sumlx = zero;
    let mut suml2 = zero;
    for i in 0..N {
        let (qi, q) = nearest_capped(iscale.mul(x[i]), nmax);
        l[i] = low_byte::<V>(qi);
        sumlx = sumlx.add(w[i].mul(x[i]).mul(q));
        suml2 = suml2.add(w[i].mul(q).mul(q));
    }
    for _ in 0..5 {
        // No lane yet.
        let mut changed = V::and_not(all_zero, all_zero);
        for i in 0..N {
            let old = l[i];
            let wx = w[i].mul(x[i]);
            let slx = sumlx.sub(wx.mul(old));
            let sl2 = suml2.sub(w[i].mul(old).mul(old));
            let (new_i, new) = nearest_capped(x[i].mul(sl2).div(slx), nmax);
            let slx_new = slx.add(wx.mul(new));
            let sl2_new = sl2.add(w[i].mul(new).mul(new));
            let differs = V::and_not(V::and(slx.gt(zero), sl2.gt(zero)), new.eq(old));
            let differs = V::and_not(differs, all_zero);
            let better = slx_new
                .mul(slx_new)
                .mul(suml2)
                .gt(sumlx.mul(sumlx).mul(sl2_new));
            let accept = V::and(differs, better);
            l[i] = V::select(accept, low_byte::<V>(new_i), old);
            sumlx = V::select(accept, slx_new, sumlx);
            suml2 = V::select(accept, sl2_new, suml2);
            changed = V::or(changed, accept);
        }
        if !V::any(changed) {
            break;
        }
    }
    let scale = V::select(suml2.gt(zero), sumlx.div(suml2), zero);
    for li in &mut l {
        *li = V::select(all_zero, zero, *li);
    }
    (V::select(all_zero, zero, scale), l)
}

/// Checks of the lane searches against their scalar functions, run from each ISA's test
/// module inside its target features.
#[cfg(test)]
pub(crate) mod checks {
    use super::{Lanes, qp_quants};
    use crate::simd::lanes::{MAX_LANES, transpose};

    /// [`qp_quants`] against `make_qp_quants` on groups of 8 from several regimes:
    /// ordinary scales, zeros, groups below `GROUP_MAX_EPS`, negative values (whose codes
    /// wrap as C's byte store does, some far below the largest value), huge spreads, zero
    /// and huge weights.
    pub(crate) fn qp_quants_matches_scalar<V: Lanes>() {
        let mut s = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s >> 40) as f32 / (1u64 << 24) as f32
        };
        for case in 0..400 {
            let mut x = vec![0.0f32; 8 * V::N];
            let mut w = vec![0.0f32; 8 * V::N];
            for (i, (xi, wi)) in x.iter_mut().zip(w.iter_mut()).enumerate() {
                let u = next();
                *xi = match (case + i / 8) % 8 {
                    0 => u * 0.02,
                    1 => 0.0,
                    2 => u * 1e-16,
                    3 => u - 0.3,
                    4 => {
                        if i % 8 == 3 {
                            1e30 * u
                        } else {
                            u * 1e-20
                        }
                    }
                    5 => (u * 63.0).round() / 63.0,
                    6 => {
                        if i % 8 == 5 {
                            -1e10 * u
                        } else {
                            u
                        }
                    }
                    _ => u * 1e4 - 1.0,
                };
                *wi = match (case + i) % 5 {
                    0 => 0.0,
                    1 => 1e30 * u,
                    _ => u,
                };
            }
            let (scale, codes) = qp_quants::<V, 8>(&transpose(&x, V::N), &transpose(&w, V::N), 63);
            let mut scales = [0.0f32; MAX_LANES];
            scale.store(&mut scales);
            let mut lane_codes = [[0.0f32; MAX_LANES]; 8];
            for (k, c) in codes.iter().enumerate() {
                c.store(&mut lane_codes[k]);
            }
            for lane in 0..V::N {
                let (xs, ws) = (&x[8 * lane..8 * lane + 8], &w[8 * lane..8 * lane + 8]);
                let mut l = [0u8; 8];
                let want = crate::scalar::kquant::make_qp_quants(8, 63, xs, &mut l, ws);
                assert_eq!(scales[lane].to_bits(), want.to_bits(), "{xs:?} {ws:?}");
                for k in 0..8 {
                    assert_eq!(lane_codes[k][lane], l[k] as f32, "{xs:?} {ws:?}");
                }
            }
        }
    }
}
