//! The GGUF header (magic, version, counts, metadata, tensor directory) and the layout
//! of the file it describes, parsed and encoded with the rules of ggml's `gguf.cpp`:
//!
//! - `"GGUF"`, u32 version (2 or 3), u64 tensor count, u64 key count, the key-value pairs,
//!   then per tensor: name, u32 `n_dims`, `n_dims` x i64 `ne`, u32 type, u64 offset.
//! - The data section starts at the header's end padded to the alignment
//!   (`general.alignment`, a u32 power of two, default 32), with zero bytes.
//! - Tensor offsets are relative to the data section and sit exactly where the tensors
//!   before them end, each padded to the alignment (`gguf_add_tensor`); the reader
//!   rejects any other offset, as ggml does, so a layout is fully implied by the header.
//! - Every tensor's data is padded to the alignment, the last one too.

use super::error::{GgufError, Result};
use super::metadata::Metadata;
use super::tensor::{MAX_DIMS, TensorInfo};
use super::value::SharedBytes;
use super::wire::{self, Cursor, MAX_ARRAY_DEPTH};
use crate::output::AlignedBuffer;
use quantforge_kernels::GgmlType;
use std::collections::HashMap;

/// The four bytes every GGUF file starts with.
pub const GGUF_MAGIC: [u8; 4] = *b"GGUF";
/// The version this crate writes by default (ggml's `GGUF_VERSION`).
pub const GGUF_VERSION: u32 = 3;
/// Alignment when `general.alignment` is absent (`GGUF_DEFAULT_ALIGNMENT`).
pub const DEFAULT_ALIGNMENT: u64 = 32;
/// The largest `general.alignment` accepted: larger values only waste space (and let a
/// tiny hostile header demand gigabytes of padding).
pub const MAX_ALIGNMENT: u64 = 1 << 20;
/// The metadata key that sets the alignment.
pub const KEY_ALIGNMENT: &str = "general.alignment";

/// The most heap memory [`GgufHeader::parse`] allocates for an input of `file_len` bytes,
/// whatever the bytes claim: a constant factor of the length, plus a little.
///
/// It holds by construction: counts and lengths are checked against the bytes left before
/// anything is reserved, and vectors of variable-size items grow only as items are parsed.
/// The densest inputs cost about 12 bytes of heap per input byte (thousands of tiny keys
/// or tensor entries, each becoming a `String`, a `Value` or `TensorInfo` and an index
/// slot); the bound leaves a margin of more than two. `formats/tests/gguf_alloc.rs` and
/// the `gguf_parse` fuzz target measure it.
pub fn parse_allocation_bound(file_len: usize) -> usize {
    file_len.saturating_mul(32).saturating_add(256 << 10)
}

/// Smallest possible key-value pair: 8-byte key length, 1-byte key, 4-byte type, 1 byte.
const MIN_KV_BYTES: usize = 14;
/// Smallest possible tensor entry: 8-byte name length, 1-byte name, u32 n_dims, u32 type,
/// u64 offset.
const MIN_TENSOR_BYTES: usize = 25;

/// A GGUF header: version, metadata and the tensor directory, in file order.
///
/// Offsets are not stored: they follow from the tensors and the alignment (see
/// [`GgufHeader::layout`]), which is what ggml's reader demands of a file anyway.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GgufHeader {
    version: u32,
    metadata: Metadata,
    tensors: Vec<TensorInfo>,
    index: HashMap<String, usize>,
}

/// Where the parts of a file with a given header sit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    /// Alignment of the data section and of every tensor in it.
    pub alignment: u64,
    /// Bytes of header before the padding.
    pub header_size: u64,
    /// Absolute offset of the data section (the header size padded to the alignment).
    pub data_offset: u64,
    /// Offset of each tensor's data, relative to the data section, in directory order.
    pub offsets: Vec<u64>,
    /// Bytes of the data section, every tensor padded.
    pub data_size: u64,
}

impl Layout {
    /// Size of the whole file.
    pub fn file_size(&self) -> u64 {
        self.data_offset + self.data_size
    }
}

