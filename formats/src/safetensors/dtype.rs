//! The element types a safetensors header can name, as upstream `safetensors` (main,
//! 0.8) defines them in `tensor.rs`: the names, the bit widths, and the declaration order,
//! which is increasing alignment and is the order the writer sorts by.

use std::fmt;

macro_rules! dtypes {
    ($( $(#[$doc:meta])* $variant:ident = $name:literal, $bits:literal; )*) => {
        /// A safetensors element type. The declaration order is upstream's (increasing
        /// alignment), so `Ord` sorts as the Hugging Face writer does.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum Dtype {
            $( $(#[$doc])* $variant, )*
        }

        impl Dtype {
            /// Every dtype, in upstream's declaration (alignment) order.
            pub const ALL: &'static [Dtype] = &[ $( Dtype::$variant, )* ];

            /// The name as it appears in a header (`"F16"`, `"F8_E4M3"`).
            pub const fn name(self) -> &'static str {
                match self { $( Dtype::$variant => $name, )* }
            }

            /// Bits one element occupies (4 and 6 for the sub-byte float types).
            pub const fn bit_size(self) -> usize {
                match self { $( Dtype::$variant => $bits, )* }
            }

            /// The dtype a header spells `name`, if any (names are case-sensitive).
            pub fn from_name(name: &str) -> Option<Dtype> {
                match name {
                    $( $name => Some(Dtype::$variant), )*
                    _ => None,
                }
            }
        }
    };
}

dtypes! {
    /// Boolean, one byte.
    Bool = "BOOL", 8;
    /// MX FP4 (E2M1), two per byte.
    F4 = "F4", 4;
    /// MX FP6 E2M3.
    F6E2M3 = "F6_E2M3", 6;
    /// MX FP6 E3M2.
    F6E3M2 = "F6_E3M2", 6;
    /// Unsigned byte.
    U8 = "U8", 8;
    /// Signed byte.
    I8 = "I8", 8;
    /// FP8 E5M2 (IEEE-like: infinities and NaNs).
    F8E5M2 = "F8_E5M2", 8;
    /// FP8 E4M3 "FN" (no infinities, one NaN pattern per sign, max 448).
    F8E4M3 = "F8_E4M3", 8;
    /// FP8 E8M0, the MX scale format (powers of two, 0xFF is NaN).
    F8E8M0 = "F8_E8M0", 8;
    /// FP8 E4M3 FNUZ (bias 8, no negative zero, 0x80 is NaN).
    F8E4M3Fnuz = "F8_E4M3FNUZ", 8;
    /// FP8 E5M2 FNUZ (bias 16, no negative zero, 0x80 is NaN).
    F8E5M2Fnuz = "F8_E5M2FNUZ", 8;
    /// Signed 16-bit integer.
    I16 = "I16", 16;
    /// Unsigned 16-bit integer.
    U16 = "U16", 16;
    /// IEEE half float.
    F16 = "F16", 16;
    /// bfloat16.
    BF16 = "BF16", 16;
    /// Signed 32-bit integer.
    I32 = "I32", 32;
    /// Unsigned 32-bit integer.
    U32 = "U32", 32;
    /// IEEE single float.
    F32 = "F32", 32;
    /// Complex number of two f32 parts.
    C64 = "C64", 64;
    /// IEEE double float.
    F64 = "F64", 64;
    /// Signed 64-bit integer.
    I64 = "I64", 64;
    /// Unsigned 64-bit integer.
    U64 = "U64", 64;
}

impl Dtype {
    /// Bytes of `elements` elements, or `None` when that overflows or (for the sub-byte
    /// types) does not end on a byte boundary; see [`Dtype::bits_of`].
    pub fn bytes_of(self, elements: usize) -> Option<usize> {
        let bits = self.bits_of(elements)?;
        bits.is_multiple_of(8).then_some(bits / 8)
    }

    /// Bits of `elements` elements, `None` on overflow.
    pub fn bits_of(self, elements: usize) -> Option<usize> {
        elements.checked_mul(self.bit_size())
    }
}

impl fmt::Display for Dtype {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Reads a header's dtype string; unknown names are errors that quote the name.
impl<'de> serde::Deserialize<'de> for Dtype {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Dtype, D::Error> {
        struct DtypeVisitor;
        impl serde::de::Visitor<'_> for DtypeVisitor {
            type Value = Dtype;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a dtype name such as \"F32\"")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Dtype, E> {
                Dtype::from_name(v).ok_or_else(|| E::custom(format!("unknown dtype `{v}`")))
            }
        }
        deserializer.deserialize_str(DtypeVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_order_is_alignment() {
        for &d in Dtype::ALL {
            assert_eq!(Dtype::from_name(d.name()), Some(d));
        }
        assert_eq!(Dtype::from_name("f32"), None);
        // Upstream's declaration order, which its writer sorts by (descending).
        let names: Vec<&str> = Dtype::ALL.iter().map(|d| d.name()).collect();
        let upstream = "BOOL F4 F6_E2M3 F6_E3M2 U8 I8 F8_E5M2 F8_E4M3 F8_E8M0 F8_E4M3FNUZ \
                        F8_E5M2FNUZ I16 U16 F16 BF16 I32 U32 F32 C64 F64 I64 U64";
        assert_eq!(names, upstream.split_whitespace().collect::<Vec<_>>());
        assert_eq!(Dtype::F4.bytes_of(3), None);
        assert_eq!(Dtype::F6E2M3.bytes_of(4), Some(3));
        assert_eq!(Dtype::U64.bytes_of(usize::MAX), None);
    }
}
