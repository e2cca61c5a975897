//! q6_K with one 16-value sub-block per lane: the `make_qx_quants` search in lanes
//! ([`super::kquant::qx_scale`]), the super-block scale in scalar code, the final
//! re-rounding over elements. Mirrors `scalar::q6_k::quantize_row`.

use super::kquant::{SubBlockSearch, qx_scale, search_sub_blocks, store_lanes};
use super::lanes::{Lanes, transpose};
use crate::blocks::{BlockQ6K, QK_K};
use crate::num::{F16Le, nearest_int};
use crate::scalar::kquant::{GROUP_MAX_EPS, make_qx_quants};
use crate::scalar::q6_k::pack_codes;
use bytemuck::Zeroable;

/// One row as `quantize_q6_K` does it (reference path without `qw`, `_impl` with it).
#[inline(always)]
pub(crate) fn quantize_row<V: Lanes>(x: &[f32], qw: Option<&[f32]>, y: &mut [BlockQ6K]) {
    let nsub = x.len() / 16;
    let mut search = Search {
        x,
        qw,
        scales: vec![0.0f32; nsub],
    };
    search_sub_blocks::<V>(nsub, &mut search, None);
    let scales = search.scales;
    for (b, (xb, block)) in x.chunks_exact(QK_K).zip(y.iter_mut()).enumerate() {
        let sc = &scales[16 * b..16 * b + 16];
        let mut max_abs_scale = 0.0f32;
        let mut max_scale = 0.0f32;
        for &s in sc {
            if s.abs() > max_abs_scale {
                max_abs_scale = s.abs();
                max_scale = s;
            }
        }
        if max_abs_scale < GROUP_MAX_EPS {
            *block = BlockQ6K::zeroed();
            continue;
        }
        let iscale = -128.0 / max_scale;
        block.d = F16Le::from_f32(1.0 / iscale);
        for (out, &s) in block.scales.iter_mut().zip(sc) {
            *out = nearest_int(iscale * s).min(127) as i8;
        }
        let d_all = block.d.to_f32();
        let mut l = [0i8; QK_K];
        // An index loop: in a function this large the compiler may leave an iterator
        // adapter's constructor as a call.
        for j in 0..QK_K / 16 {
            let (xs, ls) = (&xb[16 * j..16 * j + 16], &mut l[16 * j..16 * j + 16]);
            let d = d_all * block.scales[j] as f32;
            if d == 0.0 {
                // The search's own codes stay: get them from the scalar search.
                let ws = qw.map(|w| &w[b * QK_K + 16 * j..b * QK_K + 16 * j + 16]);
                make_qx_quants(16, 32, xs, ls, 1, ws);
                continue;
            }
            requantize_symmetric::<V>(xs, d, 32, ls);
        }
        pack_codes(&l, block);
    }
}

/// The `make_qx_quants` search of a row's 16-value sub-blocks: their scales.
struct Search<'a> {
    x: &'a [f32],
    qw: Option<&'a [f32]>,
    scales: Vec<f32>,
}

impl SubBlockSearch for Search<'_> {
    #[inline(always)]
    fn group<V: Lanes>(&mut self, g: usize, count: usize) {
        let xt: [V; 16] = transpose(&self.x[g * 16..], count);
        // Not `Option::map`: a closure would not inline the lane operations (see lanes.rs).
        #[allow(clippy::manual_map)]
        let wt: Option<[V; 16]> = match self.qw {
            Some(qw) => Some(transpose(&qw[g * 16..], count)),
            None => None,
        };
        store_lanes(
            qx_scale(&xt, wt.as_ref(), 32),
            &mut self.scales[g..g + count],
        );
    }
}

/// `l = clamp(nearest_int(x / d), -nmax, nmax - 1) + nmax` over a sub-block of 16.
#[inline(always)]
pub(crate) fn requantize_symmetric<V: Lanes>(x: &[f32], d: f32, nmax: i32, l: &mut [i8]) {
    let dv = V::splat(d);
    let l: &mut [u8] = bytemuck::cast_slice_mut(l);
    // Every ISA's lane count (4, 8, 16) divides 16.
    for (xs, ls) in x.chunks_exact(V::N).zip(l.chunks_exact_mut(V::N)) {
        let q = V::load(xs).div(dv).nearest_int();
        V::store_u8(V::clamp_int(q, -nmax, nmax - 1), ls);
    }
    // -nmax..nmax as bytes, plus nmax: 0..2*nmax.
    for b in l.iter_mut() {
        *b = b.wrapping_add(nmax as u8);
    }
}

super::row_codec!(
    /// q6_K.
    Q6_K => quantize_row, q6_k
);
