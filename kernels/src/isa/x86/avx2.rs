//! AVX2: 8 f32 lanes.

use crate::simd::lanes::Lanes;
use std::arch::x86_64::*;

/// Eight f32 lanes in a `__m256`.
#[derive(Clone, Copy)]
pub(in crate::isa) struct Avx2(__m256);

/// Eight i32 lanes.
#[derive(Clone, Copy)]
pub(in crate::isa) struct Avx2Int(__m256i);

// SAFETY (every `unsafe` block below): an `Avx2` value exists only inside functions that
// run with AVX2 and F16C enabled (the entry points `crate::isa` generates for AVX2, and
// those for AVX-512, whose `Narrow` lanes these are; reached only through a `Codec` that
// checked the CPU for every feature its entry points enable), so the AVX/AVX2 intrinsics
// are available; loads and stores go through slices whose length is checked first.
impl Lanes for Avx2 {
    const N: usize = 8;
    type Mask = __m256;
    type Int = Avx2Int;
    type Narrow = Avx2;

    #[inline(always)]
    fn splat(v: f32) -> Self {
        // SAFETY: see the impl comment.
        unsafe { Avx2(_mm256_set1_ps(v)) }
    }
    #[inline(always)]
    fn load(s: &[f32]) -> Self {
        let s = &s[..8];
        // SAFETY: see the impl comment; `s` holds 8 floats.
        unsafe { Avx2(_mm256_loadu_ps(s.as_ptr())) }
    }
    #[inline(always)]
    fn store(self, s: &mut [f32]) {
        let s = &mut s[..8];
        // SAFETY: see the impl comment; `s` holds 8 floats.
        unsafe { _mm256_storeu_ps(s.as_mut_ptr(), self.0) }
    }
    #[inline(always)]
    fn add(self, o: Self) -> Self {
        // SAFETY: see the impl comment.
        unsafe { Avx2(_mm256_add_ps(self.0, o.0)) }
    }
    #[inline(always)]
    fn sub(self, o: Self) -> Self {
        // SAFETY: see the impl comment.
        unsafe { Avx2(_mm256_sub_ps(self.0, o.0)) }
    }
    #[inline(always)]
    fn mul(self, o: Self) -> Self {
        // SAFETY: see the impl comment.
        unsafe { Avx2(_mm256_mul_ps(self.0, o.0)) }
    }
    #[inline(always)]
    fn div(self, o: Self) -> Self {
        // SAFETY: see the impl comment.
        unsafe { Avx2(_mm256_div_ps(self.0, o.0)) }
    }
    #[inline(always)]
    fn sqrt(self) -> Self {
        // SAFETY: see the impl comment.
        unsafe { Avx2(_mm256_sqrt_ps(self.0)) }
    }
    #[inline(always)]
    fn abs(self) -> Self {
        // SAFETY: see the impl comment.
        unsafe {
            Avx2(_mm256_and_ps(
                self.0,
                _mm256_castsi256_ps(_mm256_set1_epi32(0x7fff_ffff)),
            ))
        }
    }
    #[inline(always)]
    fn xor_bits(self, o: Self) -> Self {
        // SAFETY: see the impl comment.
        unsafe { Avx2(_mm256_xor_ps(self.0, o.0)) }
    }
    #[inline(always)]
    fn max(self, o: Self) -> Self {
        // SAFETY: see the impl comment.
        unsafe { Avx2(_mm256_max_ps(self.0, o.0)) }
    }
    #[inline(always)]
    fn min(self, o: Self) -> Self {
        // SAFETY: see the impl comment.
        unsafe { Avx2(_mm256_min_ps(self.0, o.0)) }
    }
    #[inline(always)]
    fn min_or_keep(self, o: Self) -> Self {
        // SAFETY: see the impl comment. `minps` is `src1 < src2 ? src1 : src2`.
        unsafe { Avx2(_mm256_min_ps(self.0, o.0)) }
    }
    #[inline(always)]
    fn max_or_keep(self, o: Self) -> Self {
        // SAFETY: see the impl comment. `maxps` is `src1 > src2 ? src1 : src2`.
        unsafe { Avx2(_mm256_max_ps(self.0, o.0)) }
    }
    #[inline(always)]
    fn max_bits(self, o: Self) -> Self {
        // SAFETY: see the impl comment.
        unsafe {
            Avx2(_mm256_castsi256_ps(_mm256_max_epi32(
                _mm256_castps_si256(self.0),
                _mm256_castps_si256(o.0),
            )))
        }
    }
    #[inline(always)]
    fn min_bits(self, hi: Self) -> Self {
        // SAFETY: see the impl comment.
        unsafe {
            Avx2(_mm256_castsi256_ps(_mm256_min_epi32(
                _mm256_castps_si256(self.0),
                _mm256_castps_si256(hi.0),
            )))
        }
    }
    #[inline(always)]
    fn hmax(self) -> f32 {
        // SAFETY: see the impl comment.
        unsafe {
            let m = _mm_max_ps(
                _mm256_castps256_ps128(self.0),
                _mm256_extractf128_ps::<1>(self.0),
            );
            let m = _mm_max_ps(m, _mm_movehl_ps(m, m));
            let m = _mm_max_ss(m, _mm_shuffle_ps::<0b01>(m, m));
            _mm_cvtss_f32(m)
        }
    }
    #[inline(always)]
    fn round_even(self) -> Self {
        // SAFETY: see the impl comment.
        unsafe {
            Avx2(_mm256_round_ps::<
                { _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC },
            >(self.0))
        }
    }
    #[inline(always)]
    fn lt(self, o: Self) -> __m256 {
        // SAFETY: see the impl comment.
        unsafe { _mm256_cmp_ps::<_CMP_LT_OQ>(self.0, o.0) }
    }
    #[inline(always)]
    fn gt(self, o: Self) -> __m256 {
        // SAFETY: see the impl comment.
        unsafe { _mm256_cmp_ps::<_CMP_GT_OQ>(self.0, o.0) }
    }
    #[inline(always)]
    fn eq(self, o: Self) -> __m256 {
        // SAFETY: see the impl comment.
        unsafe { _mm256_cmp_ps::<_CMP_EQ_OQ>(self.0, o.0) }
    }
    #[inline(always)]
    fn any(m: __m256) -> bool {
        // SAFETY: see the impl comment.
        unsafe { _mm256_movemask_ps(m) != 0 }
    }
    #[inline(always)]
    fn and(a: __m256, b: __m256) -> __m256 {
        // SAFETY: see the impl comment.
        unsafe { _mm256_and_ps(a, b) }
    }
    #[inline(always)]
    fn and_not(a: __m256, b: __m256) -> __m256 {
        // SAFETY: see the impl comment.
        unsafe { _mm256_andnot_ps(b, a) }
    }
    #[inline(always)]
    fn load_transposed_every(x: &[f32], stride: usize, out: &mut [Self], step: usize, n: usize) {
        let whole = n / 8 * 8;
        for c in 0..whole / 8 {
            let mut rows = [Self::splat(0.0); 8];
            for (j, r) in rows.iter_mut().enumerate() {
                *r = Self::load(&x[j * stride + 8 * c..]);
            }
            // SAFETY: see the impl comment.
            unsafe { transpose8(&mut rows) };
            for (k, r) in rows.iter().enumerate() {
                out[(8 * c + k) * step] = *r;
            }
        }
        crate::simd::lanes::gather_columns(x, stride, whole, out, step, n);
    }
    #[inline(always)]
    fn prefetch(s: &[f32]) {
        // SAFETY: a prefetch reads nothing into the program and never faults; `s` is a
        // live slice besides.
        unsafe { _mm_prefetch::<_MM_HINT_T0>(s.as_ptr().cast()) }
    }
    #[inline(always)]
    fn store_stream(self, s: &mut [f32]) {
        let s = &mut s[..8];
        let p = s.as_mut_ptr();
        // SAFETY: see the impl comment; `s` holds 8 floats, at a 16-byte boundary when
        // streamed.
        unsafe {
            if (p as usize).is_multiple_of(16) {
                _mm_stream_ps(p, _mm256_castps256_ps128(self.0));
                _mm_stream_ps(p.add(4), _mm256_extractf128_ps::<1>(self.0));
            } else {
                _mm256_storeu_ps(p, self.0)
            }
        }
    }
    #[inline(always)]
    fn stream_fence() {
        // SAFETY: see the impl comment.
        unsafe { _mm_sfence() }
    }
    #[inline(always)]
    fn or(a: __m256, b: __m256) -> __m256 {
        // SAFETY: see the impl comment.
        unsafe { _mm256_or_ps(a, b) }
    }
    #[inline(always)]
    fn select(m: __m256, a: Self, b: Self) -> Self {
        // SAFETY: see the impl comment.
        unsafe { Avx2(_mm256_blendv_ps(b.0, a.0, m)) }
    }
    #[inline(always)]
    fn nearest_int(self) -> Avx2Int {
        // SAFETY: see the impl comment.
        unsafe {
            let val = _mm256_castps_si256(_mm256_add_ps(self.0, _mm256_set1_ps(12_582_912.0)));
            let m = _mm256_and_si256(val, _mm256_set1_epi32(0x007f_ffff));
            Avx2Int(_mm256_sub_epi32(m, _mm256_set1_epi32(0x0040_0000)))
        }
    }
    #[inline(always)]
    fn c_int(self) -> Avx2Int {
        // SAFETY: see the impl comment. cvttps2dq gives INT_MIN for NaN and out of range,
        // exactly C's cast on x86-64.
        unsafe { Avx2Int(_mm256_cvttps_epi32(self.0)) }
    }
    #[inline(always)]
    fn clamp_int(i: Avx2Int, lo: i32, hi: i32) -> Avx2Int {
        // SAFETY: see the impl comment.
        unsafe {
            Avx2Int(_mm256_min_epi32(
                _mm256_max_epi32(i.0, _mm256_set1_epi32(lo)),
                _mm256_set1_epi32(hi),
            ))
        }
    }
    #[inline(always)]
    fn int_to_f32(i: Avx2Int) -> Self {
        // SAFETY: see the impl comment.
        unsafe { Avx2(_mm256_cvtepi32_ps(i.0)) }
    }
    #[inline(always)]
    fn store_int(i: Avx2Int, s: &mut [i32]) {
        let s = &mut s[..8];
        // SAFETY: see the impl comment; `s` holds 8 ints.
        unsafe { _mm256_storeu_si256(s.as_mut_ptr().cast(), i.0) }
    }
    #[inline(always)]
    fn sext8(i: Avx2Int) -> Avx2Int {
        // SAFETY: see the impl comment.
        unsafe { Avx2Int(_mm256_srai_epi32::<24>(_mm256_slli_epi32::<24>(i.0))) }
    }
    #[inline(always)]
    fn load_u16(s: &[u8]) -> Avx2Int {
        let s = &s[..16];
        // SAFETY: see the impl comment; `s` holds 8 halves.
        unsafe { Avx2Int(_mm256_cvtepu16_epi32(_mm_loadu_si128(s.as_ptr().cast()))) }
    }
    #[inline(always)]
    fn shr_int(i: Avx2Int, n: u32) -> Avx2Int {
        // SAFETY: see the impl comment.
        unsafe { Avx2Int(_mm256_srl_epi32(i.0, _mm_cvtsi32_si128(n as i32))) }
    }
    #[inline(always)]
    fn lookup4(table: &[f32; 4], i: Avx2Int) -> Self {
        // SAFETY: see the impl comment; `table` holds 4 floats, broadcast to both halves;
        // vpermilps reads the low two bits of each index.
        unsafe {
            Avx2(_mm256_permutevar_ps(
                _mm256_broadcast_ps(&*table.as_ptr().cast::<__m128>()),
                i.0,
            ))
        }
    }
    #[inline(always)]
    fn lookup8(table: &[f32; 8], i: Avx2Int) -> Self {
        // SAFETY: see the impl comment; `table` holds 8 floats; vpermps reads the low
        // three bits of each index.
        unsafe {
            Avx2(_mm256_permutevar8x32_ps(
                _mm256_loadu_ps(table.as_ptr()),
                i.0,
            ))
        }
    }
    #[inline(always)]
    fn lookup16(table: &[f32; 16], i: Avx2Int) -> Self {
        // SAFETY: see the impl comment; `table` holds 16 floats. Each half of the table
        // is permuted by the low three bits; bit 3, moved to the sign, picks the half.
        unsafe {
            let lo = _mm256_permutevar8x32_ps(_mm256_loadu_ps(table.as_ptr()), i.0);
            let hi = _mm256_permutevar8x32_ps(_mm256_loadu_ps(table.as_ptr().add(8)), i.0);
            Avx2(_mm256_blendv_ps(
                lo,
                hi,
                _mm256_castsi256_ps(_mm256_slli_epi32::<28>(i.0)),
            ))
        }
    }
    #[inline(always)]
    fn store_u8(i: Avx2Int, s: &mut [u8]) {
        let s = &mut s[..8];
        // SAFETY: see the impl comment; `s` holds 8 bytes. The shuffle gathers each
        // 128-bit half's low bytes into its first four bytes; the permute joins them.
        unsafe {
            let bytes = _mm256_shuffle_epi8(
                i.0,
                _mm256_setr_epi8(
                    0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, 0, 4, 8, 12, -1,
                    -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
                ),
            );
            let joined =
                _mm256_permutevar8x32_epi32(bytes, _mm256_setr_epi32(0, 4, 0, 0, 0, 0, 0, 0));
            _mm_storel_epi64(s.as_mut_ptr().cast(), _mm256_castsi256_si128(joined))
        }
    }
    #[inline(always)]
    fn store_u8_4(i: [Avx2Int; 4], s: &mut [u8]) {
        let s = &mut s[..32];
        // SAFETY: see the impl comment; `s` holds 32 bytes. Each lane's low byte, taken
        // alone, passes both unsigned saturating packs unchanged; the packs interleave
        // the four vectors' 128-bit halves, which the permute puts back in order.
        unsafe {
            let low = _mm256_set1_epi32(0xff);
            let (a, b) = (_mm256_and_si256(i[0].0, low), _mm256_and_si256(i[1].0, low));
            let (c, d) = (_mm256_and_si256(i[2].0, low), _mm256_and_si256(i[3].0, low));
            let bytes = _mm256_packus_epi16(_mm256_packus_epi32(a, b), _mm256_packus_epi32(c, d));
            let ordered =
                _mm256_permutevar8x32_epi32(bytes, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
            _mm256_storeu_si256(s.as_mut_ptr().cast(), ordered)
        }
    }
    #[inline(always)]
    fn test_int(i: Avx2Int, bits: i32) -> __m256 {
        // SAFETY: see the impl comment.
        unsafe {
            let b = _mm256_set1_epi32(bits);
            _mm256_castsi256_ps(_mm256_cmpeq_epi32(_mm256_and_si256(i.0, b), b))
        }
    }
    #[inline(always)]
    fn mask_bits(m: __m256) -> u64 {
        // SAFETY: see the impl comment.
        unsafe { _mm256_movemask_ps(m) as u32 as u64 }
    }
    #[inline(always)]
    fn store_f16(self, s: &mut [u16]) {
        let s = &mut s[..8];
        // SAFETY: see the impl comment (the AVX2 entry points also enable F16C, which the
        // dispatcher checks); `s` holds 8 halves. vcvtps2ph with round to nearest even is
        // IEEE's conversion, as ggml's software one is for finite values.
        unsafe {
            let h = _mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(self.0);
            _mm_storeu_si128(s.as_mut_ptr().cast(), h)
        }
    }
    #[inline(always)]
    fn load_u8(s: &[u8]) -> Self {
        let s = &s[..8];
        // SAFETY: see the impl comment; `s` holds 8 bytes.
        unsafe {
            Avx2(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(
                s.as_ptr().cast(),
            ))))
        }
    }
    #[inline(always)]
    fn load_i8(s: &[i8]) -> Self {
        let s = &s[..8];
        // SAFETY: see the impl comment; `s` holds 8 bytes.
        unsafe {
            Avx2(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(
                s.as_ptr().cast(),
            ))))
        }
    }
    #[inline(always)]
    fn load_f16(s: &[u8]) -> Self {
        let s = &s[..16];
        // SAFETY: see the impl comment (F16C is enabled with AVX2); `s` holds 8 halves.
        // vcvtph2ps is exact, and quiets a NaN keeping its payload, as ggml's software
        // widening does.
        unsafe { Avx2(_mm256_cvtph_ps(_mm_loadu_si128(s.as_ptr().cast()))) }
    }
}

