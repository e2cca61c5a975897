//! The one slab engine of every whole-model job (quantize, dequantize, diff, convert):
//! how much of a model is handled at once, and how that is cut into parallel tasks.
//!
//! A job goes through its tensors a slab at a time: about [`SLAB_BYTES`] of source (or of
//! output, when that is wider), whose pages are asked for a slab ahead and released once
//! used, so memory stays near a few slabs whatever the model's size. A slab is cut into
//! tasks of about [`TASK_ELEMENTS`] values (whole rows) that the current rayon pool runs;
//! each row is handled by itself, so results never depend on the thread count.

use crate::error::Result;
use crate::model::Tensor;
use std::ops::Range;

/// Bytes of source (or of output, if larger) handled per slab.
pub const SLAB_BYTES: usize = 16 << 20;
/// Elements each parallel task widens, quantizes or decodes (llama.cpp's chunk is 16 Ki).
pub const TASK_ELEMENTS: usize = 64 << 10;
/// Bytes each parallel task copies when a tensor is copied as it is: as many as a task of
/// f32 values reads.
pub const COPY_TASK_BYTES: usize = 4 * TASK_ELEMENTS;

/// Rows of `row_len` elements per parallel task: about [`TASK_ELEMENTS`], at least one.
pub fn task_rows(row_len: usize) -> usize {
    (TASK_ELEMENTS / row_len.max(1)).max(1)
}

/// Rows per slab when the widest row (source or output) has `row_bytes` bytes: about
/// [`SLAB_BYTES`], at least one, and a whole number of tasks of `task_rows`.
pub fn slab_rows(row_bytes: usize, task_rows: usize) -> usize {
    (SLAB_BYTES / row_bytes.max(1))
        .max(1)
        .next_multiple_of(task_rows)
}

/// `rows` cut into ranges of `task_rows`.
pub fn tasks(rows: Range<usize>, task_rows: usize) -> Vec<Range<usize>> {
    rows.clone()
        .step_by(task_rows.max(1))
        .map(|start| start..(start + task_rows).min(rows.end))
        .collect()
}

/// Calls `f` with consecutive ranges of the tensor's bytes, [`SLAB_BYTES`] each (the last
/// shorter; one empty range for a tensor without data): a copy of the tensor as it is.
/// Each range's pages are asked for before the previous one is handed over and released
/// after it.
pub fn for_each_byte_slab(
    tensor: &Tensor<'_>,
    mut f: impl FnMut(Range<usize>) -> Result<()>,
) -> Result<()> {
    let len = tensor.data().len();
    if len == 0 {
        return f(0..0);
    }
    let slabs: Vec<Range<usize>> = (0..len)
        .step_by(SLAB_BYTES)
        .map(|start| start..(start + SLAB_BYTES).min(len))
        .collect();
    tensor.prefetch(slabs[0].clone())?;
    for (i, slab) in slabs.iter().enumerate() {
        if let Some(next) = slabs.get(i + 1) {
            tensor.prefetch(next.clone())?;
        }
        f(slab.clone())?;
        tensor.release(slab.clone())?;
    }
    Ok(())
}

/// Calls `f` with consecutive ranges of rows covering tensors with the same row count:
/// each a whole number of tasks and about [`SLAB_BYTES`] of the widest of the tensors'
/// rows and `out_row_bytes`. Each slab's pages are asked for before the previous slab is
/// handed over and released after it.
pub fn for_each_slab(
    tensors: &[&Tensor<'_>],
    out_row_bytes: usize,
    mut f: impl FnMut(Range<usize>) -> Result<()>,
) -> Result<()> {
    let Some(first) = tensors.first() else {
        return Ok(());
    };
    let n_rows = first.n_rows();
    let row_bytes = tensors
        .iter()
        .map(|t| t.row_bytes())
        .collect::<Result<Vec<_>>>()?;
    let widest = row_bytes.iter().copied().fold(out_row_bytes, usize::max);
    let task_rows = first.task_rows();
    let slab_rows = slab_rows(widest, task_rows);
    let bytes = |t: usize, rows: &Range<usize>| rows.start * row_bytes[t]..rows.end * row_bytes[t];
    let slabs: Vec<Range<usize>> = (0..n_rows)
        .step_by(slab_rows)
        .map(|start| start..(start + slab_rows).min(n_rows))
        .collect();
    if let Some(slab) = slabs.first() {
        for (t, tensor) in tensors.iter().enumerate() {
            tensor.prefetch(bytes(t, slab))?;
        }
    }
    for (i, slab) in slabs.iter().enumerate() {
        if let Some(next) = slabs.get(i + 1) {
            for (t, tensor) in tensors.iter().enumerate() {
                tensor.prefetch(bytes(t, next))?;
            }
        }
        f(slab.clone())?;
        for (t, tensor) in tensors.iter().enumerate() {
            tensor.release(bytes(t, slab))?;
        }
    }
    Ok(())
}
