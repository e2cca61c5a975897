//! q4_K and q5_K quantization with one 32-value sub-block per lane: AVX2's 8 lanes are one
//! super-block, AVX-512's 16 two, NEON's 4 half of one. The search runs in lanes
//! ([`super::kquant::qkx_search`]); choosing the 6-bit codes of a super-block is the
//! scalar code itself (`choose_scale_min_codes`); the final re-rounding runs over
//! elements. Mirrors `scalar::kquant::quantize_scale_min_super_block`.

use super::kquant::qp_quants;
use super::kquant::{
    Level, PairScratch, SubBlockSearch, qkx_search, qkx_search_two, search_sub_blocks, store_lanes,
    sub_block_weights_into,
};
use super::lanes::{Lanes, MAX_LANES, Pair, from_fn, transpose, transpose_into};
use super::{Row, Scratch, SimdCodec, blocks, blocks_mut};
use crate::blocks::{BlockQ4K, BlockQ5K, QK_K};
use crate::num::F16Le;
use crate::scalar::kquant::{
    ScaleMinBlock, ScaleMinFormat, ScaleMinSuperBlock, choose_scale_min_codes, get_scale_min_k4,
    pack_scale_min_k4, search_sub_block,
};

/// Quantizes one row (`x.len()` a multiple of 256, `qw` its importance weights) in
/// `scratch` into `blocks`, prefetching what it reads next during the search (see
/// `Search::two_groups`; `ahead` is the next row, or empty). Returns false, having written nothing,
/// when the row holds a NaN or an infinity.
///
/// The row is not read for them first: a value that is not finite makes the sum of its
/// sub-block's squares (or super-block's, with weights) NaN or infinite, which the search
/// computes anyway; only a row where one of those sums is (finite values whose squares
/// overflow can make it so) is looked through value by value before anything is written.
#[inline(always)]
pub(crate) fn quantize_row<V: Lanes>(
    x: &[f32],
    qw: Option<&[f32]>,
    format: &ScaleMinFormat,
    scratch: &mut PairScratch<Pair<V>>,
    ahead: &[f32],
    blocks: &mut [impl ScaleMinBlock],
) -> bool {
    let nb = x.len() / QK_K;
    let sigma2 = super_block_sigma2::<V>(x, qw, 2.0);
    let suspect = match &sigma2 {
        Some(s2) => !s2.iter().all(|s| s.is_finite()),
        None => false,
    };
    let mut search = Search {
        suspect,
        x,
        qw,
        sigma2: sigma2.as_deref(),
        format,
        ahead,
        scales: vec![0.0f32; nb * 8],
        mins: vec![0.0f32; nb * 8],
        sw: vec![0.0f32; nb * 8],
    };
    search_sub_blocks::<V>(nb * 8, &mut search, Some(scratch));
    let Search {
        scales,
        mins,
        sw,
        suspect,
        ..
    } = search;
    if suspect && !x.iter().all(|v| v.is_finite()) {
        return false;
    }
    // Not `qw.map(..)`: a closure would be compiled without the ISA's target features.
    #[allow(clippy::manual_map)]
    let weighted = match qw {
        Some(_) => Some(weighted_codes::<V>(&scales, &mins, &sw, format)),
        None => None,
    };
    let mut sb = ScaleMinSuperBlock {
        d: F16Le::from_f32(0.0),
        dmin: F16Le::from_f32(0.0),
        scales: [0; 12],
        l: [0; QK_K],
    };
    // Index loops, not iterator adapters: in a function this large the compiler stops
    // inlining them, and a call per super-block costs more than its work.
    for b in 0..nb {
        let (d, dmin, packed) = match &weighted {
            Some(codes) => codes[b],
            None => {
                let sub = |v: &[f32]| -> [f32; 8] { v[8 * b..8 * b + 8].try_into().unwrap() };
                choose_scale_min_codes(&sub(&scales), &sub(&mins), None, format)
            }
        };
        let (d_all, dmin_all) = (d.to_f32(), dmin.to_f32());
        for j in 0..8 {
            let at = b * QK_K + 32 * j;
            let (xs, ls) = (&x[at..at + 32], &mut sb.l[32 * j..32 * j + 32]);
            let (sc, m) = get_scale_min_k4(j, &packed);
            let d = d_all * sc as f32;
            if d == 0.0 {
                // The search's own codes stay: get them from the scalar search.
                let ws = qw
                    .zip(sigma2.as_ref())
                    .map(|(qw, s2)| (&qw[at..at + 32], s2[b]));
                search_sub_block(xs, ws, format, ls);
                continue;
            }
            requantize_with_min::<V>(xs, d, dmin_all * m as f32, format.nmax, ls);
        }
        (sb.d, sb.dmin, sb.scales) = (d, dmin, packed);
        ScaleMinBlock::pack(&sb, &mut blocks[b]);
    }
    true
}

