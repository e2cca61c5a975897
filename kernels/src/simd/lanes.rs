//! The vector operations the lane-parallel codecs are written in, implemented once per
//! ISA (`x86::avx2`, `x86::avx512`, `aarch64::neon`).
//!
//! Every operation is IEEE-exact per lane (add, sub, mul, div, sqrt, compare, select,
//! integer ops): a lane computes exactly what the scalar code computes for one element,
//! which is why the SIMD paths are byte-identical to `scalar/` by construction. There is
//! deliberately no fused multiply-add (but the exact `x*1 + y` of
//! [`Lanes::add_on_mul_unit`]), no reciprocal estimate and no horizontal float sum.
//!
//! Generic code over `Lanes` must not call lane operations from closures: a closure is
//! compiled as its own function, without the entry point's target features, so its
//! intrinsics would not inline. Loops and `#[inline(always)]` functions only.
//!
//! Soundness: the ISA implementations call intrinsics from safe methods, which is sound
//! only on a CPU that has the ISA. Their types are visible only inside `crate::isa`, whose
//! entry points and lane checks are the only code that instantiates the generic codecs
//! with them, after the CPU was checked (see there). The portable implementation has no
//! intrinsics.

/// `N` f32 lanes with masks and 32-bit integer lanes.
pub(crate) trait Lanes: Copy {
    /// Lanes per vector.
    const N: usize;
    /// A per-lane condition.
    type Mask: Copy;
    /// `N` i32 lanes.
    type Int: Copy;
    /// The ISA's 256-bit (or only) lanes, usable wherever `Self` is, for loops bound by
    /// memory writes: on AMD Zen 4, 512-bit stores stream to memory more slowly than
    /// 256-bit ones.
    type Narrow: Lanes;

