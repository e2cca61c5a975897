//! The table of codecs: one row per ggml type, saying what quantforge can do with it.
//!
//! A row names the type's scalar codec (the specification, in `scalar/`) and which of its
//! directions exist, whether ggml's quantizer for it reads an importance matrix, its SIMD
//! codec if any (in `simd/`, written once over `Lanes` and compiled for every ISA) and
//! whether that one finds NaN and infinity itself as it reads its input, and the relative
//! cost of quantizing one element, which only orders a pipeline's work. Everything that
//! asks what a type can do reads this table: the public `can_quantize`, `can_dequantize`,
//! `uses_imatrix`, `has_simd_path` and `quantize_cost`, and the kernels a [`crate::Codec`]
//! runs. The match over the types is generated without a catch-all arm, so a type added
//! to [`GgmlType`] without a row here does not compile.

use crate::GgmlType;
use crate::simd::{IsaEntry, Row};

/// Quantizes one row into exactly its bytes; false when a quantizer that finds NaN and
/// infinity itself met one.
///
/// # Safety
/// The CPU must support the ISA the function was made for.
pub(crate) type QuantizeFn = unsafe fn(Row<'_>, Option<&[f32]>, &mut [u8]) -> bool;

/// Dequantizes whole blocks into exactly as many values; the flag asks for streaming
/// stores (an output too large for the caches), where the path has them.
///
/// # Safety
/// The CPU must support the ISA the function was made for.
pub(crate) type DequantizeFn = unsafe fn(&[u8], &mut [f32], bool);

/// The index of the first NaN or infinity.
///
/// # Safety
/// The CPU must support the ISA the function was made for.
pub(crate) type FindNonFiniteFn = unsafe fn(&[f32]) -> Option<usize>;

/// The functions one type runs on one ISA.
#[derive(Clone, Copy)]
pub(crate) struct Kernels {
    /// The quantizer, if the type has one.
    pub(crate) quantize: Option<QuantizeFn>,
    /// The dequantizer, if the type has one.
    pub(crate) dequantize: Option<DequantizeFn>,
    /// The search for NaN and infinity, compiled for the same ISA.
    pub(crate) first_non_finite: FindNonFiniteFn,
    /// Whether `quantize` finds NaN and infinity itself (then no separate pass runs).
    pub(crate) finds_non_finite: bool,
}

/// What the table says of one type.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Capabilities {
    pub(crate) quantize: bool,
    pub(crate) dequantize: bool,
    pub(crate) imatrix: bool,
    pub(crate) requires_imatrix: bool,
    pub(crate) simd: bool,
    pub(crate) cost: f64,
}

