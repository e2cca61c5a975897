//! THE SPECIFICATION: safe-Rust ports of ggml 0.26.0's codecs (`ggml-quants.c`).
//!
//! Each format module mirrors one ggml type and offers
//! `quantize_row(x, imatrix, y)` — what `quantize_<type>` in ggml does to one row, the
//! reference path (`quantize_row_<type>_ref`) without weights and the `*_impl` path with
//! them — and `dequantize_row(x, y)`, ggml's `dequantize_row_<type>`.
//! Arithmetic follows ggml's order and precision exactly; see the crate docs.

use crate::GgmlType;
use crate::blocks::Block;

pub mod float;
pub mod kquant;
pub mod tables;

pub mod iq1_m;
pub mod iq1_s;
pub mod iq2_s;
pub mod iq2_xs;
pub mod iq2_xxs;
pub mod iq3_s;
pub mod iq3_xxs;
pub mod iq4_nl;
pub mod iq4_xs;
pub mod mxfp4;
pub mod nvfp4;
pub mod q1_0;
pub mod q2_0;
pub mod q2_k;
pub mod q3_k;
pub mod q4_0;
pub mod q4_1;
pub mod q4_k;
pub mod q5_0;
pub mod q5_1;
pub mod q5_k;
pub mod q6_k;
pub mod q8_0;
pub mod q8_1;
pub mod q8_k;
pub mod tq1_0;
pub mod tq2_0;

type QuantizeRow<B> = fn(&[f32], Option<&[f32]>, &mut [B]);
type DequantizeRow<B> = fn(&[B], &mut [f32]);

#[inline]
fn q<B: Block>(f: QuantizeRow<B>, x: &[f32], w: Option<&[f32]>, y: &mut [u8]) {
    f(x, w, bytemuck::cast_slice_mut(y))
}

#[inline]
fn dq<B: Block>(f: DequantizeRow<B>, x: &[u8], y: &mut [f32]) {
    f(bytemuck::cast_slice(x), y)
}

/// Whether there is a scalar quantizer for `ty`.
pub fn can_quantize(ty: GgmlType) -> bool {
    use GgmlType::*;
    matches!(
        ty,
        F32 | F16
            | BF16
            | Q1_0
            | Q2_0
            | Q4_0
            | Q4_1
            | Q5_0
            | Q5_1
            | Q8_0
            | Q8_1
            | MXFP4
            | NVFP4
            | Q2_K
            | Q3_K
            | Q4_K
            | Q5_K
            | Q6_K
            | Q8_K
            | TQ1_0
            | TQ2_0
            | IQ4_NL
            | IQ4_XS
    )
}

/// Whether there is a scalar dequantizer for `ty`.
pub fn can_dequantize(ty: GgmlType) -> bool {
    use GgmlType::*;
    !matches!(ty, Q8_1 | I8 | I16 | I32 | I64 | F64)
}

/// Whether ggml's quantizer for `ty` reads an importance matrix.
pub fn uses_imatrix(ty: GgmlType) -> bool {
    use GgmlType::*;
    matches!(
        ty,
        Q4_0 | Q4_1 | Q5_0 | Q5_1 | Q2_K | Q3_K | Q4_K | Q5_K | Q6_K | IQ4_NL | IQ4_XS
    )
}

/// Quantizes one row `x` into `y` (exactly `ty.row_size(x.len())` bytes). The caller has
/// checked lengths, finiteness and that [`can_quantize`] holds.
pub fn quantize_row(ty: GgmlType, x: &[f32], w: Option<&[f32]>, y: &mut [u8]) {
    use GgmlType::*;
    match ty {
        F32 => float::quantize_f32(x, y),
        F16 => float::quantize_f16(x, y),
        BF16 => float::quantize_bf16(x, y),
        Q1_0 => q(q1_0::quantize_row, x, w, y),
        Q2_0 => q(q2_0::quantize_row, x, w, y),
        Q4_0 => q(q4_0::quantize_row, x, w, y),
        Q4_1 => q(q4_1::quantize_row, x, w, y),
        Q5_0 => q(q5_0::quantize_row, x, w, y),
        Q5_1 => q(q5_1::quantize_row, x, w, y),
        Q8_0 => q(q8_0::quantize_row, x, w, y),
        Q8_1 => q(q8_1::quantize_row, x, w, y),
        MXFP4 => q(mxfp4::quantize_row, x, w, y),
        NVFP4 => q(nvfp4::quantize_row, x, w, y),
        Q2_K => q(q2_k::quantize_row, x, w, y),
        Q3_K => q(q3_k::quantize_row, x, w, y),
        Q4_K => q(q4_k::quantize_row, x, w, y),
        Q5_K => q(q5_k::quantize_row, x, w, y),
        Q6_K => q(q6_k::quantize_row, x, w, y),
        Q8_K => q(q8_k::quantize_row, x, w, y),
        TQ1_0 => q(tq1_0::quantize_row, x, w, y),
        TQ2_0 => q(tq2_0::quantize_row, x, w, y),
        IQ4_NL => q(iq4_nl::quantize_row, x, w, y),
        IQ4_XS => q(iq4_xs::quantize_row, x, w, y),
        _ => unreachable!("no scalar quantizer for {ty}; checked by can_quantize"),
    }
}

