//! x86-64: the [`Lanes`](crate::simd::lanes::Lanes) operations for AVX2 and AVX-512
//! (their entry points are generated from the table in `crate::isa`).

pub(super) mod avx2;
pub(super) mod avx512;
