//! What a run reports as it goes: a [`Progress`] call for each tensor once its last
//! piece is on disk, and the [`Summary`] counts.

use super::Summary;
use super::quality::Quality;
use super::schedule::Piece;
use crate::diff::ErrorStats;
use crate::pipeline::imatrix::ImatrixUse;
use crate::pipeline::plan::{Plan, TensorPlan};

/// One tensor done, for progress reports.
#[derive(Debug)]
pub struct Progress<'a> {
    /// The output it was written to (its index among the run's targets).
    pub output: usize,
    /// Tensors of that output done so far, this one included.
    pub done: usize,
    /// Tensors in the output's plan.
    pub total: usize,
    /// The tensor just written.
    pub tensor: &'a TensorPlan,
    /// Its position in the output's plan (tensors are not always finished in order).
    pub index: usize,
    /// Its bytes in the source.
    pub bytes_in: u64,
    /// Its bytes in the output.
    pub bytes_out: u64,
    /// How it used the importance matrix (`None`: none given, or the tensor was copied).
    pub imatrix: Option<ImatrixUse>,
}

/// One converted tensor's error against its source values (`quantize --report`).
#[derive(Clone, Debug, PartialEq)]
pub struct TensorQuality {
    /// Its name in the output.
    pub name: String,
    /// Its type in the source.
    pub source: quantforge_kernels::GgmlType,
    /// Its type in the output.
    pub target: quantforge_kernels::GgmlType,
    /// The figures of its dequantized output (B) against the source values (A).
    pub stats: ErrorStats,
}

/// One output's tensors written so far.
struct Tally<'a> {
    plan: &'a Plan,
    uses: &'a [Option<ImatrixUse>],
    weighted: &'a [Option<&'a [f32]>],
    /// Pieces of each tensor not yet on disk.
    pieces_left: Vec<usize>,
    /// Output bytes of each tensor so far.
    bytes_out: Vec<u64>,
    summary: Summary,
}

/// The tensors written so far, for each output: the summaries and the progress calls.
pub(super) struct Tracker<'a, 'p> {
    outputs: Vec<Tally<'a>>,
    quality: Option<&'a Quality>,
    progress: &'p mut (dyn FnMut(&Progress<'_>) + Send),
}

impl<'a, 'p> Tracker<'a, 'p> {
    /// Nothing written yet of `pieces[k]` (every piece of every tensor of `plans[k]`),
    /// for each output `k`; `uses[k]` and `weighted[k]` say how its tensors use the
    /// importance matrix.
    pub(super) fn new(
        plans: &[&'a Plan],
        uses: &'a [Vec<Option<ImatrixUse>>],
        weighted: &'a [Vec<Option<&'a [f32]>>],
        pieces: &[Vec<Piece>],
        quality: Option<&'a Quality>,
        progress: &'p mut (dyn FnMut(&Progress<'_>) + Send),
    ) -> Tracker<'a, 'p> {
        let outputs = plans
            .iter()
            .zip(uses)
            .zip(weighted)
            .zip(pieces)
            .map(|(((plan, uses), weighted), pieces)| {
                let mut pieces_left = vec![0; plan.tensors.len()];
                for p in pieces {
                    pieces_left[p.tensor] += 1;
                }
                Tally {
                    plan,
                    uses,
                    weighted,
                    pieces_left,
                    bytes_out: vec![0; plan.tensors.len()],
                    summary: Summary::default(),
                }
            })
            .collect();
        Tracker {
            outputs,
            quality,
            progress,
        }
    }

    /// What was written to each output, once everything was.
    pub(super) fn into_summaries(self) -> Vec<Summary> {
        self.outputs.into_iter().map(|o| o.summary).collect()
    }

    /// Counts `pieces` of output `k` as written; reports each tensor whose last piece
    /// that was.
    pub(super) fn written(&mut self, k: usize, pieces: &[Piece]) {
        let o = &mut self.outputs[k];
        for piece in pieces {
            let i = piece.tensor;
            o.bytes_out[i] += piece.out_len as u64;
            o.pieces_left[i] -= 1;
            if o.pieces_left[i] > 0 {
                continue;
            }
            let t = &o.plan.tensors[i];
            let bytes_in = piece.src.end as u64;
            o.summary.tensors += 1;
            o.summary.converted += usize::from(t.converts());
            o.summary.imatrix_used += usize::from(o.weighted[i].is_some());
            o.summary.bytes_in += bytes_in;
            o.summary.bytes_out += o.bytes_out[i];
            if let Some(q) = self.quality.filter(|_| t.converts()) {
                o.summary.quality.push(TensorQuality {
                    name: t.name.clone(),
                    source: t.source,
                    target: t.target,
                    stats: q.take(k, i),
                });
            }
            (self.progress)(&Progress {
                output: k,
                done: o.summary.tensors,
                total: o.plan.tensors.len(),
                tensor: t,
                index: i,
                bytes_in,
                bytes_out: o.bytes_out[i],
                imatrix: o.uses[i],
            });
        }
    }
}
