//! Writing safetensors byte-identical to the Hugging Face crate (`prepare` and
//! `serialize` in upstream `tensor.rs`): tensors sorted by descending dtype (upstream's
//! alignment order) then by name, offsets packed from 0, the header as compact serde_json
//! (`__metadata__` first, then each tensor as `{"dtype","shape","data_offsets"}`), padded
//! with spaces to a multiple of 8 bytes, its length as a little-endian u64 in front.
//!
//! [`Layout`] computes all of that from declared names, dtypes and shapes alone, so a
//! [`FileWriter`] can write the header first and then take each tensor's bytes as they
//! become available, in any order and from several threads (positional writes), with
//! memory bounded by what the caller holds. Files are replaced atomically: a temporary
//! file in the same directory, fsynced, then renamed over the target.

use super::header::{Header, TensorInfo, checked_byte_len};
use super::{Dtype, Error, MAX_HEADER_LEN, Result, TensorView};
use crate::output::disk::write_all_at;
use std::collections::HashMap;
use std::io::Write;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use tempfile::NamedTempFile;

/// The order tensors take in a written file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Order {
    /// Upstream's: descending dtype alignment, then name (byte order). What the Hugging
    /// Face crate (and so `safetensors.torch.save_file`) writes.
    #[default]
    Canonical,
    /// The order given, e.g. to re-emit a file exactly as it was laid out.
    AsGiven,
}

/// A tensor to be written, declared before its data exists.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorSpec {
    /// Its name.
    pub name: String,
    /// Its element type.
    pub dtype: Dtype,
    /// Its shape, outermost axis first.
    pub shape: Vec<usize>,
}

impl From<&TensorView<'_>> for TensorSpec {
    fn from(view: &TensorView<'_>) -> TensorSpec {
        TensorSpec {
            name: view.name().to_owned(),
            dtype: view.dtype(),
            shape: view.shape().to_vec(),
        }
    }
}

/// Everything about a file except its tensor data: the header bytes and where each
/// tensor goes.
#[derive(Clone, Debug)]
pub struct Layout {
    /// Length prefix, header JSON, padding.
    prefix: Vec<u8>,
    tensors: Vec<TensorInfo>,
    index: HashMap<String, usize>,
    data_len: usize,
}

impl Layout {
    /// Lays out `specs` with `metadata` (`None` writes no `__metadata__`; `Some` of an
    /// empty list writes an empty one, as upstream does for `Some(HashMap::new())`).
    ///
    /// Errors: a repeated or reserved name or metadata key, a shape whose size overflows
    /// or (F4, F6) is not whole bytes, a header beyond the 100 MB limit.
    pub fn new(
        specs: impl IntoIterator<Item = TensorSpec>,
        metadata: Option<&[(String, String)]>,
        order: Order,
    ) -> Result<Layout> {
        let mut specs: Vec<TensorSpec> = specs.into_iter().collect();
        if order == Order::Canonical {
            specs.sort_by(|a, b| b.dtype.cmp(&a.dtype).then_with(|| a.name.cmp(&b.name)));
        }
        let mut index = HashMap::with_capacity(specs.len());
        let mut tensors = Vec::with_capacity(specs.len());
        let mut offset = 0usize;
        for spec in specs {
            if spec.name == "__metadata__" {
                return Err(Error::ReservedName);
            }
            let len = checked_byte_len(&spec.name, spec.dtype, &spec.shape)?;
            let end = offset
                .checked_add(len)
                .ok_or_else(|| Error::ShapeOverflow {
                    name: spec.name.clone(),
                    dtype: spec.dtype,
                    shape: spec.shape.clone(),
                })?;
            if index.insert(spec.name.clone(), tensors.len()).is_some() {
                return Err(Error::DuplicateTensor { name: spec.name });
            }
            tensors.push(TensorInfo::new(
                spec.name,
                spec.dtype,
                spec.shape,
                offset..end,
            ));
            offset = end;
        }
        if let Some(metadata) = metadata {
            let mut keys = std::collections::HashSet::new();
            for (key, _) in metadata {
                if !keys.insert(key.as_str()) {
                    return Err(Error::DuplicateMetadataKey { key: key.clone() });
                }
            }
        }
        let prefix = header_prefix(metadata, &tensors)?;
        check_file_len(prefix.len(), offset, &tensors)?;
        Ok(Layout {
            prefix,
            tensors,
            index,
            data_len: offset,
        })
    }

