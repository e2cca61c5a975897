//! Exact conversions of the 8-bit float formats safetensors can hold to f32, as 256-entry
//! tables built at compile time from each format's definition (every value of these
//! formats is exactly representable in f32, so there is no rounding anywhere):
//!
//! | format      | exponent bits | bias | infinities | NaN                      | -0  |
//! |-------------|---------------|------|------------|--------------------------|-----|
//! | F8_E4M3     | 4 (mant. 3)   | 7    | none       | S.1111.111               | yes |
//! | F8_E5M2     | 5 (mant. 2)   | 15   | S.11111.00 | S.11111.{01,10,11}       | yes |
//! | F8_E4M3FNUZ | 4 (mant. 3)   | 8    | none       | 0x80 only                | no  |
//! | F8_E5M2FNUZ | 5 (mant. 2)   | 16   | none       | 0x80 only                | no  |
//! | F8_E8M0     | 8 (no mant.)  | 127  | none       | 0xFF                     | no sign |
//!
//! These are the definitions of PyTorch's `float8_e4m3fn`, `float8_e5m2`,
//! `float8_e4m3fnuz`, `float8_e5m2fnuz` and `float8_e8m0fnu` (and of the OCP MX spec for
//! E8M0, where exponent 0 is 2^-127). NaNs come out as the quiet NaN with the input's sign.

/// How a format spends its all-ones exponent and its 0x80 pattern.
#[derive(Clone, Copy)]
enum Specials {
    /// IEEE-like: all-ones exponent is infinity (mantissa 0) or NaN.
    Ieee,
    /// "FN": no infinities; only all-ones exponent and mantissa is NaN.
    Finite,
    /// "FNUZ": no infinities, no negative zero; 0x80 is the only NaN.
    Fnuz,
}

const QUIET_NAN: u32 = 0x7FC0_0000;

/// f32 bits of the 8-bit value `x` with `man_bits` mantissa bits (the rest after the sign
/// are exponent) and exponent `bias`.
const fn minifloat_bits(x: u8, man_bits: u32, bias: i32, specials: Specials) -> u32 {
    let sign = ((x as u32) >> 7) << 31;
    let exp_bits = 7 - man_bits;
    let exp = ((x as u32) >> man_bits) & ((1 << exp_bits) - 1);
    let man = (x as u32) & ((1 << man_bits) - 1);
    let exp_max = (1 << exp_bits) - 1;
    match specials {
        Specials::Ieee if exp == exp_max => {
            return if man == 0 {
                sign | 0x7F80_0000
            } else {
                sign | QUIET_NAN
            };
        }
        Specials::Finite if exp == exp_max && man == (1 << man_bits) - 1 => {
            return sign | QUIET_NAN;
        }
        Specials::Fnuz if x == 0x80 => return QUIET_NAN,
        _ => {}
    }
    if exp == 0 {
        if man == 0 {
            return sign;
        }
        // man * 2^(1 - bias - man_bits): normalize on the highest set bit p of man.
        let p = 31 - man.leading_zeros();
        let f32_exp = (1 - bias - man_bits as i32 + p as i32 + 127) as u32;
        let f32_man = (man - (1 << p)) << (23 - p);
        return sign | (f32_exp << 23) | f32_man;
    }
    let f32_exp = (exp as i32 - bias + 127) as u32;
    sign | (f32_exp << 23) | (man << (23 - man_bits))
}

const fn minifloat_table(man_bits: u32, bias: i32, specials: Specials) -> [f32; 256] {
    let mut table = [0f32; 256];
    let mut i = 0;
    while i < 256 {
        table[i] = f32::from_bits(minifloat_bits(i as u8, man_bits, bias, specials));
        i += 1;
    }
    table
}

const fn e8m0_table() -> [f32; 256] {
    let mut table = [0f32; 256];
    let mut i = 0;
    while i < 256 {
        table[i] = f32::from_bits(match i {
            0 => 0x0040_0000, // 2^-127, an f32 subnormal
            255 => QUIET_NAN,
            e => (e as u32) << 23,
        });
        i += 1;
    }
    table
}