    fn splat(v: f32) -> Self;
    /// Loads `s[..N]`.
    fn load(s: &[f32]) -> Self;
    /// Stores into `s[..N]`.
    fn store(self, s: &mut [f32]);
    fn add(self, o: Self) -> Self;
    /// `self + o`, bit for bit, issued where the CPU has room for it: with AVX-512 as the
    /// fused multiply-add `self*one + o`, whose one rounding is that of the sum, on the
    /// multiply units (on AMD Zen 4 float adds, roundings and conversions share two
    /// pipes, multiplies two others). For loops with more adds than multiplies. `one`
    /// must be 1 in every lane, made by [`opaque_one`] so that the compiler does not turn
    /// the multiply-add back into an add.
    #[inline(always)]
    fn add_on_mul_unit(self, o: Self, one: Self) -> Self {
        let _ = one;
        self.add(o)
    }
    fn sub(self, o: Self) -> Self;
    fn mul(self, o: Self) -> Self;
    fn div(self, o: Self) -> Self;
    fn sqrt(self) -> Self;
    fn abs(self) -> Self;
    /// The lanes' bits exclusive-or `o`'s: with `o` holding -0.0 in some lanes and +0.0 in
    /// the others, C's unary minus of those lanes (NaNs' signs flipped too).
    fn xor_bits(self, o: Self) -> Self;
    /// Lane-wise maximum (only used where no lane that matters can be NaN).
    fn max(self, o: Self) -> Self;
    /// Lane-wise minimum (only used where no lane that matters can be NaN).
    fn min(self, o: Self) -> Self;
    /// `self < o ? self : o`, C's running minimum: `o` is kept on a tie (-0 against +0
    /// either way) and wherever either is NaN. x86's `minps` is exactly this.
    #[inline(always)]
    fn min_or_keep(self, o: Self) -> Self {
        Self::select(self.lt(o), self, o)
    }
    /// `self > o ? self : o`, C's running maximum (see [`Lanes::min_or_keep`]).
    #[inline(always)]
    fn max_or_keep(self, o: Self) -> Self {
        Self::select(self.gt(o), self, o)
    }
    /// `max(self, +0)` computed on the bit patterns as signed integers: a lane with its sign
    /// bit set (a negative value, -0) becomes +0, any other stays. For every lane that is
    /// not NaN this is the float maximum with +0; it runs on the integer units, which on
    /// some CPUs (AMD Zen 4) sit beside the busy floating-point adders.
    #[inline(always)]
    fn max_zero_bits(self) -> Self {
        self.max_bits(Self::splat(0.0))
    }
    /// `min(self, hi)` computed on the bit patterns as signed integers, for `hi` positive
    /// and finite in every lane: for every lane that is not NaN this is the float minimum
    /// (non-negative floats order as their bits do, and every negative one, -0 included,
    /// has a negative bit pattern). See [`Lanes::max_zero_bits`] for why.
    fn min_bits(self, hi: Self) -> Self;
    /// `max(self, o)` computed on the bit patterns as signed integers: for values with the
    /// sign bit clear (absolute values) every NaN orders above infinity and infinity above
    /// every finite value, which is what tracks whether a NaN or infinity went by.
    fn max_bits(self, o: Self) -> Self;
    /// The largest lane (for finite lanes a maximum is independent of order).
    fn hmax(self) -> f32;
    /// Rounding to the nearest integer, ties to even (exact, as `f32::round_ties_even`).
    fn round_even(self) -> Self;
    fn lt(self, o: Self) -> Self::Mask;
    fn gt(self, o: Self) -> Self::Mask;
    fn eq(self, o: Self) -> Self::Mask;
    fn and(a: Self::Mask, b: Self::Mask) -> Self::Mask;
    /// `a && !b` per lane.
    fn and_not(a: Self::Mask, b: Self::Mask) -> Self::Mask;
    /// `a || b` per lane.
    fn or(a: Self::Mask, b: Self::Mask) -> Self::Mask;
    /// Every lane set.
    #[inline(always)]
    fn all() -> Self::Mask {
        let zero = Self::splat(0.0);
        zero.eq(zero)
    }
    /// `!m` per lane.
    #[inline(always)]
    fn not(m: Self::Mask) -> Self::Mask {
        Self::and_not(Self::all(), m)
    }
    /// Whether any lane of `m` is set.
    fn any(m: Self::Mask) -> bool;
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
    /// The low byte of each integer lane, sign-extended (C's `(int8_t)i`).
    fn sext8(i: Self::Int) -> Self::Int;
    /// Stores the low byte of each integer lane into `s[..N]` (C's `(uint8_t)i`).
    fn store_u8(i: Self::Int, s: &mut [u8]);
    /// [`Lanes::store_u8`] of four vectors into `s[..4 * N]`, one after another.
    #[inline(always)]
    fn store_u8_4(i: [Self::Int; 4], s: &mut [u8]) {
        for (k, v) in i.into_iter().enumerate() {
            Self::store_u8(v, &mut s[k * Self::N..]);
        }
    }
    /// Lanes whose integer has every bit of `bits` set.
    fn test_int(i: Self::Int, bits: i32) -> Self::Mask;
    /// The mask as bits, lane `k` in bit `k`.
    fn mask_bits(m: Self::Mask) -> u64;
    /// Stores each lane rounded to IEEE half precision, to nearest with ties to even, into
    /// `s[..N]`: `fp32_to_fp16` (ggml's `GGML_FP32_TO_FP16`) for every finite lane.
    fn store_f16(self, s: &mut [u16]);
    /// Loads `N` little-endian IEEE halves from `s[..2 * N]`, widened to f32: exactly
    /// `fp16_to_fp32` (ggml's `GGML_FP16_TO_FP32`) for every bit pattern, NaNs included.
    fn load_f16(s: &[u8]) -> Self;
    /// Loads `N` bytes from `s[..N]`, each widened to the f32 of its unsigned value.
    fn load_u8(s: &[u8]) -> Self;
    /// Loads `N` signed bytes from `s[..N]`, each widened to the f32 of its value.
    fn load_i8(s: &[i8]) -> Self;
    /// Loads `N` runs of `stride` values transposed: lane `j` of `out[i]` is
    /// `x[j * stride + i]`, for every `i < out.len() <= stride` (`x` needs to reach no
    /// further than the last lane's last value).
    #[inline(always)]
    fn load_transposed(x: &[f32], stride: usize, out: &mut [Self]) {
        Self::load_transposed_every(x, stride, out, 1, out.len());
    }
    /// [`Lanes::load_transposed`] of `n` vectors into every `step`-th slot of `out`
    /// (`out[i * step]` for `i < n`).
    #[inline(always)]
    fn load_transposed_every(x: &[f32], stride: usize, out: &mut [Self], step: usize, n: usize) {
        gather_columns(x, stride, 0, out, step, n);
    }
    /// Asks for the cache line holding `s[0]` to be brought into the first-level cache
    /// (a hint: no effect on any result; nothing on ISAs without one here).
    #[inline(always)]
    fn prefetch(s: &[f32]) {
        let _ = s;
    }
    /// Stores into `s[..N]` around the caches (a streaming store: no read of the line
    /// first) where the ISA has one and `s` starts on a 16-byte boundary, else as
    /// [`Lanes::store`]. A run of these ends with [`Lanes::stream_fence`].
    #[inline(always)]
    fn store_stream(self, s: &mut [f32]) {
        self.store(s)
    }
    /// Orders the streaming stores before it before any later store.
    #[inline(always)]
    fn stream_fence() {}
    /// Loads `N` little-endian `u16`s from `s[..2 * N]` into integer lanes, zero-extended.
    fn load_u16(s: &[u8]) -> Self::Int;
    /// Shifts each integer lane right by `n < 32` bits, filling with zeros.
    fn shr_int(i: Self::Int, n: u32) -> Self::Int;
    /// `table[i & 3]` per lane.
    #[inline(always)]
    fn lookup4(table: &[f32; 4], i: Self::Int) -> Self {
        lookup_lanes(table, i)
    }
    /// `table[i & 7]` per lane.
    #[inline(always)]
    fn lookup8(table: &[f32; 8], i: Self::Int) -> Self {
        lookup_lanes(table, i)
    }
    /// `table[i & 15]` per lane.
    #[inline(always)]
    fn lookup16(table: &[f32; 16], i: Self::Int) -> Self {
        lookup_lanes(table, i)
    }
}

