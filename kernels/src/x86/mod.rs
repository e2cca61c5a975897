//! x86-64 code paths: the [`Lanes`](crate::simd::lanes::Lanes) operations for AVX2 and
//! AVX-512, and their `#[target_feature]` entry points.

pub(crate) mod avx2;
pub(crate) mod avx512;
