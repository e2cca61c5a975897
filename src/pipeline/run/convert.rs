//! The converting side of a run: a batch's pieces cut into tasks of whole rows (or of
//! bytes, for a copied tensor), run on the current rayon pool straight into the batch's
//! slab; each task widens its rows to f32 and quantizes them, each run of rows of one
//! expert with that expert's importance values.

use super::RunError;
use super::schedule::{Extent, RowSizes, group_bytes, row_sizes, task_rows};
use super::write::{Filled, Job};
use crate::model::Tensor;
use crate::pipeline::plan::TensorPlan;
use crate::slab::COPY_TASK_BYTES;
use quantforge_formats::output::AlignedBuffer;
use quantforge_kernels::{can_dequantize, can_quantize};
use rayon::prelude::*;

impl Job<'_, '_> {
    /// Lets the source pages of the pieces in batch `b` leave the resident set.
    pub(super) fn release(&self, b: usize) -> Result<(), RunError> {
        for p in &self.pieces[self.batches[b].clone()] {
            if !p.src.is_empty() {
                self.sources[p.tensor].release(p.src.clone())?;
            }
        }
        Ok(())
    }

    /// Asks for the source pages of the pieces in batch `b`.
    pub(super) fn prefetch(&self, b: usize) -> Result<(), RunError> {
        for p in &self.pieces[self.batches[b].clone()] {
            if !p.src.is_empty() {
                self.sources[p.tensor].prefetch(p.src.clone())?;
            }
        }
        Ok(())
    }

    /// Converts (or copies) the pieces of batch `b` into `slab` (as large as the largest
    /// batch needs), their rows spread over the pool in tasks of about
    /// [`crate::slab::TASK_ELEMENTS`];
    /// beside them, releases the source pages of the batch converted `before` and asks
    /// for those of the `next` one.
    pub(super) fn fill(
        &self,
        b: usize,
        mut slab: AlignedBuffer,
        before: Option<usize>,
        next: Option<usize>,
    ) -> Result<Filled, RunError> {
        let pieces = &self.pieces[self.batches[b].clone()];
        let first = &pieces[0];
        let Extent { skip, len } = self.extent(b);
        let at = first.at;
        let mut tasks: Vec<Task<'_, '_>> = Vec::new();
        let mut rest = &mut slab.as_mut_slice()[skip..skip + len];
        for p in pieces {
            let (out, more) = std::mem::take(&mut rest).split_at_mut(p.out_len);
            let (pad, more) = more.split_at_mut(p.pad);
            pad.fill(0);
            rest = more;
            let t = &self.plan.tensors[p.tensor];
            let src = self.sources[p.tensor].bytes(p.src.clone())?;
            match row_sizes(t, self.sources[p.tensor])? {
                Some(RowSizes {
                    src: src_row,
                    dst: dst_row,
                }) => {
                    let group = self.sources[p.tensor].row_group();
                    let task_rows = task_rows(t, group);
                    let first_row = p.src.start / src_row;
                    let mut out = out;
                    for (k, x) in src.chunks(task_rows * src_row).enumerate() {
                        let (y, more) =
                            std::mem::take(&mut out).split_at_mut(x.len() / src_row * dst_row);
                        out = more;
                        tasks.push(Task::Convert {
                            tensor: p.tensor,
                            x,
                            first_row: first_row + k * task_rows,
                            y,
                        });
                    }
                }
                None if p.out_len > 0 => {
                    let group = self.sources[p.tensor].row_group();
                    let len = self.sources[p.tensor].len();
                    let chunk = if group > 1 {
                        COPY_TASK_BYTES.next_multiple_of(group_bytes(t, len, group))
                    } else {
                        COPY_TASK_BYTES
                    };
                    for (x, y) in src.chunks(chunk).zip(out.chunks_mut(chunk)) {
                        tasks.push(Task::Copy {
                            tensor: p.tensor,
                            x,
                            y,
                        });
                    }
                }
                None => {}
            }
        }
        let (kept, converted) = rayon::join(
            || -> Result<(), RunError> {
                if let Some(before) = before {
                    self.release(before)?;
                }
                match next {
                    Some(next) => self.prefetch(next),
                    None => Ok(()),
                }
            },
            || {
                tasks.into_par_iter().try_for_each(|task| match task {
                    Task::Copy { tensor, x, y } => {
                        let source = self.sources[tensor];
                        if source.row_group() > 1 {
                            let rows: u64 = self.plan.tensors[tensor].ne[1..].iter().product();
                            let row_bytes = source.len() / rows.max(1) as usize;
                            let mut buf = REORDERED.take();
                            source.reorder_groups(x, row_bytes, &mut buf);
                            y.copy_from_slice(&buf);
                            REORDERED.set(buf);
                        } else {
                            y.copy_from_slice(x);
                        }
                        Ok(())
                    }
                    Task::Convert {
                        tensor,
                        x,
                        first_row,
                        y,
                    } => {
                        let t = &self.plan.tensors[tensor];
                        let n = y.len() / t.target.type_size() * t.target.block_size();
                        let mut f32s = SCRATCH.take();
                        f32s.resize(n, 0.0);
                        let source = self.sources[tensor];
                        let done = if source.row_group() > 1 {
                            let rows =
                                y.len() / t.target.row_size(t.ne[0] as usize).unwrap_or(1).max(1);
                            let mut buf = REORDERED.take();
                            source.reorder_groups(x, x.len() / rows.max(1), &mut buf);
                            let done = convert_rows(
                                t,
                                source,
                                &buf,
                                &mut f32s[..n],
                                first_row,
                                self.weights[tensor],
                                y,
                            );
                            REORDERED.set(buf);
                            done
                        } else {
                            convert_rows(
                                t,
                                source,
                                x,
                                &mut f32s[..n],
                                first_row,
                                self.weights[tensor],
                                y,
                            )
                        };
                        SCRATCH.set(f32s);
                        done
                    }
                })
            },
        );
        kept?;
        converted?;
        Ok(Filled {
            batch: Some(b),
            slab,
            skip,
            len,
            part: first.part,
            at,
        })
    }
}

