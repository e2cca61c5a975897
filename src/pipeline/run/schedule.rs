//! How a run's work is cut and ordered: every tensor into pieces of at most a slab (see
//! [`crate::slab`]), consecutive pieces into batches that fill a slab, and the order the
//! batches are converted in, from a rough cost model. Only the order and the grouping
//! depend on these choices, never the bytes written.

use super::RunError;
use crate::model::Tensor;
use crate::pipeline::plan::{Plan, TensorPlan};
use crate::slab::{self, SLAB_BYTES};
use quantforge_formats::output::PlacedFile;
use std::ops::Range;

/// Where a tensor's data goes: its output file, its offset there, and the bytes up to
/// the next tensor (or the end of the file), padding included.
pub(super) struct Place {
    pub(super) part: usize,
    pub(super) at: u64,
    pub(super) room: u64,
}

/// A run of one tensor's source handled as a unit: rows of a converted tensor, or bytes
/// of a copied one, and where their output goes.
pub(super) struct Piece {
    /// The tensor's index in the plan.
    pub(super) tensor: usize,
    /// The bytes of the tensor's source data.
    pub(super) src: Range<usize>,
    /// Output bytes (the converted rows, or the copied bytes).
    pub(super) out_len: usize,
    /// The output file.
    pub(super) part: usize,
    /// The output's offset in that file.
    pub(super) at: u64,
    /// Zero bytes after it in the file: the tensor's padding, after its last piece.
    pub(super) pad: usize,
}

impl Piece {
    /// The file bytes this piece accounts for, padding included.
    pub(super) fn file_len(&self) -> u64 {
        (self.out_len + self.pad) as u64
    }
}

