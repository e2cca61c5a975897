//! Live parity: quantforge's scalar codecs against the real ggml, byte for byte.
//!
//! For every type and direction, proptest generates adversarial rows (zeros, constants,
//! one huge outlier, +v/-v ties for the maximum, values on k.5 after scaling, subnormals,
//! magnitudes from 1e-30 to 1e30, and rows mixing all of these block by block) and random
//! importance matrices (zeros included). `QF_PARITY_CASES` sets the number of cases per
//! test (each case holds `ROWS` rows); the default gives 2,000 rows per type and direction.

use ggml_ref as ggml;
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

#[path = "../../kernels/tests/common/mod.rs"]
mod common;
use common::*;
use quantforge_kernels::{GgmlType, Isa};

fn config() -> ProptestConfig {
    let cases = std::env::var("QF_PARITY_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(500);
    ProptestConfig {
        cases,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

/// Row lengths that exercise one and several blocks of the type.
fn row_lengths(ty: GgmlType) -> Vec<usize> {
    let b = ty.block_size().max(32);
    vec![b, 2 * b, 3 * b]
}

fn ours_quantize(ty: GgmlType, x: &[f32], n: usize, w: Option<&[f32]>) -> Vec<u8> {
    let mut dst = vec![0u8; x.len() / n * ty.row_size(n).unwrap()];
    quantforge_kernels::Codec::new(ty, Isa::Scalar)
        .unwrap()
        .quantize(x, n, w, &mut dst)
        .unwrap();
    dst
}

fn check_quantize(
    ty: GgmlType,
    x: &[f32],
    n: usize,
    w: Option<&[f32]>,
) -> Result<(), TestCaseError> {
    let theirs = ggml::quantize_chunk(ty.code(), x, n, w);
    let ours = ours_quantize(ty, x, n, w);
    if ours != theirs {
        let bs = ty.type_size();
        let first = ours
            .chunks(bs)
            .zip(theirs.chunks(bs))
            .position(|(a, b)| a != b)
            .unwrap();
        let per_block = ty.block_size();
        return Err(TestCaseError::fail(format!(
            "{ty} n_per_row={n} imatrix={}: block {first} differs\n ours  {:02x?}\n ggml  {:02x?}\n input {:?}\n weights {:?}",
            w.is_some(),
            &ours[first * bs..(first + 1) * bs],
            &theirs[first * bs..(first + 1) * bs],
            &x[first * per_block..(first + 1) * per_block],
            w.map(|w| {
                let r = (first * per_block) % n;
                w[r..r + per_block].to_vec()
            })
        )));
    }
    Ok(())
}

fn check_dequantize(ty: GgmlType, bytes: &[u8]) -> Result<(), TestCaseError> {
    let theirs = ggml::dequantize_row(ty.code(), bytes).expect("ggml dequantizes this type");
    let mut ours = vec![0f32; theirs.len()];
    quantforge_kernels::Codec::new(ty, Isa::Scalar)
        .unwrap()
        .dequantize(bytes, &mut ours)
        .unwrap();
    if let Some(i) = ours
        .iter()
        .zip(&theirs)
        .position(|(a, b)| a.to_bits() != b.to_bits())
    {
        let b = i / ty.block_size();
        let bs = ty.type_size();
        return Err(TestCaseError::fail(format!(
            "{ty}: element {i} ours {:e} ({:#x}) ggml {:e} ({:#x}); block {:02x?}",
            ours[i],
            ours[i].to_bits(),
            theirs[i],
            theirs[i].to_bits(),
            &bytes[b * bs..(b + 1) * bs]
        )));
    }
    Ok(())
}

macro_rules! quantize_parity {
    ($($name:ident: $ty:ident),* $(,)?) => { $(
        mod $name {
            use super::*;
            const TY: GgmlType = GgmlType::$ty;

            fn lengths() -> impl Strategy<Value = usize> {
                prop::sample::select(row_lengths(TY))
            }

            proptest! {
                #![proptest_config(config())]

                #[test]
                fn without_imatrix((n, x) in lengths().prop_flat_map(|n| (Just(n), rows(n)))) {
                    if quantforge_kernels::requires_imatrix(TY) {
                        // ggml aborts the process; quantforge refuses with an error.
                        let mut dst = vec![0u8; x.len() / n * TY.row_size(n).unwrap()];
                        let r = quantforge_kernels::Codec::new(TY, Isa::Scalar)
                            .unwrap()
                            .quantize(&x, n, None, &mut dst);
                        prop_assert!(
                            matches!(r, Err(quantforge_kernels::Error::ImatrixRequired { .. })),
                            "expected ImatrixRequired, got {:?}",
                            r
                        );
                    } else {
                        check_quantize(TY, &x, n, None)?;
                    }
                }

                #[test]
                fn with_imatrix((n, x, w) in lengths().prop_flat_map(|n| (Just(n), rows(n), imatrix(n)))) {
                    check_quantize(TY, &x, n, Some(&w))?;
                }
            }
        }
    )* };
}

macro_rules! dequantize_parity {
    ($($name:ident: $ty:ident),* $(,)?) => { $(
        mod $name {
            use super::*;
            const TY: GgmlType = GgmlType::$ty;

            fn lengths() -> impl Strategy<Value = usize> {
                prop::sample::select(row_lengths(TY))
            }

            fn source_rows(n: usize) -> BoxedStrategy<Vec<f32>> {
                if quantforge_kernels::can_quantize(TY) { rows(n).boxed() } else { tame_rows(n).boxed() }
            }

            proptest! {
                #![proptest_config(config())]

                #[test]
                fn random_blocks(bytes in prop::collection::vec(any::<u8>(), TY.type_size() * ROWS * 2)) {
                    check_dequantize(TY, &bytes)?;
                }

                #[test]
                fn ggml_blocks((n, x, w) in lengths().prop_flat_map(|n| (Just(n), source_rows(n), imatrix(n)))) {
                    // Blocks as ggml's own quantizer writes them (i-quants need the imatrix).
                    let bytes = ggml::quantize_chunk(TY.code(), &x, n, Some(&w));
                    check_dequantize(TY, &bytes)?;
                }
            }
        }
    )* };
}

/// Every type quantforge quantizes, against `ggml_quantize_chunk`.
mod quantize {
    use super::*;
    quantize_parity! {
        f16: F16, bf16: BF16,
        q1_0: Q1_0, q2_0: Q2_0, q4_0: Q4_0, q4_1: Q4_1, q5_0: Q5_0, q5_1: Q5_1, q8_0: Q8_0,
        q8_1: Q8_1, mxfp4: MXFP4, nvfp4: NVFP4, tq1_0: TQ1_0, tq2_0: TQ2_0,
        q2_k: Q2_K, q3_k: Q3_K, q4_k: Q4_K, q5_k: Q5_K, q6_k: Q6_K, q8_k: Q8_K,
        iq4_nl: IQ4_NL, iq4_xs: IQ4_XS,
    }
}

/// Every type quantforge dequantizes, against ggml's `to_float`.
mod dequantize {
    use super::*;
    dequantize_parity! {
        f16: F16, bf16: BF16,
        q1_0: Q1_0, q2_0: Q2_0, q4_0: Q4_0, q4_1: Q4_1, q5_0: Q5_0, q5_1: Q5_1, q8_0: Q8_0,
        mxfp4: MXFP4, nvfp4: NVFP4, tq1_0: TQ1_0, tq2_0: TQ2_0,
        q2_k: Q2_K, q3_k: Q3_K, q4_k: Q4_K, q5_k: Q5_K, q6_k: Q6_K, q8_k: Q8_K,
        iq4_nl: IQ4_NL, iq4_xs: IQ4_XS,
        iq2_xxs: IQ2_XXS, iq2_xs: IQ2_XS, iq2_s: IQ2_S, iq3_xxs: IQ3_XXS, iq3_s: IQ3_S,
        iq1_s: IQ1_S, iq1_m: IQ1_M,
    }
}

/// The lists above cover every type the kernels support.
#[test]
fn suite_covers_every_supported_type() {
    let q = [
        "f16", "bf16", "q1_0", "q2_0", "q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "q8_1", "mxfp4",
        "nvfp4", "tq1_0", "tq2_0", "q2_K", "q3_K", "q4_K", "q5_K", "q6_K", "q8_K", "iq4_nl",
        "iq4_xs",
    ];
    for &ty in GgmlType::ALL {
        if ty == GgmlType::F32 {
            continue; // a copy; ggml has no to_float for it
        }
        assert_eq!(
            quantforge_kernels::can_quantize(ty),
            q.contains(&ty.name()),
            "{ty}: quantize list"
        );
    }
}

/// The types that need an importance matrix are ggml's.
#[test]
fn required_imatrix_matches_ggml() {
    for &ty in GgmlType::ALL {
        if quantforge_kernels::can_quantize(ty) {
            assert_eq!(
                quantforge_kernels::requires_imatrix(ty),
                ggml::requires_imatrix(ty.code()),
                "{ty}"
            );
        }
    }
}

/// The catalogue agrees with ggml's type traits for every code.
#[test]
fn catalogue_matches_ggml() {
    for code in 0..ggml::TYPE_COUNT {
        match (GgmlType::from_code(code), ggml::type_info(code)) {
            (Ok(ty), Some((name, block, size, quantized))) => {
                assert_eq!(ty.name(), name, "code {code}");
                assert_eq!(ty.block_size(), block, "{name}");
                assert_eq!(ty.type_size(), size, "{name}");
                assert_eq!(ty.is_quantized(), quantized, "{name}");
            }
            (Err(_), None) => {}
            (ours, theirs) => panic!("code {code}: ours {ours:?}, ggml {theirs:?}"),
        }
    }
}

/// Every type ggml can dequantize, we can, and the same for ggml's quantizers.
#[test]
fn coverage_matches_ggml() {
    for &ty in GgmlType::ALL {
        let ggml_dequantizes = ggml::dequantize_row(ty.code(), &[]).is_some();
        assert!(
            !ggml_dequantizes || quantforge_kernels::can_dequantize(ty),
            "{ty} dequantize"
        );
    }
}
