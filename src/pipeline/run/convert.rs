//! The converting side of a run: a batch's pieces cut into tasks of whole rows (or of
//! bytes, for a copied tensor), run on the current rayon pool straight into the batch's
//! slabs, one per output; each task widens its rows to f32 once and quantizes them for
//! every output that converts them, each run of rows of one expert with that expert's
//! importance values.

use super::RunError;
use super::digest::rows_digest;
use super::quality::Quality;
use super::schedule::{Extent, RowSizes, group_bytes, row_sizes, task_rows};
use super::write::{Filled, Job};
use crate::diff::ErrorStats;
use crate::model::Tensor;
use crate::pipeline::plan::TensorPlan;
use crate::slab::COPY_TASK_BYTES;
use quantforge_formats::output::AlignedBuffer;
use quantforge_kernels::{can_dequantize, can_quantize};
use rayon::prelude::*;

impl Job<'_, '_> {
    /// Lets the source pages of the pieces in batch `b` leave the resident set.
    pub(super) fn release(&self, b: usize) -> Result<(), RunError> {
        for p in self.batch_pieces(0, b) {
            if !p.src.is_empty() {
                self.sources[p.tensor].release(p.src.clone())?;
            }
        }
        Ok(())
    }

    /// Asks for the source pages of the pieces in batch `b`.
    pub(super) fn prefetch(&self, b: usize) -> Result<(), RunError> {
        for p in self.batch_pieces(0, b) {
            if !p.src.is_empty() {
                self.sources[p.tensor].prefetch(p.src.clone())?;
            }
        }
        Ok(())
    }

