//! What the K-quants share, ported from the helper section of ggml 0.26.0's
//! `ggml-quants.c`: the scale searches `make_qx_quants`, `make_q3_quants`,
//! `make_qkx2_quants`, `make_qkx3_quants` and `make_qp_quants`, the 6-bit scale/min
//! packing of q4_K and q5_K (`get_scale_min_k4` and its inverse), and the steps several
//! format files repeat (importance weights, the final re-rounding, 2-bit packing, the
//! whole q4_K/q5_K super-block search).
//!
//! Every f32 expression keeps C's operand order and association (`w*x*l` is `(w*x)*l`),
//! C's `int`/`uint8_t`/`int8_t` conversions are spelled out with `as`, and every sum starts
//! from `+0.0` as C's `float s = 0` does (never `Iterator::sum`, which starts from `-0.0`).

use crate::blocks::QK_K;
use crate::num::{F16Le, nearest_int};

/// ggml's `GROUP_MAX_EPS`: a group whose largest magnitude is below this is all zero.
pub const GROUP_MAX_EPS: f32 = 1e-15;

/// `MAX(-nmax, MIN(nmax-1, l))`, the signed code range of `make_qx_quants`.
#[inline(always)]
fn clamp_signed(l: i32, nmax: i32) -> i32 {
    l.clamp(-nmax, nmax - 1)
}

/// The value of largest magnitude and that magnitude; the first one wins ties, so `+v`
/// before `-v` keeps the sign of `+v` (C's `if (ax > amax)`).
#[inline(always)]
pub(crate) fn signed_abs_max(x: &[f32]) -> (f32, f32) {
    let mut amax = 0.0f32;
    let mut max = 0.0f32;
    for &v in x {
        let ax = v.abs();
        if ax > amax {
            amax = ax;
            max = v;
        }
    }
    (amax, max)
}

