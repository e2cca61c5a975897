//! The vector operations the lane-parallel codecs are written in, implemented once per
//! ISA (`x86::avx2`, `x86::avx512`, `aarch64::neon`).
//!
//! Every operation is IEEE-exact per lane (add, sub, mul, div, sqrt, compare, select,
//! integer ops): a lane computes exactly what the scalar code computes for one element,
//! which is why the SIMD paths are byte-identical to `scalar/` by construction. There is
//! deliberately no fused multiply-add, no reciprocal estimate and no horizontal float sum.
//!
//! Generic code over `Lanes` must not call lane operations from closures: a closure is
//! compiled as its own function, without the entry point's target features, so its
//! intrinsics would not inline. Loops and `#[inline(always)]` functions only.
//!
//! A value of a `Lanes` type can only be made on a CPU that supports its ISA (the codec
//! that runs it proves that), which is what makes the `unsafe` intrinsic calls sound.

/// `N` f32 lanes with masks and 32-bit integer lanes.
pub(crate) trait Lanes: Copy {
    /// Lanes per vector.
    const N: usize;
    /// A per-lane condition.
    type Mask: Copy;
    /// `N` i32 lanes.
    type Int: Copy;

    fn splat(v: f32) -> Self;
    /// Loads `s[..N]`.
    fn load(s: &[f32]) -> Self;
    /// Stores into `s[..N]`.
    fn store(self, s: &mut [f32]);
    fn add(self, o: Self) -> Self;
    fn sub(self, o: Self) -> Self;
    fn mul(self, o: Self) -> Self;
    fn div(self, o: Self) -> Self;
    fn sqrt(self) -> Self;
    fn abs(self) -> Self;
    /// Rounding toward zero (exact, as `f32::trunc`).
    fn trunc(self) -> Self;
    fn lt(self, o: Self) -> Self::Mask;
    fn gt(self, o: Self) -> Self::Mask;
    fn ge(self, o: Self) -> Self::Mask;
    fn eq(self, o: Self) -> Self::Mask;
    fn and(a: Self::Mask, b: Self::Mask) -> Self::Mask;
    /// `m ? a : b` per lane.
    fn select(m: Self::Mask, a: Self, b: Self) -> Self;
    /// ggml's `nearest_int` per lane (the 1.5*2^23 magic add and bit mask).
    fn nearest_int(self) -> Self::Int;
    /// C's `(int)v` as x86-64 computes it: truncation, `INT_MIN` for NaN and out of range.
    fn c_int(self) -> Self::Int;
    /// Clamps integer lanes to `lo..=hi`.
    fn clamp_int(i: Self::Int, lo: i32, hi: i32) -> Self::Int;
    /// Converts integer lanes to f32 (exact for the small codes this is used on).
    fn int_to_f32(i: Self::Int) -> Self;
    /// Stores integer lanes into `s[..N]`.
    fn store_int(i: Self::Int, s: &mut [i32]);
}

/// Lanes built from a function of the lane index.
#[inline(always)]
pub(crate) fn from_fn<V: Lanes>(f: impl Fn(usize) -> f32) -> V {
    let mut buf = [0.0f32; 16];
    for (lane, b) in buf.iter_mut().enumerate().take(V::N) {
        *b = f(lane);
    }
    V::load(&buf)
}

/// `f32::round` per lane (half away from zero), from exact operations: the fraction
/// `v - trunc(v)` is exact, and a step of one away from zero is added when it is at
/// least one half.
#[inline(always)]
pub(crate) fn round_half_away<V: Lanes>(v: V) -> V {
    let t = v.trunc();
    let frac = v.sub(t).abs();
    let up = frac.ge(V::splat(0.5));
    let step = V::select(v.lt(V::splat(0.0)), V::splat(-1.0), V::splat(1.0));
    V::select(up, t.add(step), t)
}

/// The absolute maximum of `x` (a whole number of vectors), starting from 0. Order does
/// not matter for a maximum of finite values, so lanes reduce independently.
#[inline(always)]
pub(crate) fn abs_max<V: Lanes>(x: &[f32]) -> f32 {
    let mut m = V::splat(0.0);
    for c in x.chunks_exact(V::N) {
        let a = V::load(c).abs();
        m = V::select(a.gt(m), a, m);
    }
    let mut buf = [0.0f32; 16];
    m.store(&mut buf);
    buf[..V::N]
        .iter()
        .fold(0.0f32, |acc, &v| if acc > v { acc } else { v })
}

/// Transposes `count` consecutive runs of 32 values (`count <= N`) so that vector `i`
/// holds element `i` of each run; missing lanes are zero.
#[inline(always)]
pub(crate) fn transpose32<V: Lanes>(x: &[f32], count: usize) -> [V; 32] {
    let mut buf = [[0.0f32; 16]; 32];
    for lane in 0..count {
        for (i, row) in buf.iter_mut().enumerate() {
            row[lane] = x[lane * 32 + i];
        }
    }
    let mut out = [V::splat(0.0); 32];
    for (o, row) in out.iter_mut().zip(&buf) {
        *o = V::load(row);
    }
    out
}

/// Transposes `count` consecutive runs of 16 values, as [`transpose32`].
#[inline(always)]
pub(crate) fn transpose16<V: Lanes>(x: &[f32], count: usize) -> [V; 16] {
    let mut buf = [[0.0f32; 16]; 16];
    for lane in 0..count {
        for (i, row) in buf.iter_mut().enumerate() {
            row[lane] = x[lane * 16 + i];
        }
    }
    let mut out = [V::splat(0.0); 16];
    for (o, row) in out.iter_mut().zip(&buf) {
        *o = V::load(row);
    }
    out
}
