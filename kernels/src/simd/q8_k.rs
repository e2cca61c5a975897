//! q8_K over elements: mirrors `scalar::q8_k::quantize_row` (`quantize_row_q8_K_ref`).
//!
//! A block's scale comes from the first value of largest magnitude; the absolute maximum
//! is order-independent, and the first value that has it is found from the lane masks.
//! The codes are then element-wise: `MIN(127, nearest_int(iscale * x))`.

use super::lanes::{Lanes, abs_max};
use super::q4_0_q5_0_q8_0::put_scaled;
use super::{Row, Scratch, SimdCodec, blocks, blocks_mut};
use crate::blocks::{BlockQ8K, QK_K};

/// The first value of `xb` whose magnitude is `amax` (one of `xb`'s magnitudes): the
/// value C's `if (ax > amax) { amax = ax; max = x[j]; }` scan ends with.
#[inline(always)]
fn first_with_magnitude<V: Lanes>(xb: &[f32], amax: f32) -> f32 {
    let a = V::splat(amax);
    for c in xb.chunks_exact(V::N) {
        let hits = V::mask_bits(V::load(c).abs().eq(a));
        if hits != 0 {
            return c[hits.trailing_zeros() as usize];
        }
    }
    // Not reached: `amax` is the magnitude of one of the values.
    amax
}

/// `quantize_row_q8_K_ref` of whole blocks (finite values, as the codec checks first).
/// An all-zero block gets `d = 0` and zero codes and keeps its `bsums`, as in ggml.
#[inline(always)]
pub(crate) fn quantize_row<V: Lanes>(x: &[f32], y: &mut [BlockQ8K]) {
    for (xb, block) in x.chunks_exact(QK_K).zip(y.iter_mut()) {
        let amax = abs_max::<V>(xb);
        if amax == 0.0 {
            block.d = 0.0f32.to_le_bytes();
            block.qs = [0; QK_K];
            continue;
        }
        let iscale = -127.0 / first_with_magnitude::<V>(xb, amax);
        let is = V::splat(iscale);
        let qs: &mut [u8; QK_K] = bytemuck::cast_mut(&mut block.qs);
        for (xs, qs) in xb.chunks_exact(V::N).zip(qs.chunks_exact_mut(V::N)) {
            // |iscale * x| <= 127 for every value, where the magic-number rounding is exact.
            let q = V::clamp_int(V::load(xs).mul(is).nearest_int(), i32::MIN, 127);
            V::store_u8(q, qs);
        }
        for (sum, q16) in block.bsums.iter_mut().zip(block.qs.chunks_exact(16)) {
            let s: i32 = q16.iter().map(|&q| i32::from(q)).sum();
            *sum = (s as i16).to_le_bytes();
        }
        block.d = (1.0 / iscale).to_le_bytes();
    }
}

/// q8_K (ggml ignores an importance matrix for it).
#[allow(non_camel_case_types)]
pub(crate) struct Q8_K;

impl SimdCodec for Q8_K {
    #[inline(always)]
    fn quantize<V: Lanes>(
        row: Row<'_>,
        _: Option<&[f32]>,
        y: &mut [u8],
        _: &mut Scratch<V>,
    ) -> bool {
        quantize_row::<V>(row.values, blocks_mut(y));
        true
    }

    /// `y = d * q` (IEEE products commute) in the ISA's narrow lanes,
    /// bound by memory writes as q8_0's is; outputs too large for the caches are
    /// written around them.
    #[inline(always)]
    fn dequantize<V: Lanes>(x: &[u8], y: &mut [f32], stream: bool) {
        let x = blocks::<BlockQ8K>(x);
        match stream {
            true => dequantize_q8_k::<V::Narrow, true>(x, y),
            false => dequantize_q8_k::<V::Narrow, false>(x, y),
        }
    }
}

/// `dequantize_row_q8_K` in lanes, with streaming stores when `STREAM`.
#[inline(always)]
fn dequantize_q8_k<V: Lanes, const STREAM: bool>(x: &[BlockQ8K], y: &mut [f32]) {
    for (block, yb) in x.iter().zip(y.chunks_exact_mut(QK_K)) {
        put_scaled::<V, STREAM>(&block.qs, f32::from_le_bytes(block.d), yb);
    }
    if STREAM {
        V::stream_fence();
    }
}