/// `make_qx_quants`: symmetric codes `0..2*nmax` (meaning `l - nmax`) for the first `n`
/// values of `x`, written to `l`; returns the scale.
///
/// `rmse_type` 0 only rounds against `-nmax/max`; otherwise the weighted least-squares
/// scale is refined over 18 trial scales, with weights `qw` or, without them, `x²`
/// (`rmse_type` 1), 1 (2), `|x|` (3) or `sqrt|x|` (4). A negative `rmse_type` returns
/// after the first fit.
pub fn make_qx_quants(
    n: usize,
    nmax: i32,
    x: &[f32],
    l: &mut [i8],
    rmse_type: i32,
    qw: Option<&[f32]>,
) -> f32 {
    let x = &x[..n];
    let l = &mut l[..n];
    let (amax, max) = signed_abs_max(x);
    if amax < GROUP_MAX_EPS {
        l.fill(0);
        return 0.0;
    }
    let nmax_f = nmax as f32;
    let mut iscale = -nmax_f / max;
    if rmse_type == 0 {
        for (li, &xi) in l.iter_mut().zip(x) {
            *li = (nmax + clamp_signed(nearest_int(iscale * xi), nmax)) as i8;
        }
        return 1.0 / iscale;
    }
    let return_early = rmse_type < 0;
    let rmse_type = rmse_type.abs();
    let weight = |i: usize| match qw {
        Some(qw) => qw[i],
        None => match rmse_type {
            1 => x[i] * x[i],
            2 => 1.0,
            3 => x[i].abs(),
            _ => x[i].abs().sqrt(),
        },
    };
    // The weighted sums of x*l and l*l for the codes `iscale` gives.
    let fit = |iscale: f32, mut store: Option<&mut [i8]>| {
        let mut sumlx = 0.0f32;
        let mut suml2 = 0.0f32;
        for (i, &xi) in x.iter().enumerate() {
            let q = clamp_signed(nearest_int(iscale * xi), nmax);
            if let Some(l) = store.as_deref_mut() {
                l[i] = (q + nmax) as i8;
            }
            let w = weight(i);
            sumlx += w * xi * q as f32;
            suml2 += w * q as f32 * q as f32;
        }
        (sumlx, suml2)
    };
    let (sumlx, suml2) = fit(iscale, Some(&mut *l));
    let mut scale = if suml2 != 0.0 { sumlx / suml2 } else { 0.0 };
    if return_early {
        return if suml2 > 0.0 {
            0.5 * (scale + 1.0 / iscale)
        } else {
            1.0 / iscale
        };
    }
    let mut best = scale * sumlx;
    for is in (-9..=9).filter(|&is| is != 0) {
        iscale = -(nmax_f + 0.1 * is as f32) / max;
        let (sumlx, suml2) = fit(iscale, None);
        if suml2 > 0.0 && sumlx * sumlx > best * suml2 {
            fit(iscale, Some(&mut *l));
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    scale
}

/// `make_q3_quants` with `do_rmse` (the only way ggml calls it): codes `0..2*nmax` for the
/// first `n` values of `x`, refined by up to five passes that move single codes while the
/// `x²`-weighted fit improves; returns the scale.
pub fn make_q3_quants(n: usize, nmax: i32, x: &[f32], l: &mut [i8]) -> f32 {
    let x = &x[..n];
    let l = &mut l[..n];
    let (amax, max) = signed_abs_max(x);
    if amax < GROUP_MAX_EPS {
        l.fill(0);
        return 0.0;
    }
    let iscale = -(nmax as f32) / max;
    let mut sumlx = 0.0f32;
    let mut suml2 = 0.0f32;
    for (li, &xi) in l.iter_mut().zip(x) {
        let q = clamp_signed(nearest_int(iscale * xi), nmax);
        *li = q as i8;
        let w = xi * xi;
        sumlx += w * xi * q as f32;
        suml2 += w * q as f32 * q as f32;
    }
    for _ in 0..5 {
        let mut changed = false;
        for (li, &xi) in l.iter_mut().zip(x) {
            let w = xi * xi;
            let old = *li as f32;
            let mut slx = sumlx - w * xi * old;
            if slx > 0.0 {
                let mut sl2 = suml2 - w * old * old;
                let new_l = clamp_signed(nearest_int(xi * sl2 / slx), nmax);
                if new_l != *li as i32 {
                    slx += w * xi * new_l as f32;
                    sl2 += w * new_l as f32 * new_l as f32;
                    if sl2 > 0.0 && slx * slx * suml2 > sumlx * sumlx * sl2 {
                        *li = new_l as i8;
                        sumlx = slx;
                        suml2 = sl2;
                        changed = true;
                    }
                }
            }
        }
        if !changed {
            break;
        }
    }
    for li in l.iter_mut() {
        *li = (*li as i32 + nmax) as i8;
    }
    if suml2 > 0.0 { sumlx / suml2 } else { 0.0 }
}

/// How a trial scale turns `v = iscale*(x - min)` into a code during the search of
/// `make_qkx2_quants` / `make_qkx3_quants`; they differ only for `v` outside `0..=nmax`.
type SearchLevel = fn(f32, i32) -> i32;

/// `make_qkx2_quants`: `MAX(0, MIN(nmax, nearest_int(v)))`.
fn level_qkx2(v: f32, nmax: i32) -> i32 {
    nearest_int(v).clamp(0, nmax)
}

/// `make_qkx3_quants`: `v > 0 ? nearest_int(MIN(v, nmax)) : 0`, safe for huge or NaN `v`.
fn level_qkx3(v: f32, nmax: i32) -> i32 {
    let nmax_f = nmax as f32;
    if v > 0.0 {
        nearest_int(if v < nmax_f { v } else { nmax_f })
    } else {
        0
    }
}

/// The weighted error of `scale*l + min` against `x`: absolute (`use_mad`) or squared.
#[inline(always)]
fn fit_error(
    x: &[f32],
    l: &[u8],
    weight: impl Fn(usize) -> f32,
    scale: f32,
    min: f32,
    use_mad: bool,
) -> f32 {
    let mut err = 0.0f32;
    for (i, (&xi, &li)) in x.iter().zip(l).enumerate() {
        let diff = scale * li as f32 + min - xi;
        let diff = if use_mad { diff.abs() } else { diff * diff };
        err += weight(i) * diff;
    }
    err
}

/// The body of `make_qkx2_quants` and `make_qkx3_quants`: codes `0..=nmax` meaning
/// `scale*l - the_min`, searched over `nstep + 1` trial scales. Returns
/// `(scale, the_min)`.
#[allow(clippy::too_many_arguments)]
fn make_qkx_quants(
    nmax: i32,
    x: &[f32],
    weight: impl Fn(usize) -> f32,
    l: &mut [u8],
    laux: &mut [u8],
    (rmin, rdelta, nstep): (f32, f32, i32),
    use_mad: bool,
    level: SearchLevel,
) -> (f32, f32) {
    let n = x.len();
    let l = &mut l[..n];
    let laux = &mut laux[..n];
    let mut min = x[0];
    let mut max = x[0];
    let mut sum_w = weight(0);
    let mut sum_x = sum_w * x[0];
    for (i, &xi) in x.iter().enumerate().skip(1) {
        if xi < min {
            min = xi;
        }
        if xi > max {
            max = xi;
        }
        let w = weight(i);
        sum_w += w;
        sum_x += w * xi;
    }
    if min > 0.0 {
        min = 0.0;
    }
    // `make_qkx2_quants` tests `max == min`, `make_qkx3_quants` `max <= min`; with
    // `min <= x[0] <= max` they agree.
    if max == min {
        l.fill(0);
        return (0.0, -min);
    }
    let nmax_f = nmax as f32;
    let iscale = nmax_f / (max - min);
    let mut scale = 1.0 / iscale;
    for (li, &xi) in l.iter_mut().zip(x) {
        *li = nearest_int(iscale * (xi - min)).clamp(0, nmax) as u8;
    }
    let mut best_error = fit_error(x, l, &weight, scale, min, use_mad);
    if nstep < 1 {
        return (scale, -min);
    }
    for is in 0..=nstep {
        let iscale = (rmin + rdelta * is as f32 + nmax_f) / (max - min);
        let mut sum_l = 0.0f32;
        let mut sum_l2 = 0.0f32;
        let mut sum_xl = 0.0f32;
        for (i, (la, &xi)) in laux.iter_mut().zip(x).enumerate() {
            let q = level(iscale * (xi - min), nmax);
            *la = q as u8;
            let w = weight(i);
            let qf = q as f32;
            sum_l += w * qf;
            sum_l2 += w * qf * qf;
            sum_xl += w * qf * xi;
        }
        let det = sum_w * sum_l2 - sum_l * sum_l;
        if det > 0.0 {
            let mut this_scale = (sum_w * sum_xl - sum_x * sum_l) / det;
            let mut this_min = (sum_l2 * sum_x - sum_l * sum_xl) / det;
            if this_min > 0.0 {
                this_min = 0.0;
                this_scale = sum_xl / sum_l2;
            }
            let cur_error = fit_error(x, laux, &weight, this_scale, this_min, use_mad);
            if cur_error < best_error {
                l.copy_from_slice(laux);
                best_error = cur_error;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    (scale, -min)
}

/// `make_qkx2_quants`: codes `0..=nmax` for the first `n` values of `x`, meaning
/// `scale*l - the_min`, written to `l` (`laux` is scratch of at least `n`). The scale is
/// searched over `nstep + 1` trials `(rmin + rdelta*is + nmax)/(max - min)`, minimising the
/// `weights`-weighted absolute (`use_mad`) or squared error. Returns `(scale, the_min)`.
#[allow(clippy::too_many_arguments)]
pub fn make_qkx2_quants(
    n: usize,
    nmax: i32,
    x: &[f32],
    weights: &[f32],
    l: &mut [u8],
    laux: &mut [u8],
    rmin: f32,
    rdelta: f32,
    nstep: i32,
    use_mad: bool,
) -> (f32, f32) {
    let weights = &weights[..n];
    make_qkx_quants(
        nmax,
        &x[..n],
        |i| weights[i],
        l,
        laux,
        (rmin, rdelta, nstep),
        use_mad,
        level_qkx2,
    )
}

/// `make_qkx3_quants`: as [`make_qkx2_quants`], with weights `x²` when `weights` is
/// `None`, and trial codes computed so that a fitted min near the maximum cannot overflow
/// `nearest_int`. Returns `(scale, the_min)`.
#[allow(clippy::too_many_arguments)]
pub fn make_qkx3_quants(
    n: usize,
    nmax: i32,
    x: &[f32],
    weights: Option<&[f32]>,
    l: &mut [u8],
    laux: &mut [u8],
    rmin: f32,
    rdelta: f32,
    nstep: i32,
    use_mad: bool,
) -> (f32, f32) {
    let x = &x[..n];
    let weights = weights.map(|w| &w[..n]);
    make_qkx_quants(
        nmax,
        x,
        |i| weights.map_or(x[i] * x[i], |w| w[i]),
        l,
        laux,
        (rmin, rdelta, nstep),
        use_mad,
        level_qkx3,
    )
}

/// `make_qp_quants`: unsigned codes `0..=nmax` for the first `n` values of `x` (scales or
/// mins, so non-negative in practice; a negative code wraps as C's `uint8_t` store does),
/// weighted by `quant_weights`; the scale is the best of nine trials, refined by up to five
/// passes moving single codes. Returns the scale.
pub fn make_qp_quants(n: usize, nmax: i32, x: &[f32], l: &mut [u8], quant_weights: &[f32]) -> f32 {
    let x = &x[..n];
    let l = &mut l[..n];
    let qw = &quant_weights[..n];
    let mut max = 0.0f32;
    for &v in x {
        max = if max > v { max } else { v };
    }
    if max < GROUP_MAX_EPS {
        l.fill(0);
        return 0.0;
    }
    let nmax_f = nmax as f32;
    let mut iscale = nmax_f / max;
    for (li, &xi) in l.iter_mut().zip(x) {
        *li = nearest_int(iscale * xi) as u8;
    }
    let scale = 1.0 / iscale;
    let mut best_mse = 0.0f32;
    for ((&xi, &li), &w) in x.iter().zip(l.iter()).zip(qw) {
        let diff = xi - scale * li as f32;
        best_mse += w * diff * diff;
    }
    for is in (-4..=4).filter(|&is| is != 0) {
        let iscale_is = (0.1 * is as f32 + nmax_f) / max;
        let scale_is = 1.0 / iscale_is;
        let mut mse = 0.0f32;
        for (&xi, &w) in x.iter().zip(qw) {
            let q = nearest_int(iscale_is * xi).min(nmax);
            let diff = xi - scale_is * q as f32;
            mse += w * diff * diff;
        }
        if mse < best_mse {
            best_mse = mse;
            iscale = iscale_is;
        }
    }
    let mut sumlx = 0.0f32;
    let mut suml2 = 0.0f32;
    for ((li, &xi), &w) in l.iter_mut().zip(x).zip(qw) {
        let q = nearest_int(iscale * xi).min(nmax);
        *li = q as u8;
        sumlx += w * xi * q as f32;
        suml2 += w * q as f32 * q as f32;
    }
    for _ in 0..5 {
        let mut changed = false;
        for ((li, &xi), &w) in l.iter_mut().zip(x).zip(qw) {
            let old = *li as f32;
            let mut slx = sumlx - w * xi * old;
            let mut sl2 = suml2 - w * old * old;
            if slx > 0.0 && sl2 > 0.0 {
                let new_l = nearest_int(xi * sl2 / slx).min(nmax);
                if new_l != *li as i32 {
                    slx += w * xi * new_l as f32;
                    sl2 += w * new_l as f32 * new_l as f32;
                    if slx * slx * suml2 > sumlx * sumlx * sl2 {
                        *li = new_l as u8;
                        sumlx = slx;
                        suml2 = sl2;
                        changed = true;
                    }
                }
            }
        }
        if !changed {
            break;
        }
    }
    if suml2 > 0.0 { sumlx / suml2 } else { 0.0 }
}

/// `get_scale_min_k4`: the 6-bit scale and min of sub-block `j` (0..8) of a q4_K/q5_K
/// `scales` array.
#[inline(always)]
pub fn get_scale_min_k4(j: usize, q: &[u8; 12]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        (
            (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4),
            (q[j + 4] >> 4) | ((q[j] >> 6) << 4),
        )
    }
}

/// The inverse of [`get_scale_min_k4`]: packs 8 scale codes and 8 min codes (6-bit; wider
/// codes spill into neighbouring bits exactly as ggml's packing lets them).
pub fn pack_scale_min_k4(ls: &[u8; 8], lm: &[u8; 8]) -> [u8; 12] {
    let mut q = [0u8; 12];
    for j in 0..8 {
        if j < 4 {
            q[j] = ls[j];
            q[j + 4] = lm[j];
        } else {
            q[j + 4] = (ls[j] & 0xF) | ((lm[j] & 0xF) << 4);
            q[j - 4] |= (ls[j] >> 4) << 6;
            q[j] |= (lm[j] >> 4) << 6;
        }
    }
    q
}

/// `float s = 0; for (...) s += v;`
#[inline(always)]
pub(crate) fn sum(v: &[f32]) -> f32 {
    let mut s = 0.0f32;
    for &x in v {
        s += x;
    }
    s
}

/// `float s = 0; for (...) s += x*x;`
#[inline(always)]
pub(crate) fn sum_squares(v: &[f32]) -> f32 {
    let mut s = 0.0f32;
    for &x in v {
        s += x * x;
    }
    s
}

/// The largest of `v` and 0 (`if (v > max) max = v;` from `max = 0`).
#[inline(always)]
pub(crate) fn largest(v: &[f32]) -> f32 {
    let mut max = 0.0f32;
    for &x in v {
        if x > max {
            max = x;
        }
    }
    max
}

/// The weights of the importance-matrix paths: `qw[i] * sqrtf(sigma2 + x[i]*x[i])`.
#[inline(always)]
pub(crate) fn importance_weights(x: &[f32], qw: &[f32], sigma2: f32, out: &mut [f32]) {
    for ((o, &xi), &w) in out.iter_mut().zip(x).zip(qw) {
        *o = w * (sigma2 + xi * xi).sqrt();
    }
}

/// The final pass of q2_K/q4_K/q5_K: each value re-rounded against its sub-block's stored
/// scale `d` and min `dm`, `l = clamp(nearest_int((x + dm)/d), 0, nmax)`. A zero `d`
/// keeps the codes the search chose.
#[inline(always)]
pub(crate) fn requantize_with_min(x: &[f32], d: f32, dm: f32, nmax: i32, l: &mut [u8]) {
    if d == 0.0 {
        return;
    }
    for (li, &xi) in l.iter_mut().zip(x) {
        *li = nearest_int((xi + dm) / d).clamp(0, nmax) as u8;
    }
}

/// The final pass of q3_K/q6_K: `l = clamp(nearest_int(x/d), -nmax, nmax-1) + nmax`. A
/// zero `d` keeps the codes the search chose.
#[inline(always)]
pub(crate) fn requantize_symmetric(x: &[f32], d: f32, nmax: i32, l: &mut [i8]) {
    if d == 0.0 {
        return;
    }
    for (li, &xi) in l.iter_mut().zip(x) {
        *li = (clamp_signed(nearest_int(xi / d), nmax) + nmax) as i8;
    }
}

/// The 2-bit packing of q2_K and q3_K: byte `32*h + i` holds codes `128*h + i + 32*k`
/// in bits `2k..2k+2`.
pub(crate) fn pack_2bit(l: &[u8; QK_K], qs: &mut [u8; QK_K / 4]) {
    for (lh, qh) in l.chunks_exact(128).zip(qs.chunks_exact_mut(32)) {
        for (i, q) in qh.iter_mut().enumerate() {
            *q = lh[i] | (lh[i + 32] << 2) | (lh[i + 64] << 4) | (lh[i + 96] << 6);
        }
    }
}

/// What sets q4_K and q5_K apart while their scales are chosen.
pub(crate) struct ScaleMinFormat {
    /// Largest code: 15 for q4_K, 31 for q5_K.
    pub nmax: i32,
    /// `(rmin, rdelta, nstep)` of the reference path's `make_qkx2_quants` search.
    pub ref_search: (f32, f32, i32),
    /// Whether the weighted path clamps its scale codes to 63 (q5_K does, q4_K does not).
    pub clamp_weighted_codes: bool,
}

/// A q4_K/q5_K super-block with its scales chosen and its codes (`0..=nmax`) not yet packed.
pub(crate) struct ScaleMinSuperBlock {
    /// Super-block scale of the scales.
    pub d: F16Le,
    /// Super-block scale of the mins.
    pub dmin: F16Le,
    /// Packed 6-bit scales and mins.
    pub scales: [u8; 12],
    /// One code per element.
    pub l: [u8; QK_K],
}

/// A q4_K or q5_K block, which a [`ScaleMinSuperBlock`] is packed into.
pub(crate) trait ScaleMinBlock {
    /// Stores `sb` into `block` as the format lays it out.
    fn pack(sb: &ScaleMinSuperBlock, block: &mut Self);
}

/// Quantizes 256 values the way `quantize_row_q4_K_ref` / `quantize_row_q5_K_ref` do
/// (`qw` None) or `quantize_row_q4_K_impl` / `quantize_row_q5_K_impl` do (`qw` the 256
/// importance weights), up to the packing of the codes.
pub(crate) fn quantize_scale_min_super_block(
    x: &[f32],
    qw: Option<&[f32]>,
    format: &ScaleMinFormat,
) -> ScaleMinSuperBlock {
    let nmax = format.nmax;
    let mut l = [0u8; QK_K];
    let mut scales = [0.0f32; QK_K / 32];
    let mut mins = [0.0f32; QK_K / 32];
    let mut sw = [0.0f32; QK_K / 32];
    let sigma2 = qw.map(|_| 2.0 * sum_squares(&x[..QK_K]) / QK_K as f32);
    for (j, (xs, ls)) in x.chunks_exact(32).zip(l.chunks_exact_mut(32)).enumerate() {
        let ws = qw.zip(sigma2).map(|(qw, s)| (&qw[32 * j..32 * (j + 1)], s));
        (scales[j], mins[j], sw[j]) = search_sub_block(xs, ws, format, ls);
    }
    let (d, dmin, packed) = choose_scale_min_codes(&scales, &mins, qw.map(|_| &sw), format);
    let d_all = d.to_f32();
    let dmin_all = dmin.to_f32();
    for (j, (xs, ls)) in x.chunks_exact(32).zip(l.chunks_exact_mut(32)).enumerate() {
        let (sc, m) = get_scale_min_k4(j, &packed);
        requantize_with_min(xs, d_all * sc as f32, dmin_all * m as f32, nmax, ls);
    }
    ScaleMinSuperBlock {
        d,
        dmin,
        scales: packed,
        l,
    }
}

/// The scale search of one q4_K/q5_K sub-block of 32 values, with its codes written to
/// `ls`: the reference path's `make_qkx2_quants` with weights `av_x + |x|` (`qw` None), or
/// the weighted path's `make_qkx3_quants` with the importance weights of `qw = (the
/// sub-block's imatrix columns, sigma2)`. Returns `(scale, min, sum of the weights)`.
pub(crate) fn search_sub_block(
    xs: &[f32],
    qw: Option<(&[f32], f32)>,
    format: &ScaleMinFormat,
    ls: &mut [u8],
) -> (f32, f32, f32) {
    let mut laux = [0u8; 32];
    let mut weights = [0.0f32; 32];
    match qw {
        None => {
            let (rmin, rdelta, nstep) = format.ref_search;
            let av_x = (sum_squares(xs) / 32.0).sqrt();
            for (w, &v) in weights.iter_mut().zip(xs) {
                *w = av_x + v.abs();
            }
            let (scale, min) = make_qkx2_quants(
                32,
                format.nmax,
                xs,
                &weights,
                ls,
                &mut laux,
                rmin,
                rdelta,
                nstep,
                false,
            );
            (scale, min, 0.0)
        }
        Some((qw, sigma2)) => {
            importance_weights(xs, qw, sigma2, &mut weights);
            let sw = sum(&weights);
            let (scale, min) = make_qkx3_quants(
                32,
                format.nmax,
                xs,
                Some(&weights),
                ls,
                &mut laux,
                -0.9,
                0.05,
                36,
                false,
            );
            (scale, min, sw)
        }
    }
}

/// The middle of the q4_K/q5_K super-block quantizers: from the 8 sub-block scales and
/// mins the search found, the super-block scales `d`, `dmin` and the packed 6-bit codes.
/// `sw` (the sums of each sub-block's importance weights) selects the weighted path's
/// `make_qp_quants` coding; without it the reference path's linear coding is used.
pub(crate) fn choose_scale_min_codes(
    scales: &[f32; 8],
    mins: &[f32; 8],
    sw: Option<&[f32; 8]>,
    format: &ScaleMinFormat,
) -> (F16Le, F16Le, [u8; 12]) {
    match sw {
        None => {
            let max_scale = largest(scales);
            let max_min = largest(mins);
            let inv_scale = if max_scale > 0.0 {
                63.0 / max_scale
            } else {
                0.0
            };
            let inv_min = if max_min > 0.0 { 63.0 / max_min } else { 0.0 };
            let ls = scales.map(|s| (nearest_int(inv_scale * s) as u8).min(63));
            let lm = mins.map(|m| (nearest_int(inv_min * m) as u8).min(63));
            (
                F16Le::from_f32(max_scale / 63.0),
                F16Le::from_f32(max_min / 63.0),
                pack_scale_min_k4(&ls, &lm),
            )
        }
        Some(sw) => {
            let mut ls = [0u8; 8];
            let mut lm = [0u8; 8];
            let d_block = make_qp_quants(8, 63, scales, &mut ls, sw);
            let m_block = make_qp_quants(8, 63, mins, &mut lm, sw);
            if format.clamp_weighted_codes {
                ls = ls.map(|v| v.min(63));
                lm = lm.map(|v| v.min(63));
            }
            (
                F16Le::from_f32(d_block),
                F16Le::from_f32(m_block),
                pack_scale_min_k4(&ls, &lm),
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scale_min_k4_round_trips_six_bit_codes() {
        let ls: [u8; 8] = [0, 1, 17, 63, 32, 45, 5, 60];
        let lm: [u8; 8] = [63, 2, 16, 0, 31, 33, 48, 7];
        let q = pack_scale_min_k4(&ls, &lm);
        for j in 0..8 {
            assert_eq!(get_scale_min_k4(j, &q), (ls[j], lm[j]), "sub-block {j}");
        }
    }

    #[test]
    fn qx_quants_of_a_ramp_are_exact() {
        // x = -8..8: nmax 8 covers it with scale 1 (the first extreme, -8, sets the sign).
        let x: Vec<f32> = (0..16).map(|i| i as f32 - 8.0).collect();
        let mut l = [0i8; 16];
        let d = make_qx_quants(16, 8, &x, &mut l, 1, None);
        assert_eq!(d, 1.0);
        for (i, &li) in l.iter().enumerate() {
            assert_eq!(li as f32 - 8.0, x[i]);
        }
    }

    #[test]
    fn qx_quants_of_zeros_are_zero() {
        let mut l = [5i8; 16];
        assert_eq!(make_qx_quants(16, 32, &[0.0; 16], &mut l, 1, None), 0.0);
        assert_eq!(l, [0; 16]);
    }

    #[test]
    fn q3_quants_fit_well() {
        let x: Vec<f32> = (0..16).map(|i| ((i * 7) % 11) as f32 * 0.3 - 1.4).collect();
        let mut l = [0i8; 16];
        let d = make_q3_quants(16, 4, &x, &mut l);
        for (&xi, &li) in x.iter().zip(&l) {
            assert!((0..8).contains(&li));
            assert!(
                (xi - d * (li as f32 - 4.0)).abs() <= d.abs() * 0.75,
                "{xi} {li} {d}"
            );
        }
    }

    #[test]
    fn qkx_quants_reconstruct_within_a_step() {
        let x: Vec<f32> = (0..32)
            .map(|i| ((i * 13) % 17) as f32 * 0.25 - 1.0)
            .collect();
        let w = [1.0f32; 32];
        let (mut l2, mut l3, mut aux) = ([0u8; 32], [0u8; 32], [0u8; 32]);
        let (s2, m2) = make_qkx2_quants(32, 15, &x, &w, &mut l2, &mut aux, -1.0, 0.1, 20, false);
        let (s3, m3) = make_qkx3_quants(
            32,
            15,
            &x,
            Some(&w),
            &mut l3,
            &mut aux,
            -0.9,
            0.05,
            36,
            false,
        );
        for (s, m, l) in [(s2, m2, &l2), (s3, m3, &l3)] {
            assert!(s > 0.0 && m >= 0.0);
            for (&xi, &li) in x.iter().zip(l) {
                assert!(li <= 15);
                assert!((s * li as f32 - m - xi).abs() <= s, "{xi} {li} {s} {m}");
            }
        }
    }

    #[test]
    fn qkx_quants_of_a_constant_positive_row() {
        // min is lifted to 0, so the constant is max and codes are nmax.
        let x = [2.0f32; 16];
        let (mut l, mut aux) = ([0u8; 16], [0u8; 16]);
        let (s, m) = make_qkx2_quants(16, 3, &x, &x, &mut l, &mut aux, -0.5, 0.1, 15, true);
        assert_eq!(l, [3; 16]);
        assert_eq!(m, 0.0);
        assert!((s * 3.0 - 2.0).abs() < 1e-6);
    }

    #[test]
    fn qp_quants_hit_exact_multiples() {
        let x: Vec<f32> = (0..8).map(|i| (i * 9) as f32 * 0.5).collect();
        let mut l = [0u8; 8];
        let d = make_qp_quants(8, 63, &x, &mut l, &[1.0; 8]);
        for (&xi, &li) in x.iter().zip(&l) {
            assert!((d * li as f32 - xi).abs() < 1e-4, "{xi} {li} {d}");
        }
    }
}
