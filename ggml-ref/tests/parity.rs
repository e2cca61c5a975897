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

/// Whether ggml's quantizer gives a row (with the importance matrix, if any) bytes.
type RowTest = fn(&[f32], Option<&[f32]>) -> bool;

/// For a type whose ggml quantizer aborts the process or reads past a group on some
/// extreme finite rows (the iq1 types, see `quantforge_kernels::scalar::iq1_s`), whether
/// ggml gives a row (with the importance matrix, if any) bytes at all.
fn ggml_quantizes(ty: GgmlType) -> Option<RowTest> {
    use quantforge_kernels::scalar::{iq1_m, iq1_s};
    match ty {
        GgmlType::IQ1_S => Some(iq1_s::ggml_quantizes),
        GgmlType::IQ1_M => Some(iq1_m::ggml_quantizes),
        _ => None,
    }
}

/// The rows of `x` that ggml's quantizer for `ty` gives bytes: quantforge writes bytes
/// for every row, and the others are left out of the comparison.
fn ggml_rows(ty: GgmlType, x: &[f32], n: usize, w: Option<&[f32]>) -> Vec<f32> {
    match ggml_quantizes(ty) {
        Some(quantizes) => x
            .chunks(n)
            .filter(|r| quantizes(r, w))
            .flatten()
            .copied()
            .collect(),
        None => x.to_vec(),
    }
}

