//! Writing a [`Conversion`]: the header, then each tensor a slab of rows at a time, its
//! rows widened to f32 and encoded on all threads, into a file that takes its name only
//! when complete (so a failed or interrupted run leaves nothing under OUT).

use super::{Conversion, OutTensor, Part};
use crate::error::{Context, Result};
use quantforge_formats::gguf::{AtomicFile, GgufBuilder, GgufWriter};
use quantforge_formats::safetensors::{self as st, Dtype};
use quantforge_kernels::GgmlType;
use rayon::prelude::*;
use std::io::Write;
use std::path::{Path, PathBuf};

/// What [`write`] wrote.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Written {
    /// The output file.
    pub path: PathBuf,
    /// Tensors written.
    pub tensors: usize,
    /// The file's size.
    pub bytes: u64,
}

/// Output bytes per slab: large enough to keep every thread busy, small enough that
/// memory does not grow with the model.
const SLAB_BYTES: usize = 8 << 20;

/// Rows per parallel task (about 256 KiB of f32 each).
fn task_rows(row_len: usize) -> usize {
    ((256 << 10) / 4 / row_len.max(1)).max(1)
}

/// The ggml type whose bytes a safetensors dtype already has.
fn same_bytes(d: Dtype) -> Option<GgmlType> {
    match d {
        Dtype::F32 => Some(GgmlType::F32),
        Dtype::F16 => Some(GgmlType::F16),
        Dtype::BF16 => Some(GgmlType::BF16),
        _ => None,
    }
}

/// Writes `conv` to `path`.
pub fn write(conv: &Conversion<'_>, path: &Path) -> Result<Written> {
    let mut b = GgufBuilder::new();
    *b.metadata_mut() = conv.metadata.clone();
    for t in &conv.tensors {
        b.declare_tensor(t.name.clone(), t.ty, &t.ne)?;
    }
    if conv.tensors.is_empty() {
        // The converter's vocabulary-only file ends with the last key: no tensor
        // directory, no padding.
        let layout = b.header().layout()?;
        let mut bytes = b.to_bytes()?;
        bytes.truncate(layout.header_size as usize);
        let mut f = AtomicFile::create(path)?;
        f.write_all(&bytes).map_err(|e| {
            crate::error::Error::invalid(format!("cannot write {}: {e}", path.display()))
        })?;
        f.commit()?;
        return Ok(Written {
            path: path.to_path_buf(),
            tensors: 0,
            bytes: bytes.len() as u64,
        });
    }
    let mut w = b.create(path)?;
    let mut gathered = Vec::new();
    if let Some(first) = conv.tensors.first() {
        prefetch(first)?;
    }
    for (i, t) in conv.tensors.iter().enumerate() {
        // The next tensor's pages are asked for while this one is converted, and this
        // one's let go once written: memory does not grow with the model.
        if let Some(next) = conv.tensors.get(i + 1) {
            prefetch(next)?;
        }
        write_tensor(t, &mut w, &mut gathered)?;
    }
    let bytes = w.bytes_written();
    w.commit()?;
    Ok(Written {
        path: path.to_path_buf(),
        tensors: conv.tensors.len(),
        bytes,
    })
}

