//! Every codec against the checked-in golden vectors made by the live ggml (see
//! `golden/README.md`). Needs no ggml: this is the parity check of a default `cargo test`.

use quantforge_kernels::{Codec, GgmlType, Isa, can_dequantize, can_quantize};
use std::path::{Path, PathBuf};

const N_PER_ROW: usize = 512;

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

fn assert_same_bits(ty: GgmlType, what: &str, ours: &[f32], expected: &[f32]) {
    assert_eq!(ours.len(), expected.len(), "{ty} {what}: length");
    if let Some(i) = ours
        .iter()
        .zip(expected)
        .position(|(a, b)| a.to_bits() != b.to_bits())
    {
        panic!(
            "{ty} {what}: element {i}: ours {:e} ({:#x}), ggml {:e} ({:#x})",
            ours[i],
            ours[i].to_bits(),
            expected[i],
            expected[i].to_bits()
        );
    }
}

#[test]
fn quantize_matches_golden() {
    let x = read_f32("input.f32");
    let w = read_f32("imatrix.f32");
    let mut checked = 0;
    for &ty in GgmlType::ALL.iter().filter(|t| can_quantize(**t)) {
        for (file, imatrix) in [("plain", None), ("imatrix", Some(&w[..]))] {
            let expected = read(&format!("{}.{file}.bin", ty.name()));
            let mut ours = vec![0u8; expected.len()];
            scalar(ty)
                .quantize(&x, N_PER_ROW, imatrix, &mut ours)
                .unwrap_or_else(|e| panic!("{ty} {file}: {e}"));
            if let Some(i) = ours.iter().zip(&expected).position(|(a, b)| a != b) {
                let block = i / ty.type_size();
                panic!("{ty} {file}: byte {i} (block {block}) differs from ggml");
            }
            checked += 1;
        }
    }
    assert!(checked >= 40, "only {checked} golden quantizations checked");
}

#[test]
fn dequantize_matches_golden() {
    let mut checked = 0;
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
            assert_same_bits(ty, &out, &ours, &expected);
            checked += 1;
        }
    }
    assert!(
        checked >= 45,
        "only {checked} golden dequantizations checked"
    );
}