    /// The layout a given header describes, keeping its bytes exactly (formatting,
    /// member order, padding), e.g. to reproduce a file from a recorded header. The
    /// header is validated as a reader would.
    pub fn from_header_bytes(json: &[u8]) -> Result<Layout> {
        let header = Header::parse(json)?;
        let mut prefix = Vec::with_capacity(8 + json.len());
        prefix.extend_from_slice(&(json.len() as u64).to_le_bytes());
        prefix.extend_from_slice(json);
        let tensors = header.tensors().to_vec();
        check_file_len(prefix.len(), header.data_len(), &tensors)?;
        let index = tensors
            .iter()
            .enumerate()
            .map(|(i, t)| (t.name().to_owned(), i))
            .collect();
        Ok(Layout {
            prefix,
            tensors,
            index,
            data_len: header.data_len(),
        })
    }

    /// The bytes before the data: the 8-byte header length, the header, its padding.
    pub fn prefix(&self) -> &[u8] {
        &self.prefix
    }

    /// Where the data buffer starts in the file.
    pub fn data_start(&self) -> usize {
        self.prefix.len()
    }

    /// Length of the data buffer.
    pub fn data_len(&self) -> usize {
        self.data_len
    }

    /// Length of the whole file.
    pub fn file_len(&self) -> u64 {
        self.prefix.len() as u64 + self.data_len as u64
    }

    /// The tensors in file order, with their offsets in the data buffer.
    pub fn tensors(&self) -> &[TensorInfo] {
        &self.tensors
    }

    /// The entry of tensor `name`.
    pub fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        self.index.get(name).and_then(|&i| self.tensors.get(i))
    }

    fn position(&self, name: &str) -> Result<usize> {
        self.index
            .get(name)
            .copied()
            .ok_or_else(|| Error::TensorNotFound {
                name: name.to_owned(),
            })
    }
}

/// Serializes tensors and metadata to bytes. With [`Order::Canonical`] the result is
/// byte-identical to `safetensors::serialize` given the same tensors and (for more than
/// one key, in the same order) metadata.
pub fn serialize<'a>(
    tensors: impl IntoIterator<Item = TensorView<'a>>,
    metadata: Option<&[(String, String)]>,
    order: Order,
) -> Result<Vec<u8>> {
    let views: Vec<TensorView<'a>> = tensors.into_iter().collect();
    let layout = Layout::new(views.iter().map(TensorSpec::from), metadata, order)?;
    let by_name: HashMap<&str, &TensorView<'a>> = views.iter().map(|v| (v.name(), v)).collect();
    let mut out = Vec::new();
    out.try_reserve_exact(layout.file_len() as usize)
        .map_err(|_| {
            Error::io(
                "cannot allocate the output",
                std::io::ErrorKind::OutOfMemory.into(),
            )
        })?;
    out.extend_from_slice(layout.prefix());
    for info in layout.tensors() {
        if let Some(view) = by_name.get(info.name()) {
            out.extend_from_slice(view.data());
        }
    }
    Ok(out)
}