/// F8_E4M3 (`float8_e4m3fn`) values, indexed by byte.
pub static F8_E4M3: [f32; 256] = minifloat_table(3, 7, Specials::Finite);
/// F8_E5M2 (`float8_e5m2`) values, indexed by byte.
pub static F8_E5M2: [f32; 256] = minifloat_table(2, 15, Specials::Ieee);
/// F8_E4M3FNUZ (`float8_e4m3fnuz`) values, indexed by byte.
pub static F8_E4M3FNUZ: [f32; 256] = minifloat_table(3, 8, Specials::Fnuz);
/// F8_E5M2FNUZ (`float8_e5m2fnuz`) values, indexed by byte.
pub static F8_E5M2FNUZ: [f32; 256] = minifloat_table(2, 16, Specials::Fnuz);
/// F8_E8M0 (`float8_e8m0fnu`) values, indexed by byte.
pub static F8_E8M0: [f32; 256] = e8m0_table();

#[cfg(test)]
mod tests {
    use super::*;

    /// The naive definition, in f64: (-1)^s * 2^(e - bias) * (1 + m / 2^M), or the
    /// subnormal form for e = 0. Specials are checked separately.
    fn naive(x: u8, man_bits: u32, bias: i32) -> f64 {
        let s = if x & 0x80 != 0 { -1.0 } else { 1.0 };
        let e = ((x & 0x7F) >> man_bits) as i32;
        let m = (x & ((1 << man_bits) - 1)) as f64 / f64::from(1u32 << man_bits);
        if e == 0 {
            s * m * 2f64.powi(1 - bias)
        } else {
            s * (1.0 + m) * 2f64.powi(e - bias)
        }
    }

    fn check(table: &[f32; 256], man_bits: u32, bias: i32, is_special: impl Fn(u8) -> bool) {
        for x in 0..=255u8 {
            if is_special(x) {
                continue;
            }
            let want = naive(x, man_bits, bias);
            assert_eq!(f64::from(table[x as usize]), want, "byte {x:#04x}");
            assert_eq!(
                table[x as usize].is_sign_negative(),
                x & 0x80 != 0,
                "{x:#04x}"
            );
        }
    }

    #[test]
    fn e4m3() {
        check(&F8_E4M3, 3, 7, |x| x & 0x7F == 0x7F);
        assert!(F8_E4M3[0x7F].is_nan() && F8_E4M3[0xFF].is_nan());
        assert!(F8_E4M3[0xFF].is_sign_negative());
        assert_eq!(F8_E4M3[0x7E], 448.0);
        assert_eq!(F8_E4M3[0x01], 2f32.powi(-9));
        assert_eq!(F8_E4M3.iter().filter(|v| v.is_nan()).count(), 2);
    }

    #[test]
    fn e5m2() {
        check(&F8_E5M2, 2, 15, |x| x & 0x7C == 0x7C);
        assert_eq!(F8_E5M2[0x7C], f32::INFINITY);
        assert_eq!(F8_E5M2[0xFC], f32::NEG_INFINITY);
        assert!(F8_E5M2[0x7D].is_nan() && F8_E5M2[0xFF].is_nan());
        assert_eq!(F8_E5M2[0x7B], 57344.0);
        assert_eq!(F8_E5M2[0x01], 2f32.powi(-16));
    }

    #[test]
    fn fnuz() {
        check(&F8_E4M3FNUZ, 3, 8, |x| x == 0x80);
        check(&F8_E5M2FNUZ, 2, 16, |x| x == 0x80);
        for t in [&F8_E4M3FNUZ, &F8_E5M2FNUZ] {
            assert!(t[0x80].is_nan());
            assert_eq!(t.iter().filter(|v| v.is_nan()).count(), 1);
            assert_eq!(t[0].to_bits(), 0);
        }
        assert_eq!(F8_E4M3FNUZ[0x7F], 240.0);
        assert_eq!(F8_E5M2FNUZ[0x7F], 57344.0);
        assert_eq!(F8_E4M3FNUZ[0x01], 2f32.powi(-10));
        assert_eq!(F8_E5M2FNUZ[0x01], 2f32.powi(-17));
    }

    #[test]
    fn e8m0() {
        for e in 0..255u8 {
            assert_eq!(
                f64::from(F8_E8M0[e as usize]),
                2f64.powi(i32::from(e) - 127),
                "{e}"
            );
        }
        assert!(F8_E8M0[255].is_nan());
        assert_eq!(F8_E8M0[127], 1.0);
    }
}