/// The converter's parts under `--split-max-tensors` / `--split-max-size` (gguf-py's
/// `add_tensor_info`): a new part begins when the current one, not empty, holds
/// `max_tensors` tensors or would grow past `max_bytes` of (unpadded) data with the next.
pub fn split_parts(
    tensors: &[OutTensor<'_>],
    max_tensors: Option<u64>,
    max_bytes: Option<u64>,
) -> Result<Vec<std::ops::Range<usize>>> {
    let mut parts: Vec<std::ops::Range<usize>> = Vec::new();
    parts.push(0..0);
    let mut bytes = 0u64;
    for (i, t) in tensors.iter().enumerate() {
        let n = t.ty.row_size(t.ne.first().copied().unwrap_or(1) as usize)? as u64
            * t.ne.iter().skip(1).product::<u64>();
        let cur = parts.last_mut().expect("one part at least");
        let full = cur.start < cur.end
            && (max_tensors.is_some_and(|m| cur.len() as u64 >= m)
                || max_bytes.is_some_and(|m| bytes + n > m));
        if full {
            parts.push(i..i);
            bytes = 0;
        }
        let cur = parts.last_mut().expect("one part at least");
        cur.end = i + 1;
        bytes += n;
    }
    Ok(parts)
}

/// The converter's part names: `STEM-00001-of-00003.gguf` beside `path`.
pub fn part_paths(path: &Path, n: usize) -> Vec<PathBuf> {
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    (1..=n)
        .map(|i| path.with_file_name(format!("{stem}-{i:05}-of-{n:05}.gguf")))
        .collect()
}

/// Writes `conv` as the converter does with `--split-max-tensors`/`--split-max-size`: one
/// file when the tensors fit in one part, else parts named by [`part_paths`], the first
/// with every key and each with `split.no`, `split.count` and `split.tensors.count`
/// (in that order) last. No part takes its name until every part is written.
///
/// `small_first` is the converter's `--no-tensor-first-split`: the first part holds the
/// keys and no tensor, the tensors follow in parts of their own.
pub fn write_split(
    conv: &Conversion<'_>,
    path: &Path,
    max_tensors: Option<u64>,
    max_bytes: Option<u64>,
    small_first: bool,
) -> Result<Vec<Written>> {
    let mut parts = split_parts(&conv.tensors, max_tensors, max_bytes)?;
    if small_first && !conv.tensors.is_empty() {
        parts.insert(0, 0..0);
    }
    if parts.len() <= 1 || conv.tensors.is_empty() {
        return Ok(vec![write(conv, path)?]);
    }
    let paths = part_paths(path, parts.len());
    let count = u16::try_from(parts.len())
        .map_err(|_| crate::error::Error::invalid("more than 65535 parts"))?;
    let total = i32::try_from(conv.tensors.len())?;
    let mut writers = Vec::with_capacity(parts.len());
    for (k, (range, p)) in parts.iter().zip(&paths).enumerate() {
        let mut b = GgufBuilder::new();
        if k == 0 {
            *b.metadata_mut() = conv.metadata.clone();
        }
        let md = b.metadata_mut();
        md.set("split.no", quantforge_formats::gguf::Value::U16(k as u16))?;
        md.set("split.count", quantforge_formats::gguf::Value::U16(count))?;
        md.set(
            "split.tensors.count",
            quantforge_formats::gguf::Value::I32(total),
        )?;
        for t in &conv.tensors[range.clone()] {
            b.declare_tensor(t.name.clone(), t.ty, &t.ne)?;
        }
        writers.push(b.create(p)?);
    }
    let mut gathered = Vec::new();
    for (range, w) in parts.iter().zip(writers.iter_mut()) {
        for t in &conv.tensors[range.clone()] {
            prefetch(t)?;
            write_tensor(t, w, &mut gathered)?;
        }
    }
    let mut out = Vec::with_capacity(writers.len());
    for ((range, w), p) in parts.iter().zip(writers).zip(paths) {
        let bytes = w.bytes_written();
        w.commit()?;
        out.push(Written {
            path: p,
            tensors: range.len(),
            bytes,
        });
    }
    Ok(out)
}

/// Asks for a tensor's pages ahead of its conversion.
fn prefetch(t: &OutTensor<'_>) -> Result<()> {
    for p in &t.parts {
        if let Some(file) = p.file {
            file.prefetch(&p.bytes)?;
        }
    }
    Ok(())
}

/// Lets go of a mapped part's pages once written (not a permuted one's, whose rows are
/// read out of order).
fn release(t: &OutTensor<'_>, p: &Part<'_>, bytes: &[u8]) -> Result<()> {
    if let Some(file) = p.file
        && t.permute.is_none()
    {
        file.release(bytes)?;
    }
    Ok(())
}

/// Writes one tensor's data: its parts in turn, each part's rows gathered in output
/// order, widened and encoded a slab at a time on all threads (or copied when the type
/// does not change).
fn write_tensor<W: Write>(
    t: &OutTensor<'_>,
    w: &mut GgufWriter<'_, W>,
    gathered: &mut Vec<u8>,
) -> Result<()> {
    let elem = t
        .dtype
        .bytes_of(1)
        .with_context(|| format!("tensor `{}`", t.source_name))?;
    let row_len = t.ne.first().copied().unwrap_or(1) as usize;
    let total: usize = t.parts.iter().map(|p| p.bytes.len()).sum();
    if total == 0 {
        w.write_chunk(&[])?;
        return Ok(());
    }
    for p in &t.parts {
        write_part(t, p, elem, row_len, w, gathered)?;
    }
    Ok(())
}

/// Writes one part of a tensor (whole rows).
fn write_part<W: Write>(
    t: &OutTensor<'_>,
    p: &Part<'_>,
    elem: usize,
    row_len: usize,
    w: &mut GgufWriter<'_, W>,
    gathered: &mut Vec<u8>,
) -> Result<()> {
    let src: &[u8] = &p.bytes;
    let rows_permuted = t.permute.is_some();
    if same_bytes(t.dtype) == Some(t.ty) && !rows_permuted {
        for chunk in src.chunks(SLAB_BYTES) {
            w.write_chunk(chunk)?;
            release(t, p, chunk)?;
        }
        return Ok(());
    }
    let src_row = row_len * elem;
    let n_rows = src.len() / src_row.max(1);
    let dst_row = t.ty.row_size(row_len)?;
    let task = task_rows(row_len);
    let slab_rows = (SLAB_BYTES / dst_row.max(1)).max(1).div_ceil(task) * task;
    let mut out = vec![0u8; slab_rows.min(n_rows) * dst_row];
    let mut row = 0;
    while row < n_rows {
        let rows = slab_rows.min(n_rows - row);
        let x: &[u8] = if rows_permuted {
            gathered.clear();
            for r in row..row + rows {
                let s = t.source_index(r, n_rows);
                gathered.extend_from_slice(&src[s * src_row..(s + 1) * src_row]);
            }
            gathered
        } else {
            &src[row * src_row..(row + rows) * src_row]
        };
        let y = &mut out[..rows * dst_row];
        if same_bytes(t.dtype) == Some(t.ty) {
            y.copy_from_slice(x);
        } else {
            y.par_chunks_mut(task * dst_row)
                .zip(x.par_chunks(task * src_row))
                .enumerate()
                .try_for_each_init(Vec::new, |buf: &mut Vec<f32>, (k, (y, x))| -> Result<()> {
                    let n = x.len() / src_row * row_len;
                    buf.resize(n, 0.0);
                    st::decode_f32_into(&t.source_name, t.dtype, x, buf)?;
                    if let Some((scale, first)) = &p.scale {
                        // The scale of the row as stored, before any permutation.
                        for (i, r) in buf.chunks_mut(row_len.max(1)).enumerate() {
                            let out_row = row + k * task + i;
                            scale.apply_row(first + t.source_index(out_row, n_rows), r);
                        }
                    }
                    encode(t.ty, buf, row_len, y)
                        .with_context(|| format!("tensor `{}`", t.source_name))
                })?;
        }
        w.write_chunk(y)?;
        release(t, p, x)?;
        row += rows;
    }
    Ok(())
}

/// Encodes f32 rows as `ty`.
fn encode(ty: GgmlType, x: &[f32], row_len: usize, y: &mut [u8]) -> Result<()> {
    if ty == GgmlType::F32 {
        y.copy_from_slice(bytemuck::cast_slice(x));
        return Ok(());
    }
    quantforge_kernels::quantize(ty, x, row_len, None, y)?;
    Ok(())
}
