//! NEON: 4 f32 lanes. NEON is part of the aarch64 baseline, so it is chosen at compile
//! time; AArch64 floating point is IEEE with subnormals (FPCR.FZ is off under Linux).

use crate::simd::lanes::Lanes;
use std::arch::aarch64::*;

/// Four f32 lanes in a `float32x4_t`.
#[derive(Clone, Copy)]
pub(in crate::isa) struct Neon(float32x4_t);

/// Four i32 lanes.
#[derive(Clone, Copy)]
pub(in crate::isa) struct NeonInt(int32x4_t);

// SAFETY (every `unsafe` block below): NEON is always present on aarch64 targets with the
// `neon` feature (checked by `Isa::is_supported` before any codec runs this code); loads
// and stores go through slices whose length is checked first.
impl Lanes for Neon {
    const N: usize = 4;
    type Mask = uint32x4_t;
    type Int = NeonInt;
    type Narrow = Neon;

    #[inline(always)]
    fn splat(v: f32) -> Self {
        // SAFETY: see the impl comment.
        unsafe { Neon(vdupq_n_f32(v)) }
    }
    #[inline(always)]
    fn load(s: &[f32]) -> Self {
        let s = &s[..4];
        // SAFETY: see the impl comment; `s` holds 4 floats.
        unsafe { Neon(vld1q_f32(s.as_ptr())) }
    }
    #[inline(always)]
    fn store(self, s: &mut [f32]) {
        let s = &mut s[..4];
        // SAFETY: see the impl comment; `s` holds 4 floats.
        unsafe { vst1q_f32(s.as_mut_ptr(), self.0) }
    }
    #[inline(always)]
    fn add(self, o: Self) -> Self {
        // SAFETY: see the impl comment.
        unsafe { Neon(vaddq_f32(self.0, o.0)) }
    }
    #[inline(always)]
    fn sub(self, o: Self) -> Self {
        // SAFETY: see the impl comment.
        unsafe { Neon(vsubq_f32(self.0, o.0)) }
    }
    #[inline(always)]
    fn mul(self, o: Self) -> Self {
        // SAFETY: see the impl comment.
        unsafe { Neon(vmulq_f32(self.0, o.0)) }
    }
    #[inline(always)]
    fn div(self, o: Self) -> Self {
        // SAFETY: see the impl comment.
        unsafe { Neon(vdivq_f32(self.0, o.0)) }
    }
    #[inline(always)]
    fn sqrt(self) -> Self {
        // SAFETY: see the impl comment.
        unsafe { Neon(vsqrtq_f32(self.0)) }
    }
    #[inline(always)]
    fn abs(self) -> Self {
        // SAFETY: see the impl comment.
        unsafe { Neon(vabsq_f32(self.0)) }
    }
    #[inline(always)]
    fn xor_bits(self, o: Self) -> Self {
        // SAFETY: see the impl comment.
        unsafe {
            Neon(vreinterpretq_f32_u32(veorq_u32(
                vreinterpretq_u32_f32(self.0),
                vreinterpretq_u32_f32(o.0),
            )))
        }
    }
    #[inline(always)]
    fn max(self, o: Self) -> Self {
        // SAFETY: see the impl comment.
        unsafe { Neon(vmaxq_f32(self.0, o.0)) }
    }
    #[inline(always)]
    fn min(self, o: Self) -> Self {
        // SAFETY: see the impl comment.
        unsafe { Neon(vminq_f32(self.0, o.0)) }
    }
    #[inline(always)]
    fn max_bits(self, o: Self) -> Self {
        // SAFETY: see the impl comment.
        unsafe {
            Neon(vreinterpretq_f32_s32(vmaxq_s32(
                vreinterpretq_s32_f32(self.0),
                vreinterpretq_s32_f32(o.0),
            )))
        }
    }
    #[inline(always)]
    fn min_bits(self, hi: Self) -> Self {
        // SAFETY: see the impl comment.
        unsafe {
            Neon(vreinterpretq_f32_s32(vminq_s32(
                vreinterpretq_s32_f32(self.0),
                vreinterpretq_s32_f32(hi.0),
            )))
        }
    }
    #[inline(always)]
    fn hmax(self) -> f32 {
        // SAFETY: see the impl comment.
        unsafe { vmaxvq_f32(self.0) }
    }
    #[inline(always)]
    fn round_even(self) -> Self {
        // SAFETY: see the impl comment.
        unsafe { Neon(vrndnq_f32(self.0)) }
    }
    #[inline(always)]
    fn lt(self, o: Self) -> uint32x4_t {
        // SAFETY: see the impl comment.
        unsafe { vcltq_f32(self.0, o.0) }
    }
    #[inline(always)]
    fn gt(self, o: Self) -> uint32x4_t {
        // SAFETY: see the impl comment.
        unsafe { vcgtq_f32(self.0, o.0) }
    }
    #[inline(always)]
    fn eq(self, o: Self) -> uint32x4_t {
        // SAFETY: see the impl comment.
        unsafe { vceqq_f32(self.0, o.0) }
    }
    #[inline(always)]
    fn any(m: uint32x4_t) -> bool {
        // SAFETY: see the impl comment.
        unsafe { vmaxvq_u32(m) != 0 }
    }
    #[inline(always)]
    fn and(a: uint32x4_t, b: uint32x4_t) -> uint32x4_t {
        // SAFETY: see the impl comment.
        unsafe { vandq_u32(a, b) }
    }
    #[inline(always)]
    fn and_not(a: uint32x4_t, b: uint32x4_t) -> uint32x4_t {
        // SAFETY: see the impl comment.
        unsafe { vbicq_u32(a, b) }
    }
    #[inline(always)]
    fn or(a: uint32x4_t, b: uint32x4_t) -> uint32x4_t {
        // SAFETY: see the impl comment.
        unsafe { vorrq_u32(a, b) }
    }
    #[inline(always)]
    fn select(m: uint32x4_t, a: Self, b: Self) -> Self {
        // SAFETY: see the impl comment.
        unsafe { Neon(vbslq_f32(m, a.0, b.0)) }
    }
    #[inline(always)]
    fn nearest_int(self) -> NeonInt {
        // SAFETY: see the impl comment.
        unsafe {
            let val = vreinterpretq_s32_f32(vaddq_f32(self.0, vdupq_n_f32(12_582_912.0)));
            NeonInt(vsubq_s32(
                vandq_s32(val, vdupq_n_s32(0x007f_ffff)),
                vdupq_n_s32(0x0040_0000),
            ))
        }
    }
    #[inline(always)]
    fn c_int(self) -> NeonInt {
        // SAFETY: see the impl comment. fcvtzs saturates and maps NaN to 0; C on x86-64
        // (the behaviour the scalar code pins down) gives INT_MIN for all of those.
        unsafe {
            let t = vcvtq_s32_f32(self.0);
            let in_range = vandq_u32(
                vcgeq_f32(self.0, vdupq_n_f32(-2_147_483_648.0)),
                vcltq_f32(self.0, vdupq_n_f32(2_147_483_648.0)),
            );
            NeonInt(vbslq_s32(in_range, t, vdupq_n_s32(i32::MIN)))
        }
    }
    #[inline(always)]
    fn clamp_int(i: NeonInt, lo: i32, hi: i32) -> NeonInt {
        // SAFETY: see the impl comment.
        unsafe { NeonInt(vminq_s32(vmaxq_s32(i.0, vdupq_n_s32(lo)), vdupq_n_s32(hi))) }
    }
    #[inline(always)]
    fn int_to_f32(i: NeonInt) -> Self {
        // SAFETY: see the impl comment.
        unsafe { Neon(vcvtq_f32_s32(i.0)) }
    }
    #[inline(always)]
    fn store_int(i: NeonInt, s: &mut [i32]) {
        let s = &mut s[..4];
        // SAFETY: see the impl comment; `s` holds 4 ints.
        unsafe { vst1q_s32(s.as_mut_ptr(), i.0) }
    }
    #[inline(always)]
    fn load_u16(s: &[u8]) -> NeonInt {
        let s = &s[..8];
        // SAFETY: see the impl comment; `s` holds 4 halves (vld1_u8 has no alignment
        // requirement).
        unsafe {
            NeonInt(vreinterpretq_s32_u32(vmovl_u16(vreinterpret_u16_u8(
                vld1_u8(s.as_ptr()),
            ))))
        }
    }
    #[inline(always)]
    fn shr_int(i: NeonInt, n: u32) -> NeonInt {
        // SAFETY: see the impl comment. A negative count shifts right.
        unsafe {
            NeonInt(vreinterpretq_s32_u32(vshlq_u32(
                vreinterpretq_u32_s32(i.0),
                vdupq_n_s32(-(n as i32)),
            )))
        }
    }
    #[inline(always)]
    fn sext8(i: NeonInt) -> NeonInt {
        // SAFETY: see the impl comment.
        unsafe { NeonInt(vshrq_n_s32::<24>(vshlq_n_s32::<24>(i.0))) }
    }
    #[inline(always)]
    fn store_u8(i: NeonInt, s: &mut [u8]) {
        let mut ints = [0i32; 4];
        Self::store_int(i, &mut ints);
        for (b, v) in s[..4].iter_mut().zip(ints) {
            *b = v as u8;
        }
    }
    #[inline(always)]
    fn test_int(i: NeonInt, bits: i32) -> uint32x4_t {
        // SAFETY: see the impl comment.
        unsafe {
            let b = vdupq_n_s32(bits);
            vceqq_s32(vandq_s32(i.0, b), b)
        }
    }
    #[inline(always)]
    fn mask_bits(m: uint32x4_t) -> u64 {
        // SAFETY: see the impl comment; the weights are in a 4-lane array.
        unsafe {
            let weights = [1u32, 2, 4, 8];
            u64::from(vaddvq_u32(vandq_u32(m, vld1q_u32(weights.as_ptr()))))
        }
    }
    #[inline(always)]
    fn store_f16(self, s: &mut [u16]) {
        let mut lanes = [0.0f32; 4];
        self.store(&mut lanes);
        for (h, v) in s[..4].iter_mut().zip(lanes) {
            *h = crate::num::fp32_to_fp16(v);
        }
    }
    #[inline(always)]
    fn load_u8(s: &[u8]) -> Self {
        let word = u32::from_le_bytes([s[0], s[1], s[2], s[3]]);
        // SAFETY: see the impl comment; register operations only.
        unsafe {
            let bytes = vcreate_u8(u64::from(word));
            Neon(vcvtq_f32_u32(vmovl_u16(vget_low_u16(vmovl_u8(bytes)))))
        }
    }
    #[inline(always)]
    fn load_i8(s: &[i8]) -> Self {
        let word = u32::from_le_bytes([s[0], s[1], s[2], s[3]].map(|b| b as u8));
        // SAFETY: see the impl comment; register operations only.
        unsafe {
            let bytes = vcreate_s8(u64::from(word));
            Neon(vcvtq_f32_s32(vmovl_s16(vget_low_s16(vmovl_s8(bytes)))))
        }
    }
    #[inline(always)]
    fn load_transposed_every(x: &[f32], stride: usize, out: &mut [Self], step: usize, n: usize) {
        let whole = n / 4 * 4;
        for c in 0..whole / 4 {
            let row = |j: usize| &x[j * stride + 4 * c..];
            let r = [
                Self::load(row(0)),
                Self::load(row(1)),
                Self::load(row(2)),
                Self::load(row(3)),
            ];
            // SAFETY: see the impl comment; register operations only. Pairs of rows are
            // interleaved (`trn1`/`trn2`), then their 64-bit halves recombined.
            let t = unsafe {
                let a = vtrnq_f32(r[0].0, r[1].0);
                let b = vtrnq_f32(r[2].0, r[3].0);
                [
                    vcombine_f32(vget_low_f32(a.0), vget_low_f32(b.0)),
                    vcombine_f32(vget_low_f32(a.1), vget_low_f32(b.1)),
                    vcombine_f32(vget_high_f32(a.0), vget_high_f32(b.0)),
                    vcombine_f32(vget_high_f32(a.1), vget_high_f32(b.1)),
                ]
            };
            for (k, v) in t.into_iter().enumerate() {
                out[(4 * c + k) * step] = Neon(v);
            }
        }
        crate::simd::lanes::gather_columns(x, stride, whole, out, step, n);
    }
    #[inline(always)]
    fn load_f16(s: &[u8]) -> Self {
        let mut lanes = [0.0f32; 4];
        for (v, b) in lanes.iter_mut().zip(s[..8].chunks_exact(2)) {
            *v = crate::num::fp16_to_fp32(u16::from_le_bytes([b[0], b[1]]));
        }
        Self::load(&lanes)
    }
}