/// One parallel task of [`Job::fill`].
enum Task<'s, 'o> {
    /// Rows of a converted tensor, from row `first_row` on.
    Convert {
        tensor: usize,
        x: &'s [u8],
        first_row: usize,
        y: &'o mut [u8],
    },
    /// Bytes of a copied tensor (whole row groups of one read in interleaved groups).
    Copy {
        tensor: usize,
        x: &'s [u8],
        y: &'o mut [u8],
    },
}

/// An error unless `t` is copied, or its source type can be widened and its target type
/// quantized.
pub(super) fn check_convertible(t: &TensorPlan) -> Result<(), RunError> {
    if !t.converts() {
        return Ok(());
    }
    if !can_dequantize(t.source) {
        return Err(RunError::CannotDecode {
            tensor: t.name.clone(),
            ty: t.source,
        });
    }
    if !can_quantize(t.target) {
        return Err(RunError::CannotEncode {
            tensor: t.name.clone(),
            ty: t.target,
        });
    }
    Ok(())
}

thread_local! {
    /// Each worker's f32 rows, kept between tasks and tensors (a fresh buffer per task
    /// would be mapped, faulted in and unmapped every time).
    static SCRATCH: std::cell::Cell<Vec<f32>> = const { std::cell::Cell::new(Vec::new()) };
    /// Each worker's source rows put in reading order, for tensors read in interleaved
    /// row groups.
    static REORDERED: std::cell::Cell<Vec<u8>> = const { std::cell::Cell::new(Vec::new()) };
}

/// Widens the source rows `x` of `t` into `f32s` and quantizes them into `y`; the rows
/// start at row `first_row` of the tensor.
#[allow(clippy::too_many_arguments)]
fn convert_rows(
    t: &TensorPlan,
    source: &Tensor<'_>,
    x: &[u8],
    f32s: &mut [f32],
    first_row: usize,
    weights: Option<&[f32]>,
    y: &mut [u8],
) -> Result<(), RunError> {
    let codec_error = |cause| RunError::Codec {
        tensor: t.name.clone(),
        cause,
    };
    let n_per_row = t.ne[0] as usize;
    if source.stored_row_bytes().is_some() {
        source.widen_stored(x, first_row, f32s)?;
    } else {
        quantforge_kernels::dequantize(t.source, x, f32s).map_err(codec_error)?;
    }
    quantize_by_expert(t, f32s, first_row, weights, y).map_err(|e| match e.cause {
        quantforge_kernels::Error::NonFinite { index, value } => {
            let index = (first_row * n_per_row + e.at + index) as u64;
            RunError::NonFinite {
                tensor: t.name.clone(),
                value,
                index,
                row: index / n_per_row as u64,
                column: index % n_per_row as u64,
            }
        }
        other => codec_error(other),
    })
}

/// Quantizes consecutive rows of `t` starting at row `first_row` of the tensor, each run of
/// rows of one expert with that expert's importance values (`llama_tensor_quantize_impl`
/// never lets a chunk cross an expert boundary).
fn quantize_by_expert(
    t: &TensorPlan,
    src: &[f32],
    first_row: usize,
    weights: Option<&[f32]>,
    dst: &mut [u8],
) -> Result<(), ExpertRowsError> {
    let n_per_row = t.ne[0] as usize;
    let Some(weights) = weights else {
        return quantforge_kernels::quantize(t.target, src, n_per_row, None, dst)
            .map(drop)
            .map_err(|cause| ExpertRowsError { at: 0, cause });
    };
    let rows_per_expert = t.ne[1] as usize;
    let n_expert = t.ne[2] as usize;
    let rows = src.len() / n_per_row;
    let dst_row = dst.len() / rows.max(1);
    let mut r = 0;
    while r < rows {
        let row = first_row + r;
        // A 4-D tensor repeats its experts along ne3.
        let expert = (row / rows_per_expert) % n_expert;
        let run = (rows - r).min(rows_per_expert - row % rows_per_expert);
        let w = &weights[expert * n_per_row..(expert + 1) * n_per_row];
        quantforge_kernels::quantize(
            t.target,
            &src[r * n_per_row..(r + run) * n_per_row],
            n_per_row,
            Some(w),
            &mut dst[r * dst_row..(r + run) * dst_row],
        )
        .map_err(|cause| ExpertRowsError {
            at: r * n_per_row,
            cause,
        })?;
        r += run;
    }
    Ok(())
}

/// A codec's failure in [`quantize_by_expert`], and where.
struct ExpertRowsError {
    /// The element offset in the rows given of the call that failed.
    at: usize,
    /// What the codec said.
    cause: quantforge_kernels::Error,
}
