//! Split sets: one model in several GGUF files, as llama.cpp's `gguf-split` writes them
//! and `llama-model-loader` reads them.
//!
//! - Part `i` of `n` is named `PREFIX-{i+1:05}-of-{n:05}.gguf` (`llama_split_path`).
//! - The first part holds all the metadata; every part has `split.no` (u16, 0-based),
//!   `split.tensors.count` (i32, the total) and `split.count` (u16), appended in that
//!   order as gguf-split does, and its share of the tensors, in order.
//! - Splitting by size counts each tensor's padded data, and starts a new part when the
//!   next tensor would exceed the limit (never leaving a part empty); splitting by count
//!   starts one every N tensors (`split_strategy` in `gguf-split.cpp`).
//!
//! Merging drops the `split.*` keys (gguf-split keeps them with `split.count = 0`), so
//! splitting a file and merging it back gives the original bytes. Parts after the first
//! carry `general.alignment` too when the model sets it, so each part is laid out with
//! the same alignment.

use super::error::{GgufError, Result};
use super::header::{GgufHeader, KEY_ALIGNMENT, pad};
use super::metadata::Metadata;
use super::reader::GgufFile;
use super::tensor::TensorView;
use super::value::Value;
use super::writer::{AtomicFile, GgufWriter};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// `split.no`: 0-based index of the part (u16).
pub const KEY_SPLIT_NO: &str = "split.no";
/// `split.count`: number of parts (u16).
pub const KEY_SPLIT_COUNT: &str = "split.count";
/// `split.tensors.count`: tensors in all parts together (i32).
pub const KEY_SPLIT_TENSORS_COUNT: &str = "split.tensors.count";

/// Bytes of tensor data copied at a time when writing from a model.
const STREAM_CHUNK: usize = 16 << 20;

const SPLIT_KEYS: [&str; 3] = [KEY_SPLIT_NO, KEY_SPLIT_COUNT, KEY_SPLIT_TENSORS_COUNT];

/// The path of part `index` (0-based) of `count`: `PREFIX-00001-of-00003.gguf`.
pub fn split_path(prefix: &Path, index: u16, count: u16) -> PathBuf {
    let mut name = prefix.as_os_str().to_owned();
    name.push(format!("-{:05}-of-{count:05}.gguf", u32::from(index) + 1));
    PathBuf::from(name)
}

/// The prefix of `path` if it is part `index` (0-based) of `count` (`llama_split_prefix`).
pub fn split_prefix(path: &Path, index: u16, count: u16) -> Option<PathBuf> {
    let text = path.to_str()?;
    let postfix = format!("-{:05}-of-{count:05}.gguf", u32::from(index) + 1);
    let prefix = text.strip_suffix(&postfix)?;
    (!prefix.is_empty()).then(|| PathBuf::from(prefix))
}

/// Limits for [`plan_split`]; `None` means no limit of that kind.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SplitLimits {
    /// Most tensors in one part.
    pub max_tensors: Option<usize>,
    /// Most bytes of (padded) tensor data in one part; a tensor larger than this gets a
    /// part of its own.
    pub max_bytes: Option<u64>,
}

