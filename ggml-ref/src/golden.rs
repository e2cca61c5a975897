//! Golden vectors: fixed adversarial inputs and what the live ggml makes of them, for
//! every type quantforge quantizes or dequantizes. `cargo run -p ggml-ref --bin
//! gen-golden` writes them to `golden/`; the test `golden_is_current` fails when the
//! files there differ from what this module produces now.
//!
//! Files (all little-endian): `input.f32` and `input-tame.f32` (ROWS x N_PER_ROW),
//! `imatrix.f32` (N_PER_ROW), and per type `T`: `T.plain.bin` and `T.imatrix.bin`
//! (ggml_quantize_chunk without and with the importance matrix, of the tame input for the
//! grid-search types; no `plain` for the types that require an importance matrix), `T.blocks.bin` (ggml's own imatrix quantization, i-quants
//! included) with `T.blocks.f32` (its dequantization by ggml's to_float),
//! `T.random.bin` (arbitrary block bytes) with `T.random.f32` (their dequantization).

use crate::{dequantize_row, quantize_chunk, requires_imatrix};
use quantforge_kernels::{GgmlType, can_dequantize, can_quantize};

/// Rows in `input.f32`.
pub const ROWS: usize = 8;
/// Elements per row: a whole number of blocks of every type.
pub const N_PER_ROW: usize = 512;
/// Blocks in each `T.random.bin`.
pub const RANDOM_BLOCKS: usize = 6;

/// A small deterministic generator (xorshift64*), so the inputs need no dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    /// Uniform in [-1, 1).
    fn unit(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// The input rows: each 32-element chunk is one adversarial kind, so every row mixes them.
pub fn input() -> Vec<f32> {
    rows(false)
}

/// Rows for the i-quant quantizers of ggml, which assert on extreme magnitudes: the same
/// kinds without subnormals and without 1e30 or 1e-30 scales.
pub fn tame_input() -> Vec<f32> {
    rows(true)
}

fn rows(tame: bool) -> Vec<f32> {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let mut out = Vec::with_capacity(ROWS * N_PER_ROW);
    for chunk in 0..ROWS * N_PER_ROW / 32 {
        let mut v: Vec<f32> = (0..32).map(|_| rng.unit()).collect();
        let kind = match chunk % 10 {
            5..=7 if tame => 9,
            k => k,
        };
        match kind {
            0 => v.fill(0.0),
            1 => v.fill(0.375),
            2 => {
                let i = rng.below(32);
                v[i] = 5000.0 * rng.unit().signum();
            }
            3 => {
                let (i, j) = (rng.below(16), 16 + rng.below(16));
                v[i] = 1.5;
                v[j] = -1.5;
            }
            4 => {
                for x in v.iter_mut() {
                    *x = (rng.below(33) as f32 - 16.0) + 0.5;
                }
            }
            5 => {
                for x in v.iter_mut() {
                    *x = f32::from_bits(rng.below(0x007f_ffff) as u32) * x.signum();
                }
            }
            6 => {
                for x in v.iter_mut() {
                    *x *= 1e30;
                }
            }
            7 => {
                for x in v.iter_mut() {
                    *x *= 1e-30;
                }
            }
            8 => {
                for x in v.iter_mut() {
                    *x = (rng.below(255) as f32) - 127.0;
                }
            }
            _ => {
                let s = 10f32.powi(rng.below(9) as i32 - 4);
                for x in v.iter_mut() {
                    *x *= s;
                }
            }
        }
        out.extend(v);
    }
    out
}

/// The importance matrix: positive weights over several magnitudes, some zeros.
pub fn imatrix() -> Vec<f32> {
    let mut rng = Rng(0xD1B5_4A32_D192_ED03);
    (0..N_PER_ROW)
        .map(|i| {
            if i % 13 == 0 {
                0.0
            } else {
                (rng.unit() + 1.0) * 10f32.powi(rng.below(5) as i32 - 2)
            }
        })
        .collect()
}

/// Arbitrary bytes for `RANDOM_BLOCKS` blocks of `ty`.
pub fn random_blocks(ty: GgmlType) -> Vec<u8> {
    let mut rng = Rng(0xA076_1D64_78BD_642F ^ ty.code() as u64);
    (0..RANDOM_BLOCKS * ty.type_size())
        .map(|_| rng.next() as u8)
        .collect()
}

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// Whether ggml quantizes `ty` by a grid search (iq1, iq2 and iq3 types), which asserts
/// on the extreme kinds of [`input`]: those types are quantized from [`tame_input`].
pub fn searches_grid(ty: GgmlType) -> bool {
    use GgmlType as T;
    matches!(
        ty,
        T::IQ2_XXS | T::IQ2_XS | T::IQ2_S | T::IQ3_XXS | T::IQ3_S | T::IQ1_S | T::IQ1_M
    )
}

/// Every golden file as (name, contents), computed by the live ggml.
pub fn files() -> Vec<(String, Vec<u8>)> {
    let x = input();
    let w = imatrix();
    let tame = tame_input();
    let mut files = vec![
        ("input.f32".to_string(), f32_bytes(&x)),
        ("input-tame.f32".to_string(), f32_bytes(&tame)),
        ("imatrix.f32".to_string(), f32_bytes(&w)),
    ];
    for &ty in GgmlType::ALL {
        let name = ty.name();
        if can_quantize(ty) {
            let source = if searches_grid(ty) { &tame } else { &x };
            if !requires_imatrix(ty.code()) {
                files.push((
                    format!("{name}.plain.bin"),
                    quantize_chunk(ty.code(), source, N_PER_ROW, None),
                ));
            }
            files.push((
                format!("{name}.imatrix.bin"),
                quantize_chunk(ty.code(), source, N_PER_ROW, Some(&w)),
            ));
        }
        if can_dequantize(ty) && ty != GgmlType::F32 {
            let source = if can_quantize(ty) && !searches_grid(ty) {
                &x
            } else {
                &tame
            };
            let own = quantize_chunk(ty.code(), source, N_PER_ROW, Some(&w));
            let y = dequantize_row(ty.code(), &own).expect("ggml dequantizes what we do");
            files.push((format!("{name}.blocks.bin"), own));
            files.push((format!("{name}.blocks.f32"), f32_bytes(&y)));
            let random = random_blocks(ty);
            let y = dequantize_row(ty.code(), &random).expect("ggml dequantizes what we do");
            files.push((format!("{name}.random.bin"), random));
            files.push((format!("{name}.random.f32"), f32_bytes(&y)));
        }
    }
    files
}
