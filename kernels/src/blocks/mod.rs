//! `#[repr(C)]` block structs, field for field as `ggml-common.h` lays them out.
//!
//! Multi-byte fields are stored as little-endian byte arrays ([`F16Le`], `[u8; 2]`,
//! `[u8; 4]`), so every block has alignment 1 and a block slice can be viewed in place in
//! any byte buffer (an mmapped file, an unaligned output slice) with `bytemuck`.

use crate::num::F16Le;
use bytemuck::{Pod, Zeroable};

/// Elements in a K-quant super-block.
pub const QK_K: usize = 256;

macro_rules! block {
    ($(#[$doc:meta])* $name:ident, $ty:ident, { $( $(#[$fdoc:meta])* $field:ident : $fty:ty ),* $(,)? }) => {
        $(#[$doc])*
        #[repr(C)]
        #[derive(Clone, Copy, Debug, PartialEq, Pod, Zeroable)]
        pub struct $name {
            $( $(#[$fdoc])* pub $field: $fty, )*
        }
        const _: () = assert!(
            std::mem::size_of::<$name>() == crate::GgmlType::$ty.type_size()
                && std::mem::align_of::<$name>() == 1
        );
        impl crate::blocks::Block for $name {
            const TYPE: crate::GgmlType = crate::GgmlType::$ty;
        }
    };
}

/// A block struct of one ggml type.
pub trait Block: Pod {
    /// The ggml type this block belongs to.
    const TYPE: crate::GgmlType;
    /// Elements one block holds.
    const SIZE: usize = Self::TYPE.block_size();
}

block!(/// `block_q1_0`: 128 sign bits and a scale.
    BlockQ1_0, Q1_0, { /// Scale.
    d: F16Le, /// One bit per element, set for >= 0.
    qs: [u8; 16] });
block!(/// `block_q2_0`: 64 2-bit values and a scale.
    BlockQ2_0, Q2_0, { /// Scale.
    d: F16Le, /// Four 2-bit codes per byte.
    qs: [u8; 16] });
block!(/// `block_q4_0`.
    BlockQ4_0, Q4_0, { /// Scale.
    d: F16Le, /// Low nibbles: elements 0..16, high nibbles: 16..32.
    qs: [u8; 16] });
block!(/// `block_q4_1`.
    BlockQ4_1, Q4_1, { /// Scale.
    d: F16Le, /// Minimum.
    m: F16Le, /// Nibbles.
    qs: [u8; 16] });
block!(/// `block_q5_0`.
    BlockQ5_0, Q5_0, { /// Scale.
    d: F16Le, /// Fifth bits, one per element (a little-endian u32).
    qh: [u8; 4], /// Low nibbles.
    qs: [u8; 16] });
block!(/// `block_q5_1`.
    BlockQ5_1, Q5_1, { /// Scale.
    d: F16Le, /// Minimum.
    m: F16Le, /// Fifth bits.
    qh: [u8; 4], /// Low nibbles.
    qs: [u8; 16] });
block!(/// `block_q8_0`.
    BlockQ8_0, Q8_0, { /// Scale.
    d: F16Le, /// Signed quants.
    qs: [i8; 32] });
block!(/// `block_q8_1`.
    BlockQ8_1, Q8_1, { /// Scale.
    d: F16Le, /// `d * sum(qs)`.
    s: F16Le, /// Signed quants.
    qs: [i8; 32] });
block!(/// `block_mxfp4`.
    BlockMxfp4, MXFP4, { /// E8M0 shared exponent.
    e: u8, /// E2M1 codes, two per byte.
    qs: [u8; 16] });
block!(/// `block_nvfp4`.
    BlockNvfp4, NVFP4, { /// UE4M3 scales, one per 16 elements.
    d: [u8; 4], /// E2M1 codes, two per byte.
    qs: [u8; 32] });
block!(/// `block_tq1_0`.
    BlockTq1_0, TQ1_0, { /// Five trits per byte.
    qs: [u8; 48], /// Four trits per byte.
    qh: [u8; 4], /// Scale.
    d: F16Le });
block!(/// `block_tq2_0`.
    BlockTq2_0, TQ2_0, { /// Four 2-bit codes per byte.
    qs: [u8; 64], /// Scale.
    d: F16Le });
block!(/// `block_q2_K`.
    BlockQ2K, Q2_K, { /// 4-bit scales (low) and mins (high) of the 16 sub-blocks.
    scales: [u8; 16], /// 2-bit quants.
    qs: [u8; 64], /// Super-block scale of the scales.
    d: F16Le, /// Super-block scale of the mins.
    dmin: F16Le });
block!(/// `block_q3_K`.
    BlockQ3K, Q3_K, { /// High bits of the quants.
    hmask: [u8; 32], /// Low 2 bits of the quants.
    qs: [u8; 64], /// 6-bit scales, packed.
    scales: [u8; 12], /// Super-block scale.
    d: F16Le });
block!(/// `block_q4_K`.
    BlockQ4K, Q4_K, { /// Super-block scale of the scales.
    d: F16Le, /// Super-block scale of the mins.
    dmin: F16Le, /// 6-bit scales and mins, packed.
    scales: [u8; 12], /// 4-bit quants.
    qs: [u8; 128] });
block!(/// `block_q5_K`.
    BlockQ5K, Q5_K, { /// Super-block scale of the scales.
    d: F16Le, /// Super-block scale of the mins.
    dmin: F16Le, /// 6-bit scales and mins, packed.
    scales: [u8; 12], /// Fifth bits.
    qh: [u8; 32], /// Low 4 bits.
    qs: [u8; 128] });
block!(/// `block_q6_K`.
    BlockQ6K, Q6_K, { /// Low 4 bits.
    ql: [u8; 128], /// High 2 bits.
    qh: [u8; 64], /// 8-bit sub-block scales.
    scales: [i8; 16], /// Super-block scale.
    d: F16Le });
block!(/// `block_q8_K`.
    BlockQ8K, Q8_K, { /// Scale (f32, little-endian).
    d: [u8; 4], /// Signed quants.
    qs: [i8; 256], /// Sums of quants in groups of 16 (i16, little-endian).
    bsums: [[u8; 2]; 16] });
block!(/// `block_iq2_xxs`.
    BlockIq2Xxs, IQ2_XXS, { /// Scale.
    d: F16Le, /// Grid indices, signs and scales (u16, little-endian).
    qs: [[u8; 2]; 32] });
block!(/// `block_iq2_xs`.
    BlockIq2Xs, IQ2_XS, { /// Scale.
    d: F16Le, /// Grid indices and signs (u16, little-endian).
    qs: [[u8; 2]; 32], /// 4-bit sub-block scales.
    scales: [u8; 8] });
block!(/// `block_iq2_s`.
    BlockIq2S, IQ2_S, { /// Scale.
    d: F16Le, /// Grid indices (low 8 bits), then signs.
    qs: [u8; 64], /// Grid index high bits.
    qh: [u8; 8], /// 4-bit sub-block scales.
    scales: [u8; 8] });
block!(/// `block_iq3_xxs`.
    BlockIq3Xxs, IQ3_XXS, { /// Scale.
    d: F16Le, /// Grid indices, then signs and scales.
    qs: [u8; 96] });
block!(/// `block_iq3_s`.
    BlockIq3S, IQ3_S, { /// Scale.
    d: F16Le, /// Grid indices (low 8 bits).
    qs: [u8; 64], /// Grid index high bits.
    qh: [u8; 8], /// Signs.
    signs: [u8; 32], /// 4-bit sub-block scales.
    scales: [u8; 4] });
block!(/// `block_iq1_s`.
    BlockIq1S, IQ1_S, { /// Scale.
    d: F16Le, /// Grid indices (low 8 bits).
    qs: [u8; 32], /// High index bits, scale and delta sign (u16, little-endian).
    qh: [[u8; 2]; 8] });
block!(/// `block_iq1_m`.
    BlockIq1M, IQ1_M, { /// Grid indices (low 8 bits).
    qs: [u8; 32], /// High index bits and delta signs.
    qh: [u8; 16], /// 3-bit scales; the super-block fp16 scale is spread over their top bits.
    scales: [u8; 8] });
block!(/// `block_iq4_nl`.
    BlockIq4Nl, IQ4_NL, { /// Scale.
    d: F16Le, /// Indices into the non-linear grid.
    qs: [u8; 16] });
block!(/// `block_iq4_xs`.
    BlockIq4Xs, IQ4_XS, { /// Scale.
    d: F16Le, /// High 2 bits of the 6-bit sub-block scales (u16, little-endian).
    scales_h: [u8; 2], /// Low 4 bits of the sub-block scales.
    scales_l: [u8; 4], /// Indices into the non-linear grid.
    qs: [u8; 128] });