impl Default for GgufHeader {
    fn default() -> GgufHeader {
        GgufHeader::new()
    }
}

impl GgufHeader {
    /// An empty version-3 header.
    pub fn new() -> GgufHeader {
        GgufHeader {
            version: GGUF_VERSION,
            metadata: Metadata::new(),
            tensors: Vec::new(),
            index: HashMap::new(),
        }
    }

    /// The GGUF version (2 or 3).
    pub fn version(&self) -> u32 {
        self.version
    }

    /// Sets the version written; only 2 and 3 (which share one encoding) are accepted.
    pub fn set_version(&mut self, version: u32) -> Result<()> {
        check_version(version)?;
        self.version = version;
        Ok(())
    }

    /// The metadata.
    pub fn metadata(&self) -> &Metadata {
        &self.metadata
    }

    /// The metadata, to change. Alignment and nesting are checked when encoding.
    pub fn metadata_mut(&mut self) -> &mut Metadata {
        &mut self.metadata
    }

    /// The tensor directory, in file order.
    pub fn tensors(&self) -> &[TensorInfo] {
        &self.tensors
    }

    /// The tensor called `name`.
    pub fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        self.index.get(name).map(|&i| &self.tensors[i])
    }

    /// Position of the tensor called `name` in the directory.
    pub fn tensor_position(&self, name: &str) -> Option<usize> {
        self.index.get(name).copied()
    }

    /// Appends a tensor to the directory; its name must be new and non-empty.
    pub fn push_tensor(&mut self, info: TensorInfo) -> Result<()> {
        if info.name().is_empty() {
            return Err(GgufError::InvalidName {
                what: format!("name of tensor {}", self.tensors.len()),
                offset: 0,
                problem: "empty",
            });
        }
        if self.index.contains_key(info.name()) {
            return Err(GgufError::DuplicateTensor {
                name: info.name().to_string(),
            });
        }
        self.index
            .insert(info.name().to_string(), self.tensors.len());
        self.tensors.push(info);
        Ok(())
    }

    /// Removes every tensor from the directory (metadata stays).
    pub fn clear_tensors(&mut self) {
        self.tensors.clear();
        self.index.clear();
    }

    /// The alignment in force: `general.alignment` if present (validated), else 32.
    pub fn alignment(&self) -> Result<u64> {
        alignment_of(&self.metadata)
    }

    /// The header's bytes, up to the data section (padding included), and its layout.
    ///
    /// Errors when the header cannot be read back: a bad alignment, arrays nested deeper
    /// than [`MAX_ARRAY_DEPTH`], sizes that overflow.
    pub fn encode(&self) -> Result<(Vec<u8>, Layout)> {
        let layout = self.layout()?;
        let mut out = Vec::with_capacity(layout.data_offset as usize);
        self.write(&mut out, &layout.offsets);
        debug_assert_eq!(out.len() as u64, layout.header_size);
        out.resize(layout.data_offset as usize, 0);
        Ok((out, layout))
    }

    /// [`GgufHeader::encode`] into memory aligned for direct I/O, written in place (a
    /// header of megabytes of vocabulary is neither grown nor copied).
    pub fn encode_aligned(&self) -> Result<(AlignedBuffer, Layout)> {
        let layout = self.layout()?;
        let mut buf = AlignedBuffer::zeroed(layout.data_offset as usize);
        let mut out = wire::Filling {
            buf: buf.as_mut_slice(),
            pos: 0,
        };
        self.write(&mut out, &layout.offsets);
        debug_assert_eq!(out.pos as u64, layout.header_size);
        Ok((buf, layout))
    }

    /// The layout a file with this header has: its size and the tensors' offsets, from
    /// the sizes of what [`GgufHeader::encode`] writes, checked as it checks them.
    pub fn layout(&self) -> Result<Layout> {
        let alignment = self.alignment()?;
        for (key, value) in self.metadata.iter() {
            if let Some(array) = value.as_array()
                && wire::array_depth(array) > MAX_ARRAY_DEPTH
            {
                return Err(GgufError::Unwritable {
                    what: format!("key '{key}'"),
                    reason: format!("arrays nested deeper than {MAX_ARRAY_DEPTH} levels"),
                });
            }
        }
        let kv: usize = self
            .metadata
            .iter()
            .map(|(key, value)| 8 + key.len() + wire::value_len(value))
            .sum();
        let infos: usize = self
            .tensors
            .iter()
            .map(|t| 8 + t.name().len() + 4 + 8 * t.ne().len() + 4 + 8)
            .sum();
        let header_size = (24 + kv + infos) as u64;
        let (offsets, data_size) = tensor_offsets(&self.tensors, alignment)?;
        let data_offset = pad(header_size, alignment).ok_or_else(|| overflow("header"))?;
        data_offset
            .checked_add(data_size)
            .ok_or_else(|| overflow("file size"))?;
        Ok(Layout {
            alignment,
            header_size,
            data_offset,
            offsets,
            data_size,
        })
    }

    /// Writes the header's bytes ([`Layout::header_size`] of them), the tensors at
    /// `offsets`.
    fn write(&self, out: &mut impl wire::Sink, offsets: &[u64]) {
        out.put(&GGUF_MAGIC);
        out.put(&self.version.to_le_bytes());
        out.put(&(self.tensors.len() as u64).to_le_bytes());
        out.put(&(self.metadata.len() as u64).to_le_bytes());
        for (key, value) in self.metadata.iter() {
            wire::write_string(out, key.as_bytes());
            wire::write_value(out, value);
        }
        for (info, offset) in self.tensors.iter().zip(offsets) {
            wire::write_string(out, info.name().as_bytes());
            out.put(&(info.ne().len() as u32).to_le_bytes());
            for d in info.ne() {
                out.put(&d.to_le_bytes());
            }
            out.put(&info.ty().code().to_le_bytes());
            out.put(&offset.to_le_bytes());
        }
    }

    /// Parses and validates the header of the GGUF file whose bytes are `file`, and checks
    /// every tensor's data lies within it.
    ///
    /// Only the header's bytes are read: with an mmapped file, tensor data stays on disk.
    pub fn parse(file: &[u8]) -> Result<(GgufHeader, Layout)> {
        Self::parse_from(Cursor::new(file))
    }

    /// [`GgufHeader::parse`], with the string arrays left in `file`'s bytes (shared, not
    /// copied: a vocabulary of megabytes costs no memory of its own).
    pub(crate) fn parse_shared(file: &SharedBytes) -> Result<(GgufHeader, Layout)> {
        Self::parse_from(Cursor::shared(file))
    }

    fn parse_from(mut c: Cursor<'_>) -> Result<(GgufHeader, Layout)> {
        let file = c.bytes();
        let magic = c.take(4, String::new).map_err(|_| {
            if GGUF_MAGIC.starts_with(file) {
                GgufError::Truncated {
                    what: "magic".to_string(),
                    offset: 0,
                    needed: 4,
                    available: file.len() as u64,
                }
            } else {
                GgufError::BadMagic {
                    found: file.to_vec(),
                }
            }
        })?;
        if magic != GGUF_MAGIC {
            return Err(GgufError::BadMagic {
                found: magic.to_vec(),
            });
        }
        let version = c.u32(|| "version".to_string())?;
        check_version(version)?;
        let n_tensors = c.u64(|| "tensor count".to_string())?;
        let n_kv = c.u64(|| "key-value count".to_string())?;
        let n_kv = c.check_count(n_kv, MIN_KV_BYTES, || "key-value count".to_string())?;
        let n_tensors =
            c.check_count(n_tensors, MIN_TENSOR_BYTES, || "tensor count".to_string())?;

        let mut header = GgufHeader::new();
        header.version = version;
        for i in 0..n_kv {
            let key = read_name(&mut c, &|| format!("key {i}"))?;
            let value = wire::read_value(&mut c, &key)?;
            header.metadata.push_new(key, value)?;
        }
        let alignment = header.alignment()?;

        let mut file_offsets = Vec::with_capacity(n_tensors.min(1024));
        for i in 0..n_tensors {
            let (info, offset) = read_tensor_info(&mut c, i)?;
            header.push_tensor(info)?;
            file_offsets.push(offset);
        }

        let header_size = c.pos();
        let data_offset = pad(header_size, alignment).ok_or_else(|| overflow("header"))?;
        let (offsets, data_size) = tensor_offsets(&header.tensors, alignment)?;
        for ((info, &found), &expected) in header.tensors.iter().zip(&file_offsets).zip(&offsets) {
            if found != expected {
                return Err(GgufError::BadTensorOffset {
                    name: info.name().to_string(),
                    offset: found,
                    expected,
                    alignment,
                });
            }
        }
        let file_size = file.len() as u64;
        if n_tensors > 0 && data_offset > file_size {
            return Err(GgufError::Truncated {
                what: "padding before the tensor data".to_string(),
                offset: header_size,
                needed: data_offset - header_size,
                available: file_size - header_size,
            });
        }
        for (info, &offset) in header.tensors.iter().zip(&offsets) {
            // Saturating: an end beyond 2^64 is beyond the end of any file.
            let start = data_offset.saturating_add(offset);
            let end = start.saturating_add(info.n_bytes());
            if end > file_size {
                return Err(GgufError::TensorTruncated {
                    name: info.name().to_string(),
                    offset: start,
                    size: info.n_bytes(),
                    missing: end - file_size,
                    file_size,
                });
            }
        }
        let layout = Layout {
            alignment,
            header_size,
            data_offset,
            offsets,
            data_size,
        };
        Ok((header, layout))
    }
}

