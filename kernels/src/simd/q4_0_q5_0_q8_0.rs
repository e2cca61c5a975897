//! q4_0, q5_0 and q8_0 over elements, with the per-block scales computed for a vector of
//! blocks at once: mirrors `scalar::q4_0::quantize_ref` (`quantize_row_q4_0_ref`),
//! `scalar::q5_0::quantize_ref` and `scalar::q8_0::quantize_row`.
//!
//! Each block's statistic (absolute maximum, or the first value of largest magnitude) is
//! a maximum, independent of order; the scale `d = m / divisor`, its inverse and its fp16
//! rounding are then one lane per block, the same IEEE operations as the scalar code.

use super::kquant::{
    SubBlockSearch, importance_weights, qx_search, search_sub_blocks, store_lanes,
};
use super::lanes::{
    Lanes, MAX_LANES, abs_max, abs_max_seen, all_finite, round_half_away_int, store_as, transpose,
};
use super::{Row, Scratch, SimdCodec, blocks, blocks_mut};
use crate::blocks::{BlockQ4_0, BlockQ5_0, BlockQ8_0};
use crate::num::F16Le;
use crate::scalar::q5_0::pack5;

const QK: usize = 32;

/// The fp16 scales `m / divisor` and the inverses `1 / d` (0 where `d` is 0) of the blocks
/// whose statistics are in `m`.
#[inline(always)]
fn scales<V: Lanes>(
    m: &[f32; MAX_LANES],
    divisor: f32,
    d_bits: &mut [u16; MAX_LANES],
    ids: &mut [f32; MAX_LANES],
) {
    let zero = V::splat(0.0);
    let d = V::load(m).div(V::splat(divisor));
    let id = V::select(d.eq(zero), zero, V::splat(1.0).div(d));
    d.store_f16(d_bits);
    id.store(ids);
}

/// The first value of largest magnitude in `xb` (32 values), 0 if all are zero: the
/// `if (amax < fabsf(v)) { amax = fabsf(v); max = v; }` scan of the `_0` quantizers.
/// Branch-free: which half holds the maximum is data, and a mispredicted branch per block
/// costs more than the comparisons.
#[inline(always)]
fn signed_max<V: Lanes>(xb: &[f32]) -> f32 {
    let amax = abs_max::<V>(xb);
    let a = V::splat(amax);
    let mut hits = 0u64;
    for (k, c) in xb.chunks_exact(V::N).enumerate() {
        hits |= V::mask_bits(V::load(c).abs().eq(a)) << (k * V::N);
    }
    // The absolute maximum is one of the values, so some bit is set.
    let first = xb[(hits.trailing_zeros() as usize).min(QK - 1)];
    // All zeros: C keeps its initial +0 (a -0 here would give a -0 scale).
    if amax == 0.0 { 0.0 } else { first }
}

/// `quantize_row_q8_0_ref`: the absolute maximum maps to 127, each value is
/// `roundf(x * id)` cast to `int8_t` as C does. Returns whether every value was finite
/// (the input is read once, so the check for NaN and infinity rides along).
#[inline(always)]
pub(crate) fn quantize_q8_0<V: Lanes>(x: &[f32], y: &mut [BlockQ8_0]) -> bool {
    let mut m = [0.0f32; MAX_LANES];
    let mut d_bits = [0u16; MAX_LANES];
    let mut ids = [0.0f32; MAX_LANES];
    let mut seen = V::splat(0.0);
    for (xg, yg) in x.chunks(QK * V::N).zip(y.chunks_mut(V::N)) {
        for (mb, xb) in m.iter_mut().zip(xg.chunks_exact(QK)) {
            *mb = abs_max_seen::<V>(xb, &mut seen);
        }
        scales::<V>(&m, 127.0, &mut d_bits, &mut ids);
        for (b, (block, xb)) in yg.iter_mut().zip(xg.chunks_exact(QK)).enumerate() {
            block.d = F16Le::from_bits(d_bits[b]);
            let id = V::splat(ids[b]);
            let qs: &mut [u8; QK] = bytemuck::cast_mut(&mut block.qs);
            if 4 * V::N <= QK {
                // Four vectors' codes stored at once: fewer byte shuffles per block.
                for (xs, qs) in xb.chunks_exact(4 * V::N).zip(qs.chunks_exact_mut(4 * V::N)) {
                    let q = [
                        round_half_away_int(V::load(xs).mul(id)),
                        round_half_away_int(V::load(&xs[V::N..]).mul(id)),
                        round_half_away_int(V::load(&xs[2 * V::N..]).mul(id)),
                        round_half_away_int(V::load(&xs[3 * V::N..]).mul(id)),
                    ];
                    V::store_u8_4(q, qs);
                }
            } else {
                for (xs, qs) in xb.chunks_exact(V::N).zip(qs.chunks_exact_mut(V::N)) {
                    V::store_u8(round_half_away_int(V::load(xs).mul(id)), qs);
                }
            }
        }
    }
    all_finite(seen)
}