/// `table[i & (T - 1)]` per lane, one lane at a time (`T` a power of two): the lookups of
/// ISAs without a permute for them.
#[inline(always)]
fn lookup_lanes<V: Lanes, const T: usize>(table: &[f32; T], i: V::Int) -> V {
    let mut idx = [0i32; MAX_LANES];
    V::store_int(i, &mut idx);
    let mut out = [0.0f32; MAX_LANES];
    for (o, &k) in out.iter_mut().zip(&idx).take(V::N) {
        *o = table[k as usize & (T - 1)];
    }
    V::load(&out)
}

/// 1 in every lane, as a value the compiler cannot see through (for
/// [`Lanes::add_on_mul_unit`]).
#[inline(always)]
pub(crate) fn opaque_one<V: Lanes>() -> V {
    V::splat(std::hint::black_box(1.0))
}

/// The widest lane count of any implementation ([`Pair`] of AVX-512).
pub(crate) const MAX_LANES: usize = 32;

/// Two vectors used as one of twice the lanes. The halves are independent, so every
/// operation is two instructions the CPU can run in parallel: the K-quant searches, whose
/// per-lane sums are serial chains, use it to hide instruction latency.
#[derive(Clone, Copy)]
#[repr(C)]
pub(crate) struct Pair<V>(V, V);

impl<V: Lanes> Lanes for Pair<V> {
    const N: usize = 2 * V::N;
    type Mask = (V::Mask, V::Mask);
    type Int = (V::Int, V::Int);
    type Narrow = V::Narrow;

