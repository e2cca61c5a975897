//! File helpers shared by the subcommands: whole-file reads with named errors, and
//! atomic writes that never leave a partial file under the final name.

use anyhow::{Context, Result, bail};
use std::io::Write;
use std::path::Path;

/// Reads a raw little-endian f32 file.
pub fn read_f32_file(path: &Path) -> Result<Vec<f32>> {
    let bytes = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    if bytes.len() % 4 != 0 {
        bail!(
            "{}: {} bytes is not a whole number of f32 values (4 bytes each)",
            path.display(),
            bytes.len()
        );
    }
    Ok(bytes
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect())
}

/// Writes `bytes` to `path` atomically: a temporary file in the same directory, flushed
/// and fsynced, then renamed over `path`. On any error nothing is left under `path`.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let dir = quantforge_formats::output::parent_dir(path);
    let mut tmp = quantforge_formats::output::temp_file_beside(path)
        .with_context(|| format!("cannot create a temporary file in {}", dir.display()))?;
    tmp.write_all(bytes)
        .and_then(|_| tmp.as_file().sync_all())
        .and_then(|_| quantforge_formats::output::check_stop())
        .with_context(|| format!("cannot write {}", path.display()))?;
    tmp.persist(path)
        .with_context(|| format!("cannot rename the temporary file to {}", path.display()))?;
    Ok(())
}

/// The size of the file at `path`, with an error naming it.
pub fn file_size(path: &Path) -> Result<u64> {
    let meta =
        std::fs::metadata(path).with_context(|| format!("cannot stat {}", path.display()))?;
    Ok(meta.len())
}

/// f32 values as little-endian bytes.
pub fn f32_bytes(values: &[f32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}
