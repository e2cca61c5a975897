//! q4_1 and q5_1 over elements: mirrors `scalar::q4_1::quantize_ref`
//! (`quantize_row_q4_1_ref`) and `scalar::q5_1::quantize_ref`. With an importance matrix
//! ggml runs `make_qkx3_quants` per block; that search runs as the scalar code, compiled
//! in the ISA's entry point.
//!
//! The input is finite (checked before a codec without its own check runs), so a block's
//! minimum and maximum do not depend on the order they are looked for in, with one
//! exception the scalar `if (v < min)` / `if (v > max)` scans decide: a zero extreme is
//! the block's first zero, with its sign (the minimum is stored in the block, and
//! `max - min` is `-0` for `-0 - +0`).

use super::lanes::Lanes;
use super::q4_0_q5_0_q8_0::nibbles;
use super::{Row, Scratch, SimdCodec, blocks, blocks_mut};
use crate::blocks::{BlockQ4_1, BlockQ5_1};
use crate::num::F16Le;
use crate::scalar::q5_0::pack5;

const QK: usize = 32;

/// The block's minimum and maximum as the scalar scan finds them.
#[inline(always)]
fn min_max<V: Lanes>(xb: &[f32]) -> (f32, f32) {
    let first = V::load(xb);
    let (mut lo, mut hi) = (first, first);
    for c in xb.chunks_exact(V::N).skip(1) {
        let v = V::load(c);
        lo = lo.min(v);
        hi = hi.max(v);
    }
    // A zero extreme is the block's first zero, as the scalar scan leaves it.
    let first_zero = |m: f32| match m == 0.0 {
        true => xb.iter().copied().find(|&v| v == 0.0).unwrap_or(m),
        false => m,
    };
    let min = -V::splat(0.0).sub(lo).hmax();
    (first_zero(min), first_zero(hi.hmax()))
}

/// The codes `(int8_t)((x - min) * id + 0.5f)` of one block, as bytes, each at most
/// `max_code`.
#[inline(always)]
fn codes<V: Lanes>(xb: &[f32], min: f32, id: f32, max_code: i32) -> [u8; QK] {
    let mut out = [0u8; QK];
    let (min, id, half) = (V::splat(min), V::splat(id), V::splat(0.5));
    for (xs, cs) in xb.chunks_exact(V::N).zip(out.chunks_exact_mut(V::N)) {
        let q = V::sext8(V::load(xs).sub(min).mul(id).add(half).c_int());
        V::store_u8(V::clamp_int(q, i32::MIN, max_code), cs);
    }
    out
}

/// The scale and its inverse (0 when the scale is) of a block spanning `min..=max` in
/// `steps` steps, as the scalar code computes them.
#[inline(always)]
fn scale(min: f32, max: f32, steps: f32) -> (f32, f32) {
    let d = (max - min) / steps;
    (d, if d != 0.0 { 1.0 / d } else { 0.0 })
}

/// `quantize_row_q4_1_ref`.
#[inline(always)]
pub(crate) fn quantize_q4_1<V: Lanes>(x: &[f32], y: &mut [BlockQ4_1]) {
    for (xb, block) in x.chunks_exact(QK).zip(y.iter_mut()) {
        let (min, max) = min_max::<V>(xb);
        let (d, id) = scale(min, max, 15.0);
        block.d = F16Le::from_f32(d);
        block.m = F16Le::from_f32(min);
        block.qs = nibbles(&codes::<V>(xb, min, id, 15), false);
    }
}

/// `quantize_row_q5_1_ref`.
#[inline(always)]
pub(crate) fn quantize_q5_1<V: Lanes>(x: &[f32], y: &mut [BlockQ5_1]) {
    for (xb, block) in x.chunks_exact(QK).zip(y.iter_mut()) {
        let (min, max) = min_max::<V>(xb);
        let (d, id) = scale(min, max, 31.0);
        block.d = F16Le::from_f32(d);
        block.m = F16Le::from_f32(min);
        // The scalar code keeps every byte of the cast: no bound.
        let codes = codes::<V>(xb, min, id, i32::MAX);
        pack5(&codes, &mut block.qs, &mut block.qh);
    }
}

/// q4_1.
#[allow(non_camel_case_types)]
pub(crate) struct Q4_1;

impl SimdCodec for Q4_1 {
    #[inline(always)]
    fn quantize<V: Lanes>(
        row: Row<'_>,
        w: Option<&[f32]>,
        y: &mut [u8],
        _: &mut Scratch<V>,
    ) -> bool {
        match w {
            None => quantize_q4_1::<V>(row.values, blocks_mut(y)),
            Some(w) => crate::scalar::q4_1::quantize_row(row.values, Some(w), blocks_mut(y)),
        }
        true
    }

    #[inline(always)]
    fn dequantize<V: Lanes>(x: &[u8], y: &mut [f32], _: bool) {
        crate::scalar::q4_1::dequantize_row(blocks(x), y)
    }
}

/// q5_1.
#[allow(non_camel_case_types)]
pub(crate) struct Q5_1;

impl SimdCodec for Q5_1 {
    #[inline(always)]
    fn quantize<V: Lanes>(
        row: Row<'_>,
        w: Option<&[f32]>,
        y: &mut [u8],
        _: &mut Scratch<V>,
    ) -> bool {
        match w {
            None => quantize_q5_1::<V>(row.values, blocks_mut(y)),
            Some(w) => crate::scalar::q5_1::quantize_row(row.values, Some(w), blocks_mut(y)),
        }
        true
    }

    #[inline(always)]
    fn dequantize<V: Lanes>(x: &[u8], y: &mut [f32], _: bool) {
        crate::scalar::q5_1::dequantize_row(blocks(x), y)
    }
}