/// Generates the lookups from the rows. Each row:
/// `TYPE: SCALAR, IMATRIX, SIMD, COST;` where SCALAR is `both(module)`,
/// `quantize(module)` or `dequantize(module)` (a module of `scalar/` with
/// `quantize_row(x, imatrix, blocks)` / `dequantize_row(blocks, y)`), `bytes(q, dq)` (two
/// functions over little-endian bytes) or `none()`; IMATRIX is `imatrix`, `required` (ggml's
/// quantizer refuses to run without one) or `-`; SIMD is
/// `-` or `(codec)` or `(codec, finds)`, a [`crate::simd::SimdCodec`] of `simd/`, with
/// `finds` when it finds NaN and infinity itself; COST is the relative cost of quantizing
/// an element (1 is about a widening pass), or `-` for a type without a quantizer.
macro_rules! codecs {
    ($( $ty:ident: $form:ident $args:tt, $im:tt, $simd:tt, $cost:tt; )*) => {
        /// What the table says of `ty`.
        pub(crate) const fn capabilities(ty: GgmlType) -> Capabilities {
            match ty {
                $( GgmlType::$ty => Capabilities {
                    quantize: codecs!(@has_q $form),
                    dequantize: codecs!(@has_dq $form),
                    imatrix: codecs!(@im $im),
                    requires_imatrix: codecs!(@im_required $im),
                    simd: codecs!(@has_simd $simd),
                    cost: codecs!(@cost $cost),
                }, )*
            }
        }

        /// The scalar kernels of `ty` (neither direction, for a type without any).
        pub(crate) fn scalar_kernels(ty: GgmlType) -> Kernels {
            let (quantize, dequantize): (Option<QuantizeFn>, Option<DequantizeFn>) = match ty {
                $( GgmlType::$ty => (codecs!(@q $form $args), codecs!(@dq $form $args)), )*
            };
            Kernels {
                quantize,
                dequantize,
                first_non_finite: find_non_finite_scalar,
                finds_non_finite: false,
            }
        }

        /// The kernels of `ty` on the ISA of `E`, for a type with a SIMD codec.
        pub(crate) fn simd_kernels<E: IsaEntry>(ty: GgmlType) -> Option<Kernels> {
            match ty {
                $( GgmlType::$ty => codecs!(@simd E $simd), )*
            }
        }
    };

    (@has_q both) => { true };
    (@has_q quantize) => { true };
    (@has_q bytes) => { true };
    (@has_q $other:ident) => { false };
    (@has_dq both) => { true };
    (@has_dq dequantize) => { true };
    (@has_dq bytes) => { true };
    (@has_dq $other:ident) => { false };
    (@im imatrix) => { true };
    (@im required) => { true };
    (@im -) => { false };
    (@im_required required) => { true };
    (@im_required $other:tt) => { false };
    (@has_simd -) => { false };
    (@has_simd $group:tt) => { true };
    (@cost -) => { 0.0 };
    (@cost $cost:literal) => { $cost };

    (@q both($m:ident)) => { codecs!(@q quantize($m)) };
    (@q quantize($m:ident)) => {
        Some(|row: Row<'_>, w: Option<&[f32]>, y: &mut [u8]| {
            crate::scalar::$m::quantize_row(row.values, w, bytemuck::cast_slice_mut(y));
            true
        })
    };
    (@q bytes($q:path, $dq:path)) => {
        Some(|row: Row<'_>, _: Option<&[f32]>, y: &mut [u8]| {
            $q(row.values, y);
            true
        })
    };
    (@q $other:ident $args:tt) => { None };
    (@dq both($m:ident)) => { codecs!(@dq dequantize($m)) };
    (@dq dequantize($m:ident)) => {
        Some(|x: &[u8], y: &mut [f32], _: bool| {
            crate::scalar::$m::dequantize_row(bytemuck::cast_slice(x), y)
        })
    };
    (@dq bytes($q:path, $dq:path)) => {
        Some(|x: &[u8], y: &mut [f32], _: bool| $dq(x, y))
    };
    (@dq $other:ident $args:tt) => { None };

    (@simd $e:ident -) => { None };
    (@simd $e:ident ($($codec:ident)::+)) => { codecs!(@simd_kernels $e ($($codec)::+) false) };
    (@simd $e:ident ($($codec:ident)::+, finds)) => {
        codecs!(@simd_kernels $e ($($codec)::+) true)
    };
    (@simd_kernels $e:ident ($($codec:ident)::+) $finds:literal) => {
        Some(Kernels {
            quantize: Some($e::quantize::<crate::simd::$($codec)::+>),
            dequantize: Some($e::dequantize::<crate::simd::$($codec)::+>),
            first_non_finite: $e::first_non_finite,
            finds_non_finite: $finds,
        })
    };
}

use crate::scalar::float;