/// `choose_scale_min_codes` with weights for every super-block of a row (8 scales, mins
/// and weight sums each, in order), one super-block per lane: the two `make_qp_quants`
/// searches in lanes ([`qp_quants`]), then the packing.
#[inline(always)]
fn weighted_codes<V: Lanes>(
    scales: &[f32],
    mins: &[f32],
    sw: &[f32],
    format: &ScaleMinFormat,
) -> Vec<(F16Le, F16Le, [u8; 12])> {
    let nb = scales.len() / 8;
    let mut out = Vec::with_capacity(nb);
    let (mut d, mut dmin) = ([0.0f32; MAX_LANES], [0.0f32; MAX_LANES]);
    let (mut ls, mut lm) = ([[0.0f32; MAX_LANES]; 8], [[0.0f32; MAX_LANES]; 8]);
    let cap = if format.clamp_weighted_codes { 63 } else { 255 };
    for g in (0..nb).step_by(V::N) {
        let count = V::N.min(nb - g);
        let w: [V; 8] = transpose(&sw[8 * g..], count);
        let (d_v, ls_v) = qp_quants::<V, 8>(&transpose(&scales[8 * g..], count), &w, 63);
        let (m_v, lm_v) = qp_quants::<V, 8>(&transpose(&mins[8 * g..], count), &w, 63);
        d_v.store(&mut d);
        m_v.store(&mut dmin);
        for k in 0..8 {
            ls_v[k].store(&mut ls[k]);
            lm_v[k].store(&mut lm[k]);
        }
        for lane in 0..count {
            let code = |l: &[[f32; MAX_LANES]; 8]| -> [u8; 8] {
                std::array::from_fn(|k| (l[k][lane] as u8).min(cap))
            };
            out.push((
                F16Le::from_f32(d[lane]),
                F16Le::from_f32(dmin[lane]),
                pack_scale_min_k4(&code(&ls), &code(&lm)),
            ));
        }
    }
    out
}

/// The scale search of a row's 32-value sub-blocks: their scales, mins and (weighted
/// path) weight sums.
struct Search<'a> {
    x: &'a [f32],
    qw: Option<&'a [f32]>,
    sigma2: Option<&'a [f32]>,
    format: &'a ScaleMinFormat,
    /// The next row, whose start is prefetched during the search of this row's end.
    ahead: &'a [f32],
    /// Whether a sum of squares was NaN or infinite (see [`quantize_row`]).
    suspect: bool,
    scales: Vec<f32>,
    mins: Vec<f32>,
    sw: Vec<f32>,
}

