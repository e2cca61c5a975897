//! Tensor digests for a run's manifest (`OUT.qf.json`) and `quantforge verify`: a fast,
//! non-cryptographic fingerprint of a tensor's bytes that the run computes on its rows as
//! they pass, in whatever order its tasks finish.
//!
//! A tensor's digest is the sum (mod 2^64) over its rows of the 64-bit XXH3 of the row's
//! bytes seeded with the row's index. Addition commutes, so rows may be hashed in any
//! order and any grouping; the seed ties each row to its place. A row is `ne[0]` elements
//! of the tensor's type; a tensor without rows has digest 0.

use std::sync::atomic::{AtomicU64, Ordering};
use twox_hash::XxHash3_64;

/// The digest of `bytes`, rows of `row_bytes` each, the first being row `first_row` of
/// its tensor: the part of the tensor's digest these rows contribute.
pub fn rows_digest(bytes: &[u8], row_bytes: usize, first_row: u64) -> u64 {
    if row_bytes == 0 {
        return 0;
    }
    bytes
        .chunks(row_bytes)
        .zip(first_row..)
        .fold(0u64, |sum, (row, r)| {
            sum.wrapping_add(XxHash3_64::oneshot_with_seed(r, row))
        })
}

/// The digest of bytes taken whole: a GGUF file's header (everything before the tensor
/// data), or a tensor's importance values.
pub fn bytes_digest(bytes: &[u8]) -> u64 {
    XxHash3_64::oneshot(bytes)
}

/// Digests being summed while a run goes on: each source tensor's, and each output's
/// tensors'.
pub(super) struct Digests {
    /// By tensor (plan order).
    pub(super) source: Vec<AtomicU64>,
    /// `[output][tensor]`.
    pub(super) output: Vec<Vec<AtomicU64>>,
}

impl Digests {
    /// All zero, for `outputs` outputs of `tensors` tensors each.
    pub(super) fn new(outputs: usize, tensors: usize) -> Digests {
        let zeros = || (0..tensors).map(|_| AtomicU64::new(0)).collect::<Vec<_>>();
        Digests {
            source: zeros(),
            output: (0..outputs).map(|_| zeros()).collect(),
        }
    }

    /// Adds rows' digest to source tensor `tensor`'s.
    pub(super) fn add_source(&self, tensor: usize, digest: u64) {
        self.source[tensor].fetch_add(digest, Ordering::Relaxed);
    }

    /// Adds rows' digest to output `k`'s tensor `tensor`.
    pub(super) fn add_output(&self, k: usize, tensor: usize, digest: u64) {
        self.output[k][tensor].fetch_add(digest, Ordering::Relaxed);
    }

    /// Source tensor `tensor`'s digest.
    pub(super) fn source(&self, tensor: usize) -> u64 {
        self.source[tensor].load(Ordering::Relaxed)
    }

    /// Output `k`'s tensor `tensor`'s digest.
    pub(super) fn output(&self, k: usize, tensor: usize) -> u64 {
        self.output[k][tensor].load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_hashed_in_any_grouping_give_one_digest() {
        let bytes: Vec<u8> = (0..40 * 6).map(|i| (i * 37 % 251) as u8).collect();
        let whole = rows_digest(&bytes, 40, 0);
        let parts = rows_digest(&bytes[120..], 40, 3)
            .wrapping_add(rows_digest(&bytes[..40], 40, 0))
            .wrapping_add(rows_digest(&bytes[40..120], 40, 1));
        assert_eq!(whole, parts);
        // The same rows in another order are another tensor.
        let mut swapped = bytes.clone();
        swapped[..80].rotate_left(40);
        assert_ne!(rows_digest(&swapped, 40, 0), whole);
        assert_eq!(rows_digest(&[], 40, 0), 0);
    }
}