    /// Converts (or copies) the pieces of batch `b` into `slabs` (one per output, each as
    /// large as the output's largest batch needs), their rows spread over the pool in
    /// tasks of about [`crate::slab::TASK_ELEMENTS`]; beside them, releases the source
    /// pages of the batch converted `before` and asks for those of the `next` one.
    pub(super) fn fill(
        &self,
        b: usize,
        mut slabs: Vec<AlignedBuffer>,
        before: Option<usize>,
        next: Option<usize>,
    ) -> Result<Vec<Filled>, RunError> {
        let extents: Vec<Extent> = (0..slabs.len()).map(|k| self.extent(k, b)).collect();
        // Each output's slab, as the pieces' outputs and padding still to be handed out.
        let mut rest: Vec<&mut [u8]> = slabs
            .iter_mut()
            .zip(&extents)
            .map(|(slab, e)| &mut slab.as_mut_slice()[e.skip..e.skip + e.len])
            .collect();
        let mut tasks: Vec<Task<'_, '_>> = Vec::new();
        for j in self.batches[b].clone() {
            let mut outs: Vec<&mut [u8]> = Vec::with_capacity(rest.len());
            for (k, rest) in rest.iter_mut().enumerate() {
                let p = &self.pieces[k][j];
                let (out, more) = std::mem::take(rest).split_at_mut(p.out_len);
                let (pad, more) = more.split_at_mut(p.pad);
                pad.fill(0);
                *rest = more;
                outs.push(out);
            }
            self.piece_tasks(j, outs, &mut tasks)?;
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
                tasks
                    .into_par_iter()
                    .try_for_each(|task| self.run_task(task))
            },
        );
        kept?;
        converted?;
        Ok(slabs
            .into_iter()
            .zip(extents)
            .enumerate()
            .map(|(k, (slab, Extent { skip, len }))| {
                let first = &self.batch_pieces(k, b)[0];
                Filled {
                    batch: Some(b),
                    output: k,
                    slab,
                    skip,
                    len,
                    part: first.part,
                    at: first.at,
                }
            })
            .collect())
    }

    /// The tasks of the `j`-th piece of every output, whose output bytes are `outs`
    /// (one per output): rows widened once and quantized for each output that converts
    /// them, and bytes copied for each that copies them.
    fn piece_tasks<'o>(
        &'o self,
        j: usize,
        outs: Vec<&'o mut [u8]>,
        tasks: &mut Vec<Task<'o, 'o>>,
    ) -> Result<(), RunError> {
        let piece = &self.pieces[0][j];
        let tensor = piece.tensor;
        if let Some(Some((old, start))) = self.reused.get(tensor).copied() {
            // Copied from the old output (a --reuse run has one output), in whole rows.
            let at = (piece.at - start) as usize;
            let t = &self.plans[0].tensors[tensor];
            let row = t.target.row_size(t.ne[0] as usize).unwrap_or(0).max(1);
            let chunk = COPY_TASK_BYTES.next_multiple_of(row);
            for out in outs {
                let old = &old[at..at + out.len()];
                for (n, (x, y)) in old.chunks(chunk).zip(out.chunks_mut(chunk)).enumerate() {
                    tasks.push(Task::Reuse {
                        tensor,
                        old: x,
                        first_row: (at + n * chunk) / row,
                        y,
                    });
                }
            }
            return Ok(());
        }
        let source = self.sources[tensor];
        let src = source.bytes(piece.src.clone())?;
        let group = source.row_group();
        let mut rows = Vec::with_capacity(outs.len());
        for plan in self.plans {
            rows.push(row_sizes(&plan.tensors[tensor], source)?);
        }
        let converting = rows.iter().flatten().next().copied();
        let (mut converted, mut copied): (Vec<_>, Vec<_>) = outs
            .into_iter()
            .enumerate()
            .filter(|(_, out)| !out.is_empty())
            .partition(|(k, _)| rows[*k].is_some());
        if let Some(RowSizes { src: src_row, .. }) = converting {
            let t = &self.plans[0].tensors[tensor];
            let task_rows = task_rows(t, group);
            let first_row = piece.src.start / src_row;
            for (n, x) in src.chunks(task_rows * src_row).enumerate() {
                let task_row_count = x.len() / src_row;
                let task_first = first_row + n * task_rows;
                let mut ys = Vec::with_capacity(converted.len());
                for (k, out) in &mut converted {
                    let dst_row = rows[*k].map_or(0, |r| r.dst);
                    let (y, more) = std::mem::take(out).split_at_mut(task_row_count * dst_row);
                    *out = more;
                    ys.push((*k, y));
                }
                for (k, out) in &mut copied {
                    let (y, more) = std::mem::take(out).split_at_mut(x.len());
                    *out = more;
                    tasks.push(Task::Copy {
                        tensor,
                        output: *k,
                        x,
                        first_row: task_first,
                        hash_source: false,
                        y,
                    });
                }
                if !ys.is_empty() {
                    tasks.push(Task::Convert {
                        tensor,
                        x,
                        rows: task_row_count,
                        first_row: task_first,
                        ys,
                    });
                }
            }
            return Ok(());
        }
        // Copied by every output: in whole rows (row groups), the source hashed once.
        let t = &self.plans[0].tensors[tensor];
        let row_bytes = group_bytes(t, source.len(), 1);
        let chunk = COPY_TASK_BYTES.next_multiple_of(group_bytes(t, source.len(), group.max(1)));
        let first_row = piece.src.start / row_bytes;
        for (c, (k, out)) in copied.into_iter().enumerate() {
            for (n, (x, y)) in src.chunks(chunk).zip(out.chunks_mut(chunk)).enumerate() {
                tasks.push(Task::Copy {
                    tensor,
                    output: k,
                    x,
                    first_row: first_row + n * chunk / row_bytes,
                    hash_source: c == 0,
                    y,
                });
            }
        }
        Ok(())
    }

    /// Runs one task of [`Job::fill`].
    fn run_task(&self, task: Task<'_, '_>) -> Result<(), RunError> {
        match task {
            Task::Reuse {
                tensor,
                old,
                first_row,
                y,
            } => {
                y.copy_from_slice(old);
                let t = &self.plans[0].tensors[tensor];
                let row = t.target.row_size(t.ne[0] as usize).unwrap_or(0);
                let digest = rows_digest(y, row, first_row as u64);
                self.digests.add_output(0, tensor, digest);
                Ok(())
            }
            Task::Copy {
                tensor,
                output,
                x,
                first_row,
                hash_source,
                y,
            } => {
                let source = self.sources[tensor];
                let row_bytes = group_bytes(&self.plans[0].tensors[tensor], source.len(), 1);
                let first_row = first_row as u64;
                let source_digest = hash_source.then(|| rows_digest(x, row_bytes, first_row));
                if let Some(d) = source_digest {
                    self.digests.add_source(tensor, d);
                }
                let output_digest = if source.row_group() > 1 {
                    let mut buf = REORDERED.take();
                    source.reorder_groups(x, row_bytes, &mut buf);
                    y.copy_from_slice(&buf);
                    REORDERED.set(buf);
                    rows_digest(y, row_bytes, first_row)
                } else {
                    y.copy_from_slice(x);
                    source_digest.unwrap_or_else(|| rows_digest(y, row_bytes, first_row))
                };
                self.digests.add_output(output, tensor, output_digest);
                Ok(())
            }
            Task::Convert {
                tensor,
                x,
                rows,
                first_row,
                ys,
            } => {
                let t = &self.plans[0].tensors[tensor];
                let n = rows * t.ne[0] as usize;
                let first = first_row as u64;
                let source_digest = rows_digest(x, x.len() / rows.max(1), first);
                self.digests.add_source(tensor, source_digest);
                let mut f32s = SCRATCH.take();
                f32s.resize(n, 0.0);
                let source = self.sources[tensor];
                let widened = if source.row_group() > 1 {
                    let mut buf = REORDERED.take();
                    source.reorder_groups(x, x.len() / rows.max(1), &mut buf);
                    let done = widen_rows(t, source, &buf, first_row, &mut f32s[..n]);
                    REORDERED.set(buf);
                    done
                } else {
                    widen_rows(t, source, x, first_row, &mut f32s[..n])
                };
                let done = widened.and_then(|()| {
                    ys.into_iter().try_for_each(|(k, y)| {
                        let t = &self.plans[k].tensors[tensor];
                        quantize_rows(t, &f32s[..n], first_row, self.weights[k][tensor], y)?;
                        let digest = rows_digest(y, y.len() / rows.max(1), first);
                        self.digests.add_output(k, tensor, digest);
                        match self.quality {
                            Some(q) => measure(q, k, tensor, t, &f32s[..n], y, first_row),
                            None => Ok(()),
                        }
                    })
                });
                SCRATCH.set(f32s);
                done
            }
        }
    }
}