    #[inline(always)]
    fn splat(v: f32) -> Self {
        Pair(V::splat(v), V::splat(v))
    }
    #[inline(always)]
    fn load(s: &[f32]) -> Self {
        Pair(V::load(&s[..V::N]), V::load(&s[V::N..2 * V::N]))
    }
    #[inline(always)]
    fn store(self, s: &mut [f32]) {
        let (a, b) = s[..2 * V::N].split_at_mut(V::N);
        self.0.store(a);
        self.1.store(b);
    }
    #[inline(always)]
    fn add(self, o: Self) -> Self {
        Pair(self.0.add(o.0), self.1.add(o.1))
    }
    /// Only the second half moves, which balances the search's trial loop (five adds
    /// and roundings against four multiplies per vector) on two vectors.
    #[inline(always)]
    fn add_on_mul_unit(self, o: Self, one: Self) -> Self {
        Pair(self.0.add(o.0), self.1.add_on_mul_unit(o.1, one.1))
    }
    #[inline(always)]
    fn sub(self, o: Self) -> Self {
        Pair(self.0.sub(o.0), self.1.sub(o.1))
    }
    #[inline(always)]
    fn mul(self, o: Self) -> Self {
        Pair(self.0.mul(o.0), self.1.mul(o.1))
    }
    #[inline(always)]
    fn div(self, o: Self) -> Self {
        Pair(self.0.div(o.0), self.1.div(o.1))
    }
    #[inline(always)]
    fn sqrt(self) -> Self {
        Pair(self.0.sqrt(), self.1.sqrt())
    }
    #[inline(always)]
    fn abs(self) -> Self {
        Pair(self.0.abs(), self.1.abs())
    }
    #[inline(always)]
    fn xor_bits(self, o: Self) -> Self {
        Pair(self.0.xor_bits(o.0), self.1.xor_bits(o.1))
    }
    #[inline(always)]
    fn max(self, o: Self) -> Self {
        Pair(self.0.max(o.0), self.1.max(o.1))
    }
    #[inline(always)]
    fn min(self, o: Self) -> Self {
        Pair(self.0.min(o.0), self.1.min(o.1))
    }
    #[inline(always)]
    fn min_or_keep(self, o: Self) -> Self {
        Pair(self.0.min_or_keep(o.0), self.1.min_or_keep(o.1))
    }
    #[inline(always)]
    fn max_or_keep(self, o: Self) -> Self {
        Pair(self.0.max_or_keep(o.0), self.1.max_or_keep(o.1))
    }
    #[inline(always)]
    fn min_bits(self, hi: Self) -> Self {
        Pair(self.0.min_bits(hi.0), self.1.min_bits(hi.1))
    }
    #[inline(always)]
    fn max_bits(self, o: Self) -> Self {
        Pair(self.0.max_bits(o.0), self.1.max_bits(o.1))
    }
    #[inline(always)]
    fn load_transposed_every(x: &[f32], stride: usize, out: &mut [Self], step: usize, n: usize) {
        // The halves go straight to their places (no arrays to zero and copy from).
        let halves = 2 * out.len();
        // SAFETY: `Pair` is `repr(C)` with two fields of one type, so `out` is `2 *
        // out.len()` vectors in a row (the first and second halves alternating), borrowed
        // mutably here alone.
        let v = unsafe { std::slice::from_raw_parts_mut(out.as_mut_ptr().cast::<V>(), halves) };
        V::load_transposed_every(x, stride, v, 2 * step, n);
        V::load_transposed_every(&x[V::N * stride..], stride, &mut v[1..], 2 * step, n);
    }
    #[inline(always)]
    fn hmax(self) -> f32 {
        self.0.max(self.1).hmax()
    }
    #[inline(always)]
    fn round_even(self) -> Self {
        Pair(self.0.round_even(), self.1.round_even())
    }
    #[inline(always)]
    fn lt(self, o: Self) -> Self::Mask {
        (self.0.lt(o.0), self.1.lt(o.1))
    }
    #[inline(always)]
    fn gt(self, o: Self) -> Self::Mask {
        (self.0.gt(o.0), self.1.gt(o.1))
    }
    #[inline(always)]
    fn eq(self, o: Self) -> Self::Mask {
        (self.0.eq(o.0), self.1.eq(o.1))
    }
    #[inline(always)]
    fn and(a: Self::Mask, b: Self::Mask) -> Self::Mask {
        (V::and(a.0, b.0), V::and(a.1, b.1))
    }
    #[inline(always)]
    fn and_not(a: Self::Mask, b: Self::Mask) -> Self::Mask {
        (V::and_not(a.0, b.0), V::and_not(a.1, b.1))
    }
    #[inline(always)]
    fn prefetch(s: &[f32]) {
        V::prefetch(s)
    }
    #[inline(always)]
    fn or(a: Self::Mask, b: Self::Mask) -> Self::Mask {
        (V::or(a.0, b.0), V::or(a.1, b.1))
    }
    #[inline(always)]
    fn any(m: Self::Mask) -> bool {
        V::any(m.0) || V::any(m.1)
    }
    #[inline(always)]
    fn select(m: Self::Mask, a: Self, b: Self) -> Self {
        Pair(V::select(m.0, a.0, b.0), V::select(m.1, a.1, b.1))
    }
    #[inline(always)]
    fn nearest_int(self) -> Self::Int {
        (self.0.nearest_int(), self.1.nearest_int())
    }
    #[inline(always)]
    fn c_int(self) -> Self::Int {
        (self.0.c_int(), self.1.c_int())
    }
    #[inline(always)]
    fn clamp_int(i: Self::Int, lo: i32, hi: i32) -> Self::Int {
        (V::clamp_int(i.0, lo, hi), V::clamp_int(i.1, lo, hi))
    }
    #[inline(always)]
    fn int_to_f32(i: Self::Int) -> Self {
        Pair(V::int_to_f32(i.0), V::int_to_f32(i.1))
    }
    #[inline(always)]
    fn store_int(i: Self::Int, s: &mut [i32]) {
        let (a, b) = s[..2 * V::N].split_at_mut(V::N);
        V::store_int(i.0, a);
        V::store_int(i.1, b);
    }
    #[inline(always)]
    fn sext8(i: Self::Int) -> Self::Int {
        (V::sext8(i.0), V::sext8(i.1))
    }
    #[inline(always)]
    fn load_u16(s: &[u8]) -> Self::Int {
        (
            V::load_u16(&s[..2 * V::N]),
            V::load_u16(&s[2 * V::N..4 * V::N]),
        )
    }
    #[inline(always)]
    fn shr_int(i: Self::Int, n: u32) -> Self::Int {
        (V::shr_int(i.0, n), V::shr_int(i.1, n))
    }
    #[inline(always)]
    fn lookup4(table: &[f32; 4], i: Self::Int) -> Self {
        Pair(V::lookup4(table, i.0), V::lookup4(table, i.1))
    }
    #[inline(always)]
    fn lookup8(table: &[f32; 8], i: Self::Int) -> Self {
        Pair(V::lookup8(table, i.0), V::lookup8(table, i.1))
    }
    #[inline(always)]
    fn lookup16(table: &[f32; 16], i: Self::Int) -> Self {
        Pair(V::lookup16(table, i.0), V::lookup16(table, i.1))
    }
    #[inline(always)]
    fn load_u8(s: &[u8]) -> Self {
        Pair(V::load_u8(&s[..V::N]), V::load_u8(&s[V::N..2 * V::N]))
    }
    #[inline(always)]
    fn load_i8(s: &[i8]) -> Self {
        Pair(V::load_i8(&s[..V::N]), V::load_i8(&s[V::N..2 * V::N]))
    }
    #[inline(always)]
    fn store_u8(i: Self::Int, s: &mut [u8]) {
        let (a, b) = s[..2 * V::N].split_at_mut(V::N);
        V::store_u8(i.0, a);
        V::store_u8(i.1, b);
    }
    #[inline(always)]
    fn test_int(i: Self::Int, bits: i32) -> Self::Mask {
        (V::test_int(i.0, bits), V::test_int(i.1, bits))
    }
    #[inline(always)]
    fn mask_bits(m: Self::Mask) -> u64 {
        V::mask_bits(m.0) | V::mask_bits(m.1) << V::N
    }
    #[inline(always)]
    fn store_f16(self, s: &mut [u16]) {
        let (a, b) = s[..2 * V::N].split_at_mut(V::N);
        self.0.store_f16(a);
        self.1.store_f16(b);
    }
    #[inline(always)]
    fn load_f16(s: &[u8]) -> Self {
        Pair(V::load_f16(s), V::load_f16(&s[2 * V::N..]))
    }
}

