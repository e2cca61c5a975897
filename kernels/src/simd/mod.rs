//! The SIMD codecs, written once over the [`lanes::Lanes`] operations and compiled for each
//! ISA by [`entry_points!`] (the ISAs are declared in `crate::isa`).
//!
//! K-quant searches put one sub-block per lane, so each lane runs exactly the scalar
//! sequence (see docs/kernels.md); element-wise codecs vectorize over elements; the
//! i-quants (`iq`) run their scalar searches with lanes across grid candidates and splits. The
//! dequantizers are mostly the scalar ones compiled inside the ISA's `#[target_feature]`
//! entry point, where the compiler vectorizes their element-wise IEEE operations (no
//! contraction, no reassociation: the same bits by construction); q4_0's, q2_K's,
//! iq4_nl's and iq4_xs's, whose loops the compiler vectorizes badly, and q8_0's and q8_K's
//! are written in the ISA's narrow lanes, and so are q4_K's and q5_K's for outputs too
//! large for the caches; all of these write such outputs with streaming stores. The other
//! i-quants' run their scalar loops with each group of 8 values written in narrow lanes
//! (`iq::LaneWrite`).
//!
//! Each type with a SIMD path implements [`SimdCodec`] in its file, and has its row in
//! `crate::codecs`.

pub(crate) mod float;
pub(crate) mod iq;
pub(crate) mod iq4_nl_iq4_xs;
pub(crate) mod kquant;
pub(crate) mod lanes;
pub(crate) mod q2_k;
pub(crate) mod q3_k;
pub(crate) mod q4_0_q5_0_q8_0;
pub(crate) mod q4_1_q5_1;
pub(crate) mod q4_k_q5_k;
pub(crate) mod q6_k;
pub(crate) mod q8_k;
pub(crate) mod tq2_0;

use lanes::Lanes;

/// One row to quantize and the row after it (empty after the last), which a search may
/// prefetch while it works on this one.
#[derive(Clone, Copy)]
pub(crate) struct Row<'a> {
    /// The row.
    pub(crate) values: &'a [f32],
    /// The next row, or empty.
    pub(crate) next: &'a [f32],
}

/// The searches' reusable arrays with `V`'s pairs of vectors (see [`kquant::PairScratch`]).
pub(crate) type Scratch<V> = kquant::PairScratch<lanes::Pair<V>>;

/// A type's codec written over [`Lanes`]: the same bytes (and, dequantizing, the same f32
/// bits) as its scalar specification for every input. Implementations are
/// `#[inline(always)]`, so that they compile inside the ISA's entry point.
pub(crate) trait SimdCodec {
    /// Quantizes one row into `y` (exactly its bytes) as `scalar::<type>::quantize_row`,
    /// searching in `scratch`. A codec marked `finds` in the table returns false when the
    /// row held a NaN or an infinity (and may have written part of it); the others return
    /// true, their caller having checked the row before.
    fn quantize<V: Lanes>(
        row: Row<'_>,
        w: Option<&[f32]>,
        y: &mut [u8],
        scratch: &mut Scratch<V>,
    ) -> bool;

    /// Dequantizes whole blocks into `y` as `scalar::<type>::dequantize_row`. With
    /// `stream` (an output too large to stay in the caches), a dequantizer that has
    /// streaming stores writes around the caches: otherwise each line is first read from
    /// memory only to be overwritten.
    fn dequantize<V: Lanes>(x: &[u8], y: &mut [f32], stream: bool);
}

