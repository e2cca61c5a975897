//! The real ggml, linked through the crates.io package `llama-cpp-sys-2` (=0.1.161, which
//! vendors ggml 0.26.0), behind a small safe API for parity tests, golden-vector generation
//! and benchmarks. Nothing here reimplements ggml: every call goes to its C code.
//!
//! Types are passed as raw ggml type codes (`enum ggml_type`).

pub mod golden;
pub mod llama;
pub mod remembered;

// Force the native ggml libraries into the link.
extern crate llama_cpp_sys_2;

use std::ffi::{CStr, c_char, c_void};

type ToFloat = unsafe extern "C" fn(x: *const c_void, y: *mut f32, k: i64);
type FromFloat = unsafe extern "C" fn(x: *const f32, y: *mut c_void, k: i64);

/// `struct ggml_type_traits` of `ggml.h`.
#[repr(C)]
struct TypeTraits {
    type_name: *const c_char,
    blck_size: i64,
    blck_size_interleave: i64,
    type_size: usize,
    is_quantized: bool,
    to_float: Option<ToFloat>,
    from_float_ref: Option<FromFloat>,
}

/// `struct ggml_type_traits_cpu` of `ggml-cpu.h`.
#[repr(C)]
struct TypeTraitsCpu {
    from_float: Option<FromFloat>,
    vec_dot: *const c_void,
    vec_dot_type: u32,
    nrows: i64,
}

unsafe extern "C" {
    fn ggml_get_type_traits(ty: u32) -> *const TypeTraits;
    fn ggml_get_type_traits_cpu(ty: u32) -> *const TypeTraitsCpu;
    fn ggml_cpu_init();
    fn ggml_quantize_requires_imatrix(ty: u32) -> bool;
    fn ggml_quantize_init(ty: u32);
    fn ggml_quantize_chunk(
        ty: u32,
        src: *const f32,
        dst: *mut c_void,
        start: i64,
        nrows: i64,
        n_per_row: i64,
        imatrix: *const f32,
    ) -> usize;
    fn quantize_row_q8_K_ref(x: *const f32, y: *mut c_void, k: i64);
    fn dequantize_row_q8_K(x: *const c_void, y: *mut f32, k: i64);
}

/// ggml's code for q8_1, which `ggml_quantize_chunk` leaves out.
const Q8_1: u32 = 9;
/// ggml's code for q8_K, which `ggml_quantize_chunk` and the type traits leave out.
const Q8_K: u32 = 15;
/// The number of type codes ggml defines (`GGML_TYPE_COUNT`).
pub const TYPE_COUNT: u32 = 43;

fn traits(ty: u32) -> Option<&'static TypeTraits> {
    if ty >= TYPE_COUNT {
        return None;
    }
    // SAFETY: ggml returns a pointer into its static `type_traits` table for every code
    // below GGML_TYPE_COUNT.
    let t = unsafe { &*ggml_get_type_traits(ty) };
    (t.blck_size > 0).then_some(t)
}

/// Name, block size and bytes per block of a type as ggml's traits give them, or `None`
/// for codes of removed types.
pub fn type_info(ty: u32) -> Option<(String, usize, usize, bool)> {
    let t = traits(ty)?;
    // SAFETY: type_name points to a static NUL-terminated string.
    let name = unsafe { CStr::from_ptr(t.type_name) }
        .to_string_lossy()
        .into_owned();
    Some((name, t.blck_size as usize, t.type_size, t.is_quantized))
}

/// `ggml_quantize_init(ty)`: builds the i-quants' grid maps and neighbour lists (a no-op
/// for other types and after the first call). [`quantize_chunk`] calls it too; benchmarks
/// call it first to time it apart from the quantizer.
pub fn quantize_init(ty: u32) {
    if ty < TYPE_COUNT {
        // SAFETY: ggml serializes the initialisation with its own mutex; any valid code.
        unsafe { ggml_quantize_init(ty) };
    }
}

/// Whether ggml insists on an importance matrix for this type.
pub fn requires_imatrix(ty: u32) -> bool {
    // SAFETY: a pure function of the code.
    ty < TYPE_COUNT && unsafe { ggml_quantize_requires_imatrix(ty) }
}

fn row_bytes(ty: u32, n_per_row: usize) -> usize {
    let t = traits(ty).expect("a live ggml type");
    assert_eq!(n_per_row % t.blck_size as usize, 0, "row not whole blocks");
    n_per_row / t.blck_size as usize * t.type_size
}

/// `ggml_quantize_chunk(ty, src, dst, 0, nrows, n_per_row, imatrix)`; q8_1 and q8_K,
/// which that function does not handle, go to their `quantize_row_*_ref`.
///
/// Panics (instead of letting ggml abort) on lengths ggml would reject.
pub fn quantize_chunk(ty: u32, src: &[f32], n_per_row: usize, imatrix: Option<&[f32]>) -> Vec<u8> {
    assert!(n_per_row > 0 && src.len().is_multiple_of(n_per_row));
    let mut dst = vec![0u8; src.len() / n_per_row * row_bytes(ty, n_per_row)];
    quantize_chunk_into(ty, src, n_per_row, imatrix, &mut dst);
    dst
}

