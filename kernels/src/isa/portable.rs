//! Eight f32 lanes in a plain array, every operation written out per lane in safe Rust.
//!
//! No intrinsics: the generic lane code runs on any target through it, so the SIMD
//! codecs' logic is tested apart from any ISA's implementation of the operations (and can
//! run under Miri, which checks the generic code's own `unsafe`). Each operation computes
//! what the x86 instruction it stands for computes, lane by lane: `max`/`min` return the
//! second operand on ties and NaN as `maxps`/`minps` do, `c_int` gives `INT_MIN` for NaN
//! and out-of-range values as `cvttps2dq` does.

use crate::num;
use crate::simd::lanes::Lanes;

const N: usize = 8;

/// Eight f32 lanes.
#[derive(Clone, Copy)]
pub(in crate::isa) struct Portable([f32; N]);

/// Applies `f` to each lane of one or two vectors.
#[inline(always)]
fn map<T: Copy, U: Copy + Default>(a: [T; N], f: impl Fn(T) -> U) -> [U; N] {
    let mut out = [U::default(); N];
    for (o, &v) in out.iter_mut().zip(&a) {
        *o = f(v);
    }
    out
}

#[inline(always)]
fn zip<T: Copy, U: Copy + Default>(a: [T; N], b: [T; N], f: impl Fn(T, T) -> U) -> [U; N] {
    let mut out = [U::default(); N];
    for ((o, &x), &y) in out.iter_mut().zip(&a).zip(&b) {
        *o = f(x, y);
    }
    out
}

/// Integer view of bit patterns, for the operations on them.
#[inline(always)]
fn bits(v: f32) -> i32 {
    v.to_bits() as i32
}

impl Lanes for Portable {
    const N: usize = N;
    type Mask = [bool; N];
    type Int = [i32; N];
    type Narrow = Portable;

    #[inline(always)]
    fn splat(v: f32) -> Self {
        Portable([v; N])
    }
    #[inline(always)]
    fn load(s: &[f32]) -> Self {
        let mut out = [0.0; N];
        out.copy_from_slice(&s[..N]);
        Portable(out)
    }
    #[inline(always)]
    fn store(self, s: &mut [f32]) {
        s[..N].copy_from_slice(&self.0);
    }
    #[inline(always)]
    fn add(self, o: Self) -> Self {
        Portable(zip(self.0, o.0, |a, b| a + b))
    }
    #[inline(always)]
    fn sub(self, o: Self) -> Self {
        Portable(zip(self.0, o.0, |a, b| a - b))
    }
    #[inline(always)]
    fn mul(self, o: Self) -> Self {
        Portable(zip(self.0, o.0, |a, b| a * b))
    }
    #[inline(always)]
    fn div(self, o: Self) -> Self {
        Portable(zip(self.0, o.0, |a, b| a / b))
    }
    #[inline(always)]
    fn sqrt(self) -> Self {
        Portable(map(self.0, f32::sqrt))
    }
    #[inline(always)]
    fn abs(self) -> Self {
        Portable(map(self.0, |v| f32::from_bits(v.to_bits() & 0x7fff_ffff)))
    }
    #[inline(always)]
    fn xor_bits(self, o: Self) -> Self {
        Portable(zip(self.0, o.0, |a, b| {
            f32::from_bits(a.to_bits() ^ b.to_bits())
        }))
    }
    #[inline(always)]
    fn max(self, o: Self) -> Self {
        Portable(zip(self.0, o.0, |a, b| if a > b { a } else { b }))
    }
    #[inline(always)]
    fn min(self, o: Self) -> Self {
        Portable(zip(self.0, o.0, |a, b| if a < b { a } else { b }))
    }
    #[inline(always)]
    fn min_bits(self, hi: Self) -> Self {
        Portable(zip(
            self.0,
            hi.0,
            |a, b| if bits(a) < bits(b) { a } else { b },
        ))
    }
    #[inline(always)]
    fn max_bits(self, o: Self) -> Self {
        Portable(zip(
            self.0,
            o.0,
            |a, b| if bits(a) > bits(b) { a } else { b },
        ))
    }
    #[inline(always)]
    fn hmax(self) -> f32 {
        self.0[1..]
            .iter()
            .fold(self.0[0], |m, &v| if m > v { m } else { v })
    }
    #[inline(always)]
    fn round_even(self) -> Self {
        Portable(map(self.0, f32::round_ties_even))
    }
    #[inline(always)]
    fn lt(self, o: Self) -> [bool; N] {
        zip(self.0, o.0, |a, b| a < b)
    }
    #[inline(always)]
    fn gt(self, o: Self) -> [bool; N] {
        zip(self.0, o.0, |a, b| a > b)
    }
    #[inline(always)]
    fn eq(self, o: Self) -> [bool; N] {
        zip(self.0, o.0, |a, b| a == b)
    }
    #[inline(always)]
    fn and(a: [bool; N], b: [bool; N]) -> [bool; N] {
        zip(a, b, |x, y| x && y)
    }
    #[inline(always)]
    fn and_not(a: [bool; N], b: [bool; N]) -> [bool; N] {
        zip(a, b, |x, y| x && !y)
    }
    #[inline(always)]
    fn or(a: [bool; N], b: [bool; N]) -> [bool; N] {
        zip(a, b, |x, y| x || y)
    }
    #[inline(always)]
    fn all() -> [bool; N] {
        [true; N]
    }
    #[inline(always)]
    fn not(m: [bool; N]) -> [bool; N] {
        map(m, |x| !x)
    }
    #[inline(always)]
    fn any(m: [bool; N]) -> bool {
        m.iter().any(|&x| x)
    }
    #[inline(always)]
    fn select(m: [bool; N], a: Self, b: Self) -> Self {
        let mut out = b.0;
        for ((o, &take), &v) in out.iter_mut().zip(&m).zip(&a.0) {
            if take {
                *o = v;
            }
        }
        Portable(out)
    }
    #[inline(always)]
    fn nearest_int(self) -> [i32; N] {
        map(self.0, num::nearest_int)
    }
    #[inline(always)]
    fn c_int(self) -> [i32; N] {
        map(self.0, num::c_int)
    }
    #[inline(always)]
    fn clamp_int(i: [i32; N], lo: i32, hi: i32) -> [i32; N] {
        map(i, |v| v.max(lo).min(hi))
    }
    #[inline(always)]
    fn int_to_f32(i: [i32; N]) -> Self {
        Portable(map(i, |v| v as f32))
    }
    #[inline(always)]
    fn store_int(i: [i32; N], s: &mut [i32]) {
        s[..N].copy_from_slice(&i);
    }
    #[inline(always)]
    fn load_u16(s: &[u8]) -> [i32; N] {
        let mut out = [0i32; N];
        for (o, b) in out.iter_mut().zip(s[..2 * N].chunks_exact(2)) {
            *o = i32::from(u16::from_le_bytes([b[0], b[1]]));
        }
        out
    }
    #[inline(always)]
    fn shr_int(i: [i32; N], n: u32) -> [i32; N] {
        map(i, |v| ((v as u32) >> n) as i32)
    }
    #[inline(always)]
    fn sext8(i: [i32; N]) -> [i32; N] {
        map(i, |v| i32::from(v as i8))
    }
    #[inline(always)]
    fn store_u8(i: [i32; N], s: &mut [u8]) {
        for (o, &v) in s[..N].iter_mut().zip(&i) {
            *o = v as u8;
        }
    }
    #[inline(always)]
    fn test_int(i: [i32; N], bits: i32) -> [bool; N] {
        map(i, |v| v & bits == bits)
    }
    #[inline(always)]
    fn mask_bits(m: [bool; N]) -> u64 {
        m.iter()
            .enumerate()
            .fold(0, |acc, (k, &x)| acc | (u64::from(x) << k))
    }
    #[inline(always)]
    fn store_f16(self, s: &mut [u16]) {
        for (o, &v) in s[..N].iter_mut().zip(&self.0) {
            *o = num::fp32_to_fp16(v);
        }
    }
    #[inline(always)]
    fn load_f16(s: &[u8]) -> Self {
        let mut out = [0.0; N];
        for (o, h) in out.iter_mut().zip(s[..2 * N].chunks_exact(2)) {
            *o = num::fp16_to_fp32(u16::from_le_bytes([h[0], h[1]]));
        }
        Portable(out)
    }
    #[inline(always)]
    fn load_u8(s: &[u8]) -> Self {
        let mut out = [0.0; N];
        for (o, &b) in out.iter_mut().zip(&s[..N]) {
            *o = f32::from(b);
        }
        Portable(out)
    }
    #[inline(always)]
    fn load_i8(s: &[i8]) -> Self {
        let mut out = [0.0; N];
        for (o, &b) in out.iter_mut().zip(&s[..N]) {
            *o = f32::from(b);
        }
        Portable(out)
    }
}

