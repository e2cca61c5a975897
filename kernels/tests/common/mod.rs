//! Proptest strategies for adversarial rows, shared by the SIMD-vs-scalar tests and the
//! live ggml parity suite (which includes this file by path).
#![allow(dead_code)]

use proptest::prelude::*;

/// Rows per generated case.
pub const ROWS: usize = 4;

/// One 32-element chunk of an adversarial row.
pub fn chunk() -> impl Strategy<Value = Vec<f32>> {
    let scale = (-30i32..=30).prop_map(|e| 10f32.powi(e));
    prop_oneof![
        Just(vec![0.0f32; 32]),
        // negative zeros, alone or among positive ones
        prop::collection::vec(prop::sample::select(vec![0.0f32, -0.0]), 32),
        (-1e3f32..1e3).prop_map(|c| vec![c; 32]),
        (scale.clone(), prop::collection::vec(-1.0f32..1.0, 32))
            .prop_map(|(s, v)| v.into_iter().map(|x| x * s).collect()),
        // one huge outlier among small values
        (
            prop::collection::vec(-1.0f32..1.0, 32),
            0usize..32,
            -1e6f32..1e6
        )
            .prop_map(|(mut v, i, big)| {
                v[i] = big;
                v
            }),
        // +v and -v both present as the absolute maximum, in either order
        (
            prop::collection::vec(-0.99f32..0.99, 32),
            0usize..32,
            0usize..32,
            0.5f32..4.0
        )
            .prop_map(|(mut v, i, j, m)| {
                let k = if i == j { (j + 1) % 32 } else { j };
                for x in v.iter_mut() {
                    *x *= m;
                }
                v[i] = m;
                v[k] = -m;
                v
            }),
        // values that land on k.5 after scaling: halves and integers up to a nice maximum
        (
            prop::collection::vec(-16i32..=16, 32),
            prop::sample::select(vec![1.0f32, 0.5, 0.25, 2.0, 127.0 / 16.0])
        )
            .prop_map(|(v, s)| v.into_iter().map(|k| (k as f32 + 0.5) * s).collect()),
        // integers, exactly representable multiples
        prop::collection::vec(-127i32..=127, 32)
            .prop_map(|v| v.into_iter().map(|k| k as f32).collect()),
        // subnormals and tiny values, with zeros
        prop::collection::vec(
            prop_oneof![
                Just(0.0f32),
                -1e-38f32..1e-38,
                (1u32..0x007f_ffff).prop_map(f32::from_bits)
            ],
            32
        ),
        // zeros of both signs among non-negative values: a block minimum of zero keeps
        // the sign of the block's first zero in the `_1` quantizers
        prop::collection::vec(prop_oneof![Just(0.0f32), Just(-0.0f32), 0.0f32..1.0], 32),
        // any finite bit pattern
        prop::collection::vec(
            any::<u32>().prop_map(|b| {
                let f = f32::from_bits(b);
                if f.is_finite() { f } else { 0.0 }
            }),
            32
        ),
    ]
}

/// `ROWS` rows of `n_per_row` elements, each a concatenation of adversarial chunks.
pub fn rows(n_per_row: usize) -> impl Strategy<Value = Vec<f32>> {
    prop::collection::vec(chunk(), ROWS * n_per_row / 32).prop_map(|c| c.concat())
}

/// Ordinary rows (uniform values, one scale per row) for ggml's i-quant quantizers, which
/// assert on extreme inputs; used only to produce realistic blocks to dequantize.
pub fn tame_rows(n_per_row: usize) -> impl Strategy<Value = Vec<f32>> {
    (
        (-3i32..=3),
        prop::collection::vec(-1.0f32..1.0, ROWS * n_per_row),
    )
        .prop_map(|(e, v)| v.into_iter().map(|x| x * 10f32.powi(e)).collect())
}

/// The largest magnitude in [`searchable_rows`]. ggml's i-quant searches weigh squared
/// distances by the square roots of weights that grow with `x^2`; from about 1e12 on
/// those distances overflow to infinity, no grid point is nearer than `FLT_MAX`, and ggml
/// aborts on an assert (`iq2_find_best_neighbour`'s `grid_index >= 0`).
pub const SEARCHABLE_MAX: f32 = 1e10;

/// [`rows`] for ggml's grid i-quant quantizers: every magnitude above [`SEARCHABLE_MAX`]
/// is divided by 1e10 until it is not, so a chunk drawn at 1e30 keeps its spread at 1e10
/// (the overflowing sums of the scale search, which do not abort, are still reached).
pub fn searchable_rows(n_per_row: usize) -> impl Strategy<Value = Vec<f32>> {
    rows(n_per_row).prop_map(|r| {
        r.into_iter()
            .map(|mut v| {
                while v.abs() > SEARCHABLE_MAX {
                    v /= 1e10;
                }
                v
            })
            .collect()
    })
}

pub fn imatrix(n_per_row: usize) -> impl Strategy<Value = Vec<f32>> {
    prop::collection::vec(
        prop_oneof![Just(0.0f32), 0.0f32..1.0, 0.0f32..1e4, 1e-20f32..1e-10],
        n_per_row,
    )
}

/// `nrows` rows of `n_per_row` elements of adversarial chunks.
pub fn rows_n(nrows: usize, n_per_row: usize) -> impl Strategy<Value = Vec<f32>> {
    prop::collection::vec(chunk(), nrows * n_per_row / 32).prop_map(|c| c.concat())
}
