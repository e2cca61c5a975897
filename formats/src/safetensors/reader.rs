//! Loading a safetensors file: from a byte slice, from a file read into memory, by mmap,
//! or as one frame of a stream. Every length is checked against what is actually there
//! before anything is allocated, so memory stays bounded by the input's real size.

use super::header::{Header, TensorInfo};
use super::{Error, MAX_HEADER_LEN, Result, TensorView};
use memmap2::Mmap;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

/// Where a file's bytes live.
#[derive(Debug)]
enum Storage<'a> {
    Borrowed(&'a [u8]),
    Owned(Vec<u8>),
    Mapped(Mmap),
}

impl Storage<'_> {
    fn bytes(&self) -> &[u8] {
        match self {
            Storage::Borrowed(b) => b,
            Storage::Owned(v) => v,
            Storage::Mapped(m) => m,
        }
    }
}

/// A validated safetensors file: its header and its bytes (borrowed, owned or mapped).
#[derive(Debug)]
pub struct SafeTensors<'a> {
    header: Header,
    storage: Storage<'a>,
    /// 8 + header length: where the data buffer starts.
    data_start: usize,
}

impl<'a> SafeTensors<'a> {
    /// Parses and validates a whole file held in `bytes` (no copy).
    pub fn from_bytes(bytes: &'a [u8]) -> Result<SafeTensors<'a>> {
        let (header, data_start) = parse_whole(bytes)?;
        Ok(SafeTensors {
            header,
            storage: Storage::Borrowed(bytes),
            data_start,
        })
    }
}

impl SafeTensors<'static> {
    /// Parses and validates a whole file held in `bytes`, taking ownership.
    pub fn from_vec(bytes: Vec<u8>) -> Result<SafeTensors<'static>> {
        let (header, data_start) = parse_whole(&bytes)?;
        Ok(SafeTensors {
            header,
            storage: Storage::Owned(bytes),
            data_start,
        })
    }

    /// Reads the file at `path` into memory. The header is read and validated against
    /// the file's size first, so a hostile length never causes a large allocation.
    pub fn read(path: impl AsRef<Path>) -> Result<SafeTensors<'static>> {
        let path = path.as_ref();
        read_file(path).map_err(|e| e.in_file(path))
    }

    /// Maps the file at `path` into memory and validates it; tensor data is read from
    /// the mapping on demand (zero-copy).
    pub fn mmap(path: impl AsRef<Path>) -> Result<SafeTensors<'static>> {
        let path = path.as_ref();
        mmap_file(path).map_err(|e| e.in_file(path))
    }

    /// Reads one safetensors frame (length, header, data) from `reader`, leaving it
    /// positioned just after the frame, so a stream may hold several frames back to back.
    /// Returns `None` at a clean end of stream (no byte before the frame). Memory grows
    /// only with bytes actually received.
    pub fn read_frame<R: Read + ?Sized>(reader: &mut R) -> Result<Option<SafeTensors<'static>>> {
        let mut len = [0u8; 8];
        match read_up_to(reader, &mut len)? {
            0 => return Ok(None),
            8 => {}
            got => return Err(Error::TooShort { len: got as u64 }),
        }
        let n = checked_header_len(len)?;
        let mut bytes = Vec::with_capacity(8);
        bytes.extend_from_slice(&len);
        let got = read_limited(reader, n as u64, &mut bytes)?;
        if got < n {
            return Err(Error::HeaderPastEnd {
                len: n as u64,
                available: got as u64,
            });
        }
        let header = Header::parse(&bytes[8..])?;
        let want = header.data_len();
        let got = read_limited(reader, want as u64, &mut bytes)?;
        if got < want {
            return Err(truncated(&header, got));
        }
        Ok(Some(SafeTensors {
            header,
            storage: Storage::Owned(bytes),
            data_start: 8 + n,
        }))
    }
}

impl<'a> SafeTensors<'a> {
    /// The validated header.
    pub fn header(&self) -> &Header {
        &self.header
    }

    /// `__metadata__`, in header order (`None` when absent).
    pub fn metadata(&self) -> Option<&[(String, String)]> {
        self.header.metadata()
    }