#[cfg(test)]
mod tests {
    use crate::{Codec, GgmlType, Isa};

    /// Every SIMD codec on the portable lanes against its scalar specification, on two
    /// rows (the second one is the first's "next row") with and without importance
    /// weights. Under Miri (`cargo +nightly miri test -p quantforge-kernels --lib
    /// portable`), which interprets every lane operation, one row of the codecs that
    /// cover the generic code's `unsafe` and casts: q4_K (pairs of vectors transposed in
    /// place, the per-thread search arrays), q8_0 and f16.
    #[test]
    fn portable_codecs_match_scalar() {
        let types: Vec<GgmlType> = match cfg!(miri) {
            true => vec![GgmlType::Q4_K, GgmlType::Q8_0, GgmlType::F16],
            false => GgmlType::ALL
                .iter()
                .copied()
                .filter(|&t| crate::has_simd_path(t))
                .collect(),
        };
        let rows = if cfg!(miri) { 1 } else { 2 };
        let mut state = 0x9e37_79b9u32;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 17;
            state ^= state << 5;
            (state % 20001) as f32 / 10000.0 - 1.0
        };
        for ty in types {
            let n = ty.block_size().max(256);
            let x: Vec<f32> = (0..rows * n).map(|_| next()).collect();
            let w: Vec<f32> = (0..n).map(|_| next().abs() + 0.01).collect();
            let size = rows * ty.row_size(n).unwrap();
            let portable = Codec::new(ty, Isa::Portable).unwrap();
            let scalar = Codec::new(ty, Isa::Scalar).unwrap();
            assert_eq!(portable.isa(), Isa::Portable, "{ty}");
            for weights in [None, Some(&w[..])] {
                if weights.is_none() && crate::requires_imatrix(ty) {
                    continue;
                }
                let (mut ours, mut spec) = (vec![0u8; size], vec![0u8; size]);
                portable.quantize(&x, n, weights, &mut ours).unwrap();
                scalar.quantize(&x, n, weights, &mut spec).unwrap();
                assert!(
                    ours == spec,
                    "{ty} quantize (weights: {})",
                    weights.is_some()
                );
                let (mut back, mut want) = (vec![0f32; rows * n], vec![0f32; rows * n]);
                portable.dequantize(&ours, &mut back).unwrap();
                scalar.dequantize(&spec, &mut want).unwrap();
                let same = back
                    .iter()
                    .zip(&want)
                    .all(|(a, b)| a.to_bits() == b.to_bits());
                assert!(same, "{ty} dequantize");
            }
        }
    }
}