/// Transposes an 8x8 matrix of f32 held as 8 rows: interleaves of pairs of rows, then of
/// pairs of pairs, then the 128-bit halves.
///
/// # Safety
/// The CPU must support AVX.
#[inline(always)]
unsafe fn transpose8(r: &mut [Avx2; 8]) {
    // SAFETY: register-only intrinsics; the caller guarantees AVX.
    unsafe {
        let mut t = [_mm256_setzero_ps(); 8];
        for k in 0..4 {
            t[2 * k] = _mm256_unpacklo_ps(r[2 * k].0, r[2 * k + 1].0);
            t[2 * k + 1] = _mm256_unpackhi_ps(r[2 * k].0, r[2 * k + 1].0);
        }
        let mut u = [_mm256_setzero_ps(); 8];
        for k in 0..2 {
            let b = 4 * k;
            u[b] = _mm256_shuffle_ps::<0x44>(t[b], t[b + 2]);
            u[b + 1] = _mm256_shuffle_ps::<0xee>(t[b], t[b + 2]);
            u[b + 2] = _mm256_shuffle_ps::<0x44>(t[b + 1], t[b + 3]);
            u[b + 3] = _mm256_shuffle_ps::<0xee>(t[b + 1], t[b + 3]);
        }
        for j in 0..4 {
            r[j] = Avx2(_mm256_permute2f128_ps::<0x20>(u[j], u[4 + j]));
            r[4 + j] = Avx2(_mm256_permute2f128_ps::<0x31>(u[j], u[4 + j]));
        }
    }
}