    /// The value of `__metadata__` key `key`.
    pub fn metadata_value(&self, key: &str) -> Option<&str> {
        self.metadata()?
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// Number of tensors.
    pub fn len(&self) -> usize {
        self.header.tensors().len()
    }

    /// Whether the file holds no tensor.
    pub fn is_empty(&self) -> bool {
        self.header.tensors().is_empty()
    }

    /// Tensor names in file (data-offset) order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.header.tensors().iter().map(TensorInfo::name)
    }

    /// Every tensor, in file order.
    pub fn tensors(&self) -> impl Iterator<Item = TensorView<'_>> {
        self.header.tensors().iter().map(|t| self.view(t))
    }

    /// The tensor called `name`.
    pub fn tensor(&self, name: &str) -> Result<TensorView<'_>> {
        let info = self
            .header
            .tensor(name)
            .ok_or_else(|| Error::TensorNotFound {
                name: name.to_owned(),
            })?;
        Ok(self.view(info))
    }

    /// Asks the kernel to start reading `bytes`, a part of this file such as some rows of
    /// one of its tensor views (`MADV_WILLNEED`). A no-op unless the file is mapped.
    pub fn prefetch(&self, bytes: &[u8]) -> Result<()> {
        match self.mapped(bytes)? {
            Some((map, offset)) => crate::pages::prefetch(map, offset, bytes.len())
                .map_err(|e| Error::io("madvise(WILLNEED)", e)),
            None => Ok(()),
        }
    }

    /// Lets the pages of `bytes`, a part of this file, leave the resident set
    /// (`MADV_DONTNEED`); reading them again is still correct, they come back from the
    /// file. A no-op unless the file is mapped.
    pub fn release(&self, bytes: &[u8]) -> Result<()> {
        match self.mapped(bytes)? {
            // SAFETY: `map` is this file's read-only mapping, made by `Mmap::map` in
            // `mmap_file`.
            Some((map, offset)) => unsafe { crate::pages::release(map, offset, bytes.len()) }
                .map_err(|e| Error::io("madvise(DONTNEED)", e)),
            None => Ok(()),
        }
    }

    /// The mapping and the offset of `bytes` in it, when the file is mapped and `bytes`
    /// is not empty; an error when `bytes` is not part of the mapping.
    fn mapped(&self, bytes: &[u8]) -> Result<Option<(&Mmap, usize)>> {
        let Storage::Mapped(map) = &self.storage else {
            return Ok(None);
        };
        if bytes.is_empty() {
            return Ok(None);
        }
        let start = (bytes.as_ptr() as usize).wrapping_sub(map.as_ptr() as usize);
        if start >= map.len() || map.len() - start < bytes.len() {
            return Err(Error::io(
                "madvise",
                std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    format!("{} bytes that are not part of this file", bytes.len()),
                ),
            ));
        }
        Ok(Some((map, start)))
    }

    /// The whole file (or frame): length, header, data.
    pub fn as_bytes(&self) -> &[u8] {
        self.storage.bytes()
    }

    /// The header JSON exactly as stored, padding included.
    pub fn header_bytes(&self) -> &[u8] {
        self.storage.bytes().get(8..self.data_start).unwrap_or(&[])
    }

    /// The data buffer (everything after the header).
    pub fn data(&self) -> &[u8] {
        self.storage.bytes().get(self.data_start..).unwrap_or(&[])
    }

    fn view<'s>(&'s self, info: &'s TensorInfo) -> TensorView<'s> {
        // Offsets were validated to tile exactly `data()`.
        let data = self.data().get(info.data_offsets()).unwrap_or(&[]);
        TensorView::validated(info.name(), info.dtype(), info.shape(), data)
    }
}

/// The header length from its 8 little-endian bytes, with upstream's 100 MB cap.
fn checked_header_len(len: [u8; 8]) -> Result<usize> {
    let n = u64::from_le_bytes(len);
    if n > MAX_HEADER_LEN {
        return Err(Error::HeaderTooLarge { len: n });
    }
    Ok(n as usize)
}

/// Validates a whole file; returns the header and where the data starts.
fn parse_whole(bytes: &[u8]) -> Result<(Header, usize)> {
    let Some(&len) = bytes.first_chunk::<8>() else {
        return Err(Error::TooShort {
            len: bytes.len() as u64,
        });
    };
    let n = checked_header_len(len)?;
    let rest = &bytes[8..];
    let Some(json) = rest.get(..n) else {
        return Err(Error::HeaderPastEnd {
            len: n as u64,
            available: rest.len() as u64,
        });
    };
    let header = Header::parse(json)?;
    check_data_len(&header, (rest.len() - n) as u64)?;
    Ok((header, 8 + n))
}