/// One parallel task of [`Job::fill`].
enum Task<'s, 'o> {
    /// Rows of a tensor copied from an earlier run's output, from row `first_row` on.
    Reuse {
        tensor: usize,
        old: &'s [u8],
        first_row: usize,
        y: &'o mut [u8],
    },
    /// `rows` rows of a converted tensor, from row `first_row` on, and where each output
    /// that converts it puts them.
    Convert {
        tensor: usize,
        x: &'s [u8],
        rows: usize,
        first_row: usize,
        ys: Vec<(usize, &'o mut [u8])>,
    },
    /// Whole rows (row groups, for a tensor read in interleaved groups) of a tensor
    /// output `output` copies, from row `first_row` on; `hash_source`: this task's rows
    /// count in the source tensor's digest (one task per source row does).
    Copy {
        tensor: usize,
        output: usize,
        x: &'s [u8],
        first_row: usize,
        hash_source: bool,
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
    /// Each worker's row figures for the quality report, kept between tasks.
    static MEASURED: std::cell::Cell<Vec<ErrorStats>> = const { std::cell::Cell::new(Vec::new()) };
}

/// Measures the error of the rows `y` of `t` (output `k`'s tensor `tensor`), quantized
/// from `source`, for the quality report.
fn measure(
    q: &Quality,
    k: usize,
    tensor: usize,
    t: &TensorPlan,
    source: &[f32],
    y: &[u8],
    first_row: usize,
) -> Result<(), RunError> {
    let row_len = (t.ne[0] as usize).max(1);
    let mut stats = MEASURED.take();
    stats.clear();
    let done =
        ErrorStats::of_quantized_rows(source, t.target, y, row_len, first_row as u64, &mut stats);
    if done.is_ok() {
        q.add(k, tensor, first_row, &stats);
    }
    MEASURED.set(stats);
    done.map_err(codec_error(t))
}

/// The error of a codec working on `t`'s rows, with the tensor named.
pub(super) fn codec_error(
    t: &TensorPlan,
) -> impl Fn(quantforge_kernels::Error) -> RunError + Copy + '_ {
    |cause| RunError::Codec {
        tensor: t.name.clone(),
        cause,
    }
}

/// Widens the source rows `x` of `t`, from row `first_row` of the tensor on, into `f32s`.
fn widen_rows(
    t: &TensorPlan,
    source: &Tensor<'_>,
    x: &[u8],
    first_row: usize,
    f32s: &mut [f32],
) -> Result<(), RunError> {
    if source.stored_row_bytes().is_some() {
        source.widen_stored(x, first_row, f32s)?;
    } else {
        quantforge_kernels::dequantize(t.source, x, f32s).map_err(codec_error(t))?;
    }
    Ok(())
}

/// Quantizes the f32 rows `f32s` of `t`, from row `first_row` of the tensor on, into `y`.
fn quantize_rows(
    t: &TensorPlan,
    f32s: &[f32],
    first_row: usize,
    weights: Option<&[f32]>,
    y: &mut [u8],
) -> Result<(), RunError> {
    let n_per_row = t.ne[0] as usize;
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
        other => codec_error(t)(other),
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
