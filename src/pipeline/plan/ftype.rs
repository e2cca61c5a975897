//! llama.cpp's file types (`enum llama_ftype` in `llama.h`), the default tensor type of
//! each (`llama_ftype_get_default_type` in `llama-quant.cpp`), and the presets
//! `llama-quantize` accepts by name (its `QUANT_OPTIONS` table).

use quantforge_kernels::GgmlType;
use std::fmt;

macro_rules! file_types {
    ($( $(#[$doc:meta])* $variant:ident = $code:literal, $default:ident; )*) => {
        /// A llama.cpp file type (`enum llama_ftype`): the value written to
        /// `general.file_type`, and the mix of tensor types a quantization aims for.
        ///
        /// Variant names are the ones `llama-quantize` prints (`Q4_K_M` is
        /// `LLAMA_FTYPE_MOSTLY_Q4_K_M`, `F32` is `LLAMA_FTYPE_ALL_F32`).
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        #[repr(u32)]
        #[allow(non_camel_case_types)]
        pub enum FileType {
            $( $(#[$doc])* $variant = $code, )*
        }

        impl FileType {
            /// Every file type llama.cpp defines, in code order.
            pub const ALL: &'static [FileType] = &[ $( FileType::$variant, )* ];

            /// The `llama_ftype` value, as written to `general.file_type`.
            pub const fn code(self) -> u32 {
                self as u32
            }

            /// The file type with this code, if llama.cpp defines it (without the
            /// "guessed" bit 1024).
            pub fn from_code(code: u32) -> Option<FileType> {
                match code {
                    $( $code => Some(FileType::$variant), )*
                    _ => None,
                }
            }

            /// The name `llama-quantize` uses for it (`Q4_K_M`, `F16`).
            pub const fn name(self) -> &'static str {
                match self { $( FileType::$variant => stringify!($variant), )* }
            }

            /// The type every quantizable tensor gets before the mix rules apply
            /// (`llama_ftype_get_default_type`); `None` where llama.cpp refuses the file
            /// type as a target ("invalid output file type").
            pub const fn default_type(self) -> Option<GgmlType> {
                match self { $( FileType::$variant => file_types!(@default $default), )* }
            }
        }
    };
    (@default None) => { None };
    (@default $ty:ident) => { Some(GgmlType::$ty) };
}

file_types! {
    /// All tensors f32.
    F32 = 0, F32;
    /// Mostly f16.
    F16 = 1, F16;
    /// Mostly q4_0.
    Q4_0 = 2, Q4_0;
    /// Mostly q4_1.
    Q4_1 = 3, Q4_1;
    /// Mostly q8_0.
    Q8_0 = 7, Q8_0;
    /// Mostly q5_0.
    Q5_0 = 8, Q5_0;
    /// Mostly q5_1.
    Q5_1 = 9, Q5_1;
    /// q2_K mix.
    Q2_K = 10, Q2_K;
    /// q3_K mix, small.
    Q3_K_S = 11, Q3_K;
    /// q3_K mix, medium.
    Q3_K_M = 12, Q3_K;
    /// q3_K mix, large.
    Q3_K_L = 13, Q3_K;
    /// q4_K mix, small.
    Q4_K_S = 14, Q4_K;
    /// q4_K mix, medium.
    Q4_K_M = 15, Q4_K;
    /// q5_K mix, small.
    Q5_K_S = 16, Q5_K;
    /// q5_K mix, medium.
    Q5_K_M = 17, Q5_K;
    /// Mostly q6_K.
    Q6_K = 18, Q6_K;
    /// iq2_xxs mix.
    IQ2_XXS = 19, IQ2_XXS;
    /// iq2_xs mix.
    IQ2_XS = 20, IQ2_XS;
    /// q2_K mix, small (needs an importance matrix).
    Q2_K_S = 21, Q2_K;
    /// iq3_s mix, extra small.
    IQ3_XS = 22, IQ3_S;
    /// iq3_xxs mix.
    IQ3_XXS = 23, IQ3_XXS;
    /// iq1_s mix.
    IQ1_S = 24, IQ1_S;
    /// Mostly iq4_nl.
    IQ4_NL = 25, IQ4_NL;
    /// Mostly iq3_s.
    IQ3_S = 26, IQ3_S;
    /// iq3_s mix, medium.
    IQ3_M = 27, IQ3_S;
    /// iq2_xs mix, small.
    IQ2_S = 28, IQ2_XS;
    /// iq2_s mix, medium.
    IQ2_M = 29, IQ2_S;
    /// Mostly iq4_xs.
    IQ4_XS = 30, IQ4_XS;
    /// iq1_m mix.
    IQ1_M = 31, IQ1_M;
    /// Mostly bf16.
    BF16 = 32, BF16;
    /// Mostly tq1_0 (ternary).
    TQ1_0 = 36, TQ1_0;
    /// Mostly tq2_0 (ternary).
    TQ2_0 = 37, TQ2_0;
    /// MoE experts mxfp4, the rest q8_0.
    MXFP4_MOE = 38, MXFP4;
    /// nvfp4; llama.cpp reads it but cannot quantize to it.
    NVFP4 = 39, None;
    /// Mostly q1_0.
    Q1_0 = 40, Q1_0;
    /// Mostly q2_0.
    Q2_0 = 41, Q2_0;
}

impl fmt::Display for FileType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The bit llama.cpp sets in a file type it guessed from the tensor types because the
/// file had no `general.file_type` (`LLAMA_FTYPE_GUESSED`).
pub const FILE_TYPE_GUESSED: u32 = 1024;

/// One entry of `llama-quantize`'s table of target names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Preset {
    /// The name as `llama-quantize` lists it (`Q4_K_M`, `Q4_K`, `COPY`).
    pub name: &'static str,
    /// The file type it selects.
    pub ftype: FileType,
    /// `COPY`: every tensor is copied unchanged and `general.file_type` keeps the
    /// source's value (`only_copy`).
    pub copy: bool,
}

const fn preset(name: &'static str, ftype: FileType) -> Preset {
    Preset {
        name,
        ftype,
        copy: false,
    }
}

impl Preset {
    /// `llama-quantize`'s table, in its order (which decides what a number names: 12 is
    /// `Q3_K`, the alias listed before `Q3_K_M`; 0 is `F32`, listed before `COPY`).
    pub const ALL: &'static [Preset] = &[
        preset("Q1_0", FileType::Q1_0),
        preset("Q2_0", FileType::Q2_0),
        preset("Q4_0", FileType::Q4_0),
        preset("Q4_1", FileType::Q4_1),
        preset("MXFP4_MOE", FileType::MXFP4_MOE),
        preset("Q5_0", FileType::Q5_0),
        preset("Q5_1", FileType::Q5_1),
        preset("IQ2_XXS", FileType::IQ2_XXS),
        preset("IQ2_XS", FileType::IQ2_XS),
        preset("IQ2_S", FileType::IQ2_S),
        preset("IQ2_M", FileType::IQ2_M),
        preset("IQ1_S", FileType::IQ1_S),
        preset("IQ1_M", FileType::IQ1_M),
        preset("TQ1_0", FileType::TQ1_0),
        preset("TQ2_0", FileType::TQ2_0),
        preset("Q2_K", FileType::Q2_K),
        preset("Q2_K_S", FileType::Q2_K_S),
        preset("IQ3_XXS", FileType::IQ3_XXS),
        preset("IQ3_S", FileType::IQ3_S),
        preset("IQ3_M", FileType::IQ3_M),
        preset("Q3_K", FileType::Q3_K_M),
        preset("IQ3_XS", FileType::IQ3_XS),
        preset("Q3_K_S", FileType::Q3_K_S),
        preset("Q3_K_M", FileType::Q3_K_M),
        preset("Q3_K_L", FileType::Q3_K_L),
        preset("IQ4_NL", FileType::IQ4_NL),
        preset("IQ4_XS", FileType::IQ4_XS),
        preset("Q4_K", FileType::Q4_K_M),
        preset("Q4_K_S", FileType::Q4_K_S),
        preset("Q4_K_M", FileType::Q4_K_M),
        preset("Q5_K", FileType::Q5_K_M),
        preset("Q5_K_S", FileType::Q5_K_S),
        preset("Q5_K_M", FileType::Q5_K_M),
        preset("Q6_K", FileType::Q6_K),
        preset("Q8_0", FileType::Q8_0),
        preset("F16", FileType::F16),
        preset("BF16", FileType::BF16),
        preset("F32", FileType::F32),
        Preset {
            name: "COPY",
            ftype: FileType::F32,
            copy: true,
        },
    ];

    /// The preset a `llama-quantize` type argument names: a name compared
    /// case-insensitively (`q4_k_m`, `Q8_0`, `copy`), or a number (`15`), which names the
    /// first entry with that file type. `None` for anything else.
    pub fn parse(arg: &str) -> Option<Preset> {
        if let Some(p) = Self::ALL.iter().find(|p| p.name.eq_ignore_ascii_case(arg)) {
            return Some(*p);
        }
        let code = parse_leading_int(arg)?;
        Self::ALL
            .iter()
            .find(|p| i64::from(p.ftype.code()) == code)
            .copied()
    }
}

impl fmt::Display for Preset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name)
    }
}

/// The integer at the start of `s` as C++'s `std::stoi` reads it: leading whitespace, an
/// optional sign, at least one digit; trailing text is ignored. `None` when there is no
/// number or it does not fit an `int`.
pub fn parse_leading_int(s: &str) -> Option<i64> {
    let s = s.trim_start_matches([' ', '\t', '\n', '\x0b', '\x0c', '\r']);
    let (negative, rest) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
    if digits == 0 {
        return None;
    }
    let magnitude: i64 = rest[..digits].parse().ok()?;
    let value = if negative { -magnitude } else { magnitude };
    i32::try_from(value).ok().map(i64::from)
}
