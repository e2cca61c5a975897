//! Getting bytes to disk cheaply: memory aligned for direct I/O, direct writes of whole
//! blocks where the filesystem allows them, positional writes and writeback hints.

use std::fs::File;
use std::ptr::NonNull;

/// Alignment of memory, offsets and lengths for direct I/O (a multiple of every common
/// logical block size).
pub(crate) const BLOCK: usize = 4096;
/// Buffers of at least this size ask for transparent huge pages: a direct write from
/// them then pins and sends a few large segments instead of a thousand 4 KiB pages.
const HUGE: usize = 2 << 20;

/// Zero-initialized memory of a fixed size whose start is aligned for direct I/O (to
/// [`BLOCK`] bytes; on huge pages where the kernel gives them, for sizes of 2 MiB and
/// more), so that files are written straight from it.
pub struct AlignedBuffer {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the buffer owns its memory, which is only reached through `&self`/`&mut self`.
unsafe impl Send for AlignedBuffer {}
// SAFETY: shared references only read.
unsafe impl Sync for AlignedBuffer {}

impl AlignedBuffer {
    /// `len` zero bytes (no allocation for 0).
    pub fn zeroed(len: usize) -> AlignedBuffer {
        if len == 0 {
            return AlignedBuffer {
                ptr: NonNull::<Block>::dangling().cast(),
                len: 0,
            };
        }
        let ptr = memory::map_zeroed(len);
        if len >= HUGE {
            advise_huge_pages(ptr.as_ptr(), len);
        }
        AlignedBuffer { ptr, len }
    }

    /// Its size in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it has no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Its bytes.
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: `len` initialized bytes (zero when mapped), or a dangling pointer with
        // length 0.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    /// Its bytes, to write into.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as in `as_slice`, and `&mut self` makes the borrow unique.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for AlignedBuffer {
    fn drop(&mut self) {
        if self.len > 0 {
            // SAFETY: made by `map_zeroed` with this length.
            unsafe { memory::unmap(self.ptr, self.len) }
        }
    }
}

/// Nothing, aligned like a block: the dangling pointer of an empty buffer.
#[repr(align(4096))]
struct Block;

/// Fresh zero memory from the system: on Unix, anonymous pages mapped for the buffer
/// alone (zero without a pass over them, and faulted in by whoever first writes them);
/// elsewhere, the allocator's zeroed memory with the block's alignment.
#[cfg(unix)]
mod memory {
    use std::ptr::NonNull;

    pub(super) fn map_zeroed(len: usize) -> NonNull<u8> {
        // SAFETY: a fresh private anonymous mapping; no existing memory is touched.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            let layout = std::alloc::Layout::from_size_align(len, super::BLOCK)
                .unwrap_or_else(|_| panic!("{len} bytes is not a valid allocation size"));
            std::alloc::handle_alloc_error(layout);
        }
        NonNull::new(ptr.cast()).expect("mmap returns a non-null address")
    }

    /// # Safety
    /// `ptr` and `len` must come from one `map_zeroed` call, not unmapped since.
    pub(super) unsafe fn unmap(ptr: NonNull<u8>, len: usize) {
        // SAFETY: the caller's guarantee; nothing borrows the memory any more.
        unsafe {
            libc::munmap(ptr.as_ptr().cast(), len);
        }
    }
}

#[cfg(not(unix))]
mod memory {
    use std::ptr::NonNull;

    fn layout(len: usize) -> std::alloc::Layout {
        std::alloc::Layout::from_size_align(len, super::BLOCK)
            .unwrap_or_else(|_| panic!("{len} bytes is not a valid allocation size"))
    }

    pub(super) fn map_zeroed(len: usize) -> NonNull<u8> {
        // SAFETY: a non-zero-sized layout.
        let ptr = unsafe { std::alloc::alloc_zeroed(layout(len)) };
        NonNull::new(ptr).unwrap_or_else(|| std::alloc::handle_alloc_error(layout(len)))
    }

    /// # Safety
    /// `ptr` and `len` must come from one `map_zeroed` call, not freed since.
    pub(super) unsafe fn unmap(ptr: NonNull<u8>, len: usize) {
        // SAFETY: the caller's guarantee.
        unsafe { std::alloc::dealloc(ptr.as_ptr(), layout(len)) }
    }
}

impl std::fmt::Debug for AlignedBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "AlignedBuffer({} bytes)", self.len)
    }
}

/// Asks for transparent huge pages under `len` bytes at `ptr` (a hint: ignored where the
/// kernel has none or declines).
#[cfg(target_os = "linux")]
fn advise_huge_pages(ptr: *mut u8, len: usize) {
    // SAFETY: the range is an allocation of ours; the advice changes no contents.
    unsafe {
        libc::madvise(ptr.cast(), len, libc::MADV_HUGEPAGE);
    }
}

#[cfg(not(target_os = "linux"))]
fn advise_huge_pages(_ptr: *mut u8, _len: usize) {}

/// Writes all of `buf` at `offset` without moving the file's cursor, so that writers on
/// several threads may share the handle.
#[cfg(unix)]
pub(crate) fn write_all_at(file: &File, buf: &[u8], offset: u64) -> std::io::Result<()> {
    std::os::unix::fs::FileExt::write_all_at(file, buf, offset)
}