fn check_quantize(
    ty: GgmlType,
    x: &[f32],
    n: usize,
    w: Option<&[f32]>,
) -> Result<(), TestCaseError> {
    // Every row is quantized without a panic; those ggml quantizes are compared.
    ours_quantize(ty, x, n, w);
    let x = &ggml_rows(ty, x, n, w)[..];
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

/// The grid i-quants, whose ggml quantizers abort on magnitudes near the f32 range.
fn ggml_aborts_on_huge_values(ty: GgmlType) -> bool {
    use GgmlType::*;
    matches!(
        ty,
        IQ2_XXS | IQ2_XS | IQ2_S | IQ3_XXS | IQ3_S | IQ1_S | IQ1_M
    )
}

/// The adversarial rows a type's quantizer is compared on: all of [`rows`], or
/// [`searchable_rows`] where ggml would abort on some of them.
fn quantize_rows(ty: GgmlType, n: usize) -> BoxedStrategy<Vec<f32>> {
    if ggml_aborts_on_huge_values(ty) {
        searchable_rows(n).boxed()
    } else {
        rows(n).boxed()
    }
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
                fn without_imatrix((n, x) in lengths().prop_flat_map(|n| (Just(n), quantize_rows(TY, n)))) {
                    if quantforge_kernels::requires_imatrix(TY) {
                        // ggml aborts the process; quantforge refuses with an error.
                        let mut dst = vec![0u8; x.len() / n * TY.row_size(n).unwrap()];
                        let r = quantforge_kernels::Codec::new(TY, Isa::Scalar)
                            .unwrap()
                            .quantize(&x, n, None, &mut dst);
                        let refused = matches!(r, Err(quantforge_kernels::Error::ImatrixRequired { .. }));
                        prop_assert!(refused, "{TY}: {r:?}");
                    } else {
                        check_quantize(TY, &x, n, None)?;
                    }
                }

                #[test]
                fn with_imatrix((n, x, w) in lengths().prop_flat_map(|n| (Just(n), quantize_rows(TY, n), imatrix(n)))) {
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
                if quantforge_kernels::can_quantize(TY) { quantize_rows(TY, n) } else { tame_rows(n).boxed() }
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
                    let x = ggml_rows(TY, &x, n, Some(&w));
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
        iq2_xxs: IQ2_XXS, iq2_xs: IQ2_XS, iq2_s: IQ2_S, iq3_xxs: IQ3_XXS, iq3_s: IQ3_S,
        iq1_s: IQ1_S, iq1_m: IQ1_M,
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
        "iq4_xs", "iq2_xxs", "iq2_xs", "iq2_s", "iq3_xxs", "iq3_s", "iq1_s", "iq1_m",
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

/// The rows quantforge says ggml's iq1 quantizers give no bytes do make ggml abort: a
/// built overflow and the first such row of the adversarial strategy, each quantized by
/// ggml in a child process (this test binary re-run on `ggml_quantize_child`), which
/// must die on a GGML_ASSERT. A child spends about 14 s building ggml's iq1 search data.
mod rows_without_ggml_bytes {
    use super::*;
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;
    use std::process::Command;

    const CHILD_ENV: &str = "QF_GGML_QUANTIZE_CHILD";

    /// `ty`, then the row, then the weights if any: f32 bits in hex, comma-separated.
    fn encode(ty: GgmlType, row: &[f32], w: Option<&[f32]>) -> String {
        let hex = |v: &[f32]| {
            v.iter()
                .map(|f| format!("{:08x}", f.to_bits()))
                .collect::<Vec<_>>()
        };
        let mut parts = vec![ty.name().to_string(), hex(row).join(",")];
        parts.extend(w.map(|w| hex(w).join(",")));
        parts.join(";")
    }

    fn decode(s: &str) -> (GgmlType, Vec<f32>, Option<Vec<f32>>) {
        let mut parts = s.split(';');
        let ty = GgmlType::from_name(parts.next().unwrap()).unwrap();
        let floats = |p: &str| {
            p.split(',')
                .map(|h| f32::from_bits(u32::from_str_radix(h, 16).unwrap()))
                .collect::<Vec<_>>()
        };
        let row = floats(parts.next().unwrap());
        (ty, row, parts.next().map(floats))
    }

    /// Quantizes the row of `CHILD_ENV` with ggml; does nothing when run without it.
    #[test]
    fn ggml_quantize_child() {
        if let Ok(s) = std::env::var(CHILD_ENV) {
            let (ty, row, w) = decode(&s);
            ggml::quantize_chunk(ty.code(), &row, row.len(), w.as_deref());
        }
    }

    fn assert_ggml_aborts(ty: GgmlType, row: &[f32], w: Option<&[f32]>) {
        let out = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "rows_without_ggml_bytes::ggml_quantize_child",
                "--nocapture",
            ])
            .env(CHILD_ENV, encode(ty, row, w))
            .env("GGML_NO_BACKTRACE", "1")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && stderr.contains("GGML_ASSERT"),
            "{ty} imatrix={}: ggml did not abort ({}): {stderr}\n row {row:?}\n weights {w:?}",
            w.is_some(),
            out.status
        );
    }

    fn check(ty: GgmlType, with_imatrix: bool) {
        const N: usize = 256;
        let quantizes = ggml_quantizes(ty).unwrap();
        // Built: 1e20 squared overflows, every weight is infinite, and the all-positive
        // sub-blocks get the scale inf/inf = NaN.
        let mut row = vec![0.5f32; N];
        row[0] = 1e20;
        let ones = vec![1.0f32; N];
        let w = with_imatrix.then_some(&ones[..]);
        assert!(!quantizes(&row, w));
        assert_ggml_aborts(ty, &row, w);

        let mut runner = TestRunner::deterministic();
        for _ in 0..500 {
            let x = rows(N).new_tree(&mut runner).unwrap().current();
            let w = imatrix(N).new_tree(&mut runner).unwrap().current();
            let w = with_imatrix.then_some(&w[..]);
            if let Some(row) = x.chunks(N).find(|r| !quantizes(r, w)) {
                assert_ggml_aborts(ty, row, w);
                break;
            }
        }
    }

    #[test]
    fn iq1_s() {
        check(GgmlType::IQ1_S, true);
    }

    #[test]
    fn iq1_m_with_imatrix() {
        check(GgmlType::IQ1_M, true);
    }

    #[test]
    fn iq1_m_without_imatrix() {
        check(GgmlType::IQ1_M, false);
    }
}