/// Stores `v` into `s[..V::N]`, around the caches ([`Lanes::store_stream`]) with `STREAM`.
#[inline(always)]
pub(crate) fn store_as<V: Lanes, const STREAM: bool>(v: V, s: &mut [f32]) {
    if STREAM {
        v.store_stream(s);
    } else {
        v.store(s);
    }
}

/// Lanes built from a function of the lane index.
#[inline(always)]
pub(crate) fn from_fn<V: Lanes>(f: impl Fn(usize) -> f32) -> V {
    let mut buf = [0.0f32; MAX_LANES];
    for (lane, b) in buf.iter_mut().enumerate().take(V::N) {
        *b = f(lane);
    }
    V::load(&buf)
}

/// The largest float below 1/2 (0.49999997).
pub(crate) const BELOW_HALF: f32 = f32::from_bits(0x3eff_ffff);

/// C's `(int)roundf(v)` per lane (half away from zero), as C's truncating cast of
/// `v + copysign(BELOW_HALF, v)`: for every finite float, `truncf(v + copysignf(BELOW_HALF,
/// v))` has the bits of `roundf(v)` (checked over all 2^32 bit patterns; adding 1/2
/// itself would round `0.49999997` up to 1). Only the sign of a zero differs (-0 gives +0
/// here), which the integer does not keep. Non-finite lanes convert as `roundf`'s result
/// would (C's `(int)` of NaN or infinity).
#[inline(always)]
pub(crate) fn round_half_away_int<V: Lanes>(v: V) -> V::Int {
    let half = V::select(
        v.lt(V::splat(0.0)),
        V::splat(-BELOW_HALF),
        V::splat(BELOW_HALF),
    );
    v.add(half).c_int()
}

/// The absolute maximum of `x` (a whole number of vectors), starting from 0. Order does
/// not matter for a maximum of finite values, so lanes reduce independently.
#[inline(always)]
pub(crate) fn abs_max<V: Lanes>(x: &[f32]) -> f32 {
    abs_max_seen(x, &mut V::splat(0.0))
}

/// [`abs_max`], also folding the absolute values' bit patterns into `seen` (see
/// [`Lanes::max_bits`]), so that a quantizer that reads its input once learns from
/// [`all_finite`] whether it held a NaN or an infinity.
#[inline(always)]
pub(crate) fn abs_max_seen<V: Lanes>(x: &[f32], seen: &mut V) -> f32 {
    // Absolute values order as their bit patterns do, NaN and infinity above every finite
    // value: one integer maximum per vector finds the maximum and shows them.
    let mut m = V::splat(0.0);
    for c in x.chunks_exact(V::N) {
        m = m.max_bits(V::load(c).abs());
    }
    *seen = seen.max_bits(m);
    m.hmax()
}

/// Whether every value folded into `seen` by [`abs_max_seen`] was finite.
#[inline(always)]
pub(crate) fn all_finite<V: Lanes>(seen: V) -> bool {
    let mut lanes = [0.0f32; MAX_LANES];
    seen.store(&mut lanes);
    lanes[..V::N].iter().all(|v| v.to_bits() < 0x7f80_0000)
}

/// Columns `first..n` of [`Lanes::load_transposed_every`], one value at a time: lane `j` of
/// `out[i * step]` is `x[j * stride + i]`. The plain form of the transposition (and the
/// ISA forms' tail).
#[inline(always)]
pub(crate) fn gather_columns<V: Lanes>(
    x: &[f32],
    stride: usize,
    first: usize,
    out: &mut [V],
    step: usize,
    n: usize,
) {
    let x = &x[..(V::N - 1) * stride + n];
    for i in first..n {
        let mut buf = [0.0f32; MAX_LANES];
        for (lane, b) in buf.iter_mut().enumerate().take(V::N) {
            *b = x[lane * stride + i];
        }
        out[i * step] = V::load(&buf);
    }
}

/// Transposes `count` consecutive runs of `R` values (`count <= N`) so that vector `i`
/// holds element `i` of each run; missing lanes are zero.
#[inline(always)]
pub(crate) fn transpose<V: Lanes, const R: usize>(x: &[f32], count: usize) -> [V; R] {
    let mut out = [V::splat(0.0); R];
    transpose_into(x, count, &mut out);
    out
}

/// [`transpose`] into `out`.
#[inline(always)]
pub(crate) fn transpose_into<V: Lanes, const R: usize>(x: &[f32], count: usize, out: &mut [V; R]) {
    if count == V::N {
        V::load_transposed(x, R, out);
        return;
    }
    for (i, o) in out.iter_mut().enumerate() {
        let mut buf = [0.0f32; MAX_LANES];
        for (lane, b) in buf.iter_mut().enumerate().take(count) {
            *b = x[lane * R + i];
        }
        *o = V::load(&buf);
    }
}