codecs! {
    F32: bytes(float::quantize_f32, float::dequantize_f32), -, -, 1.0;
    F16: bytes(float::quantize_f16, float::dequantize_f16), -, (float::F16), 1.0;
    BF16: bytes(float::quantize_bf16, float::dequantize_bf16), -, (float::BF16), 1.0;
    Q1_0: both(q1_0), -, -, 20.0;
    Q2_0: both(q2_0), -, -, 20.0;
    Q4_0: both(q4_0), imatrix, (q4_0_q5_0_q8_0::Q4_0), 1.0;
    Q4_1: both(q4_1), imatrix, (q4_1_q5_1::Q4_1), 1.0;
    Q5_0: both(q5_0), imatrix, (q4_0_q5_0_q8_0::Q5_0), 1.0;
    Q5_1: both(q5_1), imatrix, (q4_1_q5_1::Q5_1), 1.0;
    Q8_0: both(q8_0), -, (q4_0_q5_0_q8_0::Q8_0, finds), 1.0;
    Q8_1: quantize(q8_1), -, -, 20.0;
    MXFP4: both(mxfp4), -, -, 20.0;
    NVFP4: both(nvfp4), -, -, 20.0;
    Q2_K: both(q2_k), imatrix, (q2_k::Q2_K), 15.0;
    Q3_K: both(q3_k), imatrix, (q3_k::Q3_K), 10.0;
    Q4_K: both(q4_k), imatrix, (q4_k_q5_k::Q4_K, finds), 15.0;
    Q5_K: both(q5_k), imatrix, (q4_k_q5_k::Q5_K, finds), 15.0;
    Q6_K: both(q6_k), imatrix, (q6_k::Q6_K), 8.0;
    Q8_K: both(q8_k), -, (q8_k::Q8_K), 1.0;
    TQ1_0: both(tq1_0), -, -, 20.0;
    TQ2_0: both(tq2_0), -, (tq2_0::TQ2_0, finds), 1.0;
    IQ4_NL: both(iq4_nl), imatrix, (iq4_nl_iq4_xs::IQ4_NL), 25.0;
    IQ4_XS: both(iq4_xs), imatrix, (iq4_nl_iq4_xs::IQ4_XS), 25.0;
    IQ2_XXS: both(iq2_xxs), required, (iq::IQ2_XXS), 200.0;
    IQ2_XS: both(iq2_xs), required, (iq::IQ2_XS), 200.0;
    IQ2_S: both(iq2_s), imatrix, (iq::IQ2_S), 200.0;
    IQ3_XXS: both(iq3_xxs), imatrix, (iq::IQ3_XXS), 200.0;
    IQ3_S: both(iq3_s), imatrix, (iq::IQ3_S), 200.0;
    IQ1_S: both(iq1_s), required, (iq::IQ1_S), 300.0;
    IQ1_M: both(iq1_m), imatrix, (iq::IQ1_M), 200.0;
    I8: none(), -, -, -;
    I16: none(), -, -, -;
    I32: none(), -, -, -;
    I64: none(), -, -, -;
    F64: none(), -, -, -;
}

/// [`crate::simd::first_non_finite`] as the scalar path runs it (compiled for the
/// baseline target).
fn find_non_finite_scalar(x: &[f32]) -> Option<usize> {
    crate::simd::first_non_finite(x)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Isa;

    /// The flags agree with the kernels each path really has.
    #[test]
    fn rows_agree_with_the_kernels() {
        for &ty in GgmlType::ALL {
            let r = capabilities(ty);
            let scalar = scalar_kernels(ty);
            assert_eq!(r.quantize, scalar.quantize.is_some(), "{ty}");
            assert_eq!(r.dequantize, scalar.dequantize.is_some(), "{ty}");
            let simd = Isa::Portable.kernels(ty);
            assert_eq!(r.simd, simd.is_some(), "{ty}");
            if let Some(k) = simd {
                // A SIMD codec has both directions, as its scalar specification.
                assert!(k.quantize.is_some() && k.dequantize.is_some(), "{ty}");
                assert!(r.quantize && r.dequantize, "{ty}");
            }
            assert!(
                !r.imatrix || r.quantize,
                "{ty}: imatrix without a quantizer"
            );
            assert!(
                !r.requires_imatrix || r.imatrix,
                "{ty}: requires what it ignores"
            );
            assert_eq!(r.quantize, r.cost > 0.0, "{ty}: a quantizer has a cost");
        }
    }
}