/// [`quantize_chunk`] into a caller's buffer of exactly the right size (for benchmarks).
pub fn quantize_chunk_into(
    ty: u32,
    src: &[f32],
    n_per_row: usize,
    imatrix: Option<&[f32]>,
    dst: &mut [u8],
) {
    assert!(n_per_row > 0 && src.len().is_multiple_of(n_per_row));
    let nrows = src.len() / n_per_row;
    assert_eq!(dst.len(), nrows * row_bytes(ty, n_per_row));
    if let Some(w) = imatrix {
        assert_eq!(w.len(), n_per_row);
    }
    assert!(imatrix.is_some() || !requires_imatrix(ty));
    if src.is_empty() {
        return;
    }
    if ty == Q8_K || ty == Q8_1 {
        let f = if ty == Q8_K {
            quantize_row_q8_K_ref as FromFloat
        } else {
            traits(ty)
                .and_then(|t| t.from_float_ref)
                .expect("q8_1 has a reference quantizer")
        };
        // SAFETY: dst is exactly the size of src.len() elements of the type.
        unsafe { f(src.as_ptr(), dst.as_mut_ptr().cast(), src.len() as i64) };
        return;
    }
    let w = imatrix.map_or(std::ptr::null(), |w| w.as_ptr());
    // SAFETY: lengths checked above: dst is exactly nrows rows of the type, src holds
    // nrows * n_per_row floats, the imatrix n_per_row floats or is null.
    let written = unsafe {
        ggml_quantize_chunk(
            ty,
            src.as_ptr(),
            dst.as_mut_ptr().cast(),
            0,
            nrows as i64,
            n_per_row as i64,
            w,
        )
    };
    assert_eq!(written, dst.len());
}

/// The type's `from_float_ref` (`quantize_row_*_ref`), over `src` as one run of blocks.
/// `None` when ggml has no reference quantizer for the type.
pub fn quantize_row_ref(ty: u32, src: &[f32]) -> Option<Vec<u8>> {
    let f = if ty == Q8_K {
        quantize_row_q8_K_ref as FromFloat
    } else {
        traits(ty)?.from_float_ref?
    };
    let mut dst = vec![0u8; row_bytes(ty, src.len())];
    // SAFETY: dst is exactly the size of src.len() elements of the type.
    unsafe { f(src.as_ptr(), dst.as_mut_ptr().cast(), src.len() as i64) };
    Some(dst)
}

/// ggml-cpu's `from_float` for the type (its SIMD quantizer in this build) into `dst`,
/// exactly the size of `src`'s blocks; false when ggml-cpu has none for the type.
pub fn quantize_row_cpu_into(ty: u32, src: &[f32], dst: &mut [u8]) -> bool {
    let Some(f) = cpu_from_float(ty) else {
        return false;
    };
    assert_eq!(dst.len(), row_bytes(ty, src.len()));
    // SAFETY: dst is exactly the size of src.len() elements of the type.
    unsafe { f(src.as_ptr(), dst.as_mut_ptr().cast(), src.len() as i64) };
    true
}

fn cpu_from_float(ty: u32) -> Option<FromFloat> {
    static INIT: std::sync::Once = std::sync::Once::new();
    traits(ty)?;
    // SAFETY: ggml_cpu_init only fills ggml-cpu's lookup tables; Once serializes it.
    INIT.call_once(|| unsafe { ggml_cpu_init() });
    // SAFETY: a pointer into ggml-cpu's static table for a valid code.
    unsafe { (*ggml_get_type_traits_cpu(ty)).from_float }
}

/// The type's `to_float` (`dequantize_row_*`, or `dequantize_row_q8_K` for q8_K) over
/// whole blocks. `None` when ggml has no dequantizer for the type.
pub fn dequantize_row(ty: u32, src: &[u8]) -> Option<Vec<f32>> {
    let t = traits(ty)?;
    assert_eq!(src.len() % t.type_size, 0, "source not whole blocks");
    let mut dst = vec![0f32; src.len() / t.type_size * t.blck_size as usize];
    dequantize_row_into(ty, src, &mut dst).then_some(dst)
}

/// [`dequantize_row`] into a caller's buffer of exactly the right size; false when ggml
/// has no dequantizer for the type.
pub fn dequantize_row_into(ty: u32, src: &[u8], dst: &mut [f32]) -> bool {
    let Some(t) = traits(ty) else { return false };
    let f = if ty == Q8_K {
        dequantize_row_q8_K as ToFloat
    } else {
        match t.to_float {
            Some(f) => f,
            None => return false,
        }
    };
    assert_eq!(src.len() % t.type_size, 0, "source not whole blocks");
    let n = src.len() / t.type_size * t.blck_size as usize;
    assert_eq!(dst.len(), n);
    // SAFETY: src holds n / blck_size whole blocks, dst n floats.
    unsafe { f(src.as_ptr().cast(), dst.as_mut_ptr(), n as i64) };
    true
}