/// Writes tensors and metadata to `path` atomically, streaming each tensor's bytes
/// (nothing is gathered in memory). The bytes are those of [`serialize`].
pub fn write_file<'a>(
    path: impl AsRef<Path>,
    tensors: impl IntoIterator<Item = TensorView<'a>>,
    metadata: Option<&[(String, String)]>,
    order: Order,
) -> Result<()> {
    let path = path.as_ref();
    let views: Vec<TensorView<'a>> = tensors.into_iter().collect();
    let layout = Layout::new(views.iter().map(TensorSpec::from), metadata, order)
        .map_err(|e| e.in_file(path))?;
    let writer = FileWriter::create(path, layout)?;
    for view in &views {
        writer.write_tensor(view.name(), view.data())?;
    }
    writer.finish()
}

/// A file being written from a [`Layout`]: the header is on disk, tensor bytes go in by
/// position. `&self` methods, so threads can fill one file together. Dropped without
/// [`FileWriter::finish`], the temporary file is deleted and `path` is untouched.
#[derive(Debug)]
pub struct FileWriter {
    layout: Layout,
    path: PathBuf,
    file: NamedTempFile,
    /// Per tensor (file order), the byte ranges written so far.
    written: Vec<Mutex<Vec<Range<usize>>>>,
}

impl FileWriter {
    /// Creates the temporary file next to `path`, sized to the layout, header written.
    pub fn create(path: impl AsRef<Path>, layout: Layout) -> Result<FileWriter> {
        let path = path.as_ref().to_path_buf();
        let file = temp_file_beside(&path)?;
        let sized = file
            .as_file()
            .set_len(layout.file_len())
            .and_then(|()| write_all_at(file.as_file(), layout.prefix(), 0));
        sized.map_err(|e| Error::io("cannot write the header", e).in_file(&path))?;
        let written = layout
            .tensors()
            .iter()
            .map(|_| Mutex::new(Vec::new()))
            .collect();
        Ok(FileWriter {
            layout,
            path,
            file,
            written,
        })
    }

    /// The layout being written.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// Writes all of tensor `name`'s bytes.
    pub fn write_tensor(&self, name: &str, data: &[u8]) -> Result<()> {
        let i = self
            .layout
            .position(name)
            .map_err(|e| e.in_file(&self.path))?;
        let info = &self.layout.tensors[i];
        if data.len() != info.byte_len() {
            return Err(Error::WrongDataLength {
                name: name.to_owned(),
                dtype: info.dtype(),
                shape: info.shape().to_vec(),
                expected: info.byte_len(),
                actual: data.len(),
            }
            .in_file(&self.path));
        }
        self.write_at(name, 0, data)
    }

    /// Writes `bytes` at byte `offset` within tensor `name`. Writes may come in any
    /// order and from any thread; [`FileWriter::finish`] checks every byte was covered.
    pub fn write_at(&self, name: &str, offset: usize, bytes: &[u8]) -> Result<()> {
        let i = self
            .layout
            .position(name)
            .map_err(|e| e.in_file(&self.path))?;
        let info = &self.layout.tensors[i];
        let end = offset
            .checked_add(bytes.len())
            .filter(|&e| e <= info.byte_len());
        let Some(end) = end else {
            return Err(Error::WriteOutOfBounds {
                name: name.to_owned(),
                offset,
                len: bytes.len(),
                size: info.byte_len(),
            }
            .in_file(&self.path));
        };
        if bytes.is_empty() {
            return Ok(());
        }
        // In range: offset + len <= the tensor's size, and the file length fits in u64.
        let at = self.layout.data_start() as u64 + (info.data_offsets().start + offset) as u64;
        crate::output::check_stop()
            .and_then(|()| write_all_at(self.file.as_file(), bytes, at))
            .map_err(|e| {
                Error::io(format!("cannot write tensor `{name}`"), e).in_file(&self.path)
            })?;
        let mut written = self.written[i].lock().unwrap_or_else(|p| p.into_inner());
        written.push(offset..end);
        if written.len() > 64 {
            merge(&mut written);
        }
        Ok(())
    }