/// The data buffer must end exactly where the last tensor does.
fn check_data_len(header: &Header, available: u64) -> Result<()> {
    let want = header.data_len() as u64;
    if available < want {
        return Err(truncated(header, available as usize));
    }
    if available > want {
        return Err(Error::TrailingBytes {
            count: available - want,
            data_len: header.data_len(),
        });
    }
    Ok(())
}

fn truncated(header: &Header, available: usize) -> Error {
    let name = header
        .first_incomplete(available)
        .map_or_else(String::new, |t| t.name().to_owned());
    Error::Truncated {
        name,
        missing: (header.data_len() - available) as u64,
    }
}

/// Opens `path` and checks its declared header length against the 100 MB cap and the
/// file's size, reading nothing else. Returns the file (positioned after the length), its
/// size and the header length.
fn open_checked(path: &Path) -> Result<(File, u64, usize)> {
    let mut file = File::open(path).map_err(|e| Error::io("cannot open", e))?;
    let size = file
        .metadata()
        .map_err(|e| Error::io("cannot stat", e))?
        .len();
    if size < 8 {
        return Err(Error::TooShort { len: size });
    }
    let mut len = [0u8; 8];
    file.read_exact(&mut len)
        .map_err(|e| Error::io("cannot read", e))?;
    let n = checked_header_len(len)?;
    if n as u64 > size - 8 {
        return Err(Error::HeaderPastEnd {
            len: n as u64,
            available: size - 8,
        });
    }
    Ok((file, size, n))
}

fn read_file(path: &Path) -> Result<SafeTensors<'static>> {
    let (mut file, size, n) = open_checked(path)?;
    let mut json = vec![0u8; n];
    file.read_exact(&mut json)
        .map_err(|e| Error::io("cannot read", e))?;
    let header = Header::parse(&json)?;
    check_data_len(&header, size - 8 - n as u64)?;
    drop(json);
    // The size is now justified by a valid header: read the whole file.
    file.seek(SeekFrom::Start(0))
        .map_err(|e| Error::io("cannot seek", e))?;
    let mut bytes = Vec::new();
    bytes
        .try_reserve_exact(size as usize)
        .map_err(|_| Error::io("cannot allocate", std::io::ErrorKind::OutOfMemory.into()))?;
    file.take(size)
        .read_to_end(&mut bytes)
        .map_err(|e| Error::io("cannot read", e))?;
    if bytes.len() as u64 != size {
        return Err(Error::io(
            "cannot read",
            std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "the file shrank while being read",
            ),
        ));
    }
    Ok(SafeTensors {
        header,
        storage: Storage::Owned(bytes),
        data_start: 8 + n,
    })
}

fn mmap_file(path: &Path) -> Result<SafeTensors<'static>> {
    // The declared header length is checked against the file before mapping anything.
    let (file, _, _) = open_checked(path)?;
    // SAFETY: the mapping is read-only and owned by the returned value. Like every
    // mmap-based reader (upstream's included) this relies on the file not being truncated
    // or rewritten while mapped; every access below is bounded by the mapping's length.
    let map = unsafe { Mmap::map(&file) }.map_err(|e| Error::io("cannot mmap", e))?;
    let (header, data_start) = parse_whole(&map)?;
    Ok(SafeTensors {
        header,
        storage: Storage::Mapped(map),
        data_start,
    })
}

/// Fills `buf` as far as the reader allows; returns the bytes read (short only at EOF).
fn read_up_to<R: Read + ?Sized>(reader: &mut R, buf: &mut [u8]) -> Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match reader.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(k) => got += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(Error::io("cannot read the stream", e)),
        }
    }
    Ok(got)
}

/// Appends up to `limit` bytes from `reader` to `out`, growing `out` only as bytes
/// arrive; returns how many were appended.
fn read_limited<R: Read + ?Sized>(reader: &mut R, limit: u64, out: &mut Vec<u8>) -> Result<usize> {
    let before = out.len();
    Read::take(&mut *reader, limit)
        .read_to_end(out)
        .map_err(|e| Error::io("cannot read the stream", e))?;
    Ok(out.len() - before)
}