fn check_version(version: u32) -> Result<()> {
    match version {
        2 | 3 => Ok(()),
        version => Err(GgufError::UnsupportedVersion { version }),
    }
}

fn overflow(what: &str) -> GgufError {
    GgufError::Unwritable {
        what: what.to_string(),
        reason: "size overflows 64 bits".to_string(),
    }
}

/// `x` rounded up to a multiple of `align` (a power of two), or None on overflow.
pub(crate) fn pad(x: u64, align: u64) -> Option<u64> {
    Some(x.checked_add(align - 1)? & !(align - 1))
}

/// The validated alignment `metadata` asks for.
pub(crate) fn alignment_of(metadata: &Metadata) -> Result<u64> {
    let Some(value) = metadata.get(KEY_ALIGNMENT) else {
        return Ok(DEFAULT_ALIGNMENT);
    };
    let bad = |reason: String| GgufError::BadAlignment {
        found: format!("{value:?}"),
        reason,
    };
    let align = u64::from(
        value
            .as_u32()
            .ok_or_else(|| bad(format!("must be u32, is {}", value.type_name())))?,
    );
    if !align.is_power_of_two() {
        return Err(bad("not a power of two".to_string()));
    }
    if align > MAX_ALIGNMENT {
        return Err(bad(format!("above the limit of {MAX_ALIGNMENT}")));
    }
    Ok(align)
}