/// The headers of the parts that `header` splits into under `limits`, with the
/// `split.*` keys set. Any `split.*` keys `header` had are replaced.
pub fn plan_split(header: &GgufHeader, limits: SplitLimits) -> Result<Vec<GgufHeader>> {
    if limits.max_tensors == Some(0) || limits.max_bytes == Some(0) {
        return Err(GgufError::Split(
            "split limits must be at least 1 tensor and 1 byte".to_string(),
        ));
    }
    let alignment = header.alignment()?;
    let mut groups: Vec<Vec<usize>> = vec![Vec::new()];
    let mut bytes = 0u64;
    for (i, info) in header.tensors().iter().enumerate() {
        let size = pad(info.n_bytes(), alignment).unwrap_or(u64::MAX);
        let current = groups.last().map_or(0, Vec::len);
        let too_many = limits.max_tensors.is_some_and(|max| current >= max);
        let too_big = limits
            .max_bytes
            .is_some_and(|max| bytes.saturating_add(size) > max);
        if current > 0 && (too_many || too_big) {
            groups.push(Vec::new());
            bytes = 0;
        }
        bytes = bytes.saturating_add(size);
        if let Some(group) = groups.last_mut() {
            group.push(i);
        }
    }
    let count = u16::try_from(groups.len()).map_err(|_| {
        GgufError::Split(format!(
            "{} parts needed, at most {} allowed",
            groups.len(),
            u16::MAX
        ))
    })?;
    let total = i32::try_from(header.tensors().len()).map_err(|_| {
        GgufError::Split(format!(
            "{} tensors do not fit split.tensors.count (i32)",
            header.tensors().len()
        ))
    })?;
    let mut base = header.metadata().clone();
    for key in SPLIT_KEYS {
        base.remove(key);
    }
    let mut parts = Vec::with_capacity(groups.len());
    for (no, group) in (0u16..).zip(groups) {
        let mut part = GgufHeader::new();
        part.set_version(header.version())?;
        let meta = part.metadata_mut();
        if no == 0 {
            *meta = base.clone();
        }
        set_split_keys(meta, no, count, total);
        if no > 0
            && let Some(align) = base.get(KEY_ALIGNMENT)
        {
            meta.set(KEY_ALIGNMENT, align.clone())?;
        }
        for i in group {
            part.push_tensor(header.tensors()[i].clone())?;
        }
        parts.push(part);
    }
    Ok(parts)
}

/// Appends the split keys in the order gguf-split leaves them: it sets `split.no`,
/// `split.count` (a placeholder), `split.tensors.count`, then sets `split.count` again
/// once the number of parts is known, which moves it last (`gguf_set_val_*` removes and
/// re-appends).
fn set_split_keys(meta: &mut Metadata, no: u16, count: u16, total: i32) {
    // Keys are non-empty constants: `set` cannot fail.
    let _ = meta.set(KEY_SPLIT_NO, Value::U16(no));
    let _ = meta.set(KEY_SPLIT_TENSORS_COUNT, Value::I32(total));
    let _ = meta.set(KEY_SPLIT_COUNT, Value::U16(count));
}

/// A model: one GGUF file, or every part of a split set opened together, with one tensor
/// directory across the parts.
#[derive(Debug)]
pub struct GgufModel {
    parts: Vec<GgufFile>,
    /// (part, index in part) of each tensor, in model order.
    entries: Vec<(usize, usize)>,
    index: HashMap<String, usize>,
}

impl GgufModel {
    /// Opens `path` by mmap; when it is the first part of a split set (it has
    /// `split.count`), the other parts are found by name and opened too.
    pub fn open(path: impl AsRef<Path>) -> Result<GgufModel> {
        let path = path.as_ref();
        let first = GgufFile::open(path)?;
        let count = split_count(&first).map_err(|e| e.in_file(path))?;
        let mut parts = vec![first];
        if count > 1 {
            let no = split_no(&parts[0]).map_err(|e| e.in_file(path))?;
            if no != 0 {
                return Err(GgufError::Split(format!(
                    "this is part {} of {count}; open the first part",
                    u32::from(no) + 1
                ))
                .in_file(path));
            }
            let prefix = split_prefix(path, 0, count).ok_or_else(|| {
                GgufError::Split(format!(
                    "split.count is {count} but the name does not end in -00001-of-{count:05}.gguf"
                ))
                .in_file(path)
            })?;
            for i in 1..count {
                parts.push(GgufFile::open(split_path(&prefix, i, count))?);
            }
        }
        GgufModel::from_parts(parts)
    }

    /// One file as a model on its own, without the split-set checks (a plain file, or
    /// one part of a set looked at alone).
    pub fn from_file(file: GgufFile) -> GgufModel {
        let entries: Vec<(usize, usize)> = (0..file.tensors().len()).map(|t| (0, t)).collect();
        let index = file
            .tensors()
            .iter()
            .enumerate()
            .map(|(t, info)| (info.name().to_string(), t))
            .collect();
        GgufModel {
            parts: vec![file],
            entries,
            index,
        }
    }

