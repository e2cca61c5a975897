//! The safetensors side of `inspect` and `convert`: describing a safetensors file or
//! model folder ([`super::describe`]), and converting between containers
//! ([`quantforge::convert`]).

use super::describe;
use super::file_kind::FileKind;
use anyhow::{Context, Result};
use quantforge::convert;
use quantforge_formats::safetensors::{ModelFolder, Order, write_file};
use std::path::Path;

/// Whether `path` names a safetensors output (`*.safetensors`).
pub fn is_safetensors_path(path: &Path) -> bool {
    path.extension().is_some_and(|e| e == "safetensors")
}

/// `quantforge inspect` of a safetensors file, index or model folder.
pub fn inspect(path: &Path, json: bool, full: bool) -> Result<()> {
    let model = ModelFolder::open(path)?;
    let out = if json {
        let mut text = serde_json::to_string_pretty(&describe::safetensors_json(&model, full))?;
        text.push('\n');
        text
    } else {
        describe::safetensors_text(&model, full)
    };
    print!("{out}");
    Ok(())
}

/// `quantforge convert` with safetensors on either side: safetensors to GGUF, GGUF to
/// safetensors, or safetensors (a folder, shards) to one canonical safetensors file.
pub fn convert(input: &Path, output: &Path, from: FileKind) -> Result<()> {
    let tensors = match (from, is_safetensors_path(output)) {
        (FileKind::Gguf, _) => convert::gguf_to_safetensors(input, output)?.tensors,
        (FileKind::Safetensors, false) => convert::safetensors_to_gguf(input, output)?.tensors,
        (FileKind::Safetensors, true) => {
            let model = ModelFolder::open(input)?;
            write_file(output, model.tensors(), model.metadata(), Order::Canonical)?;
            model.len()
        }
    };
    let size = std::fs::metadata(output)
        .with_context(|| format!("cannot stat {}", output.display()))?
        .len();
    println!("{}: {tensors} tensors, {size} bytes", output.display());
    Ok(())
}
