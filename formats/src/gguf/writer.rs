//! Writing GGUF: a streaming writer (header first, then each tensor's data in directory
//! order, padded like ggml's `gguf_write_out`), a builder for headers with tensors given
//! up front or streamed later, and atomic file replacement.
//!
//! Memory stays bounded by the header plus whatever slice the caller hands over: tensor
//! data goes straight to the output.

use super::error::{GgufError, Result};
use super::header::{GgufHeader, pad};
use super::metadata::Metadata;
use super::tensor::TensorInfo;
use crate::output::disk::{DirectFile, start_writeback, write_all_at};
use crate::output::{AlignedBuffer, parent_dir};
use quantforge_kernels::GgmlType;
use std::borrow::Cow;
use std::io::Write;
use std::path::{Path, PathBuf};

/// Zero bytes for padding, written in pieces of at most this size.
const ZEROS: [u8; 4096] = [0; 4096];

/// Bytes collected before they are handed to the writing thread.
const WRITE_BUFFER: usize = 4 << 20;
/// Buffers queued for the writing thread beyond the one it is writing: 16 MiB, about one
/// slab of the commands that stream models through this writer (`dequantize`,
/// `convert`), so that a slab handed over while the disk is still busy with the one
/// before returns at once and its thread goes back to converting (a queue of 8 was no
/// faster and costs 16 MiB more).
const QUEUED_BUFFERS: usize = 4;
/// A buffer of [`WRITE_BUFFER`] bytes whose memory is aligned for direct I/O, so that
/// the writing thread writes from it without another copy.
struct Buffer {
    mem: AlignedBuffer,
    len: usize,
}

impl Buffer {
    fn new() -> Buffer {
        Buffer {
            mem: AlignedBuffer::zeroed(WRITE_BUFFER),
            len: 0,
        }
    }

    /// The bytes pushed so far.
    fn as_slice(&self) -> &[u8] {
        &self.mem.as_slice()[..self.len]
    }

    /// Bytes that still fit.
    fn room(&self) -> usize {
        WRITE_BUFFER - self.len
    }

    /// Appends `data`, which must fit.
    fn push(&mut self, data: &[u8]) {
        self.mem.as_mut_slice()[self.len..self.len + data.len()].copy_from_slice(data);
        self.len += data.len();
    }

    fn clear(&mut self) {
        self.len = 0;
    }
}

/// A file written under a temporary name in its target's directory, then flushed,
/// fsynced and renamed over the target by [`AtomicFile::commit`]. Dropped without a
/// commit (an error, a panic), the temporary file is deleted: the target is never left
/// half-written.
///
/// The writes themselves run on a thread of their own, a few MiB behind the caller, so
/// producing the data and writing it overlap; on Linux that thread writes whole blocks
/// with direct I/O where the filesystem allows it, and starts the writeback of anything
/// it writes through the page cache at once, so the final fsync waits for little and
/// dirty pages never pile up. Memory stays at six buffers of 4 MiB whatever the file
/// size.
pub struct AtomicFile {
    path: PathBuf,
    buf: Buffer,
    to_writer: Option<std::sync::mpsc::SyncSender<Buffer>>,
    recycled: std::sync::mpsc::Receiver<Buffer>,
    writer: Option<std::thread::JoinHandle<std::io::Result<tempfile::NamedTempFile>>>,
}

impl AtomicFile {
    /// Starts writing what will become `path`.
    pub fn create(path: impl AsRef<Path>) -> Result<AtomicFile> {
        let path = path.as_ref().to_path_buf();
        let dir = parent_dir(&path);
        let tmp = crate::output::temp_file_beside(&path).map_err(|e| {
            GgufError::io(
                format!("cannot create a temporary file in {}", dir.display()),
                e,
            )
            .in_file(&path)
        })?;
        let (to_writer, from_caller) = std::sync::mpsc::sync_channel::<Buffer>(QUEUED_BUFFERS);
        let (give_back, recycled) = std::sync::mpsc::channel();
        let writer = std::thread::Builder::new()
            .name("quantforge-writer".into())
            .spawn(move || write_buffers(tmp, from_caller, give_back))
            .map_err(|e| GgufError::io("cannot start the writing thread", e).in_file(&path))?;
        Ok(AtomicFile {
            path,
            buf: Buffer::new(),
            to_writer: Some(to_writer),
            recycled,
            writer: Some(writer),
        })
    }

