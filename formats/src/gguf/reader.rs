//! One GGUF file, opened by mmap or read into memory, with zero-copy tensor views.
//!
//! Opening parses and validates the header only ([`GgufHeader::parse`]). Under mmap the
//! mapping is marked random-access, so the kernel reads only the pages actually touched
//! (no read-around into neighbouring tensors); [`GgufFile::prefetch`] asks for read-ahead
//! of exactly one tensor about to be read whole, and [`GgufFile::release`] drops the pages
//! of one that is done. `formats/tests/gguf_mmap.rs` checks all three with `mincore`.

use super::error::{GgufError, Result};
use super::header::{GgufHeader, Layout};
use super::metadata::Metadata;
use super::tensor::{TensorInfo, TensorView};
use super::value::SharedBytes;
use memmap2::{Advice, Mmap};
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Where the file's bytes live.
#[derive(Debug)]
enum Source {
    Mmap(Mmap),
    Heap(Vec<u8>),
}

impl Source {
    fn bytes(&self) -> &[u8] {
        match self {
            Source::Mmap(map) => map,
            Source::Heap(bytes) => bytes,
        }
    }
}

impl AsRef<[u8]> for Source {
    fn as_ref(&self) -> &[u8] {
        self.bytes()
    }
}

/// An open, validated GGUF file.
#[derive(Debug)]
pub struct GgufFile {
    path: Option<PathBuf>,
    /// Shared with the header's string arrays, which keep to its bytes.
    source: Arc<Source>,
    header: GgufHeader,
    layout: Layout,
}

impl GgufFile {
    /// Opens `path` by mmap. Only the header's pages are read.
    ///
    /// Like every mmap reader (llama.cpp's included), this assumes no other process
    /// truncates or rewrites the file while it is open.
    pub fn open(path: impl AsRef<Path>) -> Result<GgufFile> {
        let path = path.as_ref();
        let file = File::open(path).map_err(|e| GgufError::io("cannot open", e).in_file(path))?;
        // SAFETY: the map is read-only and private to this process; the file is opened
        // read-only. Soundness requires that no one truncates or modifies the file while
        // it is mapped, the documented contract of `GgufFile::open` (and of llama.cpp's
        // loader); writers in this crate never write in place, they rename a new file
        // over the old one, which leaves this mapping intact.
        let map = unsafe { Mmap::map(&file) }
            .map_err(|e| GgufError::io("cannot mmap", e).in_file(path))?;
        // No read-around on page faults: the kernel would otherwise read megabytes of
        // tensor data around the header (read_ahead_kb is often 8 MiB). Tensors that are
        // read whole get their read-ahead from `prefetch`. A hint: failure is harmless.
        let _ = map.advise(Advice::Random);
        Self::from_source(Some(path.to_path_buf()), Source::Mmap(map))
    }

    /// Reads `path` entirely into memory.
    pub fn read(path: impl AsRef<Path>) -> Result<GgufFile> {
        let path = path.as_ref();
        let bytes =
            std::fs::read(path).map_err(|e| GgufError::io("cannot read", e).in_file(path))?;
        Self::from_source(Some(path.to_path_buf()), Source::Heap(bytes))
    }

    /// Parses a file held in memory.
    pub fn from_bytes(bytes: Vec<u8>) -> Result<GgufFile> {
        Self::from_source(None, Source::Heap(bytes))
    }

    fn from_source(path: Option<PathBuf>, source: Source) -> Result<GgufFile> {
        let source = Arc::new(source);
        let shared: SharedBytes = source.clone();
        match GgufHeader::parse_shared(&shared) {
            Ok((header, layout)) => Ok(GgufFile {
                path,
                source,
                header,
                layout,
            }),
            Err(e) => Err(match path {
                Some(path) => e.in_file(path),
                None => e,
            }),
        }
    }

    /// The path, when opened from one.
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// Whether the bytes are mmapped (rather than in memory).
    pub fn is_mmap(&self) -> bool {
        matches!(*self.source, Source::Mmap(_))
    }

    /// The header.
    pub fn header(&self) -> &GgufHeader {
        &self.header
    }

    /// The header, owned (to modify and write elsewhere).
    pub fn into_header(self) -> GgufHeader {
        self.header
    }

    /// The layout: alignment, data offset, tensor offsets.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// The metadata.
    pub fn metadata(&self) -> &Metadata {
        self.header.metadata()
    }

