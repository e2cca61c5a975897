//! AVX-512 (F, BW, VL): 16 f32 lanes.

use crate::simd::lanes::Lanes;
use std::arch::x86_64::*;

/// Sixteen f32 lanes in a `__m512`.
#[derive(Clone, Copy)]
pub(in crate::isa) struct Avx512(__m512);

/// Sixteen i32 lanes.
#[derive(Clone, Copy)]
pub(in crate::isa) struct Avx512Int(__m512i);

// SAFETY (every `unsafe` block below): an `Avx512` value exists only inside functions that
// run with AVX-512 F/BW/VL enabled (the entry points `crate::isa` generates for AVX-512,
// reached only through a `Codec` that checked the CPU), so the intrinsics are available;
// loads and stores go through slices whose length is checked first.
impl Lanes for Avx512 {
    const N: usize = 16;
    type Mask = __mmask16;
    type Int = Avx512Int;
    type Narrow = super::avx2::Avx2;

    #[inline(always)]
    fn splat(v: f32) -> Self {
        // SAFETY: see the impl comment.
        unsafe { Avx512(_mm512_set1_ps(v)) }
    }
    #[inline(always)]
    fn load(s: &[f32]) -> Self {
        let s = &s[..16];
        // SAFETY: see the impl comment; `s` holds 16 floats.
        unsafe { Avx512(_mm512_loadu_ps(s.as_ptr())) }
    }
    #[inline(always)]
    fn store(self, s: &mut [f32]) {
        let s = &mut s[..16];
        // SAFETY: see the impl comment; `s` holds 16 floats.
        unsafe { _mm512_storeu_ps(s.as_mut_ptr(), self.0) }
    }
    #[inline(always)]
    fn add(self, o: Self) -> Self {
        // SAFETY: see the impl comment.
        unsafe { Avx512(_mm512_add_ps(self.0, o.0)) }
    }
    #[inline(always)]
    fn add_on_mul_unit(self, o: Self, one: Self) -> Self {
        // SAFETY: see the impl comment.
        unsafe { Avx512(_mm512_fmadd_ps(self.0, one.0, o.0)) }
    }
    #[inline(always)]
    fn sub(self, o: Self) -> Self {
        // SAFETY: see the impl comment.
        unsafe { Avx512(_mm512_sub_ps(self.0, o.0)) }
    }
    #[inline(always)]
    fn mul(self, o: Self) -> Self {
        // SAFETY: see the impl comment.
        unsafe { Avx512(_mm512_mul_ps(self.0, o.0)) }
    }
    #[inline(always)]
    fn div(self, o: Self) -> Self {
        // SAFETY: see the impl comment.
        unsafe { Avx512(_mm512_div_ps(self.0, o.0)) }
    }
    #[inline(always)]
    fn sqrt(self) -> Self {
        // SAFETY: see the impl comment.
        unsafe { Avx512(_mm512_sqrt_ps(self.0)) }
    }
    #[inline(always)]
    fn abs(self) -> Self {
        // SAFETY: see the impl comment.
        unsafe { Avx512(_mm512_abs_ps(self.0)) }
    }
    #[inline(always)]
    fn xor_bits(self, o: Self) -> Self {
        // SAFETY: see the impl comment (AVX-512F's integer form: the float one is DQ's).
        unsafe {
            Avx512(_mm512_castsi512_ps(_mm512_xor_si512(
                _mm512_castps_si512(self.0),
                _mm512_castps_si512(o.0),
            )))
        }
    }
    #[inline(always)]
    fn max(self, o: Self) -> Self {
        // SAFETY: see the impl comment.
        unsafe { Avx512(_mm512_max_ps(self.0, o.0)) }
    }
    #[inline(always)]
    fn min(self, o: Self) -> Self {
        // SAFETY: see the impl comment.
        unsafe { Avx512(_mm512_min_ps(self.0, o.0)) }
    }
    #[inline(always)]
    fn min_or_keep(self, o: Self) -> Self {
        // SAFETY: see the impl comment. `minps` is `src1 < src2 ? src1 : src2`.
        unsafe { Avx512(_mm512_min_ps(self.0, o.0)) }
    }
    #[inline(always)]
    fn max_or_keep(self, o: Self) -> Self {
        // SAFETY: see the impl comment. `maxps` is `src1 > src2 ? src1 : src2`.
        unsafe { Avx512(_mm512_max_ps(self.0, o.0)) }
    }
    #[inline(always)]
    fn max_bits(self, o: Self) -> Self {
        // SAFETY: see the impl comment.
        unsafe {
            Avx512(_mm512_castsi512_ps(_mm512_max_epi32(
                _mm512_castps_si512(self.0),
                _mm512_castps_si512(o.0),
            )))
        }
    }
    #[inline(always)]
    fn min_bits(self, hi: Self) -> Self {
        // SAFETY: see the impl comment.
        unsafe {
            Avx512(_mm512_castsi512_ps(_mm512_min_epi32(
                _mm512_castps_si512(self.0),
                _mm512_castps_si512(hi.0),
            )))
        }
    }
    #[inline(always)]
    fn hmax(self) -> f32 {
        // SAFETY: see the impl comment.
        unsafe { _mm512_reduce_max_ps(self.0) }
    }
    #[inline(always)]
    fn round_even(self) -> Self {
        // SAFETY: see the impl comment.
        unsafe {
            Avx512(_mm512_roundscale_ps::<
                { _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC },
            >(self.0))
        }
    }
    #[inline(always)]
    fn lt(self, o: Self) -> __mmask16 {
        // SAFETY: see the impl comment.
        unsafe { _mm512_cmp_ps_mask::<_CMP_LT_OQ>(self.0, o.0) }
    }
    #[inline(always)]
    fn gt(self, o: Self) -> __mmask16 {
        // SAFETY: see the impl comment.
        unsafe { _mm512_cmp_ps_mask::<_CMP_GT_OQ>(self.0, o.0) }
    }
    #[inline(always)]
    fn eq(self, o: Self) -> __mmask16 {
        // SAFETY: see the impl comment.
        unsafe { _mm512_cmp_ps_mask::<_CMP_EQ_OQ>(self.0, o.0) }
    }
    #[inline(always)]
    fn any(m: __mmask16) -> bool {
        m != 0
    }
    #[inline(always)]
    fn and(a: __mmask16, b: __mmask16) -> __mmask16 {
        a & b
    }
    #[inline(always)]
    fn and_not(a: __mmask16, b: __mmask16) -> __mmask16 {
        a & !b
    }
    #[inline(always)]
    fn prefetch(s: &[f32]) {
        // SAFETY: a prefetch reads nothing into the program and never faults; `s` is a
        // live slice besides.
        unsafe { _mm_prefetch::<_MM_HINT_T0>(s.as_ptr().cast()) }
    }
    #[inline(always)]
    fn or(a: __mmask16, b: __mmask16) -> __mmask16 {
        a | b
    }
    #[inline(always)]
    fn select(m: __mmask16, a: Self, b: Self) -> Self {
        // SAFETY: see the impl comment.
        unsafe { Avx512(_mm512_mask_blend_ps(m, b.0, a.0)) }
    }
    #[inline(always)]
    fn nearest_int(self) -> Avx512Int {
        // SAFETY: see the impl comment.
        unsafe {
            let val = _mm512_castps_si512(_mm512_add_ps(self.0, _mm512_set1_ps(12_582_912.0)));
            let m = _mm512_and_si512(val, _mm512_set1_epi32(0x007f_ffff));
            Avx512Int(_mm512_sub_epi32(m, _mm512_set1_epi32(0x0040_0000)))
        }
    }
    #[inline(always)]
    fn c_int(self) -> Avx512Int {
        // SAFETY: see the impl comment. vcvttps2dq gives INT_MIN for NaN and out of range,
        // exactly C's cast on x86-64.
        unsafe { Avx512Int(_mm512_cvttps_epi32(self.0)) }
    }
    #[inline(always)]
    fn clamp_int(i: Avx512Int, lo: i32, hi: i32) -> Avx512Int {
        // SAFETY: see the impl comment.
        unsafe {
            Avx512Int(_mm512_min_epi32(
                _mm512_max_epi32(i.0, _mm512_set1_epi32(lo)),
                _mm512_set1_epi32(hi),
            ))
        }
    }
    #[inline(always)]
    fn int_to_f32(i: Avx512Int) -> Self {
        // SAFETY: see the impl comment.
        unsafe { Avx512(_mm512_cvtepi32_ps(i.0)) }
    }
    #[inline(always)]
    fn store_int(i: Avx512Int, s: &mut [i32]) {
        let s = &mut s[..16];
        // SAFETY: see the impl comment; `s` holds 16 ints.
        unsafe { _mm512_storeu_si512(s.as_mut_ptr().cast(), i.0) }
    }
    #[inline(always)]
    fn sext8(i: Avx512Int) -> Avx512Int {
        // SAFETY: see the impl comment.
        unsafe { Avx512Int(_mm512_srai_epi32::<24>(_mm512_slli_epi32::<24>(i.0))) }
    }
    #[inline(always)]
    fn load_transposed_every(x: &[f32], stride: usize, out: &mut [Self], step: usize, n: usize) {
        let whole = n / 16 * 16;
        for c in 0..whole / 16 {
            let mut rows = [Self::splat(0.0); 16];
            for (j, r) in rows.iter_mut().enumerate() {
                *r = Self::load(&x[j * stride + 16 * c..]);
            }
            // SAFETY: see the impl comment.
            unsafe { transpose16(&mut rows) };
            for (k, r) in rows.iter().enumerate() {
                out[(16 * c + k) * step] = *r;
            }
        }
        crate::simd::lanes::gather_columns(x, stride, whole, out, step, n);
    }
    #[inline(always)]
    fn load_u16(s: &[u8]) -> Avx512Int {
        let s = &s[..32];
        // SAFETY: see the impl comment; `s` holds 16 halves.
        unsafe { Avx512Int(_mm512_cvtepu16_epi32(_mm256_loadu_si256(s.as_ptr().cast()))) }
    }
    #[inline(always)]
    fn shr_int(i: Avx512Int, n: u32) -> Avx512Int {
        // SAFETY: see the impl comment.
        unsafe { Avx512Int(_mm512_srl_epi32(i.0, _mm_cvtsi32_si128(n as i32))) }
    }
    #[inline(always)]
    fn lookup4(table: &[f32; 4], i: Avx512Int) -> Self {
        // SAFETY: see the impl comment; `table` holds 4 floats, broadcast to all four
        // 128-bit parts; vpermilps reads the low two bits of each index.
        unsafe {
            Avx512(_mm512_permutevar_ps(
                _mm512_broadcast_f32x4(_mm_loadu_ps(table.as_ptr())),
                i.0,
            ))
        }
    }
    #[inline(always)]
    fn lookup8(table: &[f32; 8], i: Avx512Int) -> Self {
        // SAFETY: see the impl comment; `table` holds 8 floats, in both halves, so that
        // vpermps's four index bits pick `table[i & 7]`.
        unsafe {
            let t = _mm512_castps256_ps512(_mm256_loadu_ps(table.as_ptr()));
            // 128-bit parts 0, 1, 0, 1 of `t`.
            let t = _mm512_shuffle_f32x4::<0b01_00_01_00>(t, t);
            Avx512(_mm512_permutexvar_ps(i.0, t))
        }
    }
    #[inline(always)]
    fn lookup16(table: &[f32; 16], i: Avx512Int) -> Self {
        // SAFETY: see the impl comment; `table` holds 16 floats.
        unsafe { Avx512(_mm512_permutexvar_ps(i.0, _mm512_loadu_ps(table.as_ptr()))) }
    }
    #[inline(always)]
    fn store_u8(i: Avx512Int, s: &mut [u8]) {
        let s = &mut s[..16];
        // SAFETY: see the impl comment; `s` holds 16 bytes. vpmovdb truncates.
        unsafe { _mm_storeu_si128(s.as_mut_ptr().cast(), _mm512_cvtepi32_epi8(i.0)) }
    }
    #[inline(always)]
    fn test_int(i: Avx512Int, bits: i32) -> __mmask16 {
        // SAFETY: see the impl comment.
        unsafe {
            let b = _mm512_set1_epi32(bits);
            _mm512_cmpeq_epi32_mask(_mm512_and_si512(i.0, b), b)
        }
    }
    #[inline(always)]
    fn mask_bits(m: __mmask16) -> u64 {
        u64::from(m)
    }
    #[inline(always)]
    fn store_f16(self, s: &mut [u16]) {
        let s = &mut s[..16];
        // SAFETY: see the impl comment; `s` holds 16 halves. vcvtps2ph with round to
        // nearest even is IEEE's conversion, as ggml's software one is for finite values.
        unsafe {
            let h = _mm512_cvtps_ph::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(self.0);
            _mm256_storeu_si256(s.as_mut_ptr().cast(), h)
        }
    }
    #[inline(always)]
    fn load_u8(s: &[u8]) -> Self {
        let s = &s[..16];
        // SAFETY: see the impl comment; `s` holds 16 bytes.
        unsafe {
            Avx512(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128(
                s.as_ptr().cast(),
            ))))
        }
    }
    #[inline(always)]
    fn load_i8(s: &[i8]) -> Self {
        let s = &s[..16];
        // SAFETY: see the impl comment; `s` holds 16 bytes.
        unsafe {
            Avx512(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(
                s.as_ptr().cast(),
            ))))
        }
    }
    #[inline(always)]
    fn load_f16(s: &[u8]) -> Self {
        let s = &s[..32];
        // SAFETY: see the impl comment; `s` holds 16 halves. vcvtph2ps is exact, and
        // quiets a NaN keeping its payload, as ggml's software widening does.
        unsafe { Avx512(_mm512_cvtph_ps(_mm256_loadu_si256(s.as_ptr().cast()))) }
    }
}