    /// A [`Write`] that appends to tensor `name` from its start, for streaming it in
    /// pieces.
    pub fn tensor_writer(&self, name: &str) -> Result<TensorWriter<'_>> {
        self.layout
            .position(name)
            .map_err(|e| e.in_file(&self.path))?;
        Ok(TensorWriter {
            file: self,
            name: name.to_owned(),
            offset: 0,
        })
    }

    /// Checks every tensor was written in full, then fsyncs and renames the file over
    /// `path`.
    pub fn finish(self) -> Result<()> {
        for (info, written) in self.layout.tensors.iter().zip(self.written) {
            let mut ranges = written.into_inner().unwrap_or_else(|p| p.into_inner());
            merge(&mut ranges);
            let covered: usize = ranges.iter().map(|r| r.len()).sum();
            if covered != info.byte_len() {
                return Err(Error::Unwritten {
                    name: info.name().to_owned(),
                    missing: info.byte_len() - covered,
                    size: info.byte_len(),
                }
                .in_file(&self.path));
            }
        }
        persist(self.file, &self.path)
    }
}

/// Streams one tensor's bytes into a [`FileWriter`] (see [`FileWriter::tensor_writer`]).
#[derive(Debug)]
pub struct TensorWriter<'w> {
    file: &'w FileWriter,
    name: String,
    offset: usize,
}

