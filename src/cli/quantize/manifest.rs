//! The manifest every `quantize` run writes beside each output file, `FILE.qf.json`: the
//! tool, the source, the preset, the file's size and header digest, and every tensor in
//! it with its place and the digests of its source and output data
//! ([`quantforge::pipeline::run::digest`]). `quantforge verify` checks a file or a whole
//! split set against them.

use anyhow::{Context, Result};
use quantforge::pipeline::plan::{Plan, Preset};
use quantforge::pipeline::run::Summary;
use serde_json::{Value as Json, json};
use std::path::{Path, PathBuf};

/// The version of the manifest's layout.
pub(crate) const MANIFEST_VERSION: u64 = 1;

/// The manifest's path for `file`: its name with `.qf.json` appended.
pub(crate) fn manifest_path(file: &Path) -> PathBuf {
    let mut name = file.as_os_str().to_owned();
    name.push(".qf.json");
    PathBuf::from(name)
}

/// A digest as the manifest writes it: 16 hex digits.
pub(crate) fn hex(digest: u64) -> String {
    format!("{digest:016x}")
}

/// What the manifests of one output say of its run.
pub(super) struct RunFacts<'a> {
    /// The input as given.
    pub(super) input: &'a Path,
    /// The preset.
    pub(super) preset: Preset,
    /// The importance matrix file, if any.
    pub(super) imatrix: Option<&'a Path>,
}

/// Writes the manifest of every file of one output (`summary` of a run of `plan`).
pub(super) fn write(facts: &RunFacts<'_>, plan: &Plan, summary: &Summary) -> Result<()> {
    let names: Vec<String> = summary
        .set
        .iter()
        .map(|f| {
            f.file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default()
        })
        .collect();
    let input_size = std::fs::metadata(facts.input)
        .ok()
        .filter(|m| m.is_file())
        .map(|m| m.len());
    for (f, path) in summary.files.iter().enumerate() {
        let tensors: Vec<Json> = summary
            .records
            .iter()
            .filter(|r| r.file == f)
            .map(|r| {
                json!({
                    "name": r.name,
                    "type": r.ty.name(),
                    "source_type": r.source_type.name(),
                    "ne": r.ne,
                    "offset": r.offset,
                    "size": r.size,
                    "source_digest": hex(r.source_digest),
                    "digest": hex(r.digest),
                })
            })
            .collect();
        let header = summary.headers.get(f).copied().unwrap_or_default();
        let size = std::fs::metadata(path)
            .with_context(|| format!("{}", path.display()))?
            .len();
        let doc = json!({
            "quantforge": env!("CARGO_PKG_VERSION"),
            "manifest": MANIFEST_VERSION,
            "input": {
                "path": facts.input.display().to_string(),
                "size": input_size,
            },
            "preset": facts.preset.name,
            "file_type": plan.file_type,
            "imatrix": facts.imatrix.map(|p| p.display().to_string()),
            "file": names.get(summary.first_part + f),
            "part": summary.first_part + f + 1,
            "set": names,
            "size": size,
            "header": { "bytes": header.data_offset, "digest": hex(header.digest) },
            "tensors": tensors,
        });
        let text = serde_json::to_string_pretty(&doc)? + "\n";
        let manifest = manifest_path(path);
        super::super::io::write_atomic(&manifest, text.as_bytes())
            .with_context(|| format!("writing the manifest {}", manifest.display()))?;
    }
    Ok(())
}