    /// The final path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Hands the collected bytes to the writing thread; an error if it has stopped (its
    /// own error, once joined).
    fn hand_over(&mut self) -> std::io::Result<()> {
        if self.buf.len == 0 {
            return Ok(());
        }
        let next = self.recycled.try_recv().unwrap_or_else(|_| Buffer::new());
        let full = std::mem::replace(&mut self.buf, next);
        let sent = match &self.to_writer {
            Some(tx) => tx.send(full).is_ok(),
            None => false,
        };
        if sent {
            Ok(())
        } else {
            Err(self.stop().err().unwrap_or_else(|| {
                std::io::Error::other("the writing thread stopped without an error")
            }))
        }
    }

    /// Ends the writing thread and returns the file it wrote, or its error.
    fn stop(&mut self) -> std::io::Result<tempfile::NamedTempFile> {
        self.to_writer = None;
        match self.writer.take() {
            Some(handle) => handle
                .join()
                .unwrap_or_else(|_| Err(std::io::Error::other("the writing thread panicked"))),
            None => Err(std::io::Error::other("the file was already closed")),
        }
    }

    /// Flushes, fsyncs and renames the file into place, then fsyncs the directory so the
    /// rename is durable too.
    pub fn commit(mut self) -> Result<()> {
        let path = self.path.clone();
        let fail = |what: &str, e: std::io::Error| GgufError::io(what, e).in_file(&path);
        self.hand_over().map_err(|e| fail("cannot write", e))?;
        let tmp = self.stop().map_err(|e| fail("cannot write", e))?;
        crate::output::persist(tmp, &path, crate::output::Durability::Synced)
            .map_err(|(step, e)| fail(step, e))
    }
}

/// The writing thread: writes each buffer in order at its offset, gives the buffer back;
/// returns the file when the caller hangs up, or the first error.
///
/// Where the filesystem allows it (Linux, `O_DIRECT`), whole 4 KiB blocks go straight to
/// the disk from an aligned buffer, bypassing the page cache: copying hundreds of MB into
/// the cache costs more CPU than producing them, and nobody reads the output back soon.
/// Anything else (the unaligned tail, a filesystem without direct I/O, a direct write
/// that fails) goes through the page cache, with its writeback started at once.
fn write_buffers(
    tmp: tempfile::NamedTempFile,
    from_caller: std::sync::mpsc::Receiver<Buffer>,
    give_back: std::sync::mpsc::Sender<Buffer>,
) -> std::io::Result<tempfile::NamedTempFile> {
    let mut direct = DirectFile::open(tmp.path());
    let mut offset = 0u64;
    for mut buffer in from_caller {
        let buf = buffer.as_slice();
        let mut done = 0;
        if let Some(d) = &mut direct {
            match d.write_blocks_at(buf, offset) {
                Ok(n) => done = n,
                // The bytes are written again below, through the page cache.
                Err(_) => direct = None,
            }
        }
        if done < buf.len() {
            write_all_at(tmp.as_file(), &buf[done..], offset + done as u64)?;
            start_writeback(
                tmp.as_file(),
                offset + done as u64,
                (buf.len() - done) as u64,
            );
        }
        offset += buf.len() as u64;
        buffer.clear();
        // The caller may be gone already (an error on its side); nothing to do then.
        let _ = give_back.send(buffer);
    }
    Ok(tmp)
}

impl Drop for AtomicFile {
    fn drop(&mut self) {
        // Not committed: end the thread; the temporary file is deleted as it drops.
        let _ = self.stop();
    }
}

impl Write for AtomicFile {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.write_all(buf)?;
        Ok(buf.len())
    }

    fn write_all(&mut self, mut data: &[u8]) -> std::io::Result<()> {
        crate::output::check_stop()?;
        while !data.is_empty() {
            let (now, rest) = data.split_at(self.buf.room().min(data.len()));
            self.buf.push(now);
            data = rest;
            if self.buf.room() == 0 {
                self.hand_over()?;
            }
        }
        Ok(())
    }

    /// Hands what is collected to the writing thread (it reaches the file in order;
    /// [`AtomicFile::commit`] waits for all of it).
    fn flush(&mut self) -> std::io::Result<()> {
        self.hand_over()
    }
}

