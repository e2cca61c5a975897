//! Which container a file holds, told from its first bytes (safetensors also from a
//! `.safetensors`/`.json` name or a folder). The one place that decides;
//! a subcommand that learns another container matches on one more [`FileKind`].

use anyhow::{Context, Result, bail};
use std::io::Read;
use std::path::Path;

/// A container quantforge reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FileKind {
    /// llama.cpp's GGUF (starts with `GGUF`).
    Gguf,
    /// Hugging Face safetensors: a `.safetensors` file, a `*.safetensors.index.json`, a
    /// model folder, or any file whose JSON header starts right after its 8-byte length.
    Safetensors,
}

/// The kind of the file at `path`, or an error naming what its first bytes are.
pub fn detect(path: &Path) -> Result<FileKind> {
    let named = |ext: &str| path.extension().is_some_and(|e| e == ext);
    if path.is_dir() || named("safetensors") || named("json") {
        return Ok(FileKind::Safetensors);
    }
    let mut head = [0u8; 9];
    let mut file =
        std::fs::File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    let mut n = 0;
    while n < head.len() {
        match file.read(&mut head[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e).with_context(|| format!("cannot read {}", path.display())),
        }
    }
    let head = &head[..n];
    if head.starts_with(b"GGUF") {
        return Ok(FileKind::Gguf);
    }
    if matches!(head.get(8), Some(b'{' | b' ' | b'\t' | b'\n' | b'\r')) {
        return Ok(FileKind::Safetensors);
    }
    bail!(
        "{}: neither GGUF nor safetensors ({} bytes, starts with {:02x?})",
        path.display(),
        n,
        head
    )
}

/// Opens the model at `path`, whichever container it is.
pub fn open_model(path: &Path) -> Result<quantforge::model::Model> {
    match detect(path)? {
        FileKind::Gguf => Ok(quantforge::model::Model::open_gguf(path)?),
        FileKind::Safetensors => Ok(quantforge::model::Model::open_safetensors(path)?),
    }
}