/// Each tensor's offset in the data section and the section's padded size.
fn tensor_offsets(tensors: &[TensorInfo], alignment: u64) -> Result<(Vec<u64>, u64)> {
    let mut offsets = Vec::with_capacity(tensors.len());
    let mut end = 0u64;
    for info in tensors {
        offsets.push(end);
        end = pad(info.n_bytes(), alignment)
            .and_then(|n| end.checked_add(n))
            .ok_or_else(|| GgufError::BadTensorShape {
                name: info.name().to_string(),
                reason: "tensor data would end beyond 2^64 bytes".to_string(),
            })?;
    }
    Ok((offsets, end))
}

/// A key or tensor name: non-empty UTF-8.
fn read_name(c: &mut Cursor<'_>, what: &dyn Fn() -> String) -> Result<String> {
    let offset = c.pos();
    let bytes = c.string(what)?;
    let problem = if bytes.is_empty() {
        "empty"
    } else {
        match std::str::from_utf8(bytes) {
            Ok(name) => return Ok(name.to_string()),
            Err(_) => "not valid UTF-8",
        }
    };
    Err(GgufError::InvalidName {
        what: what(),
        offset,
        problem,
    })
}

/// One tensor directory entry and the offset the file gives it.
fn read_tensor_info(c: &mut Cursor<'_>, i: usize) -> Result<(TensorInfo, u64)> {
    let name = read_name(c, &|| format!("name of tensor {i}"))?;
    let n_dims = c.u32(|| format!("n_dims of tensor '{name}'"))?;
    if n_dims as usize > MAX_DIMS {
        return Err(GgufError::BadTensorShape {
            name,
            reason: format!("{n_dims} dimensions, at most {MAX_DIMS} allowed"),
        });
    }
    let mut ne = [0u64; MAX_DIMS];
    for d in ne.iter_mut().take(n_dims as usize) {
        *d = c.u64(|| format!("dimensions of tensor '{name}'"))?;
    }
    let code = c.u32(|| format!("type of tensor '{name}'"))?;
    let ty = GgmlType::from_code(code).map_err(|cause| GgufError::BadTensorType {
        name: name.clone(),
        cause,
    })?;
    let offset = c.u64(|| format!("offset of tensor '{name}'"))?;
    let info = TensorInfo::new(name, ty, &ne[..n_dims as usize])?;
    Ok((info, offset))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gguf::value::{Array, StringArray, Value};

    /// Both encoders give the same bytes and layout as the sizes alone, and the bytes
    /// parse back to the same header.
    #[test]
    fn encoders_agree_and_round_trip() {
        let mut h = GgufHeader::new();
        let m = h.metadata_mut();
        m.set("general.alignment", Value::U32(64)).unwrap();
        m.set("name", Value::from("tiny")).unwrap();
        m.set("flag", Value::Bool(true)).unwrap();
        let tokens: StringArray = (0..5000).map(|i| format!("tok{i}")).collect();
        m.set("tokens", Value::Array(Array::String(tokens)))
            .unwrap();
        m.set("scores", Value::Array(Array::F32(vec![0.5, -1.0, 2.0])))
            .unwrap();
        m.set("bools", Value::Array(Array::Bool(vec![true, false, true])))
            .unwrap();
        m.set(
            "nested",
            Value::Array(Array::Array(vec![
                Array::I32(vec![1, 2]),
                Array::String(StringArray::from(vec!["x", ""])),
            ])),
        )
        .unwrap();
        h.push_tensor(TensorInfo::new("a", GgmlType::F32, &[7, 3]).unwrap())
            .unwrap();
        h.push_tensor(TensorInfo::new("b", GgmlType::Q8_0, &[64]).unwrap())
            .unwrap();
        let (bytes, layout) = h.encode().unwrap();
        let (aligned, layout2) = h.encode_aligned().unwrap();
        assert_eq!(aligned.as_slice(), &bytes[..]);
        assert_eq!(layout, layout2);
        assert_eq!(layout, h.layout().unwrap());
        assert_eq!(bytes.len() as u64, layout.data_offset);
        let mut file = bytes.clone();
        file.resize(layout.file_size() as usize, 0);
        let (back, layout3) = GgufHeader::parse(&file).unwrap();
        assert_eq!(layout3, layout);
        assert_eq!(back.encode().unwrap().0, bytes);
        // Parsed with the string arrays left in the file's bytes: the same header, which
        // outlives the parse's own handle on them.
        let shared: SharedBytes = std::sync::Arc::new(file);
        let (kept, layout4) = GgufHeader::parse_shared(&shared).unwrap();
        drop(shared);
        assert_eq!(layout4, layout);
        assert_eq!(kept, back);
        assert_eq!(kept.encode_aligned().unwrap().0.as_slice(), &bytes[..]);
    }
}
