//! The SIMD codecs, written once over the [`lanes::Lanes`] operations and instantiated per
//! ISA by [`simd_entry_points!`] (in `x86::avx2`, `x86::avx512`, `aarch64::neon`).
//!
//! K-quant searches put one sub-block per lane, so each lane runs exactly the scalar
//! sequence (DESIGN.md section 2); element-wise codecs vectorize over elements. The
//! dequantizers are the scalar ones compiled inside the ISA's `#[target_feature]` entry
//! point, where the compiler vectorizes their element-wise IEEE operations (no
//! contraction, no reassociation: the same bits by construction); q4_0's, whose loop the
//! compiler vectorizes badly, and q8_0's, which stores with the ISA's narrow lanes, are
//! written in lanes, and so is q4_K's for outputs too large for the caches, which it
//! writes with streaming stores (as q8_0's does then).

pub(crate) mod iq4_nl;
pub(crate) mod kquant;
pub(crate) mod lanes;
pub(crate) mod q2_k;
pub(crate) mod q3_k;
pub(crate) mod q6_k;
pub(crate) mod q8_k;
pub(crate) mod q_0;
pub(crate) mod scale_min;
pub(crate) mod tq2_0;

use crate::GgmlType;
use crate::scalar;
use lanes::Lanes;

/// Whether `ty` has SIMD code paths (in both directions; f16 and bf16 are the widening
/// and narrowing of whole models).
pub(crate) fn has_path(ty: GgmlType) -> bool {
    use GgmlType::*;
    matches!(
        ty,
        F16 | BF16
            | Q4_0
            | Q5_0
            | Q2_K
            | Q3_K
            | Q4_K
            | Q5_K
            | Q6_K
            | Q8_0
            | Q8_K
            | TQ2_0
            | IQ4_NL
            | IQ4_XS
    )
}

/// The searches' reusable arrays with `V`'s pairs of vectors (see [`kquant::PairScratch`]).
pub(crate) type Scratch<V> = kquant::PairScratch<lanes::Pair<V>>;

/// Quantizes one row of a type for which [`has_path`] holds, as `scalar::quantize_row`,
/// searching in `scratch`; `ahead` (the next row, or empty) may be prefetched meanwhile.
/// For the types of [`checks_finite`] returns whether every value was finite (else
/// true: the caller checks those before).
#[inline(always)]
pub(crate) fn quantize_row<V: Lanes>(
    ty: GgmlType,
    (x, ahead): (&[f32], &[f32]),
    w: Option<&[f32]>,
    y: &mut [u8],
    scratch: &mut Scratch<V>,
) -> bool {
    use GgmlType::*;
    match ty {
        Q8_0 => return q_0::quantize_q8_0::<V>(x, bytemuck::cast_slice_mut(y)),
        TQ2_0 => return tq2_0::quantize_row::<V>(x, bytemuck::cast_slice_mut(y)),
        // Element-wise conversions: the scalar code, vectorized by the compiler here.
        F16 => scalar::float::quantize_f16(x, y),
        BF16 => scalar::float::quantize_bf16(x, y),
        // With an importance matrix ggml runs `make_qx_quants` per block.
        Q4_0 => match w {
            None => q_0::quantize_q4_0::<V>(x, bytemuck::cast_slice_mut(y)),
            Some(w) => q_0::quantize_q4_0_weighted::<V>(x, w, bytemuck::cast_slice_mut(y)),
        },
        Q5_0 => match w {
            None => q_0::quantize_q5_0::<V>(x, bytemuck::cast_slice_mut(y)),
            Some(w) => q_0::quantize_q5_0_weighted::<V>(x, w, bytemuck::cast_slice_mut(y)),
        },
        Q2_K => q2_k::quantize_row::<V>(x, w, bytemuck::cast_slice_mut(y)),
        Q3_K => q3_k::quantize_row::<V>(x, w, bytemuck::cast_slice_mut(y)),
        Q4_K => {
            let blocks: &mut [crate::blocks::BlockQ4K] = bytemuck::cast_slice_mut(y);
            let work = (scratch, ahead);
            return scale_min::quantize_row::<V>(x, w, &scalar::q4_k::FORMAT, work, blocks);
        }
        Q5_K => {
            let blocks: &mut [crate::blocks::BlockQ5K] = bytemuck::cast_slice_mut(y);
            let work = (scratch, ahead);
            return scale_min::quantize_row::<V>(x, w, &scalar::q5_k::FORMAT, work, blocks);
        }
        Q6_K => q6_k::quantize_row::<V>(x, w, bytemuck::cast_slice_mut(y)),
        Q8_K => q8_k::quantize_row::<V>(x, bytemuck::cast_slice_mut(y)),
        IQ4_NL => iq4_nl::quantize_iq4_nl::<V>(x, w, bytemuck::cast_slice_mut(y)),
        IQ4_XS => iq4_nl::quantize_iq4_xs::<V>(x, w, bytemuck::cast_slice_mut(y)),
        _ => unreachable!("no SIMD quantizer for {ty}; checked by has_path"),
    }
    true
}