/// Writes one GGUF file front to back: the header on creation, then each tensor's data
/// in directory order, whole ([`GgufWriter::write_tensor`]) or in pieces
/// ([`GgufWriter::write_chunk`]). Each tensor is padded with zeros to the alignment
/// once complete, the last one included, exactly as ggml and gguf-py write.
pub struct GgufWriter<'a, W: Write> {
    out: W,
    path: Option<PathBuf>,
    tensors: Vec<TensorInfo>,
    queued: Vec<Option<Cow<'a, [u8]>>>,
    alignment: u64,
    next: usize,
    done_in_next: u64,
    written: u64,
    failed: bool,
}

impl<'a, W: Write> GgufWriter<'a, W> {
    /// Writes `header` to `out` and returns a writer waiting for the first tensor's data.
    pub fn new(out: W, header: &GgufHeader) -> Result<GgufWriter<'a, W>> {
        Self::with_queued(out, None, header, Vec::new())
    }

    fn with_queued(
        out: W,
        path: Option<PathBuf>,
        header: &GgufHeader,
        mut queued: Vec<Option<Cow<'a, [u8]>>>,
    ) -> Result<GgufWriter<'a, W>> {
        let (bytes, layout) = header.encode()?;
        queued.resize(header.tensors().len(), None);
        let mut w = GgufWriter {
            out,
            path,
            tensors: header.tensors().to_vec(),
            queued,
            alignment: layout.alignment,
            next: 0,
            done_in_next: 0,
            written: 0,
            failed: false,
        };
        w.put(&bytes)?;
        w.write_queued()?;
        Ok(w)
    }

    /// The tensor whose data is expected next, if any.
    pub fn next_tensor(&self) -> Option<&TensorInfo> {
        self.tensors.get(self.next)
    }

    /// Bytes written so far.
    pub fn bytes_written(&self) -> u64 {
        self.written
    }

    /// Writes the whole data of tensor `name`, which must be the next one and not begun.
    pub fn write_tensor(&mut self, name: &str, data: &[u8]) -> Result<()> {
        self.check_usable()?;
        let Some(next) = self.tensors.get(self.next) else {
            return Err(self.stream_error(format!(
                "tensor '{name}' given, but every tensor is already written"
            )));
        };
        if next.name() != name {
            return Err(self.stream_error(format!(
                "tensor '{name}' given, but '{}' comes next in the directory",
                next.name()
            )));
        }
        if self.done_in_next != 0 {
            return Err(self.stream_error(format!(
                "tensor '{name}' given whole after {} bytes of it were written in chunks",
                self.done_in_next
            )));
        }
        if data.len() as u64 != next.n_bytes() {
            return Err(GgufError::DataSize {
                name: name.to_string(),
                ty: next.ty(),
                expected: next.n_bytes(),
                got: data.len() as u64,
            });
        }
        self.write_chunk(data)
    }

    /// Writes the next piece of the current tensor's data. When the tensor is complete its
    /// padding follows. (A tensor of zero bytes is completed by an empty chunk.)
    pub fn write_chunk(&mut self, data: &[u8]) -> Result<()> {
        self.check_usable()?;
        let Some(next) = self.tensors.get(self.next) else {
            return Err(self.stream_error(format!(
                "{} bytes given, but every tensor is already written",
                data.len()
            )));
        };
        let size = next.n_bytes();
        let left = size - self.done_in_next;
        if data.len() as u64 > left {
            return Err(self.stream_error(format!(
                "{} bytes given for tensor '{}', which has only {left} of its {size} bytes left",
                data.len(),
                next.name()
            )));
        }
        self.put(data)?;
        self.done_in_next += data.len() as u64;
        if self.done_in_next == size {
            self.complete_tensor()?;
            self.write_queued()?;
        }
        Ok(())
    }

    /// Checks every tensor was written and returns the output.
    pub fn finish(mut self) -> Result<W> {
        self.check_usable()?;
        if let Some(next) = self.tensors.get(self.next) {
            let missing = self.tensors.len() - self.next;
            return Err(self.stream_error(format!(
                "finished with {missing} tensors unwritten, starting with '{}' ({} of {} bytes)",
                next.name(),
                self.done_in_next,
                next.n_bytes()
            )));
        }
        self.out
            .flush()
            .map_err(|e| self.with_path(GgufError::io("cannot write", e)))?;
        Ok(self.out)
    }

    fn complete_tensor(&mut self) -> Result<()> {
        let size = self.tensors[self.next].n_bytes();
        let padded = pad(size, self.alignment).unwrap_or(size);
        let mut zeros = padded - size;
        while zeros > 0 {
            let n = zeros.min(ZEROS.len() as u64) as usize;
            self.put(&ZEROS[..n])?;
            zeros -= n as u64;
        }
        self.next += 1;
        self.done_in_next = 0;
        Ok(())
    }

    /// Writes the data given up front for the tensors that come next.
    fn write_queued(&mut self) -> Result<()> {
        while let Some(slot) = self.queued.get_mut(self.next) {
            let Some(data) = slot.take() else { break };
            self.put(&data)?;
            self.done_in_next = data.len() as u64;
            self.complete_tensor()?;
        }
        Ok(())
    }

    fn put(&mut self, bytes: &[u8]) -> Result<()> {
        match self.out.write_all(bytes) {
            Ok(()) => {
                self.written += bytes.len() as u64;
                Ok(())
            }
            Err(e) => {
                self.failed = true;
                Err(self.with_path(GgufError::io("cannot write", e)))
            }
        }
    }

    fn check_usable(&self) -> Result<()> {
        if self.failed {
            return Err(self.stream_error("an earlier write failed".to_string()));
        }
        Ok(())
    }

    fn stream_error(&self, message: String) -> GgufError {
        self.with_path(GgufError::Stream(message))
    }

    fn with_path(&self, e: GgufError) -> GgufError {
        match &self.path {
            Some(p) => e.in_file(p),
            None => e,
        }
    }
}

