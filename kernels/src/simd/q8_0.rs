//! q8_0 over elements: mirrors `scalar::q8_0::quantize_row` (`quantize_row_q8_0_ref`).

use super::lanes::{Lanes, abs_max, round_half_away};
use crate::blocks::BlockQ8_0;
use crate::num::F16Le;

/// `quantize_row_q8_0_ref`: the absolute maximum (order-free) maps to 127, each value is
/// `roundf(x * id)` cast to `int8_t` as C does.
#[inline(always)]
pub(crate) fn quantize_row<V: Lanes>(x: &[f32], y: &mut [BlockQ8_0]) {
    let mut codes = [0i32; 32];
    for (xb, block) in x.chunks_exact(32).zip(y.iter_mut()) {
        let amax = abs_max::<V>(xb);
        let d = amax / 127.0;
        let id = V::splat(if d != 0.0 { 1.0 / d } else { 0.0 });
        block.d = F16Le::from_f32(d);
        for (xs, cs) in xb.chunks_exact(V::N).zip(codes.chunks_exact_mut(V::N)) {
            V::store_int(round_half_away(V::load(xs).mul(id)).c_int(), cs);
        }
        for (q, &c) in block.qs.iter_mut().zip(&codes) {
            *q = c as i8;
        }
    }
}
