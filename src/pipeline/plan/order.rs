//! How llama.cpp's loader orders and reads a model's tensor list: the layer in a name,
//! the load order, and the file type it guesses when the metadata has none.

use super::{FILE_TYPE_GUESSED, FileType, TensorSpec};
use quantforge_kernels::GgmlType;

/// The layer in a tensor name as llama.cpp reads it with `sscanf(name, "blk.%d.", ..)`:
/// after the literal `blk.`, optional whitespace, a sign and digits; the rest is ignored.
pub(super) fn layer_of(name: &str) -> Option<i64> {
    let rest = name.strip_prefix("blk.")?;
    let rest = rest.trim_start_matches([' ', '\t', '\n', '\x0b', '\x0c', '\r']);
    let (negative, rest) = match rest.as_bytes().first() {
        Some(b'-') => (true, &rest[1..]),
        Some(b'+') => (false, &rest[1..]),
        _ => (false, rest),
    };
    let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
    if digits == 0 {
        return None;
    }
    // glibc converts with strtol (saturating at the i64 range) and stores into an int.
    let magnitude = rest[..digits].parse::<i64>().unwrap_or(i64::MAX);
    let value = if negative {
        magnitude.checked_neg().unwrap_or(i64::MIN)
    } else {
        magnitude
    };
    Some(i64::from(value as i32))
}

/// The key llama.cpp's loader sorts tensors by (`weight_name_comparer`).
pub(super) fn load_order(a: &TensorSpec, b: &TensorSpec) -> std::cmp::Ordering {
    let la = layer_of(&a.name).unwrap_or(-1);
    let lb = layer_of(&b.name).unwrap_or(-1);
    la.cmp(&lb)
        .then_with(|| a.name.as_bytes().cmp(b.name.as_bytes()))
}

/// The file type llama.cpp's loader guesses when a file has no `general.file_type`: that
/// of the most common tensor type (the first to reach the top count, in load order).
pub(super) fn guess_file_type(ordered: &[&TensorSpec]) -> u32 {
    let mut counts = std::collections::HashMap::new();
    let (mut best, mut best_count) = (GgmlType::F32, 0u32);
    for t in ordered {
        let n = counts.entry(t.ty).or_insert(0u32);
        *n += 1;
        if *n > best_count {
            (best, best_count) = (t.ty, *n);
        }
    }
    use FileType as F;
    use GgmlType as T;
    let ftype = match best {
        T::F16 => F::F16,
        T::BF16 => F::BF16,
        T::Q4_0 => F::Q4_0,
        T::Q4_1 => F::Q4_1,
        T::Q5_0 => F::Q5_0,
        T::Q5_1 => F::Q5_1,
        T::Q8_0 => F::Q8_0,
        T::Q2_K => F::Q2_K,
        T::Q3_K => F::Q3_K_M,
        T::Q4_K => F::Q4_K_M,
        T::Q5_K => F::Q5_K_M,
        T::Q6_K => F::Q6_K,
        T::TQ1_0 => F::TQ1_0,
        T::TQ2_0 => F::TQ2_0,
        T::IQ2_XXS => F::IQ2_XXS,
        T::IQ2_XS => F::IQ2_XS,
        T::IQ2_S => F::IQ2_S,
        T::IQ3_XXS => F::IQ3_XXS,
        T::IQ1_S => F::IQ1_S,
        T::IQ1_M => F::IQ1_M,
        T::IQ4_NL => F::IQ4_NL,
        T::IQ4_XS => F::IQ4_XS,
        T::IQ3_S => F::IQ3_S,
        T::NVFP4 => F::NVFP4,
        T::Q1_0 => F::Q1_0,
        T::Q2_0 => F::Q2_0,
        _ => F::F32,
    };
    ftype.code() | FILE_TYPE_GUESSED
}
