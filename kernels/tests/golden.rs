//! Every codec against the checked-in golden vectors made by the live ggml (see
//! `golden/README.md`). Needs no ggml: this is the parity check of a default `cargo test`.

use quantforge_kernels::{Codec, GgmlType, Isa, can_dequantize, can_quantize, requires_imatrix};
use std::path::{Path, PathBuf};

const N_PER_ROW: usize = 512;

/// The types ggml quantizes by a grid search, from `input-tame.f32`.
const SEARCHES_GRID: [GgmlType; 7] = [
    GgmlType::IQ2_XXS,
    GgmlType::IQ2_XS,
    GgmlType::IQ2_S,
    GgmlType::IQ3_XXS,
    GgmlType::IQ3_S,
    GgmlType::IQ1_S,
    GgmlType::IQ1_M,
];

fn golden_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../golden")
}

fn read(name: &str) -> Vec<u8> {
    let path = golden_dir().join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn read_f32(name: &str) -> Vec<f32> {
    read(name)
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect()
}

fn scalar(ty: GgmlType) -> Codec {
    Codec::new(ty, Isa::Scalar).unwrap()
}

fn same_bits(ty: GgmlType, what: &str, ours: &[f32], expected: &[f32]) -> Result<(), String> {
    assert_eq!(ours.len(), expected.len(), "{ty} {what}: length");
    if let Some(i) = ours
        .iter()
        .zip(expected)
        .position(|(a, b)| a.to_bits() != b.to_bits())
    {
        return Err(format!(
            "{ty} {what}: element {i}: ours {:e} ({:#x}), ggml {:e} ({:#x})",
            ours[i],
            ours[i].to_bits(),
            expected[i],
            expected[i].to_bits()
        ));
    }
    Ok(())
}

/// The first byte where `ours` differs from ggml's. The vectors come from ggml on x86-64,
/// where an operation that creates a NaN (inf - inf, 0 * inf, from inputs whose squares
/// overflow) gives the negative default NaN, stored by `GGML_FP32_TO_FP16` as fp16 0xFE00;
/// other CPUs (AArch64) create a positive one, 0x7E00, and so does ggml built there. Only
/// off x86-64 is that one pattern accepted in place of the other.
fn first_difference(ours: &[u8], ggml: &[u8]) -> Option<usize> {
    let x86 = cfg!(target_arch = "x86_64");
    (0..ours.len()).find(|&i| {
        ours[i] != ggml[i]
            && (x86
                || !(i % 2 == 1
                    && ours[i - 1..=i] == [0x00, 0x7e]
                    && ggml[i - 1..=i] == [0x00, 0xfe]))
    })
}

#[test]
fn quantize_matches_golden() {
    let x = read_f32("input.f32");
    let tame = read_f32("input-tame.f32");
    let w = read_f32("imatrix.f32");
    let mut checked = 0;
    let mut failures = Vec::new();
    for &ty in GgmlType::ALL.iter().filter(|t| can_quantize(**t)) {
        // ggml's grid searches assert on the extreme kinds of input.f32.
        let source = if SEARCHES_GRID.contains(&ty) {
            &tame
        } else {
            &x
        };
        for (file, imatrix) in [("plain", None), ("imatrix", Some(&w[..]))] {
            if imatrix.is_none() && requires_imatrix(ty) {
                continue;
            }
            let expected = read(&format!("{}.{file}.bin", ty.name()));
            let mut ours = vec![0u8; expected.len()];
            scalar(ty)
                .quantize(source, N_PER_ROW, imatrix, &mut ours)
                .unwrap_or_else(|e| panic!("{ty} {file}: {e}"));
            if let Some(i) = first_difference(&ours, &expected) {
                let block = i / ty.type_size();
                let bs = ty.type_size();
                failures.push(format!(
                    "{ty} {file}: byte {i} (block {block}) differs from ggml\n ours {:02x?}\n ggml {:02x?}",
                    &ours[block * bs..(block + 1) * bs],
                    &expected[block * bs..(block + 1) * bs]
                ));
            }
            checked += 1;
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(checked >= 40, "only {checked} golden quantizations checked");
}

#[test]
fn dequantize_matches_golden() {
    let mut checked = 0;
    let mut failures = Vec::new();
    for &ty in GgmlType::ALL
        .iter()
        .filter(|t| can_dequantize(**t) && **t != GgmlType::F32)
    {
        let name = ty.name();
        for kind in ["blocks", "random"] {
            let src = read(&format!("{name}.{kind}.bin"));
            let out = format!("{name}.{kind}.f32");
            let expected = read_f32(&out);
            let mut ours = vec![0f32; expected.len()];
            scalar(ty).dequantize(&src, &mut ours).unwrap();
            if let Err(e) = same_bits(ty, &out, &ours, &expected) {
                failures.push(e);
            }
            checked += 1;
        }
    }
    assert!(
        checked >= 45,
        "only {checked} golden dequantizations checked"
    );
}