/// The codes `MIN(max_code, (int8_t)(x * id + offset))` of one block, as bytes, and the
/// bits of the codes that have bit 4 set (for q5_0's `qh`).
#[inline(always)]
fn offset_codes<V: Lanes>(
    xb: &[f32],
    id: f32,
    offset: f32,
    max_code: i32,
    codes: &mut [u8; QK],
) -> u32 {
    let (id, offset) = (V::splat(id), V::splat(offset));
    let mut high = 0u64;
    for (k, (xs, cs)) in xb
        .chunks_exact(V::N)
        .zip(codes.chunks_exact_mut(V::N))
        .enumerate()
    {
        let q = V::clamp_int(
            V::sext8(V::load(xs).mul(id).add(offset).c_int()),
            i32::MIN,
            max_code,
        );
        V::store_u8(q, cs);
        high |= V::mask_bits(V::test_int(q, 0x10)) << (k * V::N);
    }
    high as u32
}

/// Bytes holding the low nibble of `lo[j]` and, above it, the low nibble of `hi[j]`.
#[inline(always)]
pub(super) fn nibbles(codes: &[u8; QK], mask_lo: bool) -> [u8; QK / 2] {
    const LOW: u128 = u128::from_le_bytes([0x0F; 16]);
    let lo = u128::from_le_bytes(codes[..16].try_into().expect("16 bytes"));
    let hi = u128::from_le_bytes(codes[16..].try_into().expect("16 bytes"));
    let lo = if mask_lo { lo & LOW } else { lo };
    (lo | ((hi & LOW) << 4)).to_le_bytes()
}

/// `quantize_row_q4_0_ref`: the first value of largest magnitude maps to -8; codes are
/// `MIN(15, (int8_t)(x * id + 8.5f))`, two per byte (element j low, j + 16 high).
#[inline(always)]
pub(crate) fn quantize_q4_0<V: Lanes>(x: &[f32], y: &mut [BlockQ4_0]) {
    let mut m = [0.0f32; MAX_LANES];
    let mut d_bits = [0u16; MAX_LANES];
    let mut ids = [0.0f32; MAX_LANES];
    let mut codes = [0u8; QK];
    for (xg, yg) in x.chunks(QK * V::N).zip(y.chunks_mut(V::N)) {
        for (mb, xb) in m.iter_mut().zip(xg.chunks_exact(QK)) {
            *mb = signed_max::<V>(xb);
        }
        scales::<V>(&m, -8.0, &mut d_bits, &mut ids);
        for (b, (block, xb)) in yg.iter_mut().zip(xg.chunks_exact(QK)).enumerate() {
            block.d = F16Le::from_bits(d_bits[b]);
            offset_codes::<V>(xb, ids[b], 8.5, 15, &mut codes);
            // `qs[j] = xi0 | (xi1 << 4)` in bytes: the low code is not masked.
            block.qs = nibbles(&codes, false);
        }
    }
}

/// `quantize_row_q5_0_ref`: the first value of largest magnitude maps to -16; codes are
/// `MIN(31, (int8_t)(x * id + 16.5f))`, low nibbles two per byte, fifth bits in `qh`.
#[inline(always)]
pub(crate) fn quantize_q5_0<V: Lanes>(x: &[f32], y: &mut [BlockQ5_0]) {
    let mut m = [0.0f32; MAX_LANES];
    let mut d_bits = [0u16; MAX_LANES];
    let mut ids = [0.0f32; MAX_LANES];
    let mut codes = [0u8; QK];
    for (xg, yg) in x.chunks(QK * V::N).zip(y.chunks_mut(V::N)) {
        for (mb, xb) in m.iter_mut().zip(xg.chunks_exact(QK)) {
            *mb = signed_max::<V>(xb);
        }
        scales::<V>(&m, -16.0, &mut d_bits, &mut ids);
        for (b, (block, xb)) in yg.iter_mut().zip(xg.chunks_exact(QK)).enumerate() {
            block.d = F16Le::from_bits(d_bits[b]);
            let high = offset_codes::<V>(xb, ids[b], 16.5, 31, &mut codes);
            block.qs = nibbles(&codes, true);
            block.qh = high.to_le_bytes();
        }
    }
}