impl Write for TensorWriter<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.file
            .write_at(&self.name, self.offset, buf)
            .map_err(std::io::Error::other)?;
        self.offset += buf.len();
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The whole file must be addressable with u64 offsets (so positional writes cannot
/// overflow); blamed on the last tensor.
fn check_file_len(prefix_len: usize, data_len: usize, tensors: &[TensorInfo]) -> Result<()> {
    match (prefix_len as u64).checked_add(data_len as u64) {
        Some(_) => Ok(()),
        None => {
            let last = tensors.last();
            Err(Error::ShapeOverflow {
                name: last.map(|t| t.name().to_owned()).unwrap_or_default(),
                dtype: last.map_or(Dtype::U8, TensorInfo::dtype),
                shape: last.map(|t| t.shape().to_vec()).unwrap_or_default(),
            })
        }
    }
}

/// Sorts and merges overlapping or touching ranges.
fn merge(ranges: &mut Vec<Range<usize>>) {
    ranges.sort_by_key(|r| r.start);
    let mut merged: Vec<Range<usize>> = Vec::with_capacity(ranges.len());
    for r in ranges.drain(..) {
        match merged.last_mut() {
            Some(last) if r.start <= last.end => last.end = last.end.max(r.end),
            _ => merged.push(r),
        }
    }
    *ranges = merged;
}

/// The length prefix, compact header JSON and space padding, as upstream writes them.
fn header_prefix(metadata: Option<&[(String, String)]>, tensors: &[TensorInfo]) -> Result<Vec<u8>> {
    let mut json = Vec::with_capacity(64 + tensors.len() * 96);
    json.push(b'{');
    if let Some(metadata) = metadata {
        json.extend_from_slice(b"\"__metadata__\":{");
        for (i, (key, value)) in metadata.iter().enumerate() {
            if i > 0 {
                json.push(b',');
            }
            str_json(&mut json, key)?;
            json.push(b':');
            str_json(&mut json, value)?;
        }
        json.push(b'}');
    }
    for (i, t) in tensors.iter().enumerate() {
        if i > 0 || metadata.is_some() {
            json.push(b',');
        }
        str_json(&mut json, t.name())?;
        json.extend_from_slice(b":{\"dtype\":\"");
        json.extend_from_slice(t.dtype().name().as_bytes());
        json.extend_from_slice(b"\",\"shape\":[");
        for (j, d) in t.shape().iter().enumerate() {
            if j > 0 {
                json.push(b',');
            }
            json.extend_from_slice(d.to_string().as_bytes());
        }
        let offsets = t.data_offsets();
        json.extend_from_slice(
            format!("],\"data_offsets\":[{},{}]}}", offsets.start, offsets.end).as_bytes(),
        );
    }
    json.push(b'}');
    let padded = json.len().next_multiple_of(8);
    if padded as u64 > MAX_HEADER_LEN {
        return Err(Error::HeaderTooLarge { len: padded as u64 });
    }
    json.resize(padded, b' ');
    let mut prefix = Vec::with_capacity(8 + padded);
    prefix.extend_from_slice(&(padded as u64).to_le_bytes());
    prefix.extend_from_slice(&json);
    Ok(prefix)
}

/// Appends `s` as a JSON string, escaped exactly as serde_json (and so upstream) does.
fn str_json(out: &mut Vec<u8>, s: &str) -> Result<()> {
    serde_json::to_writer(out, s).map_err(|e| Error::HeaderJson {
        message: e.to_string(),
    })
}

/// A temporary file in `path`'s directory, so the final rename is atomic.
pub(crate) fn temp_file_beside(path: &Path) -> Result<NamedTempFile> {
    let dir = crate::output::parent_dir(path);
    crate::output::temp_file_beside(path).map_err(|e| {
        Error::io(
            format!("cannot create a temporary file in {}", dir.display()),
            e,
        )
    })
}

/// Flushes `file` to disk, renames it over `path`, and syncs the directory so the
/// rename itself is durable ([`crate::output::persist`]).
pub(crate) fn persist(file: NamedTempFile, path: &Path) -> Result<()> {
    crate::output::persist(file, path, crate::output::Durability::Synced)
        .map_err(|(step, e)| Error::io(step, e).in_file(path))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_matches_upstream_shape() {
        let layout = Layout::new(
            [
                TensorSpec {
                    name: "b".into(),
                    dtype: Dtype::U8,
                    shape: vec![3],
                },
                TensorSpec {
                    name: "a".into(),
                    dtype: Dtype::F32,
                    shape: vec![1, 2],
                },
            ],
            Some(&[("format".to_owned(), "pt".to_owned())]),
            Order::Canonical,
        )
        .unwrap();
        let json = std::str::from_utf8(&layout.prefix()[8..]).unwrap();
        assert_eq!(
            json.trim_end(),
            r#"{"__metadata__":{"format":"pt"},"a":{"dtype":"F32","shape":[1,2],"data_offsets":[0,8]},"b":{"dtype":"U8","shape":[3],"data_offsets":[8,11]}}"#
        );
        assert_eq!(layout.prefix().len() % 8, 0);
        assert_eq!(layout.file_len(), layout.prefix().len() as u64 + 11);
    }

    #[test]
    fn rejects_bad_specs() {
        let spec = |name: &str| TensorSpec {
            name: name.into(),
            dtype: Dtype::U8,
            shape: vec![1],
        };
        let dup = Layout::new([spec("x"), spec("x")], None, Order::AsGiven).unwrap_err();
        assert!(matches!(dup, Error::DuplicateTensor { .. }));
        let reserved = Layout::new([spec("__metadata__")], None, Order::AsGiven).unwrap_err();
        assert!(matches!(reserved, Error::ReservedName));
        let md = [
            ("k".to_owned(), "1".to_owned()),
            ("k".to_owned(), "2".to_owned()),
        ];
        let err = Layout::new([], Some(&md), Order::AsGiven).unwrap_err();
        assert!(matches!(err, Error::DuplicateMetadataKey { .. }));
    }

    #[test]
    fn recorded_headers_are_kept_verbatim() {
        let json = br#" { "b": {"dtype":"U8","shape":[2],"data_offsets":[0,2]} } "#;
        let layout = Layout::from_header_bytes(json).unwrap();
        assert_eq!(&layout.prefix()[8..], json);
        assert_eq!(layout.data_len(), 2);
        assert!(Layout::from_header_bytes(b"{\"b\":1}").is_err());
    }

    #[test]
    fn merges_ranges() {
        let mut r = vec![4..6, 0..2, 2..3, 5..9];
        merge(&mut r);
        assert_eq!(r, [0..3, 4..9]);
    }
}