    /// A model from files already open: one plain file, or every part of a split set in
    /// order. Checks the `split.*` keys and that tensor names are unique across parts.
    pub fn from_parts(parts: Vec<GgufFile>) -> Result<GgufModel> {
        let Some(first) = parts.first() else {
            return Err(GgufError::Split("no files given".to_string()));
        };
        let name = |f: &GgufFile| {
            f.path()
                .map(|p| p.display().to_string())
                .unwrap_or_default()
        };
        let count = split_count(first)?;
        if usize::from(count.max(1)) != parts.len() {
            return Err(GgufError::Split(format!(
                "{}: split.count is {count} but {} files are given",
                name(first),
                parts.len()
            )));
        }
        if parts.len() > 1 || first.metadata().contains_key(KEY_SPLIT_COUNT) {
            for (i, part) in parts.iter().enumerate() {
                let no = split_no(part).map_err(|e| e.in_file(name(part)))?;
                let n = split_count(part).map_err(|e| e.in_file(name(part)))?;
                if usize::from(no) != i || n != count {
                    return Err(GgufError::Split(format!(
                        "{}: is part {} of {n}, expected part {} of {count}",
                        name(part),
                        u32::from(no) + 1,
                        i + 1
                    )));
                }
            }
        }
        let mut entries = Vec::new();
        let mut index = HashMap::new();
        for (p, part) in parts.iter().enumerate() {
            for (t, info) in part.tensors().iter().enumerate() {
                if index
                    .insert(info.name().to_string(), entries.len())
                    .is_some()
                {
                    return Err(GgufError::DuplicateTensor {
                        name: info.name().to_string(),
                    }
                    .in_file(name(part)));
                }
                entries.push((p, t));
            }
        }
        if let Some(value) = first.metadata().get(KEY_SPLIT_TENSORS_COUNT) {
            let expected = value.as_u64_lossless();
            if expected != Some(entries.len() as u64) {
                return Err(GgufError::Split(format!(
                    "split.tensors.count is {value:?} but the parts hold {} tensors",
                    entries.len()
                )));
            }
        }
        Ok(GgufModel {
            parts,
            entries,
            index,
        })
    }

    /// The files, in part order (one for a plain file).
    pub fn parts(&self) -> &[GgufFile] {
        &self.parts
    }

    /// Whether this is a split set (the first file has `split.count`).
    pub fn is_split(&self) -> bool {
        self.parts[0].metadata().contains_key(KEY_SPLIT_COUNT)
    }

    /// The metadata of the first part (which holds the model's metadata).
    pub fn metadata(&self) -> &Metadata {
        self.parts[0].metadata()
    }

    /// Number of tensors across all parts.
    pub fn n_tensors(&self) -> usize {
        self.entries.len()
    }