/// The types whose SIMD quantizers look for NaN and infinity themselves as they read
/// their input: bound by memory, q8_0 and tq2_0 would lose a third of their speed to a
/// separate pass over the input first; the q4_K and q5_K searches see them in sums they
/// compute anyway (see `scale_min::quantize_row`) and prefetch their input themselves.
pub(crate) fn checks_finite(ty: GgmlType) -> bool {
    matches!(
        ty,
        GgmlType::Q8_0 | GgmlType::TQ2_0 | GgmlType::Q4_K | GgmlType::Q5_K
    )
}

/// Dequantizes whole blocks of a type for which [`has_path`] holds. With `stream` (an
/// output too large to stay in the caches), the dequantizers that have streaming stores
/// (q4_K, q8_0) write around the caches: otherwise each line is first read from memory
/// only to be overwritten.
#[inline(always)]
pub(crate) fn dequantize<V: Lanes>(ty: GgmlType, x: &[u8], y: &mut [f32], stream: bool) {
    use GgmlType::*;
    match ty {
        F16 => widen_f16::<V>(x, y),
        BF16 => scalar::float::dequantize_bf16(x, y),
        Q4_0 => q_0::dequantize_q4_0::<V>(bytemuck::cast_slice(x), y),
        Q5_0 => scalar::q5_0::dequantize_row(bytemuck::cast_slice(x), y),
        Q2_K => scalar::q2_k::dequantize_row(bytemuck::cast_slice(x), y),
        Q3_K => scalar::q3_k::dequantize_row(bytemuck::cast_slice(x), y),
        // Outputs larger than the caches are written around them (no line is read only
        // to be overwritten); smaller ones, likely read again soon, through them.
        Q4_K if stream => {
            scale_min::dequantize_q4_k_streaming::<V::Narrow>(bytemuck::cast_slice(x), y)
        }
        Q4_K => scalar::q4_k::dequantize_row(bytemuck::cast_slice(x), y),
        Q5_K => scalar::q5_k::dequantize_row(bytemuck::cast_slice(x), y),
        Q6_K => scalar::q6_k::dequantize_row(bytemuck::cast_slice(x), y),
        Q8_0 if stream => q_0::dequantize_q8_0::<V::Narrow, true>(bytemuck::cast_slice(x), y),
        Q8_0 => q_0::dequantize_q8_0::<V::Narrow, false>(bytemuck::cast_slice(x), y),
        Q8_K => scalar::q8_k::dequantize_row(bytemuck::cast_slice(x), y),
        IQ4_NL => scalar::iq4_nl::dequantize_row(bytemuck::cast_slice(x), y),
        IQ4_XS => scalar::iq4_xs::dequantize_row(bytemuck::cast_slice(x), y),
        TQ2_0 => scalar::tq2_0::dequantize_row(bytemuck::cast_slice(x), y),
        _ => unreachable!("no SIMD dequantizer for {ty}; checked by has_path"),
    }
}