/// Dequantizes whole blocks `x` into `y` (exactly as many elements). The caller has
/// checked lengths and that [`can_dequantize`] holds.
pub fn dequantize(ty: GgmlType, x: &[u8], y: &mut [f32]) {
    use GgmlType::*;
    match ty {
        F32 => float::dequantize_f32(x, y),
        F16 => float::dequantize_f16(x, y),
        BF16 => float::dequantize_bf16(x, y),
        Q1_0 => dq(q1_0::dequantize_row, x, y),
        Q2_0 => dq(q2_0::dequantize_row, x, y),
        Q4_0 => dq(q4_0::dequantize_row, x, y),
        Q4_1 => dq(q4_1::dequantize_row, x, y),
        Q5_0 => dq(q5_0::dequantize_row, x, y),
        Q5_1 => dq(q5_1::dequantize_row, x, y),
        Q8_0 => dq(q8_0::dequantize_row, x, y),
        MXFP4 => dq(mxfp4::dequantize_row, x, y),
        NVFP4 => dq(nvfp4::dequantize_row, x, y),
        Q2_K => dq(q2_k::dequantize_row, x, y),
        Q3_K => dq(q3_k::dequantize_row, x, y),
        Q4_K => dq(q4_k::dequantize_row, x, y),
        Q5_K => dq(q5_k::dequantize_row, x, y),
        Q6_K => dq(q6_k::dequantize_row, x, y),
        Q8_K => dq(q8_k::dequantize_row, x, y),
        TQ1_0 => dq(tq1_0::dequantize_row, x, y),
        TQ2_0 => dq(tq2_0::dequantize_row, x, y),
        IQ4_NL => dq(iq4_nl::dequantize_row, x, y),
        IQ4_XS => dq(iq4_xs::dequantize_row, x, y),
        IQ2_XXS => dq(iq2_xxs::dequantize_row, x, y),
        IQ2_XS => dq(iq2_xs::dequantize_row, x, y),
        IQ2_S => dq(iq2_s::dequantize_row, x, y),
        IQ3_XXS => dq(iq3_xxs::dequantize_row, x, y),
        IQ3_S => dq(iq3_s::dequantize_row, x, y),
        IQ1_S => dq(iq1_s::dequantize_row, x, y),
        IQ1_M => dq(iq1_m::dequantize_row, x, y),
        _ => unreachable!("no scalar dequantizer for {ty}; checked by can_dequantize"),
    }
}

/// Runs `f(block_x, block_weights, block)` over the blocks of one row, with the weights
/// the legacy `quantize_row_*_impl` functions derive from the importance matrix `qw`:
/// `qw[j] * sqrt(sigma2 + x[j]^2)`, `sigma2` the row's mean square.
fn weighted_blocks<B: Block>(
    x: &[f32],
    qw: &[f32],
    y: &mut [B],
    mut f: impl FnMut(&[f32], &[f32], &mut B),
) {
    let mut sum_x2 = 0.0f32;
    for &v in x {
        sum_x2 += v * v;
    }
    let sigma2 = sum_x2 / x.len() as f32;
    let mut weight = vec![0.0f32; B::SIZE];
    for ((xb, qb), block) in x.chunks_exact(B::SIZE).zip(qw.chunks_exact(B::SIZE)).zip(y) {
        for ((w, &q), &v) in weight.iter_mut().zip(qb).zip(xb) {
            *w = q * (sigma2 + v * v).sqrt();
        }
        f(xb, &weight, block);
    }
}

/// Helpers shared by the unit tests of the format modules.
#[cfg(test)]
pub(crate) mod testing {
    use super::{DequantizeRow, QuantizeRow};
    use crate::blocks::Block;

    /// `n` deterministic values in [-1, 1] (xorshift).
    pub fn wave(n: usize, seed: u32) -> Vec<f32> {
        let mut s = seed;
        (0..n)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 17;
                s ^= s << 5;
                (s % 20001) as f32 / 10000.0 - 1.0
            })
            .collect()
    }

    /// `x` quantized (with importance weights `w`, if any) and dequantized again.
    pub fn round_trip<B: Block>(
        q: QuantizeRow<B>,
        dq: DequantizeRow<B>,
        x: &[f32],
        w: Option<&[f32]>,
    ) -> Vec<f32> {
        let mut blocks = vec![B::zeroed(); x.len() / B::SIZE];
        q(x, w, &mut blocks);
        let mut y = vec![0.0; x.len()];
        dq(&blocks, &mut y);
        y
    }

    /// Root mean square of `x - y`.
    pub fn rmse(x: &[f32], y: &[f32]) -> f32 {
        let sum: f32 = x.iter().zip(y).map(|(a, b)| (a - b) * (a - b)).sum();
        (sum / x.len() as f32).sqrt()
    }
}
