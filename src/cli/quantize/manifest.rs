//! The manifest every `quantize` run writes beside each output file, `FILE.qf.json`: the
//! tool, the source, the preset, the file's size and header digest, and every tensor in
//! it with its place and the digests of its source and output data
//! ([`quantforge::pipeline::run::digest`]). `quantforge verify` checks a file or a whole
//! split set against them.

use anyhow::{Context, Result, bail};
use quantforge::pipeline::plan::{Plan, Preset};
use quantforge::pipeline::run::reuse::Reuse;
use quantforge::pipeline::run::{PlannedFile, Summary, TensorRecord};
use quantforge_kernels::GgmlType;
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

/// `--reuse OLD`: the files of OLD's set and every tensor their manifests list, for a
/// run to copy from. Nothing is taken from a set another quantforge version made (its
/// quantizers may differ): a warning says so.
pub(super) fn old_output(old: &Path) -> Result<Option<Reuse>> {
    let read = |path: &Path| -> Result<Json> {
        let manifest = manifest_path(path);
        let text = std::fs::read_to_string(&manifest)
            .with_context(|| format!("--reuse: no manifest {}", manifest.display()))?;
        serde_json::from_str(&text)
            .with_context(|| format!("--reuse: {} is not a manifest", manifest.display()))
    };
    let first = read(old)?;
    if first["quantforge"] != env!("CARGO_PKG_VERSION") {
        eprintln!(
            "quantforge: warning: --reuse: {} was made by quantforge {}; nothing reused",
            old.display(),
            first["quantforge"]
        );
        return Ok(None);
    }
    let dir = match old.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let names: Vec<&str> = first["set"]
        .as_array()
        .map(|a| a.iter().filter_map(Json::as_str).collect())
        .unwrap_or_default();
    let mut files = Vec::with_capacity(names.len());
    let mut tensors = Vec::new();
    for (f, name) in names.iter().enumerate() {
        let path = dir.join(name);
        let m = read(&path)?;
        for t in m["tensors"].as_array().into_iter().flatten() {
            tensors.extend(old_tensor(t, f));
        }
        files.push(path);
    }
    let reuse = Reuse::open(&files, tensors)
        .with_context(|| format!("--reuse: cannot read {}", old.display()))?;
    Ok(Some(reuse))
}

/// One tensor of a manifest, in file `file` of its set; `None` if anything is missing.
fn old_tensor(t: &Json, file: usize) -> Option<TensorRecord> {
    let digest = |k: &str| u64::from_str_radix(t[k].as_str()?, 16).ok();
    let ty = |k: &str| GgmlType::from_name(t[k].as_str()?).ok();
    let mut ne = [1u64; 4];
    for (d, v) in ne.iter_mut().zip(t["ne"].as_array()?) {
        *d = v.as_u64()?;
    }
    Some(TensorRecord {
        name: t["name"].as_str()?.to_string(),
        ty: ty("type")?,
        source_type: ty("source_type")?,
        ne,
        file,
        offset: t["offset"].as_u64()?,
        size: t["size"].as_u64()?,
        source_digest: digest("source_digest")?,
        digest: digest("digest")?,
        imatrix_digest: match &t["imatrix_digest"] {
            Json::Null => None,
            _ => Some(digest("imatrix_digest")?),
        },
    })
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
                    "imatrix_digest": r.imatrix_digest.map(hex),
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