/// One ISA's entry points, generic over the codec; each monomorphized function is
/// compiled with the ISA's target features.
pub(crate) trait IsaEntry {
    /// [`SimdCodec::quantize`] of `C` in this thread's search arrays for the ISA.
    ///
    /// # Safety
    /// The CPU must support the ISA.
    unsafe fn quantize<C: SimdCodec>(row: Row<'_>, w: Option<&[f32]>, y: &mut [u8]) -> bool;

    /// [`SimdCodec::dequantize`] of `C`.
    ///
    /// # Safety
    /// The CPU must support the ISA.
    unsafe fn dequantize<C: SimdCodec>(x: &[u8], y: &mut [f32], stream: bool);

    /// [`first_non_finite`], compiled for the ISA.
    ///
    /// # Safety
    /// The CPU must support the ISA.
    unsafe fn first_non_finite(x: &[f32]) -> Option<usize>;
}

/// The index of the first NaN or infinity in `x`: chunks are scanned with a branch-free
/// test of the exponent bits (which the compiler vectorizes for the target it is compiled
/// for), the exact index looked for only in a chunk that has one.
#[inline(always)]
pub(crate) fn first_non_finite(x: &[f32]) -> Option<usize> {
    const CHUNK: usize = 1024;
    x.chunks(CHUNK).enumerate().find_map(|(c, chunk)| {
        let bad = chunk.iter().fold(0u32, |acc, v| {
            acc | u32::from(v.to_bits() & 0x7f80_0000 == 0x7f80_0000)
        });
        (bad != 0).then(|| c * CHUNK + chunk.iter().position(|v| !v.is_finite()).unwrap_or(0))
    })
}

/// Generates an ISA's entry points: `$entry` implements [`IsaEntry`] with functions
/// that run the generic codecs on `$lanes` with the target features listed.
macro_rules! entry_points {
    ($entry:ident, $lanes:ty, [$($feature:literal),*]) => {
        const _: () = {
            use crate::simd::{Row, Scratch, SimdCodec};

            std::thread_local! {
                /// This thread's search arrays for this ISA, made on first use.
                static SCRATCH: std::cell::RefCell<Option<Box<Scratch<$lanes>>>> =
                    const { std::cell::RefCell::new(None) };
            }

            /// # Safety
            /// The CPU must support the target features named in the attributes.
            $( #[target_feature(enable = $feature)] )*
            unsafe fn quantize_in<C: SimdCodec>(
                row: Row<'_>,
                w: Option<&[f32]>,
                y: &mut [u8],
                scratch: &mut Option<Box<Scratch<$lanes>>>,
            ) -> bool {
                let made = match scratch.take() {
                    Some(made) => made,
                    None => crate::simd::kquant::PairScratch::new(),
                };
                C::quantize::<$lanes>(row, w, y, scratch.insert(made))
            }

            /// # Safety
            /// The CPU must support the target features named in the attributes.
            $( #[target_feature(enable = $feature)] )*
            unsafe fn dequantize_in<C: SimdCodec>(x: &[u8], y: &mut [f32], stream: bool) {
                C::dequantize::<$lanes>(x, y, stream)
            }

            /// # Safety
            /// The CPU must support the target features named in the attributes.
            $( #[target_feature(enable = $feature)] )*
            unsafe fn first_non_finite_in(x: &[f32]) -> Option<usize> {
                crate::simd::first_non_finite(x)
            }

            impl crate::simd::IsaEntry for $entry {
                unsafe fn quantize<C: SimdCodec>(
                    row: Row<'_>,
                    w: Option<&[f32]>,
                    y: &mut [u8],
                ) -> bool {
                    // The borrow runs in a closure, compiled without the target features:
                    // the work itself is in `quantize_in`.
                    SCRATCH.with_borrow_mut(|scratch| {
                        // SAFETY: the caller's guarantee.
                        unsafe { quantize_in::<C>(row, w, y, scratch) }
                    })
                }

                unsafe fn dequantize<C: SimdCodec>(x: &[u8], y: &mut [f32], stream: bool) {
                    // SAFETY: the caller's guarantee.
                    unsafe { dequantize_in::<C>(x, y, stream) }
                }

                unsafe fn first_non_finite(x: &[f32]) -> Option<usize> {
                    // SAFETY: the caller's guarantee.
                    unsafe { first_non_finite_in(x) }
                }
            }
        };
    };
}
pub(crate) use entry_points;

/// Declares a [`SimdCodec`] whose quantizer is a lane function `(x, imatrix, blocks)` of
/// the file it is declared in (its caller checks each row for NaN and infinity first) and
/// whose dequantizer is either the scalar one of `scalar::$scalar`, compiled for the ISA,
/// or (`dequantize = f`) a lane function `f::<V>(blocks, y, stream)` of that file.
macro_rules! row_codec {
    ($(#[$doc:meta])* $name:ident => $quantize:ident, $scalar:ident) => {
        $crate::simd::row_codec!(@impl $(#[$doc])* $name => $quantize, [V, x, y, _stream]
            crate::scalar::$scalar::dequantize_row(crate::simd::blocks(x), y));
    };
    ($(#[$doc:meta])* $name:ident => $quantize:ident, dequantize = $dequantize:ident) => {
        $crate::simd::row_codec!(@impl $(#[$doc])* $name => $quantize, [V, x, y, stream]
            $dequantize::<V>(crate::simd::blocks(x), y, stream));
    };
    (@impl $(#[$doc:meta])* $name:ident => $quantize:ident,
        [$v:ident, $x:ident, $y:ident, $stream:ident] $dequantize:expr) => {
        $(#[$doc])*
        #[allow(non_camel_case_types)]
        pub(crate) struct $name;

        impl crate::simd::SimdCodec for $name {
            #[inline(always)]
            fn quantize<V: Lanes>(
                row: crate::simd::Row<'_>,
                w: Option<&[f32]>,
                y: &mut [u8],
                _: &mut crate::simd::Scratch<V>,
            ) -> bool {
                $quantize::<V>(row.values, w, crate::simd::blocks_mut(y));
                true
            }

            #[inline(always)]
            fn dequantize<$v: Lanes>($x: &[u8], $y: &mut [f32], $stream: bool) {
                $dequantize
            }
        }
    };
}
pub(crate) use row_codec;

/// Casts a row's bytes to the blocks of its type (alignment 1, so any slice of whole
/// blocks casts).
#[inline(always)]
pub(crate) fn blocks_mut<B: bytemuck::Pod>(y: &mut [u8]) -> &mut [B] {
    bytemuck::cast_slice_mut(y)
}

/// Casts whole blocks' bytes to the blocks.
#[inline(always)]
pub(crate) fn blocks<B: bytemuck::Pod>(x: &[u8]) -> &[B] {
    bytemuck::cast_slice(x)
}