impl Search<'_> {
    /// The transposed values of sub-blocks `g..g + count` and their search weights (with
    /// an importance matrix also storing their sums in `sw`).
    #[inline(always)]
    fn values_and_weights<V: Lanes>(
        &mut self,
        g: usize,
        count: usize,
        xt: &mut [V; 32],
        w: &mut [V; 32],
    ) {
        transpose_into(&self.x[g * 32..], count, xt);
        match (self.qw, self.sigma2) {
            (Some(qw), Some(sigma2)) => {
                let sum_w = sub_block_weights_into(xt, qw, sigma2, 8, g, count, w);
                store_lanes(sum_w, &mut self.sw[g..g + count]);
            }
            _ => {
                let mut ss = V::splat(0.0);
                for xi in xt.iter() {
                    ss = ss.add(xi.mul(*xi));
                }
                // One comparison in registers (`lanes::all_finite` goes through memory,
                // which the codec bench measured slower here).
                let finite = ss.lt(V::splat(f32::INFINITY));
                self.suspect |= V::any(V::not(finite));
                let av_x = ss.div(V::splat(32.0)).sqrt();
                for i in 0..32 {
                    w[i] = av_x.add(xt[i].abs());
                }
            }
        }
    }

    /// The search's parameters: qkx3's with an importance matrix, else the format's qkx2.
    fn params(&self) -> ((f32, f32, i32), Level) {
        match self.qw {
            Some(_) => ((-0.9, 0.05, 36), Level::Qkx3),
            None => (self.format.ref_search, Level::Qkx2),
        }
    }

    /// Stores the scales and mins found for sub-blocks `g..g + count`.
    #[inline(always)]
    fn store<V: Lanes>(&mut self, g: usize, count: usize, (scale, min): (V, V)) {
        store_lanes(scale, &mut self.scales[g..g + count]);
        store_lanes(min, &mut self.mins[g..g + count]);
    }
}

impl SubBlockSearch for Search<'_> {
    #[inline(always)]
    fn group<V: Lanes>(&mut self, g: usize, count: usize) {
        let zero = V::splat(0.0);
        let (mut xt, mut w) = ([zero; 32], [zero; 32]);
        self.values_and_weights::<V>(g, count, &mut xt, &mut w);
        let (search, level) = self.params();
        let found = qkx_search::<V, 32, false>(&xt, &w, self.format.nmax, search, level);
        self.store(g, count, found);
    }

    #[inline(always)]
    fn two_groups<V: Lanes>(&mut self, g: usize, s: &mut PairScratch<V>) {
        self.values_and_weights::<V>(g, V::N, &mut s.xa, &mut s.wa);
        self.values_and_weights::<V>(g + V::N, V::N, &mut s.xb, &mut s.wb);
        let (search, level) = self.params();
        let (end, span) = ((g + 2 * V::N) * 32, 2 * V::N * 32);
        let ahead = match self.qw {
            // The values searched next (the rest of this row's, else the next row's) are
            // brought into the first-level cache meanwhile: the transposition that reads
            // them would otherwise wait on the second level.
            None if end < self.x.len() => &self.x[end..self.x.len().min(end + span)],
            None => &self.ahead[..self.ahead.len().min(span)],
            // With weights the row is read whole before its search (its super-blocks'
            // sums of squares), which finds it in the cache when the search of the row
            // before prefetched it.
            Some(_) => self.ahead.get(g * 32..end).unwrap_or(&[]),
        };
        let [a, b] = qkx_search_two::<V, 32, false>(
            (&s.xa, &s.wa, &mut s.la),
            (&s.xb, &s.wb, &mut s.lb),
            self.format.nmax,
            search,
            level,
            ahead,
        );
        self.store(g, V::N, a);
        self.store(g + V::N, V::N, b);
    }
}

/// `factor * sum(x²) / 256` of every super-block of the row, one super-block per lane
/// (each lane sums its 256 squares in order, as the scalar loop does; a factor of 1 leaves
/// the sum as it is), for the importance-matrix paths: `None` without importance values.
#[inline(always)]
pub(crate) fn super_block_sigma2<V: Lanes>(
    x: &[f32],
    qw: Option<&[f32]>,
    factor: f32,
) -> Option<Vec<f32>> {
    qw?;
    let mut out = super_block_sums::<V>(x);
    let nb = out.len();
    for g in (0..nb).step_by(V::N) {
        let count = V::N.min(nb - g);
        let acc: V = from_fn(|lane| if lane < count { out[g + lane] } else { 0.0 });
        let sigma2 = V::splat(factor).mul(acc).div(V::splat(QK_K as f32));
        store_lanes(sigma2, &mut out[g..g + count]);
    }
    Some(out)
}

