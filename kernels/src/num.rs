//! Number conversions exactly as ggml performs them: its software fp16 and bf16
//! conversions (`ggml-impl.h`), the E8M0 and UE4M3 scale formats, `nearest_int`, and the
//! float-to-integer casts of C on x86-64, including what they give for values out of range.

/// An fp16 value stored as its two little-endian bytes, so that blocks holding it have
/// alignment 1 and can be viewed in place in any byte buffer.
#[repr(transparent)]
#[derive(Clone, Copy, Default, PartialEq, Eq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct F16Le(pub [u8; 2]);

impl F16Le {
    /// The raw fp16 bits.
    #[inline(always)]
    pub fn bits(self) -> u16 {
        u16::from_le_bytes(self.0)
    }
    /// From raw fp16 bits.
    #[inline(always)]
    pub fn from_bits(bits: u16) -> Self {
        F16Le(bits.to_le_bytes())
    }
    /// Widened to f32 as `GGML_FP16_TO_FP32` does.
    #[inline(always)]
    pub fn to_f32(self) -> f32 {
        fp16_to_fp32(self.bits())
    }
    /// Rounded from f32 as `GGML_FP32_TO_FP16` does.
    #[inline(always)]
    pub fn from_f32(v: f32) -> Self {
        Self::from_bits(fp32_to_fp16(v))
    }
}

impl std::fmt::Debug for F16Le {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:#06x}({})", self.bits(), self.to_f32())
    }
}

/// fp16 bits to f32, the branch-free algorithm of `ggml_compute_fp16_to_fp32`: exact for
/// every finite value, and NaNs come out quieted by the final multiply, as in ggml.
#[inline(always)]
pub fn fp16_to_fp32(h: u16) -> f32 {
    let w = (h as u32) << 16;
    let sign = w & 0x8000_0000;
    let two_w = w.wrapping_add(w);
    let exp_offset: u32 = 0xE0 << 23;
    let exp_scale = f32::from_bits(0x0780_0000); // 2^-112
    let normalized = f32::from_bits((two_w >> 4) + exp_offset) * exp_scale;
    let magic_mask: u32 = 126 << 23;
    let denormalized = f32::from_bits((two_w >> 17) | magic_mask) - 0.5;
    let cutoff: u32 = 1 << 27;
    let bits = if two_w < cutoff {
        denormalized.to_bits()
    } else {
        normalized.to_bits()
    };
    f32::from_bits(sign | bits)
}

/// f32 to fp16 bits, round to nearest even, the algorithm of `ggml_compute_fp32_to_fp16`
/// (NaN becomes 0x7E00 with the sign kept).
#[inline(always)]
pub fn fp32_to_fp16(f: f32) -> u16 {
    let scale_to_inf = f32::from_bits(0x7780_0000); // 2^112
    let scale_to_zero = f32::from_bits(0x0880_0000); // 2^-110
    let mut base = (f.abs() * scale_to_inf) * scale_to_zero;
    let w = f.to_bits();
    let shl1_w = w.wrapping_add(w);
    let sign = w & 0x8000_0000;
    let mut bias = shl1_w & 0xFF00_0000;
    if bias < 0x7100_0000 {
        bias = 0x7100_0000;
    }
    base += f32::from_bits((bias >> 1) + 0x0780_0000);
    let bits = base.to_bits();
    let exp_bits = (bits >> 13) & 0x0000_7C00;
    let mantissa_bits = bits & 0x0000_0FFF;
    let nonsign = exp_bits + mantissa_bits;
    ((sign >> 16)
        | if shl1_w > 0xFF00_0000 {
            0x7E00
        } else {
            nonsign
        }) as u16
}

/// bf16 bits to f32 (a shift).
#[inline(always)]
pub fn bf16_to_fp32(h: u16) -> f32 {
    f32::from_bits((h as u32) << 16)
}

/// f32 to bf16 bits as `ggml_compute_fp32_to_bf16`: round to nearest even, NaN quieted.
#[inline(always)]
pub fn fp32_to_bf16(f: f32) -> u16 {
    let u = f.to_bits();
    if (u & 0x7fff_ffff) > 0x7f80_0000 {
        return ((u >> 16) | 64) as u16;
    }
    (u.wrapping_add(0x7fff + ((u >> 16) & 1)) >> 16) as u16
}

/// Half of the E8M0 scale `e`, as `ggml_e8m0_to_fp32_half` (MXFP4 values are stored doubled).
#[inline(always)]
pub fn e8m0_to_fp32_half(e: u8) -> f32 {
    let bits = if e < 2 {
        0x0020_0000u32 << e
    } else {
        ((e as u32) - 1) << 23
    };
    f32::from_bits(bits)
}

/// Half of the UE4M3 scale `x`, as `ggml_ue4m3_to_fp32`.
#[inline(always)]
pub fn ue4m3_to_fp32(x: u8) -> f32 {
    if x == 0 || x == 0x7F {
        return 0.0;
    }
    let exp = ((x >> 3) & 0xF) as i32;
    let man = (x & 0x7) as i32;
    let raw = if exp == 0 {
        // ldexpf(man, -9) is exact.
        man as f32 * f32::from_bits(0x3B00_0000)
    } else {
        ldexp_exact(1.0 + man as f32 / 8.0, exp - 7)
    };
    raw * 0.5
}

