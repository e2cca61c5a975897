//! aarch64: the [`Lanes`](crate::simd::lanes::Lanes) operations for NEON (its entry
//! points are generated from the table in `crate::isa`).

pub(super) mod neon;
