//! aarch64 code paths: the [`Lanes`](crate::simd::lanes::Lanes) operations for NEON and
//! their entry points.

pub(crate) mod neon;