impl<'a> GgufWriter<'a, AtomicFile> {
    /// Starts writing `header` to a temporary file that becomes `path` on
    /// [`GgufWriter::commit`].
    pub fn create(path: impl AsRef<Path>, header: &GgufHeader) -> Result<Self> {
        let file = AtomicFile::create(&path)?;
        let path = file.path().to_path_buf();
        Self::with_queued(file, Some(path), header, Vec::new())
    }

    /// Checks every tensor was written, then moves the file into place.
    pub fn commit(self) -> Result<()> {
        self.finish()?.commit()
    }
}

/// A header under construction plus the data of the tensors given up front.
///
/// Tensors are either added with their data ([`GgufBuilder::add_tensor`]) or declared
/// ([`GgufBuilder::declare_tensor`]) and streamed later through the [`GgufWriter`] that
/// [`GgufBuilder::create`] or [`GgufBuilder::stream`] returns, in declaration order;
/// the writer writes the given data itself as its turn comes.
#[derive(Debug, Default)]
pub struct GgufBuilder<'a> {
    header: GgufHeader,
    data: Vec<Option<Cow<'a, [u8]>>>,
}

impl<'a> GgufBuilder<'a> {
    /// An empty version-3 header.
    pub fn new() -> GgufBuilder<'a> {
        GgufBuilder::default()
    }

    /// Starts from `header` (metadata, version, tensors, all declared without data).
    pub fn from_header(header: GgufHeader) -> GgufBuilder<'a> {
        let data = vec![None; header.tensors().len()];
        GgufBuilder { header, data }
    }

    /// The header so far.
    pub fn header(&self) -> &GgufHeader {
        &self.header
    }

    /// The metadata, to change (see [`Metadata::set`], [`Metadata::copy_from`]).
    pub fn metadata_mut(&mut self) -> &mut Metadata {
        self.header.metadata_mut()
    }

    /// Sets the GGUF version (2 or 3).
    pub fn set_version(&mut self, version: u32) -> Result<()> {
        self.header.set_version(version)
    }

    /// Adds a tensor with its data (`ne` in ggml order); the data length must match.
    pub fn add_tensor(
        &mut self,
        name: impl Into<String>,
        ty: GgmlType,
        ne: &[u64],
        data: impl Into<Cow<'a, [u8]>>,
    ) -> Result<()> {
        let info = TensorInfo::new(name, ty, ne)?;
        let data = data.into();
        if data.len() as u64 != info.n_bytes() {
            return Err(GgufError::DataSize {
                name: info.name().to_string(),
                ty,
                expected: info.n_bytes(),
                got: data.len() as u64,
            });
        }
        self.header.push_tensor(info)?;
        self.data.push(Some(data));
        Ok(())
    }

    /// Declares a tensor whose data will be streamed to the writer later.
    pub fn declare_tensor(
        &mut self,
        name: impl Into<String>,
        ty: GgmlType,
        ne: &[u64],
    ) -> Result<()> {
        self.header.push_tensor(TensorInfo::new(name, ty, ne)?)?;
        self.data.push(None);
        Ok(())
    }

    /// Writes the header to `out`, and the data given up front as far as it reaches.
    pub fn stream<W: Write>(self, out: W) -> Result<GgufWriter<'a, W>> {
        GgufWriter::with_queued(out, None, &self.header, self.data)
    }

    /// Like [`GgufBuilder::stream`], into a temporary file that becomes `path` on
    /// [`GgufWriter::commit`].
    pub fn create(self, path: impl AsRef<Path>) -> Result<GgufWriter<'a, AtomicFile>> {
        let file = AtomicFile::create(&path)?;
        let path = file.path().to_path_buf();
        GgufWriter::with_queued(file, Some(path), &self.header, self.data)
    }

    /// The whole file in memory; every tensor must have been given data.
    pub fn to_bytes(self) -> Result<Vec<u8>> {
        self.stream(Vec::new())?.finish()
    }

    /// Writes the whole file atomically; every tensor must have been given data.
    pub fn write(self, path: impl AsRef<Path>) -> Result<()> {
        self.create(path)?.commit()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Writes `data` through an [`AtomicFile`] in irregular pieces, commits, reads back.
    fn round_trip(dir: &Path, data: &[u8]) {
        let path = dir.join("out.bin");
        let mut f = AtomicFile::create(&path).unwrap();
        let mut rest = data;
        for step in [1usize, 4095, 70_000, 3 << 20, 5 << 20].iter().cycle() {
            if rest.is_empty() {
                break;
            }
            let (now, later) = rest.split_at((*step).min(rest.len()));
            f.write_all(now).unwrap();
            rest = later;
        }
        f.commit().unwrap();
        assert!(
            std::fs::read(&path).unwrap() == data,
            "{} bytes",
            data.len()
        );
        let names: Vec<_> = std::fs::read_dir(dir).unwrap().collect();
        assert_eq!(names.len(), 1, "only the output is left");
    }

    fn sizes() -> Vec<Vec<u8>> {
        let mut s = 0x9E37_79B9_7F4A_7C15u64;
        [
            0,
            1,
            4095,
            4096,
            4097,
            4 << 20,
            (4 << 20) + 4096 + 7,
            (9 << 20) + 1,
        ]
        .into_iter()
        .map(|n| crate::output::pseudo_random_bytes(&mut s, n))
        .collect()
    }

    /// On a disk filesystem whole blocks go by direct I/O, the rest through the cache.
    #[test]
    fn every_byte_arrives_in_order() {
        for data in sizes() {
            let dir = tempfile::tempdir().unwrap();
            round_trip(dir.path(), &data);
        }
    }

    /// tmpfs refuses direct I/O: everything goes through the page cache.
    #[test]
    fn every_byte_arrives_without_direct_io() {
        let shm = Path::new("/dev/shm");
        if !shm.is_dir() {
            eprintln!("SKIPPED: no /dev/shm");
            return;
        }
        for data in sizes() {
            let dir = tempfile::tempdir_in(shm).unwrap();
            round_trip(dir.path(), &data);
        }
    }
}
