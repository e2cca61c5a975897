//! f16 and bf16 rows: the narrowing and widening of whole models. The scalar conversions
//! compiled inside the ISA's entry point (the compiler vectorizes them), but for the
//! widening of f16, which uses the ISA's conversion instruction.

use super::lanes::Lanes;
use super::{Row, Scratch, SimdCodec};
use crate::scalar;

/// IEEE half precision.
pub(crate) struct F16;

impl SimdCodec for F16 {
    #[inline(always)]
    fn quantize<V: Lanes>(
        row: Row<'_>,
        _: Option<&[f32]>,
        y: &mut [u8],
        _: &mut Scratch<V>,
    ) -> bool {
        scalar::float::quantize_f16(row.values, y);
        true
    }

    #[inline(always)]
    fn dequantize<V: Lanes>(x: &[u8], y: &mut [f32], _: bool) {
        widen_f16::<V>(x, y)
    }
}

/// bfloat16.
pub(crate) struct BF16;

impl SimdCodec for BF16 {
    #[inline(always)]
    fn quantize<V: Lanes>(
        row: Row<'_>,
        _: Option<&[f32]>,
        y: &mut [u8],
        _: &mut Scratch<V>,
    ) -> bool {
        scalar::float::quantize_bf16(row.values, y);
        true
    }

    #[inline(always)]
    fn dequantize<V: Lanes>(x: &[u8], y: &mut [f32], _: bool) {
        scalar::float::dequantize_bf16(x, y)
    }
}

/// Widens little-endian fp16 values with the ISA's conversion (see [`Lanes::load_f16`]).
#[inline(always)]
fn widen_f16<V: Lanes>(x: &[u8], y: &mut [f32]) {
    let n = y.len().min(x.len() / 2);
    let whole = n / V::N * V::N;
    for (xs, ys) in x[..2 * whole]
        .chunks_exact(2 * V::N)
        .zip(y[..whole].chunks_exact_mut(V::N))
    {
        V::load_f16(xs).store(ys);
    }
    scalar::float::dequantize_f16(&x[2 * whole..2 * n], &mut y[whole..n]);
}