/// The importance-matrix search of `quantize_row_q4_0_impl` / `quantize_row_q5_0_impl`
/// over a row's blocks, one block per lane: `make_qx_quants(32, nmax, x, L, 1, w)` with
/// the weights `qw[j] * sqrt(sigma2 + x[j]^2)`, `sigma2` the row's mean square.
struct WeightedSearch<'a> {
    x: &'a [f32],
    qw: &'a [f32],
    sigma2: f32,
    nmax: i32,
    /// Per block: the scale, and the `iscale` its codes come from (0 for an all-zero
    /// block, see [`super::kquant::QxFit`]).
    scales: Vec<f32>,
    iscales: Vec<f32>,
}

impl SubBlockSearch for WeightedSearch<'_> {
    #[inline(always)]
    fn group<W: Lanes>(&mut self, g: usize, count: usize) {
        let xt: [W; QK] = transpose(&self.x[g * QK..], count);
        let qwt: [W; QK] = transpose(&self.qw[g * QK..], count);
        let (w, _) = importance_weights(&xt, &qwt, W::splat(self.sigma2));
        let fit = qx_search::<W, QK>(&xt, Some(&w), self.nmax);
        store_lanes(fit.scale, &mut self.scales[g..g + count]);
        store_lanes(fit.iscale, &mut self.iscales[g..g + count]);
    }
}

/// Runs [`WeightedSearch`] over a row with importance values `qw`.
#[inline(always)]
fn weighted_search<'a, V: Lanes>(x: &'a [f32], qw: &'a [f32], nmax: i32) -> WeightedSearch<'a> {
    // The mean square is one serial sum over the row, as in C.
    let mut sum_x2 = 0.0f32;
    for &v in x {
        sum_x2 += v * v;
    }
    let nb = x.len() / QK;
    let mut search = WeightedSearch {
        x,
        qw,
        sigma2: sum_x2 / x.len() as f32,
        nmax,
        scales: vec![0.0; nb],
        iscales: vec![0.0; nb],
    };
    search_sub_blocks::<V>(nb, &mut search, None);
    search
}

/// The codes `make_qx_quants` leaves in `L` for block `b` of a [`WeightedSearch`]:
/// `clamp(nearest_int(iscale*x), -nmax, nmax - 1) + nmax` (rounded in float, exact since
/// `|iscale*x| <= nmax + 1`), or zeros for an all-zero block.
#[inline(always)]
fn weighted_codes<V: Lanes>(xb: &[f32], search: &WeightedSearch<'_>, b: usize) -> [u8; QK] {
    let mut codes = [0u8; QK];
    if search.iscales[b] == 0.0 {
        return codes;
    }
    let nmax = search.nmax as f32;
    let s = V::splat(search.iscales[b]);
    let (lo, hi, off) = (V::splat(-nmax), V::splat(nmax - 1.0), V::splat(nmax));
    for (xs, cs) in xb.chunks_exact(V::N).zip(codes.chunks_exact_mut(V::N)) {
        let q = s.mul(V::load(xs)).round_even().max(lo).min(hi).add(off);
        V::store_u8(q.c_int(), cs);
    }
    codes
}

/// `quantize_row_q4_0_impl` with importance values `qw`.
#[inline(always)]
pub(crate) fn quantize_q4_0_weighted<V: Lanes>(x: &[f32], qw: &[f32], y: &mut [BlockQ4_0]) {
    let search = weighted_search::<V>(x, qw, 8);
    for (b, (block, xb)) in y.iter_mut().zip(x.chunks_exact(QK)).enumerate() {
        block.d = F16Le::from_f32(search.scales[b]);
        block.qs = nibbles(&weighted_codes::<V>(xb, &search, b), false);
    }
}

/// `quantize_row_q5_0_impl` with importance values `qw`.
#[inline(always)]
pub(crate) fn quantize_q5_0_weighted<V: Lanes>(x: &[f32], qw: &[f32], y: &mut [BlockQ5_0]) {
    let search = weighted_search::<V>(x, qw, 16);
    for (b, (block, xb)) in y.iter_mut().zip(x.chunks_exact(QK)).enumerate() {
        block.d = F16Le::from_f32(search.scales[b]);
        let codes = weighted_codes::<V>(xb, &search, b);
        pack5(&codes, &mut block.qs, &mut block.qh);
    }
}

/// `dequantize_row_q8_0`: `y = q * d` (the signed byte widened exactly, then the scalar
/// code's one product). Bound by its writes: run with an ISA's `Narrow` lanes (on AMD
/// Zen 4, 512-bit stores reach memory more slowly than 256-bit ones); `STREAM`
/// writes around the caches (see [`Lanes::store_stream`]).
#[inline(always)]
pub(crate) fn dequantize_q8_0<V: Lanes, const STREAM: bool>(x: &[BlockQ8_0], y: &mut [f32]) {
    for (block, yb) in x.iter().zip(y.chunks_exact_mut(QK)) {
        put_scaled::<V, STREAM>(&block.qs, block.d.to_f32(), yb);
    }
    if STREAM {
        V::stream_fence();
    }
}