/// Widens little-endian fp16 values with the ISA's conversion (see [`Lanes::load_f16`]).
#[inline(always)]
fn widen_f16<V: Lanes>(x: &[u8], y: &mut [f32]) {
    let n = y.len().min(x.len() / 2);
    let whole = n / V::N * V::N;
    for (xs, ys) in x[..2 * whole]
        .chunks_exact(2 * V::N)
        .zip(y[..whole].chunks_exact_mut(V::N))
    {
        V::load_f16(xs).store(ys);
    }
    scalar::float::dequantize_f16(&x[2 * whole..2 * n], &mut y[whole..n]);
}

/// The index of the first NaN or infinity in `x`: chunks are scanned with the largest
/// magnitude's bits (which the compiler vectorizes for the ISA), the exact index looked
/// for only in a chunk that has one.
#[inline(always)]
pub(crate) fn first_non_finite(x: &[f32]) -> Option<usize> {
    const CHUNK: usize = 1024;
    x.chunks(CHUNK).enumerate().find_map(|(c, chunk)| {
        let worst = chunk
            .iter()
            .fold(0u32, |m, v| m.max(v.to_bits() & 0x7fff_ffff));
        (worst >= 0x7f80_0000)
            .then(|| c * CHUNK + chunk.iter().position(|v| !v.is_finite()).unwrap_or(0))
    })
}

/// Generates an ISA's `#[target_feature]` entry points over its `Lanes` type.
macro_rules! simd_entry_points {
    ($lanes:ty, $features:literal) => {
        std::thread_local! {
            /// This thread's search arrays for this ISA, made on first use.
            static SCRATCH: std::cell::RefCell<Option<Box<crate::simd::Scratch<$lanes>>>> =
                const { std::cell::RefCell::new(None) };
        }

        /// Quantizes one row with this ISA (see `crate::simd::quantize_row`, whose result it
        /// returns), in this thread's search arrays; `x.1` is what comes next (to
        /// prefetch), or empty.
        ///
        /// # Safety
        /// The CPU must support the target features named in the attribute.
        pub(crate) unsafe fn quantize_row(
            ty: crate::GgmlType,
            x: (&[f32], &[f32]),
            w: Option<&[f32]>,
            y: &mut [u8],
        ) -> bool {
            SCRATCH.with_borrow_mut(|scratch| {
                // SAFETY: the caller's guarantee.
                unsafe { quantize_row_in(ty, x, w, y, scratch) }
            })
        }

        /// [`quantize_row`] in `scratch`, which it fills on first use.
        ///
        /// # Safety
        /// The CPU must support the target features named in the attribute.
        #[target_feature(enable = $features)]
        unsafe fn quantize_row_in(
            ty: crate::GgmlType,
            x: (&[f32], &[f32]),
            w: Option<&[f32]>,
            y: &mut [u8],
            scratch: &mut Option<Box<crate::simd::Scratch<$lanes>>>,
        ) -> bool {
            let made = match scratch.take() {
                Some(made) => made,
                None => crate::simd::kquant::PairScratch::new(),
            };
            crate::simd::quantize_row::<$lanes>(ty, x, w, y, scratch.insert(made))
        }

        /// Dequantizes whole blocks with this ISA (see `crate::simd::dequantize`).
        ///
        /// # Safety
        /// The CPU must support the target features named in the attribute.
        #[target_feature(enable = $features)]
        pub(crate) unsafe fn dequantize(
            ty: crate::GgmlType,
            x: &[u8],
            y: &mut [f32],
            stream: bool,
        ) {
            crate::simd::dequantize::<$lanes>(ty, x, y, stream)
        }

        /// The first NaN or infinity, with this ISA (see `crate::simd::first_non_finite`).
        ///
        /// # Safety
        /// The CPU must support the target features named in the attribute.
        #[target_feature(enable = $features)]
        pub(crate) unsafe fn first_non_finite(x: &[f32]) -> Option<usize> {
            crate::simd::first_non_finite(x)
        }
    };
}
pub(crate) use simd_entry_points;