/// `sum(x²)` of every super-block of the row, summed in order, one super-block per lane.
#[inline(always)]
pub(crate) fn super_block_sums<V: Lanes>(x: &[f32]) -> Vec<f32> {
    let nb = x.len() / QK_K;
    let mut out = vec![0.0f32; nb];
    for g in (0..nb).step_by(V::N) {
        let count = V::N.min(nb - g);
        let mut acc = V::splat(0.0);
        if count == V::N {
            // 16 values of every super-block at a time, transposed.
            let mut cols = [V::splat(0.0); 16];
            for c in (0..QK_K).step_by(16) {
                V::load_transposed(&x[g * QK_K + c..], QK_K, &mut cols);
                for v in &cols {
                    acc = acc.add(v.mul(*v));
                }
            }
        } else {
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
        }
        store_lanes(acc, &mut out[g..g + count]);
    }
    out
}

/// `l = clamp(nearest_int((x + dm) / d), 0, nmax)` over a sub-block (a whole number of
/// vectors: 16 or 32 values).
#[inline(always)]
pub(crate) fn requantize_with_min<V: Lanes>(x: &[f32], d: f32, dm: f32, nmax: i32, l: &mut [u8]) {
    let (dv, dmv) = (V::splat(d), V::splat(dm));
    for k in (0..x.len() / V::N * V::N).step_by(V::N) {
        let q = V::load(&x[k..]).add(dmv).div(dv).nearest_int();
        V::store_u8(V::clamp_int(q, 0, nmax), &mut l[k..]);
    }
}

/// `dequantize_row_q4_K` in lanes: each 64 values share 32 bytes, whose low nibbles are
/// the first 32 values (`y = (d*sc1)*q - dmin*m1`) and high nibbles the next 32. The
/// nibbles are split in float as in [`super::q4_0_q5_0_q8_0::dequantize_q4_0`]; the products and
/// differences are the scalar code's own. For outputs too large for the caches: it writes
/// around them (see [`Lanes::store_stream`]).
#[inline(always)]
pub(crate) fn dequantize_q4_k_streaming<V: Lanes>(x: &[BlockQ4K], y: &mut [f32]) {
    for (block, yb) in x.iter().zip(y.chunks_exact_mut(QK_K)) {
        let (d, min) = (block.d.to_f32(), block.dmin.to_f32());
        put_k_super_block::<V, false>(d, min, &block.scales, &block.qs, &[0; 32], yb);
    }
    V::stream_fence();
}

/// `dequantize_row_q5_K` in lanes, as [`dequantize_q4_k_streaming`] with each value's
/// fifth bit from `qh`.
#[inline(always)]
pub(crate) fn dequantize_q5_k_streaming<V: Lanes>(x: &[BlockQ5K], y: &mut [f32]) {
    for (block, yb) in x.iter().zip(y.chunks_exact_mut(QK_K)) {
        let (d, min) = (block.d.to_f32(), block.dmin.to_f32());
        put_k_super_block::<V, true>(d, min, &block.scales, &block.qs, &block.qh, yb);
    }
    V::stream_fence();
}

/// What bits `2j` and `2j + 1` of a q5_K high-bit byte add to the low and the high
/// nibble's value, by those two bits.
const HIGH_LO: [f32; 4] = [0.0, 16.0, 0.0, 16.0];
const HIGH_HI: [f32; 4] = [0.0, 0.0, 16.0, 16.0];