/// `ldexpf` for results that stay normal (the only ones `ue4m3_to_fp32` produces).
#[inline(always)]
fn ldexp_exact(v: f32, e: i32) -> f32 {
    v * f32::from_bits(((127 + e) as u32) << 23)
}

/// f32 to UE4M3 as `ggml_fp32_to_ue4m3`: clamp to 448, round half up on the mantissa.
#[inline(always)]
pub fn fp32_to_ue4m3(mut x: f32) -> u8 {
    if x.is_nan() || x <= 0.0 {
        return 0;
    }
    if x > 448.0 {
        x = 448.0;
    }
    let bits = x.to_bits();
    let fp32_exp = ((bits >> 23) & 0xFF) as i32 - 127;
    let fp32_man = ((bits >> 20) & 0x7) as i32;
    let mut exp = fp32_exp + 7;
    if exp <= 0 {
        let man = c_int(x * 512.0 + 0.5).min(7);
        if man < 1 {
            return 0;
        }
        return man as u8;
    }
    if exp >= 15 {
        return 0x7E;
    }
    let mut man = fp32_man + ((bits >> 19) & 1) as i32;
    if man > 7 {
        man = 0;
        exp += 1;
        if exp >= 15 {
            return 0x7E;
        }
    }
    ((exp << 3) | man) as u8
}

/// ggml's `nearest_int`: round to nearest, ties to even, through the 1.5*2^23 magic add.
/// Meant for |v| <= 4194303; outside that it returns what ggml's bit trick returns.
#[inline(always)]
pub fn nearest_int(v: f32) -> i32 {
    let val = v + 12_582_912.0;
    let i = val.to_bits() as i32;
    (i & 0x007f_ffff) - 0x0040_0000
}

/// C's `(int)v` on x86-64 (`cvttss2si`): truncation toward zero; NaN and values outside
/// the `int` range give `INT_MIN`, the "integer indefinite" value.
#[inline(always)]
pub fn c_int(v: f32) -> i32 {
    if v.is_nan() || !(-2_147_483_648.0..2_147_483_648.0).contains(&v) {
        i32::MIN
    } else {
        v as i32
    }
}

/// C's `(int8_t)v` / `(uint8_t)v` as gcc emits them on x86-64: a 32-bit truncating
/// conversion, then the low byte.
#[inline(always)]
pub fn c_byte(v: f32) -> u8 {
    c_int(v) as u8
}

/// glibc's `lroundf`: round half away from zero; NaN and values outside the `long` range
/// give `LONG_MIN`.
#[inline(always)]
pub fn c_lround(v: f32) -> i64 {
    if v.is_nan() || !(-9.223_372e18..9.223_372e18).contains(&v) {
        i64::MIN
    } else {
        v.round() as i64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fp16_matches_half_for_every_non_nan_pattern() {
        for h in 0..=u16::MAX {
            let ours = fp16_to_fp32(h);
            let theirs = half::f16::from_bits(h).to_f32();
            if theirs.is_nan() {
                assert!(ours.is_nan());
            } else {
                assert_eq!(ours.to_bits(), theirs.to_bits(), "{h:#x}");
                assert_eq!(fp32_to_fp16(ours), h, "{h:#x}");
            }
        }
    }

    #[test]
    fn fp32_to_fp16_rounds_to_nearest_even() {
        let mut x = 0x1234_5678u32;
        for _ in 0..200_000 {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            let f = f32::from_bits(x);
            if f.is_nan() {
                assert_eq!(fp32_to_fp16(f) & 0x7fff, 0x7e00);
                continue;
            }
            assert_eq!(fp32_to_fp16(f), half::f16::from_f32(f).to_bits(), "{f:e}");
            assert_eq!(fp32_to_bf16(f), half::bf16::from_f32(f).to_bits(), "{f:e}");
        }
    }

    #[test]
    fn nearest_int_ties_to_even() {
        assert_eq!(nearest_int(2.5), 2);
        assert_eq!(nearest_int(3.5), 4);
        assert_eq!(nearest_int(-2.5), -2);
        assert_eq!(nearest_int(-0.4), 0);
    }

    #[test]
    fn c_casts_match_x86_semantics() {
        assert_eq!(c_int(f32::NAN), i32::MIN);
        assert_eq!(c_int(f32::INFINITY), i32::MIN);
        assert_eq!(c_int(-3.9), -3);
        assert_eq!(c_byte(300.0), 44);
        assert_eq!(c_lround(2.5), 3);
        assert_eq!(c_lround(-2.5), -3);
        assert_eq!(c_lround(f32::NEG_INFINITY), i64::MIN);
    }

    #[test]
    fn ue4m3_round_trips_its_own_values() {
        // ggml's encoder saturates every value with exponent field 15 to 0x7E (448).
        assert_eq!(fp32_to_ue4m3(256.0), 0x7E);
        for x in 1u8..0x78 {
            let v = ue4m3_to_fp32(x) * 2.0;
            assert_eq!(fp32_to_ue4m3(v), x, "{x:#x} -> {v}");
        }
    }
}