/// Checks of the operations whose ISA implementations are not plain IEEE arithmetic, run
/// for every ISA of `crate::isa` by [`suite!`](checks::suite), inside its target features.
#[cfg(test)]
pub(crate) mod checks {
    use super::{Lanes, MAX_LANES};
    use crate::num::fp32_to_fp16;

    /// The lane-check suite of one ISA: each check a test, run on the ISA's lanes and on
    /// pairs of them, skipped (and said so) on a CPU without the ISA.
    macro_rules! suite {
        ($isa:ident, $lanes:ty, $features:tt) => {
            crate::simd::lanes::checks::suite!(@each $isa, $lanes, $features,
                store_f16: crate::simd::lanes::checks::store_f16,
                load_f16: crate::simd::lanes::checks::load_f16,
                round_half_away_int: crate::simd::lanes::checks::round_half_away_int,
                transpose_and_bits: crate::simd::lanes::checks::transpose_and_bits,
                masks: crate::simd::lanes::checks::masks,
                xor_bits: crate::simd::lanes::checks::xor_bits,
                store_u8_4: crate::simd::lanes::checks::store_u8_4,
                u16_codes_and_lookups: crate::simd::lanes::checks::u16_codes_and_lookups,
                qp_quants_matches_scalar: crate::simd::kquant::checks::qp_quants_matches_scalar,
            );
        };
        (@each $isa:ident, $lanes:ty, $features:tt, $($name:ident: $($check:ident)::+),* $(,)?) => {
            $(
                #[test]
                fn $name() {
                    if !crate::Isa::$isa.is_supported() {
                        eprintln!("SKIPPED: this CPU does not support {}", crate::Isa::$isa);
                        return;
                    }
                    crate::simd::lanes::checks::suite!(@target $features
                        fn run() {
                            $($check)::+::<$lanes>();
                            $($check)::+::<crate::simd::lanes::Pair<$lanes>>();
                        }
                    );
                    // SAFETY: the CPU supports the ISA, whose features `run` enables.
                    #[allow(unused_unsafe)]
                    unsafe {
                        run()
                    }
                }
            )*
        };
        (@target [$($feature:literal),*] $f:item) => {
            $( #[target_feature(enable = $feature)] )*
            $f
        };
    }
    pub(crate) use suite;

    /// `all`, `not`, `and`, `and_not`, `or`, `any` and `mask_bits` against their
    /// definitions on masks with every lane count set.
    #[inline(always)]
    pub(crate) fn masks<V: Lanes>() {
        assert_eq!(V::mask_bits(V::all()), u64::MAX >> (64 - V::N));
        let mut lanes = [0.0f32; MAX_LANES];
        for k in 0..=V::N {
            for (j, l) in lanes[..V::N].iter_mut().enumerate() {
                *l = if j < k { 1.0 } else { 0.0 };
            }
            let m = V::load(&lanes).gt(V::splat(0.5));
            let want = (1u64 << k) - 1;
            let full = u64::MAX >> (64 - V::N);
            assert_eq!(V::mask_bits(m), want, "{k} lanes");
            assert_eq!(V::mask_bits(V::not(m)), !want & full, "not, {k} lanes");
            assert_eq!(V::any(m), k > 0, "any, {k} lanes");
            assert_eq!(V::mask_bits(V::and(m, V::all())), want);
            assert_eq!(V::mask_bits(V::or(m, V::not(m))), full);
            assert_eq!(V::mask_bits(V::and_not(V::all(), m)), !want & full);
        }
    }

    /// `store_u8_4` against four `store_u8`, on integers from C's cast of floats: every low
    /// byte with high bits clear and set, negative ones, and `INT_MIN` (NaN, out of range).
    #[inline(always)]
    pub(crate) fn store_u8_4<V: Lanes>() {
        let mut values = [0.0f32; 4 * MAX_LANES];
        let mut want = [0u8; 4 * MAX_LANES];
        let mut got = [0u8; 4 * MAX_LANES];
        for start in (0..4096).step_by(7) {
            for (j, v) in values[..4 * V::N].iter_mut().enumerate() {
                let k = start + 131 * j;
                let low = (k & 0xff) as f32;
                *v = match k % 6 {
                    0 => low,
                    1 => -low,
                    2 => ((k % 65521) * 256) as f32 + low,
                    3 => -(((k % 65521) * 256) as f32 + low),
                    4 => f32::NAN,
                    _ => 3.0e9,
                };
            }
            let ints = [
                V::load(&values).c_int(),
                V::load(&values[V::N..]).c_int(),
                V::load(&values[2 * V::N..]).c_int(),
                V::load(&values[3 * V::N..]).c_int(),
            ];
            for (k, &i) in ints.iter().enumerate() {
                V::store_u8(i, &mut want[k * V::N..]);
            }
            V::store_u8_4(ints, &mut got);
            assert_eq!(got[..4 * V::N], want[..4 * V::N], "from {start}");
        }
    }

    /// `xor_bits` against the bits' exclusive-or, NaNs, infinities, zeros and subnormals
    /// included; with ±0.0 it is C's negation of the lanes it flips.
    #[inline(always)]
    pub(crate) fn xor_bits<V: Lanes>() {
        let some = [
            1.5f32,
            -2.0,
            0.0,
            -0.0,
            f32::NAN,
            -f32::NAN,
            f32::INFINITY,
            f32::from_bits(1),
            f32::from_bits(0x7fc1_2345),
            f32::MAX,
            -3.25e-20,
            7.0,
            f32::NEG_INFINITY,
            0.125,
            -1.0,
            f32::from_bits(0xff80_0001),
        ];
        let values: [f32; MAX_LANES] = std::array::from_fn(|j| some[j % some.len()]);
        let mut flips = [0.0f32; MAX_LANES];
        let mut out = [0.0f32; MAX_LANES];
        for pattern in 0..1u32 << V::N.min(16) {
            for (j, f) in flips[..V::N].iter_mut().enumerate() {
                *f = if pattern >> j & 1 != 0 { -0.0 } else { 0.0 };
            }
            V::load(&values).xor_bits(V::load(&flips)).store(&mut out);
            for j in 0..V::N {
                let want = if pattern >> j & 1 != 0 {
                    -values[j]
                } else {
                    values[j]
                };
                assert_eq!(out[j].to_bits(), want.to_bits(), "lane {j} of {pattern:b}");
            }
        }
    }

    /// `load_u16`, `shr_int`, `lookup4` and `lookup8` against their definitions, on codes
    /// with every bit pattern in each lane over the test.
    #[inline(always)]
    pub(crate) fn u16_codes_and_lookups<V: Lanes>() {
        let t4 = [1.5f32, -2.0, 3.25, f32::MAX];
        let t8 = [0.0f32, -0.0, 1.0, 2.0, 3.0, 4.0, f32::INFINITY, -5.5];
        let mut bytes = [0u8; 2 * MAX_LANES];
        let mut ints = [0i32; MAX_LANES];
        let mut out = [0.0f32; MAX_LANES];
        for start in (0..=u16::MAX as u32).step_by(97) {
            let code = |j: usize| (start as usize * 7 + j * 4099) as u16;
            for j in 0..V::N {
                bytes[2 * j..2 * j + 2].copy_from_slice(&code(j).to_le_bytes());
            }
            let c = V::load_u16(&bytes);
            for shift in [0, 1, 2, 3, 6, 9, 14, 15] {
                let s = V::shr_int(c, shift);
                let want: Vec<usize> = (0..V::N).map(|j| (code(j) >> shift) as usize).collect();
                V::store_int(s, &mut ints);
                for (&got, &want) in ints.iter().zip(&want) {
                    assert_eq!(got, want as i32, ">> {shift}");
                }
                V::lookup4(&t4, s).store(&mut out);
                for (got, &want) in out.iter().zip(&want) {
                    assert_eq!(got.to_bits(), t4[want & 3].to_bits());
                }
                V::lookup8(&t8, s).store(&mut out);
                for (got, &want) in out.iter().zip(&want) {
                    assert_eq!(got.to_bits(), t8[want & 7].to_bits());
                }
            }
        }
    }

    /// `store_f16` against ggml's software rounding: every 251st f32 bit pattern, and
    /// every fp16 value's f32 neighbours and the midpoints between consecutive fp16
    /// values (the ties) with their neighbours.
    #[inline(always)]
    pub(crate) fn store_f16<V: Lanes>() {
        let mut values: Vec<f32> = (0..=u32::MAX).step_by(251).map(f32::from_bits).collect();
        for h in 0..0x7C00u16 {
            let lo = crate::num::fp16_to_fp32(h);
            let hi = crate::num::fp16_to_fp32(h + 1);
            let mid = ((f64::from(lo) + f64::from(hi)) / 2.0) as f32;
            for v in [lo, mid, -lo, -mid] {
                let b = v.to_bits();
                values.extend([b.wrapping_sub(1), b, b.wrapping_add(1)].map(f32::from_bits));
            }
        }
        values.retain(|v| v.is_finite());
        let mut halves = [0u16; MAX_LANES];
        for chunk in values.chunks_exact(V::N) {
            V::load(chunk).store_f16(&mut halves);
            for (&v, &h) in chunk.iter().zip(&halves) {
                assert_eq!(h, fp32_to_fp16(v), "fp16 of {v:e} ({:#010x})", v.to_bits());
            }
        }
        assert!(values.len() > 17_000_000, "only {} values", values.len());
    }

    /// `round_half_away_int` against `roundf` and C's cast: every 61st bit pattern of
    /// magnitude below 2^31, the halves `k + 1/2` and their neighbours, `BELOW_HALF`.
    #[inline(always)]
    pub(crate) fn round_half_away_int<V: Lanes>() {
        let mut values: Vec<f32> = (0..=u32::MAX)
            .step_by(61)
            .map(f32::from_bits)
            .filter(|v| v.abs() < 2_147_483_648.0)
            .collect();
        for k in -300i32..300 {
            let b = (k as f32 + 0.5).to_bits();
            values.extend([b - 1, b, b + 1].map(f32::from_bits));
        }
        values.extend([super::BELOW_HALF, -super::BELOW_HALF, 0.0, -0.0]);
        let mut ints = [0i32; MAX_LANES];
        for chunk in values.chunks_exact(V::N) {
            V::store_int(super::round_half_away_int(V::load(chunk)), &mut ints);
            for (&v, &i) in chunk.iter().zip(&ints) {
                assert_eq!(i, v.round() as i32, "(int)roundf({v:e})");
            }
        }
    }

    /// `load_f16` against ggml's software widening, on every fp16 bit pattern.
    #[inline(always)]
    pub(crate) fn load_f16<V: Lanes>() {
        let bytes: Vec<u8> = (0..=u16::MAX).flat_map(u16::to_le_bytes).collect();
        let mut lanes = [0.0f32; MAX_LANES];
        for (c, chunk) in bytes.chunks_exact(2 * V::N).enumerate() {
            V::load_f16(chunk).store(&mut lanes);
            for (k, v) in lanes[..V::N].iter().enumerate() {
                let h = (c * V::N + k) as u16;
                let want = crate::num::fp16_to_fp32(h);
                assert_eq!(v.to_bits(), want.to_bits(), "f32 of fp16 {h:#06x}");
            }
        }
    }

    /// `load_transposed` and `transpose` against their definition, for the run lengths
    /// the codecs use and shorter outputs, whole groups and partial ones; and the two
    /// operations on bit patterns against the float minimum and maximum.
    #[inline(always)]
    pub(crate) fn transpose_and_bits<V: Lanes>() {
        let x: Vec<f32> = (0..V::N * 32).map(|i| i as f32 + 0.25).collect();
        let mut lanes = [0.0f32; MAX_LANES];
        for stride in [16usize, 32] {
            for len in [1usize, 5, 8, 16, stride] {
                let mut out = [V::splat(0.0); 32];
                V::load_transposed(&x, stride, &mut out[..len]);
                for (i, o) in out[..len].iter().enumerate() {
                    o.store(&mut lanes);
                    for (j, &v) in lanes[..V::N].iter().enumerate() {
                        assert_eq!(v, x[j * stride + i], "stride {stride}, {len} vectors");
                    }
                }
            }
        }
        for count in [1, V::N / 2, V::N] {
            let out: [V; 32] = super::transpose(&x, count);
            for (i, o) in out.iter().enumerate() {
                o.store(&mut lanes);
                for (j, &v) in lanes[..V::N].iter().enumerate() {
                    let want = if j < count { x[j * 32 + i] } else { 0.0 };
                    assert_eq!(v, want, "{count} runs, vector {i}");
                }
            }
        }
        let values = [
            -f32::MAX,
            -3.0,
            -0.5,
            -0.0,
            0.0,
            1e-40,
            0.5,
            14.5,
            15.0,
            15.5,
            16.0,
            f32::MAX,
            f32::INFINITY,
            f32::NEG_INFINITY,
        ];
        for &a in &values {
            let (lo, hi) = (
                V::splat(a).max_zero_bits(),
                V::splat(a).min_bits(V::splat(15.0)),
            );
            lo.store(&mut lanes);
            let want = if a > 0.0 { a } else { 0.0 };
            assert_eq!(lanes[0].to_bits(), want.to_bits(), "max({a}, +0)");
            hi.store(&mut lanes);
            assert_eq!(lanes[0], a.min(15.0), "min({a}, 15)");
            // The running minimum and maximum keep `b` on ties and NaN.
            for &b in values.iter().chain(&[f32::NAN]) {
                for (x, y) in [(a, b), (b, a)] {
                    V::splat(x).min_or_keep(V::splat(y)).store(&mut lanes);
                    let want = if x < y { x } else { y };
                    assert_eq!(lanes[0].to_bits(), want.to_bits(), "min_or_keep({x}, {y})");
                    V::splat(x).max_or_keep(V::splat(y)).store(&mut lanes);
                    let want = if x > y { x } else { y };
                    assert_eq!(lanes[0].to_bits(), want.to_bits(), "max_or_keep({x}, {y})");
                }
            }
            // `max_bits` of absolute values orders NaN above infinity above the finite.
            for &b in values.iter().chain(&[f32::NAN]) {
                V::splat(a.abs())
                    .max_bits(V::splat(b.abs()))
                    .store(&mut lanes);
                let want = a.abs().to_bits().max(b.abs().to_bits());
                assert_eq!(lanes[0].to_bits(), want, "max_bits(|{a}|, |{b}|)");
            }
            // `add_on_mul_unit` is the sum, bit for bit (signed zeros, infinities,
            // subnormals and overflow included), in every lane.
            for &b in &values {
                let sum = V::splat(a).add_on_mul_unit(V::splat(b), super::opaque_one());
                sum.store(&mut lanes);
                let want = a + b;
                for &got in &lanes[..V::N] {
                    if want.is_nan() {
                        assert!(got.is_nan(), "{a} + {b}");
                    } else {
                        assert_eq!(got.to_bits(), want.to_bits(), "{a} + {b}");
                    }
                }
            }
        }
    }
}