    /// The tensor directory, in file order.
    pub fn tensors(&self) -> &[TensorInfo] {
        self.header.tensors()
    }

    /// The whole file's bytes.
    pub fn bytes(&self) -> &[u8] {
        self.source.bytes()
    }

    /// Size of the file in bytes.
    pub fn file_size(&self) -> u64 {
        self.bytes().len() as u64
    }

    /// Whether the file is exactly what the writer would produce for its header, as far as
    /// its length tells: it ends right after the last tensor's padding.
    pub fn has_canonical_length(&self) -> bool {
        let expected = if self.tensors().is_empty() {
            self.layout.data_offset
        } else {
            self.layout.file_size()
        };
        self.file_size() == expected
    }

    /// A view of the `i`th tensor (file order), if there is one.
    pub fn tensor_at(&self, i: usize) -> Option<TensorView<'_>> {
        (i < self.tensors().len()).then(|| self.view(i))
    }

    /// The view of tensor `i < self.tensors().len()`.
    pub(crate) fn view(&self, i: usize) -> TensorView<'_> {
        let info = &self.tensors()[i];
        let start = self.layout.data_offset + self.layout.offsets[i];
        // In bounds: GgufHeader::parse checked every tensor's extent against the file.
        let data = &self.bytes()[start as usize..(start + info.n_bytes()) as usize];
        TensorView::new(info, start, data)
    }

    /// A view of the tensor called `name`.
    pub fn tensor(&self, name: &str) -> Result<TensorView<'_>> {
        let i = self
            .header
            .tensor_position(name)
            .ok_or_else(|| GgufError::TensorNotFound {
                name: name.to_string(),
            })?;
        Ok(self.view(i))
    }

    /// Views of every tensor, in file order.
    pub fn tensor_views(&self) -> impl ExactSizeIterator<Item = TensorView<'_>> {
        (0..self.tensors().len()).map(|i| self.view(i))
    }

    /// Tells the kernel the tensor's data is about to be read whole (`MADV_WILLNEED`),
    /// so it can start reading ahead. A no-op for files in memory.
    pub fn prefetch(&self, view: &TensorView<'_>) -> Result<()> {
        self.prefetch_bytes(view.offset(), view.data().len())
    }

    /// Tells the kernel the tensor's data is done with (`MADV_DONTNEED`), so its pages
    /// leave this process's resident set. Reading the view again afterwards is still
    /// correct: the pages come back from the file. A no-op for files in memory.
    pub fn release(&self, view: &TensorView<'_>) -> Result<()> {
        self.release_bytes(view.offset(), view.data().len())
    }

    /// [`GgufFile::prefetch`] for `len` bytes of the file at `offset` (e.g. one chunk of
    /// a large tensor).
    pub fn prefetch_bytes(&self, offset: u64, len: usize) -> Result<()> {
        let Some(map) = self.mapped_range(offset, len)? else {
            return Ok(());
        };
        crate::pages::prefetch(map, offset as usize, len)
            .map_err(|e| self.io_error("madvise(WILLNEED)", e))
    }

    /// [`GgufFile::release`] for `len` bytes of the file at `offset`.
    pub fn release_bytes(&self, offset: u64, len: usize) -> Result<()> {
        let Some(map) = self.mapped_range(offset, len)? else {
            return Ok(());
        };
        // SAFETY: `map` is this file's read-only mapping, made by `Mmap::map` in `open`.
        unsafe { crate::pages::release(map, offset as usize, len) }
            .map_err(|e| self.io_error("madvise(DONTNEED)", e))
    }

    /// The map, when the file is mapped and `len > 0` bytes at `offset` lie within it.
    fn mapped_range(&self, offset: u64, len: usize) -> Result<Option<&Mmap>> {
        let Source::Mmap(map) = &*self.source else {
            return Ok(None);
        };
        if offset
            .checked_add(len as u64)
            .is_none_or(|end| end > self.file_size())
        {
            return Err(self.io_error(
                "madvise",
                std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    format!("{len} bytes at offset {offset} are outside the file"),
                ),
            ));
        }
        Ok((len > 0).then_some(map))
    }

    fn io_error(&self, what: &str, e: std::io::Error) -> GgufError {
        let err = GgufError::io(what, e);
        match &self.path {
            Some(p) => err.in_file(p),
            None => err,
        }
    }
}
