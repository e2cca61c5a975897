//! `quantforge verify FILE`: checks a file `quantize` wrote, or every part of the split
//! set it belongs to, against the manifests written beside them (`FILE.qf.json`): every
//! part present, each file's size, its header's digest and every tensor's data digest.
//! Any difference is listed and the exit code is 2.

use super::quantize::manifest::{MANIFEST_VERSION, hex, manifest_path};
use anyhow::{Context, Result, bail};
use clap::Args;
use quantforge::pipeline::run::digest::{bytes_digest, rows_digest};
use quantforge_kernels::GgmlType;
use rayon::prelude::*;
use serde_json::Value as Json;
use std::path::{Path, PathBuf};

#[derive(Args, Debug)]
pub struct VerifyArgs {
    /// A file `quantize` wrote (a single file, or any part of a split set: the whole set
    /// is checked).
    file: PathBuf,
}

pub fn run(args: VerifyArgs) -> Result<()> {
    let (dir, manifest) = find_manifest(&args.file)?;
    let set: Vec<String> = manifest["set"]
        .as_array()
        .context("the manifest has no set")?
        .iter()
        .map(|n| n.as_str().unwrap_or_default().to_string())
        .collect();
    let mut problems = Vec::new();
    let mut tensors = 0;
    for name in &set {
        let path = dir.join(name);
        match verify_file(&path) {
            Ok(n) => tensors += n,
            Err(e) => problems.push(format!("{name}: {e:#}")),
        }
    }
    if !problems.is_empty() {
        bail!(
            "{} of {} file(s) fail: {}",
            problems.len(),
            set.len(),
            problems.join("; ")
        );
    }
    println!(
        "ok: {} file(s), {tensors} tensors, as their manifests say",
        set.len()
    );
    Ok(())
}

/// The folder of `file` and a manifest of its set: its own, or (when it is missing, say a
/// lost part) that of another part named as a split set's parts are.
fn find_manifest(file: &Path) -> Result<(PathBuf, Json)> {
    let dir = match file.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let mut candidates = vec![manifest_path(file)];
    if let Some((prefix, count)) = split_name(file) {
        for i in 0..count {
            candidates.push(manifest_path(&quantforge_formats::gguf::split_path(
                &prefix, i, count,
            )));
        }
    }
    for path in candidates {
        if let Ok(text) = std::fs::read_to_string(&path) {
            let doc: Json = serde_json::from_str(&text)
                .with_context(|| format!("{}: not a manifest", path.display()))?;
            return Ok((dir, doc));
        }
    }
    bail!(
        "{}: no manifest ({}) beside it or its set's parts",
        file.display(),
        manifest_path(file).display()
    )
}

/// The prefix and part count of a path named `PREFIX-NNNNN-of-MMMMM.gguf`.
fn split_name(path: &Path) -> Option<(PathBuf, u16)> {
    let text = path.to_str()?;
    let stem = text.strip_suffix(".gguf")?;
    let (rest, count) = stem.rsplit_once("-of-")?;
    let (prefix, no) = rest.rsplit_once('-')?;
    let valid = |s: &str| s.len() == 5 && s.bytes().all(|b| b.is_ascii_digit());
    (valid(no) && valid(count) && !prefix.is_empty())
        .then(|| Some((PathBuf::from(prefix), count.parse().ok()?)))
        .flatten()
}

/// Checks one file against its manifest; the number of tensors checked.
pub(super) fn verify_file(path: &Path) -> Result<usize> {
    let manifest_file = manifest_path(path);
    let text = std::fs::read_to_string(&manifest_file)
        .with_context(|| format!("no manifest {}", manifest_file.display()))?;
    let m: Json = serde_json::from_str(&text)
        .with_context(|| format!("{}: not a manifest", manifest_file.display()))?;
    if m["manifest"].as_u64() != Some(MANIFEST_VERSION) {
        bail!(
            "{}: not a manifest of this version",
            manifest_file.display()
        );
    }
    let file = std::fs::File::open(path).context("missing")?;
    let size = file.metadata()?.len();
    let want_size = m["size"].as_u64().context("the manifest has no size")?;
    if size != want_size {
        bail!("{size} bytes, the manifest says {want_size}");
    }
    // SAFETY: the file is only read; a file changed while it is read gives wrong digests,
    // which is reported as such, never undefined behaviour in safe code we rely on.
    let map = unsafe { memmap2::Mmap::map(&file) }.context("cannot map")?;
    let header_bytes = m["header"]["bytes"].as_u64().context("no header size")? as usize;
    let header = map.get(..header_bytes).context("shorter than its header")?;
    if Some(hex(bytes_digest(header)).as_str()) != m["header"]["digest"].as_str() {
        bail!("its header differs from the manifest's");
    }
    let tensors = m["tensors"].as_array().context("no tensors")?;
    let bad: Vec<String> = tensors
        .par_iter()
        .filter_map(|t| check_tensor(&map, t).err().map(|e| format!("{e:#}")))
        .collect();
    if !bad.is_empty() {
        let shown = bad.len().min(5);
        bail!(
            "{} tensor(s) differ: {}{}",
            bad.len(),
            bad[..shown].join(", "),
            if bad.len() > shown { ", ..." } else { "" }
        );
    }
    Ok(tensors.len())
}

/// Checks one tensor of a manifest against the file's bytes.
fn check_tensor(map: &[u8], t: &Json) -> Result<()> {
    let name = t["name"].as_str().unwrap_or("?");
    let field = |k: &str| {
        t[k].as_u64()
            .with_context(|| format!("tensor {name}: no {k}"))
    };
    let (offset, size) = (field("offset")? as usize, field("size")? as usize);
    let ty = GgmlType::from_name(t["type"].as_str().unwrap_or(""))
        .with_context(|| format!("tensor {name}: unknown type"))?;
    let ne0 = t["ne"][0].as_u64().unwrap_or(0) as usize;
    let row = ty.row_size(ne0).unwrap_or(0);
    let data = map
        .get(offset..offset + size)
        .with_context(|| format!("tensor {name} lies beyond the end"))?;
    if Some(hex(rows_digest(data, row, 0)).as_str()) != t["digest"].as_str() {
        bail!("tensor {name}");
    }
    Ok(())
}