/// Transposes a 16x16 matrix of f32 held as 16 rows: interleaves of pairs of rows, then of
/// pairs of pairs, then 128-bit quarters twice.
///
/// # Safety
/// The CPU must support AVX-512F.
#[inline(always)]
unsafe fn transpose16(r: &mut [Avx512; 16]) {
    // SAFETY: register-only intrinsics; the caller guarantees AVX-512F.
    unsafe {
        let mut t = [_mm512_setzero_ps(); 16];
        for k in 0..8 {
            t[2 * k] = _mm512_unpacklo_ps(r[2 * k].0, r[2 * k + 1].0);
            t[2 * k + 1] = _mm512_unpackhi_ps(r[2 * k].0, r[2 * k + 1].0);
        }
        let mut u = [_mm512_setzero_ps(); 16];
        for k in 0..4 {
            let b = 4 * k;
            u[b] = _mm512_shuffle_ps::<0x44>(t[b], t[b + 2]);
            u[b + 1] = _mm512_shuffle_ps::<0xee>(t[b], t[b + 2]);
            u[b + 2] = _mm512_shuffle_ps::<0x44>(t[b + 1], t[b + 3]);
            u[b + 3] = _mm512_shuffle_ps::<0xee>(t[b + 1], t[b + 3]);
        }
        for k in 0..2 {
            let b = 8 * k;
            for j in 0..4 {
                t[b + j] = _mm512_shuffle_f32x4::<0x88>(u[b + j], u[b + 4 + j]);
                t[b + 4 + j] = _mm512_shuffle_f32x4::<0xdd>(u[b + j], u[b + 4 + j]);
            }
        }
        for j in 0..8 {
            r[j] = Avx512(_mm512_shuffle_f32x4::<0x88>(t[j], t[8 + j]));
            r[8 + j] = Avx512(_mm512_shuffle_f32x4::<0xdd>(t[j], t[8 + j]));
        }
    }
}
