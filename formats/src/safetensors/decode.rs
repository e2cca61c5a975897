//! Decoding tensor bytes to f32: F32 as stored, F16 and BF16 through the kernels crate's
//! converters (ggml's exact conversions), the F8 types through the tables of [`super::f8`].

use super::{Dtype, Error, Result, f8};
use quantforge_kernels::{GgmlType, dequantize};

/// Whether [`decode_f32_into`] accepts `dtype`.
pub fn can_decode_f32(dtype: Dtype) -> bool {
    matches!(
        dtype,
        Dtype::F32
            | Dtype::F16
            | Dtype::BF16
            | Dtype::F8E4M3
            | Dtype::F8E5M2
            | Dtype::F8E8M0
            | Dtype::F8E4M3Fnuz
            | Dtype::F8E5M2Fnuz
    )
}

/// Decodes `bytes`, whole elements of `dtype` (little-endian), into `out`, which must
/// hold exactly one f32 per element. `name` is the tensor, for errors.
pub fn decode_f32_into(name: &str, dtype: Dtype, bytes: &[u8], out: &mut [f32]) -> Result<()> {
    if !can_decode_f32(dtype) {
        return Err(Error::CannotDecode {
            name: name.to_owned(),
            dtype,
        });
    }
    let elements = bytes.len() / (dtype.bit_size() / 8);
    if out.len() != elements {
        return Err(Error::OutputLength {
            name: name.to_owned(),
            expected: elements,
            actual: out.len(),
        });
    }
    let table = match dtype {
        Dtype::F32 => {
            for (o, b) in out.iter_mut().zip(bytes.chunks_exact(4)) {
                *o = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
            }
            return Ok(());
        }
        Dtype::F16 | Dtype::BF16 => {
            let ty = if dtype == Dtype::F16 {
                GgmlType::F16
            } else {
                GgmlType::BF16
            };
            return dequantize(ty, bytes, out).map_err(|cause| Error::Kernels {
                name: name.to_owned(),
                cause,
            });
        }
        Dtype::F8E4M3 => &f8::F8_E4M3,
        Dtype::F8E5M2 => &f8::F8_E5M2,
        Dtype::F8E8M0 => &f8::F8_E8M0,
        Dtype::F8E4M3Fnuz => &f8::F8_E4M3FNUZ,
        _ => &f8::F8_E5M2FNUZ,
    };
    for (o, &b) in out.iter_mut().zip(bytes) {
        *o = table[b as usize];
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_each_kind() {
        let mut out = [0f32; 2];
        let f32s: Vec<u8> = [1.5f32, -2.0]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        decode_f32_into("t", Dtype::F32, &f32s, &mut out).unwrap();
        assert_eq!(out, [1.5, -2.0]);
        decode_f32_into("t", Dtype::F16, &[0x00, 0x3C, 0x00, 0xC0], &mut out).unwrap();
        assert_eq!(out, [1.0, -2.0]);
        decode_f32_into("t", Dtype::BF16, &[0x80, 0x3F, 0x00, 0xC0], &mut out).unwrap();
        assert_eq!(out, [1.0, -2.0]);
        decode_f32_into("t", Dtype::F8E4M3, &[0x38, 0xC0], &mut out).unwrap();
        assert_eq!(out, [1.0, -2.0]);
        let err = decode_f32_into("w", Dtype::I32, &[0; 8], &mut out).unwrap_err();
        assert!(err.to_string().contains("tensor `w`"), "{err}");
        let err = decode_f32_into("w", Dtype::F32, &[0; 4], &mut out).unwrap_err();
        assert!(matches!(
            err,
            Error::OutputLength {
                expected: 1,
                actual: 2,
                ..
            }
        ));
    }
}