/// One q4_K (`Q5 = false`) or q5_K super-block's 256 values from its scales, 128 bytes of
/// nibbles and, for q5_K, 32 bytes of high bits (bits `2j` and `2j + 1` of `qh[k]` for
/// value `k` of the sub-blocks of 32 numbered `2j` and `2j + 1`: `+16` where set, exact
/// in float as the scalar code's integer sum is), stored around the caches.
#[inline(always)]
fn put_k_super_block<V: Lanes, const Q5: bool>(
    d: f32,
    min: f32,
    scales: &[u8; 12],
    qs: &[u8],
    qh: &[u8; 32],
    yb: &mut [f32],
) {
    let (sixteenth, sixteen) = (V::splat(0.0625), V::splat(16.0));
    let mut high = [V::splat(0.0).c_int(); 32];
    if Q5 {
        for (k, h) in high.iter_mut().take(32 / V::N).enumerate() {
            *h = V::load_u8(&qh[k * V::N..]).c_int();
        }
    }
    for (j, (ys, qs)) in yb.chunks_exact_mut(64).zip(qs.chunks_exact(32)).enumerate() {
        let (sc1, m1) = get_scale_min_k4(2 * j, scales);
        let (sc2, m2) = get_scale_min_k4(2 * j + 1, scales);
        let (d1, m1) = (V::splat(d * sc1 as f32), V::splat(min * m1 as f32));
        let (d2, m2) = (V::splat(d * sc2 as f32), V::splat(min * m2 as f32));
        let (lo_out, hi_out) = ys.split_at_mut(32);
        for (v, k) in (0..32).step_by(V::N).enumerate() {
            let q = V::load_u8(&qs[k..]);
            let mut hi = V::int_to_f32(q.mul(sixteenth).c_int());
            let mut lo = q.sub(hi.mul(sixteen));
            if Q5 {
                let h = V::shr_int(high[v], 2 * j as u32);
                lo = lo.add(V::lookup4(&HIGH_LO, h));
                hi = hi.add(V::lookup4(&HIGH_HI, h));
            }
            d1.mul(lo).sub(m1).store_stream(&mut lo_out[k..]);
            d2.mul(hi).sub(m2).store_stream(&mut hi_out[k..]);
        }
    }
}

/// q4_K: finds NaN and infinity itself (see [`quantize_row`]).
#[allow(non_camel_case_types)]
pub(crate) struct Q4_K;

impl SimdCodec for Q4_K {
    #[inline(always)]
    fn quantize<V: Lanes>(
        row: Row<'_>,
        w: Option<&[f32]>,
        y: &mut [u8],
        scratch: &mut Scratch<V>,
    ) -> bool {
        let format = &crate::scalar::q4_k::FORMAT;
        quantize_row::<V>(
            row.values,
            w,
            format,
            scratch,
            row.next,
            blocks_mut::<BlockQ4K>(y),
        )
    }

    #[inline(always)]
    fn dequantize<V: Lanes>(x: &[u8], y: &mut [f32], stream: bool) {
        // Outputs larger than the caches are written around them (no line is read only
        // to be overwritten); smaller ones, likely read again soon, through them.
        match stream {
            true => dequantize_q4_k_streaming::<V::Narrow>(blocks(x), y),
            false => crate::scalar::q4_k::dequantize_row(blocks(x), y),
        }
    }
}

/// q5_K: finds NaN and infinity itself (see [`quantize_row`]).
#[allow(non_camel_case_types)]
pub(crate) struct Q5_K;

impl SimdCodec for Q5_K {
    #[inline(always)]
    fn quantize<V: Lanes>(
        row: Row<'_>,
        w: Option<&[f32]>,
        y: &mut [u8],
        scratch: &mut Scratch<V>,
    ) -> bool {
        let format = &crate::scalar::q5_k::FORMAT;
        quantize_row::<V>(
            row.values,
            w,
            format,
            scratch,
            row.next,
            blocks_mut::<BlockQ5K>(y),
        )
    }

    #[inline(always)]
    fn dequantize<V: Lanes>(x: &[u8], y: &mut [f32], stream: bool) {
        // As q4_K's.
        match stream {
            true => dequantize_q5_k_streaming::<V::Narrow>(blocks(x), y),
            false => crate::scalar::q5_k::dequantize_row(blocks(x), y),
        }
    }
}
