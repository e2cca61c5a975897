//! What a run reports as it goes: a [`Progress`] call for each tensor once its last
//! piece is on disk, and the [`Summary`] counts.

use super::Summary;
use super::schedule::Piece;
use crate::pipeline::imatrix::ImatrixUse;
use crate::pipeline::plan::{Plan, TensorPlan};

/// One tensor done, for progress reports.
#[derive(Debug)]
pub struct Progress<'a> {
    /// Tensors done so far, this one included.
    pub done: usize,
    /// Tensors in the plan.
    pub total: usize,
    /// The tensor just written.
    pub tensor: &'a TensorPlan,
    /// Its bytes in the source.
    pub bytes_in: u64,
    /// Its bytes in the output.
    pub bytes_out: u64,
    /// How it used the importance matrix (`None`: none given, or the tensor was copied).
    pub imatrix: Option<ImatrixUse>,
}

/// The tensors written so far: the summary and the progress calls.
pub(super) struct Tracker<'a, 'p> {
    plan: &'a Plan,
    uses: &'a [Option<ImatrixUse>],
    weighted: &'a [Option<&'a [f32]>],
    /// Pieces of each tensor not yet on disk.
    pieces_left: Vec<usize>,
    /// Output bytes of each tensor so far.
    bytes_out: Vec<u64>,
    summary: Summary,
    progress: &'p mut (dyn FnMut(&Progress<'_>) + Send),
}

impl<'a, 'p> Tracker<'a, 'p> {
    /// Nothing written yet of `pieces` (every piece of every tensor of `plan`).
    pub(super) fn new(
        plan: &'a Plan,
        uses: &'a [Option<ImatrixUse>],
        weighted: &'a [Option<&'a [f32]>],
        pieces: &[Piece],
        progress: &'p mut (dyn FnMut(&Progress<'_>) + Send),
    ) -> Tracker<'a, 'p> {
        let mut pieces_left = vec![0; plan.tensors.len()];
        for p in pieces {
            pieces_left[p.tensor] += 1;
        }
        Tracker {
            plan,
            uses,
            weighted,
            pieces_left,
            bytes_out: vec![0; plan.tensors.len()],
            summary: Summary::default(),
            progress,
        }
    }

    /// What was written, once everything was.
    pub(super) fn into_summary(self) -> Summary {
        self.summary
    }

    /// Counts `pieces` as written; reports each tensor whose last piece that was.
    pub(super) fn written(&mut self, pieces: &[Piece]) {
        for piece in pieces {
            let i = piece.tensor;
            self.bytes_out[i] += piece.out_len as u64;
            self.pieces_left[i] -= 1;
            if self.pieces_left[i] > 0 {
                continue;
            }
            let t = &self.plan.tensors[i];
            let bytes_in = piece.src.end as u64;
            self.summary.tensors += 1;
            self.summary.converted += usize::from(t.converts());
            self.summary.imatrix_used += usize::from(self.weighted[i].is_some());
            self.summary.bytes_in += bytes_in;
            self.summary.bytes_out += self.bytes_out[i];
            (self.progress)(&Progress {
                done: self.summary.tensors,
                total: self.plan.tensors.len(),
                tensor: t,
                bytes_in,
                bytes_out: self.bytes_out[i],
                imatrix: self.uses[i],
            });
        }
    }
}