#[cfg(windows)]
pub(crate) fn write_all_at(file: &File, mut buf: &[u8], mut offset: u64) -> std::io::Result<()> {
    use std::os::windows::fs::FileExt;
    while !buf.is_empty() {
        match file.seek_write(buf, offset) {
            Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
            Ok(n) => {
                buf = &buf[n..];
                offset += n as u64;
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Gives a new file its final size before anything is written: on Linux its blocks are
/// allocated (`fallocate`), so that a disk without room for it fails now, naming the
/// size, rather than after the work that produces it; elsewhere, or where the
/// filesystem cannot allocate ahead, the size is set and the blocks come with the writes.
pub(crate) fn reserve(file: &File, len: u64) -> std::io::Result<()> {
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd;
        if let Ok(len) = i64::try_from(len)
            && len > 0
        {
            // SAFETY: a plain system call on a file descriptor the caller owns.
            let r = unsafe { libc::fallocate(file.as_raw_fd(), 0, 0, len) };
            if r == 0 {
                return Ok(());
            }
            let e = std::io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::EOPNOTSUPP) | Some(libc::ENOSYS) => {}
                _ => return Err(e),
            }
        }
    }
    file.set_len(len)
}

/// Asks the kernel to start writing `len` bytes at `offset` to disk without waiting
/// (`sync_file_range` with `SYNC_FILE_RANGE_WRITE`); a hint, so failures are ignored.
#[cfg(target_os = "linux")]
pub(crate) fn start_writeback(file: &File, offset: u64, len: u64) {
    use std::os::fd::AsRawFd;
    let (Ok(offset), Ok(len)) = (i64::try_from(offset), i64::try_from(len)) else {
        return;
    };
    // SAFETY: a plain system call on a file descriptor this thread owns; it reads no
    // memory of ours.
    unsafe {
        libc::sync_file_range(file.as_raw_fd(), offset, len, libc::SYNC_FILE_RANGE_WRITE);
    }
}

#[cfg(not(target_os = "linux"))]
pub(crate) fn start_writeback(_file: &File, _offset: u64, _len: u64) {}

/// Writes `len` bytes at `offset` to disk and waits until they are there
/// (`sync_file_range` with `SYNC_FILE_RANGE_WAIT_BEFORE | WRITE | WAIT_AFTER`), so that a
/// later fsync of the file finds them clean. Not a durability guarantee by itself (no
/// metadata, no device cache flush: the fsync at commit does those); a write error it
/// reports is one the fsync would report too, only earlier. Elsewhere than on Linux it
/// does nothing and the fsync does all the work.
#[cfg(target_os = "linux")]
pub(crate) fn wait_writeback(file: &File, offset: u64, len: u64) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let (Ok(offset), Ok(len)) = (i64::try_from(offset), i64::try_from(len)) else {
        return Ok(());
    };
    let flags = libc::SYNC_FILE_RANGE_WAIT_BEFORE
        | libc::SYNC_FILE_RANGE_WRITE
        | libc::SYNC_FILE_RANGE_WAIT_AFTER;
    // SAFETY: a plain system call on a file descriptor the caller owns; it reads no memory
    // of ours.
    let r = unsafe { libc::sync_file_range(file.as_raw_fd(), offset, len, flags) };
    if r == 0 {
        return Ok(());
    }
    let e = std::io::Error::last_os_error();
    match e.raw_os_error() {
        // Filesystems without it (some network and FUSE ones): the fsync does the work.
        Some(libc::ENOSYS) | Some(libc::EOPNOTSUPP) | Some(libc::EINVAL) | Some(libc::ESPIPE) => {
            Ok(())
        }
        _ => Err(e),
    }
}

#[cfg(not(target_os = "linux"))]
pub(crate) fn wait_writeback(_file: &File, _offset: u64, _len: u64) -> std::io::Result<()> {
    Ok(())
}

/// Direct I/O (`O_DIRECT`) of whole blocks, straight from memory aligned like the file
/// offset they go to.
#[cfg(target_os = "linux")]
mod direct {
    use super::BLOCK;
    use std::fs::{File, OpenOptions};
    use std::os::unix::fs::{FileExt, OpenOptionsExt};
    use std::path::Path;

    /// A second handle on the file, opened for direct writes.
    pub(crate) struct DirectFile {
        file: File,
    }

    impl DirectFile {
        /// `None` when the filesystem refuses direct I/O (tmpfs, some network ones).
        pub(crate) fn open(path: &Path) -> Option<DirectFile> {
            let file = OpenOptions::new()
                .write(true)
                .custom_flags(libc::O_DIRECT)
                .open(path)
                .ok()?;
            Some(DirectFile { file })
        }

        /// Writes the whole blocks at the start of `data` to `offset`; returns how many
        /// bytes that was (none unless `offset` and `data`'s memory are block-aligned).
        pub(crate) fn write_blocks_at(
            &mut self,
            data: &[u8],
            offset: u64,
        ) -> std::io::Result<usize> {
            if !offset.is_multiple_of(BLOCK as u64)
                || !(data.as_ptr() as usize).is_multiple_of(BLOCK)
            {
                return Ok(0);
            }
            let whole = data.len() / BLOCK * BLOCK;
            self.file.write_all_at(&data[..whole], offset)?;
            Ok(whole)
        }
    }
}

/// Without `O_DIRECT`, everything goes through the page cache.
#[cfg(not(target_os = "linux"))]
mod direct {
    pub(crate) struct DirectFile;

    impl DirectFile {
        pub(crate) fn open(_path: &std::path::Path) -> Option<DirectFile> {
            None
        }

        pub(crate) fn write_blocks_at(
            &mut self,
            _data: &[u8],
            _offset: u64,
        ) -> std::io::Result<usize> {
            Ok(0)
        }
    }
}

pub(crate) use direct::DirectFile;
