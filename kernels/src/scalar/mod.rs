//! THE SPECIFICATION: safe-Rust ports of ggml 0.26.0's codecs (`ggml-quants.c`).
//!
//! Each format module mirrors one ggml type and offers
//! `quantize_row(x, imatrix, y)` — what `quantize_<type>` in ggml does to one row, the
//! reference path (`quantize_row_<type>_ref`) without weights and the `*_impl` path with
//! them — and `dequantize_row(x, y)`, ggml's `dequantize_row_<type>`.
//! Arithmetic follows ggml's order and precision exactly; see the crate docs.

use crate::blocks::Block;

pub mod float;
/// The dequantizers' i-quant grids, as ggml-common.h declares them (a file of its own so
/// that `build.rs` can read it too).
mod grids;
pub mod iq_grid;
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

#[cfg(test)]
type QuantizeRow<B> = fn(&[f32], Option<&[f32]>, &mut [B]);
#[cfg(test)]
type DequantizeRow<B> = fn(&[B], &mut [f32]);

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
