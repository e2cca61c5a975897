//! `quantforge types`: the type catalogue as a table.

use quantforge_kernels::{
    GgmlType, can_dequantize, can_quantize, has_simd_path, requires_imatrix, uses_imatrix,
};

pub fn run() -> anyhow::Result<()> {
    println!(
        "{:>4}  {:<8} {:>6} {:>6} {:>7}  {:<8} {:<10} {:<8} {:<4}",
        "code", "name", "block", "bytes", "bpw", "quantize", "dequantize", "imatrix", "simd"
    );
    let yes = |b: bool| if b { "yes" } else { "-" };
    for &ty in GgmlType::ALL {
        println!(
            "{:>4}  {:<8} {:>6} {:>6} {:>7.4}  {:<8} {:<10} {:<8} {:<4}",
            ty.code(),
            ty.name(),
            ty.block_size(),
            ty.type_size(),
            ty.bits_per_weight(),
            yes(can_quantize(ty)),
            yes(can_dequantize(ty)),
            if requires_imatrix(ty) {
                "required"
            } else {
                yes(uses_imatrix(ty))
            },
            yes(has_simd_path(ty)),
        );
    }
    Ok(())
}
