//! `--reuse OLD`: tensors an earlier run already made are copied from its files instead
//! of being quantized again. A tensor is reused when OLD's manifest says it was made from
//! the same source data (digest) into the same type and shape with the same importance
//! values, by the same quantforge; the copied bytes are checked against OLD's digest
//! before anything takes its name, so a damaged OLD fails the run instead of spreading.

use super::digest::rows_digest;
use super::{RunError, TensorRecord};
use crate::model::Tensor;
use crate::pipeline::plan::TensorPlan;
use std::collections::HashMap;
use std::path::PathBuf;

/// The files and tensors of an earlier run that a run may copy from.
#[derive(Debug)]
pub struct Reuse {
    /// OLD's files, mapped.
    files: Vec<memmap2::Mmap>,
    /// Its tensors by name; [`TensorRecord::file`] indexes `files`.
    tensors: HashMap<String, TensorRecord>,
}

impl Reuse {
    /// OLD's files (`paths`) and its tensors, as its manifests list them.
    pub fn open(paths: &[PathBuf], tensors: Vec<TensorRecord>) -> std::io::Result<Reuse> {
        let files = paths
            .iter()
            .map(|p| {
                let file = std::fs::File::open(p)?;
                // SAFETY: only read; a file changed under the map gives wrong bytes, which
                // the digest check after the run reports.
                unsafe { memmap2::Mmap::map(&file) }
            })
            .collect::<std::io::Result<Vec<_>>>()?;
        let tensors = tensors.into_iter().map(|t| (t.name.clone(), t)).collect();
        Ok(Reuse { files, tensors })
    }

    /// The old data for `t` (read from `source`, quantized with `weights`), if OLD made
    /// it from the same source data the same way: the bytes, and the digest they must
    /// have. Reads and hashes the source tensor when the rest matches.
    pub(super) fn find(
        &self,
        t: &TensorPlan,
        source: &Tensor<'_>,
        weights: Option<&[f32]>,
    ) -> Result<Option<(&[u8], TensorRecord)>, RunError> {
        let Some(old) = self.tensors.get(&t.name) else {
            return Ok(None);
        };
        let size = t.bytes_as(t.target).unwrap_or(u64::MAX);
        let same_plan = old.ty == t.target
            && old.source_type == t.source
            && old.ne == t.ne
            && old.size == size
            && old.imatrix_digest == weights.map(imatrix_digest);
        let data = self.files.get(old.file).and_then(|f| {
            let start = usize::try_from(old.offset).ok()?;
            f.get(start..start.checked_add(usize::try_from(old.size).ok()?)?)
        });
        let Some(data) = data.filter(|_| same_plan) else {
            return Ok(None);
        };
        Ok((source_digest(t, source)? == old.source_digest).then(|| (data, old.clone())))
    }
}

/// The digest of a source tensor's stored data, as a run sums it over the rows it reads.
pub(super) fn source_digest(t: &TensorPlan, source: &Tensor<'_>) -> Result<u64, RunError> {
    let len = source.len();
    let rows: u64 = t.ne[1..].iter().product();
    let row_bytes = len / rows.max(1) as usize;
    let run = source.run_bytes().filter(|&n| n > 0).unwrap_or(len.max(1));
    let mut digest = 0u64;
    let mut at = 0;
    while at < len {
        let end = (at + run).min(len);
        source.prefetch(at..end)?;
        let part = rows_digest(
            source.bytes(at..end)?,
            row_bytes,
            (at / row_bytes.max(1)) as u64,
        );
        source.release(at..end)?;
        digest = digest.wrapping_add(part);
        at = end;
    }
    Ok(digest)
}

/// The digest of a tensor's importance values (their f32 bytes).
pub fn imatrix_digest(weights: &[f32]) -> u64 {
    super::digest::bytes_digest(bytemuck::cast_slice(weights))
}

/// An error unless every reused tensor's new data has OLD's digest.
pub(super) fn check(
    records: &[TensorRecord],
    reused: &[Option<TensorRecord>],
) -> Result<(), RunError> {
    for (r, old) in records.iter().zip(reused) {
        if let Some(old) = old
            && old.digest != r.digest
        {
            return Err(RunError::PlanMismatch(format!(
                "--reuse: tensor {} in the old output does not match its manifest",
                r.name
            )));
        }
    }
    Ok(())
}
