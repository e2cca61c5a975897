//! The catalogue of ggml wire types, as ggml 0.26.0 defines them in `ggml.h`
//! (`enum ggml_type`) and `ggml.c` (`type_traits`): code, name, block size, bytes per block.

use crate::Error;
use std::fmt;

macro_rules! ggml_types {
    ($( $(#[$doc:meta])* $variant:ident = $code:literal, $name:literal, $block:literal, $bytes:literal, $quant:literal; )*) => {
        /// A ggml tensor type, with the numeric code it has in GGUF files.
        ///
        /// Codes 4, 5, 31-33 and 36-38 belong to types ggml removed; [`GgmlType::from_code`]
        /// rejects them by name.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[repr(u32)]
        #[allow(non_camel_case_types)]
        pub enum GgmlType {
            $( $(#[$doc])* $variant = $code, )*
        }

        impl GgmlType {
            /// Every type ggml 0.26.0 can hold in a tensor, in code order.
            pub const ALL: &'static [GgmlType] = &[ $( GgmlType::$variant, )* ];

            /// The numeric code (`enum ggml_type` value, as stored in GGUF).
            pub const fn code(self) -> u32 {
                self as u32
            }

            /// The name as ggml spells it (`q4_K`, `iq2_xxs`, `bf16`).
            pub const fn name(self) -> &'static str {
                match self { $( GgmlType::$variant => $name, )* }
            }

            /// Number of elements in one block (1 for plain scalar types).
            pub const fn block_size(self) -> usize {
                match self { $( GgmlType::$variant => $block, )* }
            }

            /// Bytes one block occupies.
            pub const fn type_size(self) -> usize {
                match self { $( GgmlType::$variant => $bytes, )* }
            }

            /// Whether ggml counts the type as quantized (block formats).
            pub const fn is_quantized(self) -> bool {
                match self { $( GgmlType::$variant => $quant, )* }
            }

            /// The type with the given code; removed and unknown codes are errors.
            pub fn from_code(code: u32) -> Result<GgmlType, Error> {
                match code {
                    $( $code => Ok(GgmlType::$variant), )*
                    _ => match removed_type_name(code) {
                        Some(name) => Err(Error::RemovedType { code, name }),
                        None => Err(Error::UnknownTypeCode(code)),
                    },
                }
            }
        }
    };
}

ggml_types! {
    /// 32-bit IEEE float.
    F32 = 0, "f32", 1, 4, false;
    /// 16-bit IEEE half float.
    F16 = 1, "f16", 1, 2, false;
    /// 4-bit, 32 per block, one f16 scale.
    Q4_0 = 2, "q4_0", 32, 18, true;
    /// 4-bit, 32 per block, f16 scale and minimum.
    Q4_1 = 3, "q4_1", 32, 20, true;
    /// 5-bit, 32 per block, one f16 scale.
    Q5_0 = 6, "q5_0", 32, 22, true;
    /// 5-bit, 32 per block, f16 scale and minimum.
    Q5_1 = 7, "q5_1", 32, 24, true;
    /// 8-bit, 32 per block, one f16 scale.
    Q8_0 = 8, "q8_0", 32, 34, true;
    /// 8-bit, 32 per block, f16 scale and f16 sum (an intermediate format of ggml-cpu).
    Q8_1 = 9, "q8_1", 32, 36, true;
    /// K-quant, 2-bit, 256 per super-block.
    Q2_K = 10, "q2_K", 256, 84, true;
    /// K-quant, 3-bit, 256 per super-block.
    Q3_K = 11, "q3_K", 256, 110, true;
    /// K-quant, 4-bit, 256 per super-block.
    Q4_K = 12, "q4_K", 256, 144, true;
    /// K-quant, 5-bit, 256 per super-block.
    Q5_K = 13, "q5_K", 256, 176, true;
    /// K-quant, 6-bit, 256 per super-block.
    Q6_K = 14, "q6_K", 256, 210, true;
    /// K-quant, 8-bit, 256 per super-block, f32 scale and block sums.
    Q8_K = 15, "q8_K", 256, 292, true;
    /// i-quant, 2.06 bits per weight.
    IQ2_XXS = 16, "iq2_xxs", 256, 66, true;
    /// i-quant, 2.31 bits per weight.
    IQ2_XS = 17, "iq2_xs", 256, 74, true;
    /// i-quant, 3.06 bits per weight.
    IQ3_XXS = 18, "iq3_xxs", 256, 98, true;
    /// i-quant, 1.56 bits per weight.
    IQ1_S = 19, "iq1_s", 256, 50, true;
    /// 4-bit non-linear, 32 per block.
    IQ4_NL = 20, "iq4_nl", 32, 18, true;
    /// i-quant, 3.44 bits per weight.
    IQ3_S = 21, "iq3_s", 256, 110, true;
    /// i-quant, 2.5 bits per weight.
    IQ2_S = 22, "iq2_s", 256, 82, true;
    /// 4-bit non-linear, 256 per super-block with 6-bit sub-block scales.
    IQ4_XS = 23, "iq4_xs", 256, 136, true;
    /// 8-bit signed integer.
    I8 = 24, "i8", 1, 1, false;
    /// 16-bit signed integer.
    I16 = 25, "i16", 1, 2, false;
    /// 32-bit signed integer.
    I32 = 26, "i32", 1, 4, false;
    /// 64-bit signed integer.
    I64 = 27, "i64", 1, 8, false;
    /// 64-bit IEEE float.
    F64 = 28, "f64", 1, 8, false;
    /// i-quant, 1.75 bits per weight.
    IQ1_M = 29, "iq1_m", 256, 56, true;
    /// bfloat16.
    BF16 = 30, "bf16", 1, 2, false;
    /// Ternary, 1.69 bits per weight.
    TQ1_0 = 34, "tq1_0", 256, 54, true;
    /// Ternary, 2.06 bits per weight.
    TQ2_0 = 35, "tq2_0", 256, 66, true;
    /// Microscaling FP4 (E2M1 values, E8M0 scale), 32 per block.
    MXFP4 = 39, "mxfp4", 32, 17, true;
    /// NVIDIA FP4 (E2M1 values, four UE4M3 scales), 64 per block.
    NVFP4 = 40, "nvfp4", 64, 36, true;
    /// 1-bit signs, 128 per block, one f16 scale.
    Q1_0 = 41, "q1_0", 128, 18, true;
    /// 2-bit, 64 per block, one f16 scale.
    Q2_0 = 42, "q2_0", 64, 18, true;
}

/// The name of a type ggml removed, for the codes it left unused.
fn removed_type_name(code: u32) -> Option<&'static str> {
    Some(match code {
        4 => "q4_2",
        5 => "q4_3",
        31 => "q4_0_4_4",
        32 => "q4_0_4_8",
        33 => "q4_0_8_8",
        36 => "iq4_nl_4_4",
        37 => "iq4_nl_4_8",
        38 => "iq4_nl_8_8",
        _ => return None,
    })
}

impl GgmlType {
    /// The type with the given name, compared case-insensitively (`Q4_K`, `q4_k`, `BF16`).
    /// Names of removed types are errors that say so.
    pub fn from_name(name: &str) -> Result<GgmlType, Error> {
        if let Some(ty) = Self::ALL
            .iter()
            .find(|t| t.name().eq_ignore_ascii_case(name))
        {
            return Ok(*ty);
        }
        for code in [4, 5, 31, 32, 33, 36, 37, 38] {
            let removed = removed_type_name(code).unwrap_or_default();
            if removed.eq_ignore_ascii_case(name) {
                return Err(Error::RemovedType {
                    code,
                    name: removed,
                });
            }
        }
        Err(Error::UnknownTypeName(name.to_string()))
    }

    /// Bytes a row of `n` elements occupies; an error unless `n` is a whole number of blocks.
    pub fn row_size(self, n: usize) -> Result<usize, Error> {
        let block = self.block_size();
        if !n.is_multiple_of(block) {
            return Err(Error::NotBlockMultiple { ty: self, n, block });
        }
        (n / block)
            .checked_mul(self.type_size())
            .ok_or(Error::TooLarge { ty: self, n })
    }

    /// Bits per weight (`type_size * 8 / block_size`).
    pub fn bits_per_weight(self) -> f64 {
        self.type_size() as f64 * 8.0 / self.block_size() as f64
    }
}

impl fmt::Display for GgmlType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for GgmlType {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self, Error> {
        GgmlType::from_name(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip_and_names_are_unique() {
        for &ty in GgmlType::ALL {
            assert_eq!(GgmlType::from_code(ty.code()).unwrap(), ty);
            assert_eq!(GgmlType::from_name(ty.name()).unwrap(), ty);
            assert_eq!(
                GgmlType::from_name(&ty.name().to_ascii_uppercase()).unwrap(),
                ty
            );
        }
        assert_eq!(GgmlType::ALL.len(), 35);
    }

    #[test]
    fn removed_and_unknown_codes_are_named() {
        for code in [4, 5, 31, 32, 33, 36, 37, 38] {
            let err = GgmlType::from_code(code).unwrap_err();
            assert!(matches!(err, Error::RemovedType { .. }), "{code}: {err}");
        }
        assert!(matches!(
            GgmlType::from_code(43),
            Err(Error::UnknownTypeCode(43))
        ));
        assert!(matches!(
            GgmlType::from_name("Q4_0_4_4"),
            Err(Error::RemovedType { code: 31, .. })
        ));
        assert!(matches!(
            GgmlType::from_name("q9_K"),
            Err(Error::UnknownTypeName(_))
        ));
    }

    #[test]
    fn row_size_requires_whole_blocks() {
        assert_eq!(GgmlType::Q4_K.row_size(512).unwrap(), 288);
        assert_eq!(GgmlType::F16.row_size(3).unwrap(), 6);
        assert!(matches!(
            GgmlType::Q4_K.row_size(300),
            Err(Error::NotBlockMultiple { block: 256, .. })
        ));
        assert!(GgmlType::Q8_0.row_size(usize::MAX - 31).is_err());
    }
}
