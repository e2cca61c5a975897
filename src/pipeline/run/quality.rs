//! The quality report of a run (`quantize --report`): for every converted tensor of every
//! output, the error of its dequantized output against the f32 values it was quantized
//! from, computed on the rows as they are quantized (no second pass over any file).
//!
//! Each task's rows are measured one by one ([`ErrorStats::of_rows`]), a few rows
//! dequantized at a time; since tasks finish in any order, each tensor's rows are added
//! up in row order as they become contiguous, the way `quantforge diff` adds them, so the
//! figures equal what `diff` computes on the finished files.

use crate::diff::ErrorStats;
use std::collections::BTreeMap;
use std::sync::Mutex;

/// One tensor's figures so far: those of its rows up to `next_row`, and runs of rows
/// measured beyond it, by their first row.
#[derive(Default)]
struct Folding {
    next_row: u64,
    stats: ErrorStats,
    pending: BTreeMap<u64, Vec<ErrorStats>>,
}

impl Folding {
    /// Adds the figures of the rows from `first_row` on, and of every pending run that
    /// now follows on. Rows that follow on are added at once; others are kept (tasks
    /// finish nearly in order, so few are).
    fn add(&mut self, first_row: u64, rows: &[ErrorStats]) {
        if first_row != self.next_row {
            self.pending.insert(first_row, rows.to_vec());
            return;
        }
        self.take_in(rows);
        while let Some(rows) = self.pending.remove(&self.next_row) {
            self.take_in(&rows);
        }
    }

    /// Adds the rows from `next_row` on.
    fn take_in(&mut self, rows: &[ErrorStats]) {
        self.next_row += rows.len() as u64;
        rows.iter().for_each(|r| self.stats.merge(r));
    }
}

/// The figures of every converted tensor of every output while a run goes on.
pub(super) struct Quality {
    /// `[output][tensor]`.
    tensors: Mutex<Vec<Vec<Folding>>>,
}

impl Quality {
    /// Nothing measured yet, for outputs with `tensors[k]` tensors each.
    pub(super) fn new(tensors: impl IntoIterator<Item = usize>) -> Quality {
        Quality {
            tensors: Mutex::new(
                tensors
                    .into_iter()
                    .map(|n| (0..n).map(|_| Folding::default()).collect())
                    .collect(),
            ),
        }
    }

    /// Adds the figures of rows of tensor `tensor` of output `output`, one per row from
    /// row `first_row` on ([`ErrorStats::of_rows`] of the values they were quantized from
    /// and their dequantized output).
    pub(super) fn add(&self, output: usize, tensor: usize, first_row: usize, rows: &[ErrorStats]) {
        // A worker that panicked while holding the lock leaves its run failing anyway.
        if let Ok(mut all) = self.tensors.lock() {
            all[output][tensor].add(first_row as u64, rows);
        }
    }

    /// The figures of tensor `tensor` of output `output`, once all its rows are measured.
    pub(super) fn take(&self, output: usize, tensor: usize) -> ErrorStats {
        self.tensors
            .lock()
            .map(|mut all| std::mem::take(&mut all[output][tensor].stats))
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_added_out_of_order_give_the_in_order_figures() {
        let a: Vec<f32> = (0..64 * 10).map(|i| (i as f32 * 0.37).sin()).collect();
        let b: Vec<f32> = (0..64 * 10).map(|i| (i as f32 * 0.41).cos()).collect();
        let mut in_order = ErrorStats::default();
        ErrorStats::of_rows(&a, &b, 64, 0)
            .iter()
            .for_each(|r| in_order.merge(r));
        let q = Quality::new([1]);
        for (first, end) in [(6, 10), (0, 2), (3, 6), (2, 3)] {
            let (x, y) = (&a[first * 64..end * 64], &b[first * 64..end * 64]);
            q.add(0, 0, first, &ErrorStats::of_rows(x, y, 64, first as u64));
        }
        assert_eq!(q.take(0, 0), in_order);
    }
}
