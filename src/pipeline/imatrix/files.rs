//! Imatrix files laid out as llama-imatrix writes them (`save_imatrix_legacy` and
//! `save_imatrix` in `tools/imatrix/imatrix.cpp`), for tests: the unit tests of
//! `pipeline::imatrix` and the comparison with llama.cpp in `ggml-ref/tests`.
#![allow(dead_code)]

use quantforge_formats::gguf::{Array, GgufBuilder, GgufError, Value};
use quantforge_kernels::GgmlType;

/// One legacy entry: name, ncall, and the values as stored (already scaled by ncall).
pub type LegacyEntry<'a> = (&'a str, i32, &'a [f32]);

/// A legacy file: the entry count, each entry, then the trailer (chunk count and dataset
/// name) when given.
pub fn legacy_bytes(entries: &[LegacyEntry<'_>], trailer: Option<(i32, &str)>) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(&(entries.len() as i32).to_le_bytes());
    for (name, ncall, values) in entries {
        out.extend_from_slice(&(name.len() as i32).to_le_bytes());
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(&ncall.to_le_bytes());
        out.extend_from_slice(&(values.len() as i32).to_le_bytes());
        for v in *values {
            out.extend_from_slice(&v.to_le_bytes());
        }
    }
    if let Some((chunks, dataset)) = trailer {
        out.extend_from_slice(&chunks.to_le_bytes());
        out.extend_from_slice(&(dataset.len() as i32).to_le_bytes());
        out.extend_from_slice(dataset.as_bytes());
    }
    out
}

/// One GGUF entry: name, sums of squares (`ne0` per expert, experts one after another),
/// and one count per expert.
pub type GgufEntry<'a> = (&'a str, &'a [f32], &'a [f32]);

fn f32_bytes(values: &[f32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

/// A GGUF imatrix with its metadata (`general.type`, `imatrix.datasets`,
/// `imatrix.chunk_count`, `imatrix.chunk_size`) and, per entry, `<name>.in_sum2` of
/// `[ne0, experts]` and `<name>.counts` of `[1, experts]`, as a builder the caller can
/// still change.
pub fn gguf_builder(
    entries: &[GgufEntry<'_>],
    datasets: &[&str],
    chunk_count: u32,
    chunk_size: u32,
) -> Result<GgufBuilder<'static>, GgufError> {
    let mut b = GgufBuilder::new();
    let m = b.metadata_mut();
    m.set("general.type", Value::from("imatrix"))?;
    let names = datasets.iter().collect();
    m.set("imatrix.datasets", Value::Array(Array::String(names)))?;
    m.set("imatrix.chunk_count", Value::U32(chunk_count))?;
    m.set("imatrix.chunk_size", Value::U32(chunk_size))?;
    for (name, sums, counts) in entries {
        let n_mat = counts.len() as u64;
        let ne0 = sums.len() as u64 / n_mat.max(1);
        b.add_tensor(
            format!("{name}.in_sum2"),
            GgmlType::F32,
            &[ne0, n_mat],
            f32_bytes(sums),
        )?;
        b.add_tensor(
            format!("{name}.counts"),
            GgmlType::F32,
            &[1, n_mat],
            f32_bytes(counts),
        )?;
    }
    Ok(b)
}
