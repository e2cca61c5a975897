//! Every SIMD path against the scalar specification, one ISA at a time: byte-identical
//! quantization (plain and with an importance matrix) and bit-identical dequantization,
//! on adversarial rows, block counts at and around vector widths (0, 1, 2, 3, 7, 8, 9,
//! 15, 16, 17, 33), and input and output slices that start off alignment. An ISA this CPU
//! lacks is reported as skipped.

mod common;

use common::*;
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use quantforge_kernels::{Codec, GgmlType, Isa};

const BLOCK_COUNTS: [usize; 11] = [0, 1, 2, 3, 7, 8, 9, 15, 16, 17, 33];

/// `QF_SIMD_CASES` cases (default 64) for a type whose quantizer costs about what q4_K's
/// does; a quarter of them for the i-quants, whose searches cost over ten times more
/// (under an emulator too, the suite stays within minutes).
fn config(ty: GgmlType) -> ProptestConfig {
    let cases: u32 = std::env::var("QF_SIMD_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(64);
    let cases = if quantforge_kernels::quantize_cost(ty) > 100.0 {
        cases.div_ceil(4)
    } else {
        cases
    };
    ProptestConfig {
        cases,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

/// The codec for `isa`, or `None` (and a note on stderr, once per type and ISA) when this
/// CPU lacks it.
fn codec_or_skip(ty: GgmlType, isa: Isa) -> Option<Codec> {
    static SAID: std::sync::Mutex<Vec<(GgmlType, Isa)>> = std::sync::Mutex::new(Vec::new());
    match Codec::new(ty, isa) {
        Some(c) => {
            assert_eq!(c.isa(), isa, "{ty} has no {isa} path");
            Some(c)
        }
        None => {
            let mut said = SAID.lock().unwrap_or_else(|e| e.into_inner());
            if !said.contains(&(ty, isa)) {
                said.push((ty, isa));
                eprintln!("SKIPPED: {ty} on {isa}: this CPU does not support {isa}");
            }
            None
        }
    }
}

/// Quantizes with `codec` and with scalar, through buffers offset by `shift` elements
/// and bytes from their allocation, and compares.
fn check_quantize(
    codec: Codec,
    x: &[f32],
    n: usize,
    w: Option<&[f32]>,
    shift: usize,
) -> Result<(), TestCaseError> {
    let ty = codec.ty();
    let size = x.len() / n.max(1) * ty.row_size(n).unwrap();
    let mut xs = vec![0.0f32; x.len() + shift];
    xs[shift..].copy_from_slice(x);
    let mut ours = vec![0u8; size + shift];
    let mut spec = vec![0u8; size];
    codec
        .quantize(&xs[shift..], n, w, &mut ours[shift..])
        .unwrap();
    Codec::new(ty, Isa::Scalar)
        .unwrap()
        .quantize(x, n, w, &mut spec)
        .unwrap();
    let ours = &ours[shift..];
    if let Some(i) = ours.iter().zip(&spec).position(|(a, b)| a != b) {
        let b = i / ty.type_size();
        return Err(TestCaseError::fail(format!(
            "{ty} on {}: n_per_row={n} imatrix={} shift={shift}: byte {i} (block {b}) differs\n simd   {:02x?}\n scalar {:02x?}\n input {:?}",
            codec.isa(),
            w.is_some(),
            &ours[b * ty.type_size()..(b + 1) * ty.type_size()],
            &spec[b * ty.type_size()..(b + 1) * ty.type_size()],
            &x[b * ty.block_size()..(b + 1) * ty.block_size()],
        )));
    }
    Ok(())
}

fn check_dequantize(codec: Codec, bytes: &[u8], shift: usize) -> Result<(), TestCaseError> {
    let ty = codec.ty();
    let n = bytes.len() / ty.type_size() * ty.block_size();
    let mut src = vec![0u8; bytes.len() + shift];
    src[shift..].copy_from_slice(bytes);
    let mut ours = vec![0f32; n + shift];
    let mut spec = vec![0f32; n];
    codec.dequantize(&src[shift..], &mut ours[shift..]).unwrap();
    Codec::new(ty, Isa::Scalar)
        .unwrap()
        .dequantize(bytes, &mut spec)
        .unwrap();
    if let Some(i) = ours[shift..]
        .iter()
        .zip(&spec)
        .position(|(a, b)| a.to_bits() != b.to_bits())
    {
        return Err(TestCaseError::fail(format!(
            "{ty} on {}: element {i}: simd {:e} scalar {:e}",
            codec.isa(),
            ours[shift + i],
            spec[i]
        )));
    }
    Ok(())
}

/// One module per type, in it one module per ISA (so the test names say which ran), each
/// with the same property tests against the scalar path.
macro_rules! simd_vs_scalar {
    (types: [$($name:ident: $ty:ident),* $(,)?], isas: $isas:tt $(,)?) => {
        /// The types these tests cover.
        const TESTED_TYPES: &[GgmlType] = &[$(GgmlType::$ty),*];
        $( simd_vs_scalar!(@type $name, $ty, $isas); )*
    };
    (@type $name:ident, $ty:ident, [$($isa_name:ident: $isa:ident),* $(,)?]) => {
        mod $name {
            use super::*;
            const TY: GgmlType = GgmlType::$ty;
            /// Elements per generated "block": the type's block, at least one 32-value chunk.
            const UNIT: usize = if TY.block_size() < 32 { 32 } else { TY.block_size() };

            fn case() -> impl Strategy<Value = (usize, usize, Vec<f32>, Vec<f32>, usize)> {
                // (rows, blocks per row, data, imatrix, shift)
                (prop::sample::select(BLOCK_COUNTS.to_vec()), 1usize..=2)
                    .prop_flat_map(|(blocks, rows)| {
                        let n = blocks * UNIT;
                        let per_row = n.max(TY.block_size());
                        (Just(rows), Just(blocks), rows_n(rows, n), imatrix(per_row), 0usize..4)
                    })
            }

            $( simd_vs_scalar!(@isa $isa_name, $isa); )*
        }
    };
    (@isa $isa_name:ident, $isa:ident) => {
        mod $isa_name {
            use super::*;
            const ISA: Isa = Isa::$isa;

            proptest! {
                #![proptest_config(config(TY))]

                #[test]
                fn quantize((rows, blocks, x, w, shift) in case()) {
                    let Some(c) = codec_or_skip(TY, ISA) else { return Ok(()) };
                    let n = blocks * UNIT;
                    if n == 0 {
                        // No rows at all: an empty source gives an empty destination.
                        let mut out = [0u8; 0];
                        prop_assert_eq!(c.quantize(&[], UNIT, None, &mut out).unwrap(), 0);
                    } else {
                        let _ = rows;
                        if !quantforge_kernels::requires_imatrix(TY) {
                            check_quantize(c, &x, n, None, shift)?;
                        }
                        check_quantize(c, &x, n, Some(&w[..n]), shift)?;
                    }
                }

                #[test]
                fn dequantize_random(blocks in prop::sample::select(BLOCK_COUNTS.to_vec()), seed in any::<u64>(), shift in 0usize..4) {
                    let Some(c) = codec_or_skip(TY, ISA) else { return Ok(()) };
                    let mut s = seed | 1;
                    let bytes: Vec<u8> = (0..blocks * TY.type_size()).map(|_| { s ^= s << 13; s ^= s >> 7; s ^= s << 17; s as u8 }).collect();
                    check_dequantize(c, &bytes, shift)?;
                }

                #[test]
                fn dequantize_quantized((_rows, blocks, x, w, shift) in case()) {
                    let Some(c) = codec_or_skip(TY, ISA) else { return Ok(()) };
                    let n = blocks * UNIT;
                    let mut q = vec![0u8; if n == 0 { 0 } else { x.len() / n * TY.row_size(n).unwrap() }];
                    if n > 0 {
                        // The types ggml quantizes only with an importance matrix get one.
                        let w = quantforge_kernels::requires_imatrix(TY).then_some(&w[..n]);
                        quantforge_kernels::quantize(TY, &x, n, w, &mut q).unwrap();
                    }
                    check_dequantize(c, &q, shift)?;
                }
            }
        }
    };
}

simd_vs_scalar! {
    types: [
        f16: F16, bf16: BF16, q4_0: Q4_0, q4_1: Q4_1, q5_0: Q5_0, q5_1: Q5_1, q2_k: Q2_K, q3_k: Q3_K, q4_k: Q4_K,
        q5_k: Q5_K, q6_k: Q6_K, q8_0: Q8_0, q8_k: Q8_K, tq2_0: TQ2_0, iq4_nl: IQ4_NL,
        iq4_xs: IQ4_XS, iq2_xxs: IQ2_XXS, iq2_xs: IQ2_XS, iq2_s: IQ2_S, iq3_xxs: IQ3_XXS,
        iq3_s: IQ3_S, iq1_s: IQ1_S, iq1_m: IQ1_M,
    ],
    isas: [portable: Portable, avx2: Avx2, avx512: Avx512, neon: Neon],
}

/// Rows of small multiples of one power of two, with weights from a few small integers:
/// the grid i-quants' scale searches then meet exact ties between neighbours and long runs
/// of trials that round to the same lattice point, whose neighbours the SIMD searches
/// settle from a run's ends or score with the trials in lanes. Every ISA gives the
/// scalar bytes.
#[test]
fn grid_searches_on_coarse_values_match_scalar() {
    const N: usize = 512;
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut next = move |k: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        (seed % k) as i32
    };
    for round in 0..24 {
        let scale = 2f32.powi(round % 12 - 6);
        let levels = [3, 5, 9, 17][round as usize % 4];
        let x: Vec<f32> = (0..N)
            .map(|_| (next(2 * levels + 1) - levels as i32) as f32 * scale)
            .collect();
        let w: Vec<f32> = (0..N).map(|_| next(4) as f32).collect();
        for ty in [
            GgmlType::IQ2_XXS,
            GgmlType::IQ2_XS,
            GgmlType::IQ2_S,
            GgmlType::IQ3_XXS,
            GgmlType::IQ3_S,
        ] {
            for &isa in TESTED_ISAS {
                let Some(c) = codec_or_skip(ty, isa) else {
                    continue;
                };
                for imatrix in [Some(&w[..]), None] {
                    if imatrix.is_none() && quantforge_kernels::requires_imatrix(ty) {
                        continue;
                    }
                    check_quantize(c, &x, N, imatrix, 0).unwrap();
                }
            }
        }
    }
}

/// Every ISA but scalar, as the tests above instantiate them.
const TESTED_ISAS: &[Isa] = &[Isa::Portable, Isa::Avx2, Isa::Avx512, Isa::Neon];

/// The types above are exactly those the table of codecs gives a SIMD path, and the ISAs
/// every one the crate declares: a type or ISA added without its tests fails here.
#[test]
fn the_tests_cover_every_simd_type_and_isa() {
    for &ty in GgmlType::ALL {
        assert_eq!(
            quantforge_kernels::has_simd_path(ty),
            TESTED_TYPES.contains(&ty),
            "{ty}: the table's SIMD path and the test list disagree"
        );
    }
    let declared: Vec<Isa> = Isa::ALL
        .iter()
        .copied()
        .filter(|&i| i != Isa::Scalar)
        .collect();
    assert_eq!(
        declared, TESTED_ISAS,
        "the declared ISAs and the test list disagree"
    );
}

/// `QUANTFORGE_ISA` caps the choice: with it unset, the best codec is the widest ISA this
/// CPU has for the types with SIMD paths.
/// Outputs of 32 MiB and more are written with streaming stores (q4_K, q8_0): the same
/// bits as the scalar dequantizer, whole and spread over threads, from aligned and
/// unaligned destinations.
#[test]
fn large_dequantized_outputs_are_bit_identical() {
    let n = (8 << 20) + 4096;
    let mut s = 0x2545_f491_4f6c_dd1du64;
    let x: Vec<f32> = (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 0.1
        })
        .collect();
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(2)
        .build()
        .unwrap();
    for ty in [GgmlType::Q4_K, GgmlType::Q8_0] {
        let fast = Codec::best(ty);
        let mut q = vec![0u8; n / ty.block_size() * ty.type_size()];
        fast.quantize(&x, 4096, None, &mut q).unwrap();
        let mut want = vec![0.0f32; n];
        Codec::new(ty, Isa::Scalar)
            .unwrap()
            .dequantize(&q, &mut want)
            .unwrap();
        for &isa in TESTED_ISAS {
            let Some(codec) = codec_or_skip(ty, isa) else {
                continue;
            };
            for shift in [0usize, 1, 4] {
                let mut got = vec![0.0f32; n + shift];
                for par in [false, true] {
                    let out = &mut got[shift..];
                    match par {
                        false => codec.dequantize(&q, out).unwrap(),
                        true => pool.install(|| codec.dequantize_par(&q, out)).unwrap(),
                    }
                    let same = out
                        .iter()
                        .zip(&want)
                        .all(|(a, b)| a.to_bits() == b.to_bits());
                    assert!(same, "{ty} on {isa}, shift {shift}, par {par}");
                }
            }
        }
    }
}

#[test]
fn best_codec_uses_the_widest_supported_isa() {
    if std::env::var_os("QUANTFORGE_ISA").is_some() {
        eprintln!("SKIPPED: QUANTFORGE_ISA is set");
        return;
    }
    let widest = [Isa::Avx512, Isa::Avx2, Isa::Neon]
        .into_iter()
        .find(|i| i.is_supported())
        .unwrap_or(Isa::Scalar);
    assert!(widest.is_auto() && !Isa::Portable.is_auto());
    assert_eq!(Codec::best(GgmlType::Q4_K).isa(), widest);
    assert_eq!(Codec::best(GgmlType::IQ2_XXS).isa(), widest);
    assert_eq!(Codec::best(GgmlType::MXFP4).isa(), Isa::Scalar);
}

/// The parallel entry points give the sequential bytes for any thread count.
#[test]
fn parallel_output_is_independent_of_thread_count() {
    let n = 1024;
    let x: Vec<f32> = (0..300 * n)
        .map(|i| ((i * 7919 % 10007) as f32 - 5000.0) / 1234.0)
        .collect();
    let w: Vec<f32> = (0..n).map(|i| (i % 11) as f32 * 0.5).collect();
    for ty in [
        GgmlType::Q4_K,
        GgmlType::Q6_K,
        GgmlType::Q8_0,
        GgmlType::IQ4_XS,
    ] {
        let codec = Codec::best(ty);
        let size = x.len() / n * ty.row_size(n).unwrap();
        let mut seq = vec![0u8; size];
        codec.quantize(&x, n, Some(&w), &mut seq).unwrap();
        let mut back_seq = vec![0f32; x.len()];
        codec.dequantize(&seq, &mut back_seq).unwrap();
        for threads in [1, 2, 3, 8] {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap();
            let mut par = vec![0u8; size];
            pool.install(|| codec.quantize_par(&x, n, Some(&w), &mut par))
                .unwrap();
            assert!(par == seq, "{ty} quantize with {threads} threads");
            let mut back = vec![0f32; x.len()];
            pool.install(|| codec.dequantize_par(&par, &mut back))
                .unwrap();
            assert!(
                back.iter()
                    .zip(&back_seq)
                    .all(|(a, b)| a.to_bits() == b.to_bits()),
                "{ty} dequantize with {threads} threads"
            );
        }
    }
}

proptest! {
    #![proptest_config(config(GgmlType::Q8_0))]

    /// Every ISA's quantizer names the same first NaN or infinity as the scalar one, at
    /// any position, with finite values of every magnitude around it; so does the
    /// multi-threaded quantizer (sources of up to 200 Ki values span several tasks).
    #[test]
    fn non_finite_values_are_found_at_their_index(
        len in prop_oneof![1usize..5000, 5000usize..200_000],
        spots in prop::collection::vec((any::<prop::sample::Index>(), 0usize..3), 0..4),
        seed in any::<u64>(),
    ) {
        // q8_0 checks with a separate pass on the scalar path and while quantizing on
        // the SIMD paths; tq2_0 likewise, with rows of 256; q4_K and q5_K (with and
        // without importance values) on the SIMD paths from the sums of squares their
        // searches compute, which finite values whose squares overflow make infinite too.
        let len = len.next_multiple_of(256);
        let mut rng = seed;
        let mut x: Vec<f32> = (0..len)
            .map(|_| {
                rng = rng.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                // Finite bit patterns of every exponent, both signs.
                let bits = (rng >> 32) as u32;
                let v = f32::from_bits(bits);
                if v.is_finite() { v } else { f32::MAX }
            })
            .collect();
        for (at, kind) in &spots {
            x[at.index(len)] = [f32::NAN, f32::INFINITY, f32::NEG_INFINITY][*kind];
        }
        let first = x.iter().position(|v| !v.is_finite());
        let pool = rayon::ThreadPoolBuilder::new().num_threads(3).build().unwrap();
        let ones = [1.0f32; 256];
        let element_wise = [GgmlType::Q8_0, GgmlType::TQ2_0].into_iter().flat_map(|ty| {
            let n = if ty == GgmlType::Q8_0 { 32 } else { 256 };
            Isa::ALL.iter().map(move |&isa| (ty, n, isa, None))
        });
        // The scalar k-quant paths check as q8_0's does (above), and slowly.
        let k_quants = [GgmlType::Q4_K, GgmlType::Q5_K].into_iter().flat_map(|ty| {
            [None, Some(&ones[..])]
                .into_iter()
                .flat_map(move |w| TESTED_ISAS.iter().map(move |&isa| (ty, 256, isa, w)))
        });
        for (ty, n, isa, w) in element_wise.chain(k_quants) {
            let Some(codec) = codec_or_skip(ty, isa) else {
                continue;
            };
            let mut y = vec![0u8; len / n * ty.row_size(n).unwrap()];
            for par in [false, true] {
                let got = match par {
                    false => codec.quantize(&x, n, w, &mut y),
                    true => pool.install(|| codec.quantize_par(&x, n, w, &mut y)),
                };
                let imx = w.is_some();
                match got {
                    Ok(_) => prop_assert_eq!(
                        first, None, "{} {} (par {}, imatrix {}) missed it", ty, isa, par, imx
                    ),
                    Err(quantforge_kernels::Error::NonFinite { index, .. }) => prop_assert_eq!(
                        Some(index), first, "{} {} (par {}, imatrix {})", ty, isa, par, imx
                    ),
                    Err(e) => panic!("{isa}: {e}"),
                }
            }
        }
    }
}