/// Every tensor cut into pieces of at most [`SLAB_BYTES`] of source and of output (or
/// one row, if a row is larger), in plan order, for each output: `places[k]` is where
/// output `k` puts each tensor of `plans[k]`. The plans list the same tensors in the same
/// order (checked by the caller), so every output's `i`-th piece reads the same source
/// bytes: a tensor is cut in rows when any output converts it, and a slab's worth of rows
/// counts every output's bytes. A tensor without data is one empty piece.
pub(super) fn pieces(
    plans: &[&Plan],
    sources: &[&Tensor<'_>],
    places: &[Vec<Place>],
) -> Result<Vec<Vec<Piece>>, RunError> {
    let mut pieces: Vec<Vec<Piece>> = plans.iter().map(|_| Vec::new()).collect();
    for (i, source) in sources.iter().enumerate() {
        let ts: Vec<&TensorPlan> = plans.iter().map(|p| &p.tensors[i]).collect();
        let rows = ts
            .iter()
            .map(|t| row_sizes(t, source))
            .collect::<Result<Vec<_>, _>>()?;
        // A tensor read in interleaved row groups is cut at group boundaries only.
        let group = source.row_group();
        let len = source.len();
        // A stacked tensor's pieces stay within one of its runs.
        let run = source.run_bytes().filter(|&n| n > 0).unwrap_or(len.max(1));
        // Source bytes of a step, and steps per piece.
        let (src_unit, units) = match rows.iter().flatten().next() {
            Some(row) => {
                let out: usize = rows.iter().flatten().map(|r| r.dst).sum();
                (
                    row.src,
                    slab::slab_rows(row.src.max(out), task_rows(ts[0], group)),
                )
            }
            None if ts.iter().all(|t| t.converts()) => (1, SLAB_BYTES),
            // Copied: cut in whole rows (row groups), so that rows are hashed as they pass.
            None => {
                let bytes = group_bytes(ts[0], len, group.max(1));
                (bytes, (SLAB_BYTES / 2 / bytes).max(1))
            }
        };
        for (k, (t, row)) in ts.iter().zip(&rows).enumerate() {
            let place = &places[k][i];
            // Output bytes of a step: a converted row, or the copied source bytes.
            let out_unit = match row {
                Some(row) => row.dst,
                None if t.converts() => 0,
                None => src_unit,
            };
            let out_total = (len / src_unit * out_unit) as u64;
            if out_total > place.room {
                return Err(RunError::PlanMismatch(format!(
                    "tensor {} needs {out_total} bytes in the output, its place holds {}",
                    t.name, place.room
                )));
            }
            let mut at = 0;
            loop {
                let end = (at + src_unit * units).min(len).min((at / run + 1) * run);
                let out_at = (at / src_unit * out_unit) as u64;
                let out_len = (end - at) / src_unit * out_unit;
                pieces[k].push(Piece {
                    tensor: i,
                    src: at..end,
                    out_len,
                    part: place.part,
                    at: place.at + out_at,
                    pad: if end == len {
                        (place.room - out_total) as usize
                    } else {
                        0
                    },
                });
                if end == len {
                    break;
                }
                at = end;
            }
        }
    }
    Ok(pieces)
}

/// The bytes of one row of a converted tensor, in the source and in the output.
#[derive(Clone, Copy, Debug)]
pub(super) struct RowSizes {
    /// Source bytes.
    pub(super) src: usize,
    /// Output bytes.
    pub(super) dst: usize,
}

/// The row sizes of a converted tensor that has data; `None` for a copied or empty one.
/// A tensor stored in another type than its own (see [`crate::model::Stored`]) is always
/// converted, from its stored rows.
pub(super) fn row_sizes(t: &TensorPlan, source: &Tensor<'_>) -> Result<Option<RowSizes>, RunError> {
    let n_per_row = t.ne[0] as usize;
    let stored = source.stored_row_bytes();
    if !(t.converts() || stored.is_some()) || n_per_row == 0 || t.ne[1..].contains(&0) {
        return Ok(None);
    }
    let codec_error = super::convert::codec_error(t);
    let src_row = match stored {
        Some(n) => n,
        None => t.source.row_size(n_per_row).map_err(codec_error)?,
    };
    let dst_row = t.target.row_size(n_per_row).map_err(codec_error)?;
    Ok(Some(RowSizes {
        src: src_row,
        dst: dst_row,
    }))
}

/// Rows of `t` each parallel task converts: a whole number of its row groups.
pub(super) fn task_rows(t: &TensorPlan, group: usize) -> usize {
    slab::task_rows(t.ne[0] as usize).next_multiple_of(group.max(1))
}

/// Bytes of one row group of a tensor of `len` bytes (its rows all alike).
pub(super) fn group_bytes(t: &TensorPlan, len: usize, group: usize) -> usize {
    let rows: u64 = t.ne[1..].iter().product();
    (len / rows.max(1) as usize * group).max(1)
}

/// Consecutive pieces grouped so that each group's source and output (every output's)
/// together stay within [`SLAB_BYTES`] (a single larger piece is a group by itself).
/// Groups cross tensor boundaries, so that small tensors share one parallel pass; in each
/// output a group is one contiguous range of one file.
pub(super) fn batches(pieces: &[Vec<Piece>]) -> Vec<Range<usize>> {
    let mut batches = Vec::new();
    let Some(first) = pieces.first() else {
        return batches;
    };
    let mut start = 0;
    let mut used = 0;
    for i in 0..first.len() {
        let size = first[i].src.len() + pieces.iter().map(|p| p[i].out_len).sum::<usize>();
        let new_file = pieces.iter().any(|p| p[i].part != p[start].part);
        if i > start && (used + size > SLAB_BYTES || new_file) {
            batches.push(start..i);
            start = i;
            used = 0;
        }
        used += size;
    }
    if start < first.len() {
        batches.push(start..first.len());
    }
    batches
}

/// A batch's output bytes and its work, in units of a widening pass (the kernels' relative
/// cost of quantizing an element: the order in which batches are converted mixes the cheap
/// ones with much output and the costly ones with little, see [`conversion_order`]; only
/// the order depends on it, never the bytes).
struct BatchCost {
    out: f64,
    work: f64,
}

/// The order in which batches are converted: two runs in plan order, the batches
/// with more output per unit of work than the whole model's and the rest, merged so
/// that the output produced keeps pace with the work done. A disk that writes slower
/// than the cheap conversions produce (a large embedding of q8_0) then drains it
/// while the costly ones run, instead of stalling all threads.
pub(super) fn conversion_order(
    plans: &[&Plan],
    sources: &[&Tensor<'_>],
    pieces: &[Vec<Piece>],
    batches: &[Range<usize>],
) -> Vec<usize> {
    let stats: Vec<BatchCost> = batches
        .iter()
        .map(|r| {
            let mut cost = BatchCost {
                out: 0.0,
                work: 0.0,
            };
            for j in r.clone() {
                // Rows are widened once for every output that converts them.
                let mut widened = false;
                for (plan, pieces) in plans.iter().zip(pieces) {
                    let p = &pieces[j];
                    let t = &plan.tensors[p.tensor];
                    cost.out += p.file_len() as f64;
                    cost.work += match row_sizes(t, sources[p.tensor]) {
                        Ok(Some(row)) => {
                            let elements = (p.src.len() / row.src * t.ne[0] as usize) as f64;
                            let widening = if widened { 0.0 } else { elements };
                            widened = true;
                            widening + elements * quantforge_kernels::quantize_cost(t.target)
                        }
                        _ => p.src.len() as f64 / 8.0,
                    };
                }
            }
            cost.work = cost.work.max(1.0);
            cost
        })
        .collect();
    let out_total: f64 = stats.iter().map(|s| s.out).sum();
    let work_total: f64 = stats.iter().map(|s| s.work).sum();
    let (heavy, light): (Vec<usize>, Vec<usize>) =
        (0..stats.len()).partition(|&b| stats[b].out * work_total > out_total * stats[b].work);
    let (mut heavy, mut light) = (heavy.into_iter().peekable(), light.into_iter().peekable());
    let (mut out, mut work) = (0.0, 0.0);
    let mut order = Vec::with_capacity(stats.len());
    while heavy.peek().is_some() || light.peek().is_some() {
        let behind = out * work_total <= work * out_total;
        let next = match (behind, heavy.peek(), light.peek()) {
            (true, Some(_), _) | (_, Some(_), None) => heavy.next(),
            _ => light.next(),
        };
        let Some(b) = next else { break };
        out += stats[b].out;
        work += stats[b].work;
        order.push(b);
    }
    order
}

/// Where a batch's output sits in a slab: after `skip` bytes (its file offset's distance
/// from the block boundary before it), `len` bytes.
#[derive(Clone, Copy, Debug)]
pub(super) struct Extent {
    /// Bytes before the output.
    pub(super) skip: usize,
    /// Bytes of output.
    pub(super) len: usize,
}

impl Extent {
    /// The extent of the batch made of `pieces` (consecutive, of one file, not empty).
    pub(super) fn of(pieces: &[Piece]) -> Extent {
        let (first, last) = (&pieces[0], &pieces[pieces.len() - 1]);
        Extent {
            skip: (first.at % PlacedFile::BLOCK) as usize,
            len: (last.at + last.file_len() - first.at) as usize,
        }
    }

    /// Slab bytes the batch needs.
    pub(super) fn end(self) -> usize {
        self.skip + self.len
    }
}
