//! Which container a file holds, told from its first bytes. The one place that decides;
//! a subcommand that learns another container matches on one more [`FileKind`].

use anyhow::{Context, Result, bail};
use std::io::Read;
use std::path::Path;

/// A container quantforge reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FileKind {
    /// llama.cpp's GGUF (starts with `GGUF`).
    Gguf,
}

/// The kind of the file at `path`, or an error naming what its first bytes are.
pub fn detect(path: &Path) -> Result<FileKind> {
    let mut head = [0u8; 8];
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
    bail!(
        "{}: not a GGUF file ({} bytes, starts with {:02x?})",
        path.display(),
        n,
        head
    )
}
