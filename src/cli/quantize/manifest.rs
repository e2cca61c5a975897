//! The manifest every `quantize` run writes beside each output file, `FILE.qf.json`: the
//! tool, the source, the preset, the file's size and header digest, and every tensor in
//! it with its place and the digests of its source and output data
//! ([`quantforge::pipeline::run::digest`]). `quantforge verify` checks a file or a whole
//! split set against them.

use anyhow::{Context, Result, bail};
use quantforge::pipeline::plan::{Plan, Preset};
use quantforge::pipeline::run::{PlannedFile, Summary};
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

/// The input as a manifest records it: its path as given, and for a file its size and
/// modification time (what `--resume` compares to trust a finished part's source).
fn input_json(input: &Path) -> Json {
    let meta = std::fs::metadata(input).ok().filter(|m| m.is_file());
    let modified = meta
        .as_ref()
        .and_then(|m| m.modified().ok())
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map(|d| d.as_nanos().to_string());
    json!({
        "path": input.display().to_string(),
        "size": meta.map(|m| m.len()),
        "modified_ns": modified,
    })
}

/// Whether `part` of a run (of `plan`, as `facts` say) is already on disk as this run
/// would write it: its manifest names this tool version, preset, file type and input
/// (path, size, modification time), its header is the one this run would write, and
/// the file verifies against the manifest. The reason when not.
pub(super) fn finished(facts: &RunFacts<'_>, plan: &Plan, part: &PlannedFile) -> Result<()> {
    let manifest = manifest_path(&part.path);
    let text = std::fs::read_to_string(&manifest)
        .with_context(|| format!("no manifest {}", manifest.display()))?;
    let m: Json = serde_json::from_str(&text).context("its manifest does not parse")?;
    let same = m["quantforge"] == env!("CARGO_PKG_VERSION")
        && m["preset"] == facts.preset.name
        && m["file_type"] == plan.file_type
        && m["input"] == input_json(facts.input);
    if !same {
        bail!("made by another run (tool, preset or input)");
    }
    if m["header"]["digest"].as_str() != Some(hex(part.header.digest).as_str())
        || m["size"].as_u64() != Some(part.size)
    {
        bail!("its header or size is not this run's");
    }
    super::super::verify::verify_file(&part.path)?;
    Ok(())
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
            "input": input_json(facts.input),
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