/// `y[i] = q[i] * d` for a block's signed quants (a whole number of vectors), stored
/// around the caches with `STREAM` (the caller fences after the last).
#[inline(always)]
pub(crate) fn put_scaled<V: Lanes, const STREAM: bool>(q: &[i8], d: f32, y: &mut [f32]) {
    let d = V::splat(d);
    for (qs, ys) in q.chunks_exact(V::N).zip(y.chunks_exact_mut(V::N)) {
        store_as::<V, STREAM>(V::load_i8(qs).mul(d), ys);
    }
}

/// `dequantize_row_q4_0`: `y = (q - 8) * d`, low nibbles to the block's first 16 values,
/// high nibbles to the last 16. The nibbles are split in float: `hi = (int)(q/16)` (exact:
/// `q/16` is exact and truncation is floor for `q >= 0`), `lo = q - 16*hi`; `q - 8` and
/// the product are then the scalar code's own operations (`V::N` divides 16). `STREAM`
/// writes around the caches.
#[inline(always)]
pub(crate) fn dequantize_q4_0<V: Lanes, const STREAM: bool>(x: &[BlockQ4_0], y: &mut [f32]) {
    let (sixteenth, sixteen, eight) = (V::splat(0.0625), V::splat(16.0), V::splat(8.0));
    for (block, yb) in x.iter().zip(y.chunks_exact_mut(QK)) {
        let d = V::splat(block.d.to_f32());
        let (lo_out, hi_out) = yb.split_at_mut(QK / 2);
        for k in (0..QK / 2).step_by(V::N) {
            let q = V::load_u8(&block.qs[k..]);
            let hi = V::int_to_f32(q.mul(sixteenth).c_int());
            let lo = q.sub(hi.mul(sixteen));
            let (lo, hi) = (lo.sub(eight).mul(d), hi.sub(eight).mul(d));
            store_as::<V, STREAM>(lo, &mut lo_out[k..]);
            store_as::<V, STREAM>(hi, &mut hi_out[k..]);
        }
    }
    if STREAM {
        V::stream_fence();
    }
}

/// q4_0: with an importance matrix ggml runs `make_qx_quants` per block.
#[allow(non_camel_case_types)]
pub(crate) struct Q4_0;

impl SimdCodec for Q4_0 {
    #[inline(always)]
    fn quantize<V: Lanes>(
        row: Row<'_>,
        w: Option<&[f32]>,
        y: &mut [u8],
        _: &mut Scratch<V>,
    ) -> bool {
        match w {
            None => quantize_q4_0::<V>(row.values, blocks_mut(y)),
            Some(w) => quantize_q4_0_weighted::<V>(row.values, w, blocks_mut(y)),
        }
        true
    }

    #[inline(always)]
    fn dequantize<V: Lanes>(x: &[u8], y: &mut [f32], stream: bool) {
        match stream {
            true => dequantize_q4_0::<V::Narrow, true>(blocks(x), y),
            false => dequantize_q4_0::<V::Narrow, false>(blocks(x), y),
        }
    }
}

/// q5_0: with an importance matrix ggml runs `make_qx_quants` per block.
#[allow(non_camel_case_types)]
pub(crate) struct Q5_0;

impl SimdCodec for Q5_0 {
    #[inline(always)]
    fn quantize<V: Lanes>(
        row: Row<'_>,
        w: Option<&[f32]>,
        y: &mut [u8],
        _: &mut Scratch<V>,
    ) -> bool {
        match w {
            None => quantize_q5_0::<V>(row.values, blocks_mut(y)),
            Some(w) => quantize_q5_0_weighted::<V>(row.values, w, blocks_mut(y)),
        }
        true
    }

    #[inline(always)]
    fn dequantize<V: Lanes>(x: &[u8], y: &mut [f32], _: bool) {
        crate::scalar::q5_0::dequantize_row(blocks(x), y)
    }
}

/// q8_0: finds NaN and infinity itself as it reads its input (bound by memory, it would
/// lose a third of its speed to a separate pass first).
#[allow(non_camel_case_types)]
pub(crate) struct Q8_0;

impl SimdCodec for Q8_0 {
    #[inline(always)]
    fn quantize<V: Lanes>(
        row: Row<'_>,
        _: Option<&[f32]>,
        y: &mut [u8],
        _: &mut Scratch<V>,
    ) -> bool {
        quantize_q8_0::<V>(row.values, blocks_mut(y))
    }

    #[inline(always)]
    fn dequantize<V: Lanes>(x: &[u8], y: &mut [f32], stream: bool) {
        match stream {
            true => dequantize_q8_0::<V::Narrow, true>(blocks(x), y),
            false => dequantize_q8_0::<V::Narrow, false>(blocks(x), y),
        }
    }
}
