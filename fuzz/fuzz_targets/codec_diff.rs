//! Every SIMD path this CPU has against the scalar specification, on arbitrary input:
//! quantized bytes must be identical (non-finite values are replaced, since they are
//! rejected before any codec runs), and dequantized f32 bits identical for arbitrary
//! block bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use quantforge_kernels::{Codec, GgmlType, Isa};

fuzz_target!(|data: &[u8]| {
    let Some((&selector, rest)) = data.split_first() else {
        return;
    };
    // Every type the table of codecs gives a SIMD path, on every ISA this CPU has (the
    // portable lanes included).
    let types: Vec<GgmlType> = GgmlType::ALL
        .iter()
        .copied()
        .filter(|&t| quantforge_kernels::has_simd_path(t))
        .collect();
    let ty = types[selector as usize % types.len()];
    let scalar = Codec::new(ty, Isa::Scalar).expect("scalar always runs");
    let isas: Vec<Codec> = Isa::ALL
        .iter()
        .filter(|&&isa| isa != Isa::Scalar)
        .filter_map(|&isa| Codec::new(ty, isa))
        .collect();

    // Quantize: the bytes as f32 values, a whole number of blocks, one row.
    let block = ty.block_size();
    let floats: Vec<f32> = rest
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .map(|v| if v.is_finite() { v } else { 0.0 })
        .collect();
    let n = floats.len() / block * block;
    if n > 0 {
        let x = &floats[..n];
        let w: Vec<f32> = x.iter().map(|v| v.abs().min(1e6)).collect();
        let size = ty.row_size(n).unwrap();
        for imatrix in [None, Some(&w[..])] {
            // ggml quantizes some i-quants only with an importance matrix; so do we.
            if imatrix.is_none() && quantforge_kernels::requires_imatrix(ty) {
                continue;
            }
            let mut expected = vec![0u8; size];
            scalar.quantize(x, n, imatrix, &mut expected).unwrap();
            for codec in &isas {
                let mut ours = vec![0u8; size];
                codec.quantize(x, n, imatrix, &mut ours).unwrap();
                assert!(ours == expected, "{ty} quantize on {} differs", codec.isa());
            }
        }
    }

    // Dequantize: the bytes as blocks.
    let whole = rest.len() / ty.type_size() * ty.type_size();
    let src = &rest[..whole];
    let count = whole / ty.type_size() * block;
    let mut expected = vec![0f32; count];
    scalar.dequantize(src, &mut expected).unwrap();
    for codec in &isas {
        let mut ours = vec![0f32; count];
        codec.dequantize(src, &mut ours).unwrap();
        assert!(
            ours.iter()
                .zip(&expected)
                .all(|(a, b)| a.to_bits() == b.to_bits()),
            "{ty} dequantize on {} differs",
            codec.isa()
        );
    }
});
