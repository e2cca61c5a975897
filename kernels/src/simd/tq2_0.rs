//! tq2_0 over elements: mirrors `scalar::tq2_0::quantize_row` (`quantize_row_tq2_0_ref`).

use super::lanes::{Lanes, abs_max_seen, all_finite, round_half_away_int};
use super::{Row, Scratch, SimdCodec, blocks, blocks_mut};
use crate::blocks::BlockTq2_0;
use crate::num::F16Le;

/// `quantize_row_tq2_0_ref`: `lroundf(x * id) + 1` per value, four 2-bit codes a byte.
/// `lroundf` and C's `(int)` agree on the low bits kept here: both give 0 in the low
/// 32 bits for the non-finite products of a subnormal block. Returns whether every value
/// was finite (the input is read once, so the check for NaN and infinity rides along).
#[inline(always)]
pub(crate) fn quantize_row<V: Lanes>(x: &[f32], y: &mut [BlockTq2_0]) -> bool {
    let mut codes = [0i32; 256];
    let mut seen = V::splat(0.0);
    for (xb, block) in x.chunks_exact(256).zip(y.iter_mut()) {
        let d = abs_max_seen::<V>(xb, &mut seen);
        let id = V::splat(if d != 0.0 { 1.0 / d } else { 0.0 });
        block.d = F16Le::from_f32(d);
        for (xs, cs) in xb.chunks_exact(V::N).zip(codes.chunks_exact_mut(V::N)) {
            V::store_int(round_half_away_int(V::load(xs).mul(id)), cs);
        }
        for (qs, cs) in block.qs.chunks_exact_mut(32).zip(codes.chunks_exact(128)) {
            for (m, q) in qs.iter_mut().enumerate() {
                let mut byte = 0u8;
                for n in 0..4 {
                    byte =
                        byte.wrapping_add(((cs[m + 32 * n].wrapping_add(1) & 3) as u8) << (2 * n));
                }
                *q = byte;
            }
        }
    }
    all_finite(seen)
}

/// tq2_0: finds NaN and infinity itself as it reads its input (bound by memory, as q8_0).
#[allow(non_camel_case_types)]
pub(crate) struct TQ2_0;

impl SimdCodec for TQ2_0 {
    #[inline(always)]
    fn quantize<V: Lanes>(
        row: Row<'_>,
        _: Option<&[f32]>,
        y: &mut [u8],
        _: &mut Scratch<V>,
    ) -> bool {
        quantize_row::<V>(row.values, blocks_mut(y))
    }

    #[inline(always)]
    fn dequantize<V: Lanes>(x: &[u8], y: &mut [f32], _: bool) {
        crate::scalar::tq2_0::dequantize_row(blocks(x), y)
    }
}