    /// Views of every tensor in model order; [`TensorView::part`] says which file.
    pub fn tensors(&self) -> impl ExactSizeIterator<Item = TensorView<'_>> {
        self.entries.iter().map(|&(p, t)| self.view(p, t))
    }

    /// The tensor called `name`, from whichever part holds it.
    pub fn tensor(&self, name: &str) -> Result<TensorView<'_>> {
        let &i = self
            .index
            .get(name)
            .ok_or_else(|| GgufError::TensorNotFound {
                name: name.to_string(),
            })?;
        let (p, t) = self.entries[i];
        Ok(self.view(p, t))
    }

    fn view(&self, part: usize, i: usize) -> TensorView<'_> {
        self.parts[part].view(i).in_part(part)
    }

    /// See [`GgufFile::prefetch`].
    pub fn prefetch(&self, view: &TensorView<'_>) -> Result<()> {
        self.part_of(view)?.prefetch(view)
    }

    /// See [`GgufFile::release`].
    pub fn release(&self, view: &TensorView<'_>) -> Result<()> {
        self.part_of(view)?.release(view)
    }

    fn part_of(&self, view: &TensorView<'_>) -> Result<&GgufFile> {
        self.parts
            .get(view.part())
            .ok_or_else(|| GgufError::TensorNotFound {
                name: view.name().to_string(),
            })
    }

    /// The header of the model as one file: the first part's version and metadata
    /// without the `split.*` keys, every tensor in order.
    pub fn merged_header(&self) -> Result<GgufHeader> {
        let mut header = GgufHeader::new();
        header.set_version(self.parts[0].header().version())?;
        *header.metadata_mut() = self.metadata().clone();
        if self.is_split() {
            for key in SPLIT_KEYS {
                header.metadata_mut().remove(key);
            }
        }
        for view in self.tensors() {
            header.push_tensor(view.info().clone())?;
        }
        Ok(header)
    }

    /// Writes the model as one file with the given header, whose tensors must be this
    /// model's (same names, types and shapes), in any order. For a plain file and its own
    /// header this is a byte-identical re-emit.
    pub fn write_with_header(&self, path: impl AsRef<Path>, header: &GgufHeader) -> Result<()> {
        let mut writer = GgufWriter::create(path, header)?;
        self.stream_tensors(&mut writer, header)?;
        writer.commit()
    }

    /// Writes the model as one file: re-emits a plain file, merges a split set.
    pub fn write_merged(&self, path: impl AsRef<Path>) -> Result<()> {
        self.write_with_header(path, &self.merged_header()?)
    }

    /// Writes the model as a split set `PREFIX-0000i-of-0000n.gguf` under `limits` and
    /// returns the paths. All parts are written to temporary files first and renamed
    /// into place only when every one is complete.
    pub fn write_split(&self, prefix: &Path, limits: SplitLimits) -> Result<Vec<PathBuf>> {
        let parts = plan_split(&self.merged_header()?, limits)?;
        let count = parts.len() as u16;
        let mut done = Vec::with_capacity(parts.len());
        for (no, header) in (0u16..).zip(&parts) {
            let path = split_path(prefix, no, count);
            let mut writer = GgufWriter::create(&path, header)?;
            self.stream_tensors(&mut writer, header)?;
            done.push(writer.finish()?);
        }
        let paths = done.iter().map(|f| f.path().to_path_buf()).collect();
        done.into_iter().try_for_each(AtomicFile::commit)?;
        Ok(paths)
    }

    /// Streams the data of `header`'s tensors, taken from this model, into `writer`.
    fn stream_tensors(
        &self,
        writer: &mut GgufWriter<'_, AtomicFile>,
        header: &GgufHeader,
    ) -> Result<()> {
        for info in header.tensors() {
            let view = self.tensor(info.name())?;
            if view.info() != info {
                return Err(GgufError::Split(format!(
                    "tensor '{}' in the output header differs from the model's",
                    info.name()
                )));
            }
            // In chunks, each read ahead and dropped after writing, so the process's
            // resident set stays near STREAM_CHUNK however large the tensor.
            let part = self.part_of(&view)?;
            let mut offset = view.offset();
            for chunk in view.data().chunks(STREAM_CHUNK) {
                part.prefetch_bytes(offset, chunk.len())?;
                writer.write_chunk(chunk)?;
                part.release_bytes(offset, chunk.len())?;
                offset += chunk.len() as u64;
            }
            if view.data().is_empty() {
                writer.write_chunk(&[])?;
            }
        }
        Ok(())
    }
}

/// `split.count` of a file, 0 when absent.
fn split_count(file: &GgufFile) -> Result<u16> {
    split_key(file, KEY_SPLIT_COUNT)
}

/// `split.no` of a file (required).
fn split_no(file: &GgufFile) -> Result<u16> {
    split_key(file, KEY_SPLIT_NO)
}

fn split_key(file: &GgufFile, key: &str) -> Result<u16> {
    let meta = file.metadata();
    if key == KEY_SPLIT_COUNT && !meta.contains_key(key) {
        return Ok(0);
    }
    let value = meta.get_uint(key)?;
    u16::try_from(value).map_err(|_| GgufError::Split(format!("{key} is {value}, above u16")))
}
