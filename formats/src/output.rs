//! Output files are written to a temporary file beside their final name and renamed over
//! it once complete, so a crash or an error never leaves a partial file under that name.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use tempfile::NamedTempFile;

pub(crate) mod disk;

pub use disk::AlignedBuffer;

/// Set once the process is asked to stop (Ctrl-C, `SIGTERM`).
static STOP: AtomicBool = AtomicBool::new(false);

/// Makes every output being written fail at its next write, and none be committed, so
/// that the writers' error paths remove their temporary files: what an interrupted run
/// leaves behind is what was there before it. Safe to call from a signal-handling thread.
pub fn request_stop() {
    STOP.store(true, Ordering::SeqCst);
}

/// `Ok` unless [`request_stop`] was called; then the error every write returns.
pub fn check_stop() -> std::io::Result<()> {
    if STOP.load(Ordering::Relaxed) {
        Err(std::io::Error::other("interrupted"))
    } else {
        Ok(())
    }
}

/// The directory `path` will live in (`.` for a bare file name).
pub fn parent_dir(path: &Path) -> &Path {
    match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    }
}

/// A new temporary file in `path`'s directory (so the final rename is atomic), created
/// with mode 0666 less the process umask on Unix, as `fopen` creates files: the renamed
/// output gets the permissions any other tool's output would.
pub fn temp_file_beside(path: &Path) -> std::io::Result<NamedTempFile> {
    let mut builder = tempfile::Builder::new();
    builder.prefix(".quantforge-").suffix(".tmp");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        builder.permissions(std::fs::Permissions::from_mode(0o666));
    }
    builder.tempfile_in(parent_dir(path))
}

/// A [`PlacedFile`]'s data before it takes its name: on Linux a file with no name at all
/// (`O_TMPFILE`), so that a process killed at any point (`SIGKILL`, the OOM killer) leaves
/// nothing behind in the directory; elsewhere, or where the filesystem cannot make one, a
/// hidden temporary file beside the output, deleted unless committed.
enum Temp {
    /// Unnamed, in the output's directory; `reopen` names it for opening it again
    /// (`/proc/self/fd/N`).
    #[cfg(target_os = "linux")]
    Unnamed {
        file: std::fs::File,
        reopen: PathBuf,
    },
    /// Under a temporary name.
    Named(NamedTempFile),
}

impl Temp {
    /// A new file for `path`, in its directory.
    fn beside(path: &Path) -> std::io::Result<Temp> {
        #[cfg(target_os = "linux")]
        if let Some(temp) = unnamed::create(parent_dir(path)) {
            return Ok(temp);
        }
        temp_file_beside(path).map(Temp::Named)
    }

    fn as_file(&self) -> &std::fs::File {
        match self {
            #[cfg(target_os = "linux")]
            Temp::Unnamed { file, .. } => file,
            Temp::Named(tmp) => tmp.as_file(),
        }
    }

    /// A path that opens this same file again.
    fn reopen_path(&self) -> &Path {
        match self {
            #[cfg(target_os = "linux")]
            Temp::Unnamed { reopen, .. } => reopen,
            Temp::Named(tmp) => tmp.path(),
        }
    }
}

#[cfg(target_os = "linux")]
mod unnamed {
    use super::Temp;
    use std::ffi::CString;
    use std::fs::OpenOptions;
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::fs::OpenOptionsExt;
    use std::os::unix::io::AsRawFd;
    use std::path::{Path, PathBuf};

    /// An unnamed file in `dir`, with mode 0666 less the umask as `fopen` makes them, or
    /// `None` where that cannot be done or the file could not be given a name later (no
    /// `/proc`): the caller then falls back to a named temporary file.
    pub(super) fn create(dir: &Path) -> Option<Temp> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .mode(0o666)
            .custom_flags(libc::O_TMPFILE)
            .open(dir)
            .ok()?;
        let reopen = PathBuf::from(format!("/proc/self/fd/{}", file.as_raw_fd()));
        std::fs::metadata(&reopen).ok()?;
        Some(Temp::Unnamed { file, reopen })
    }

    /// Gives the unnamed file behind `reopen` the name `to` (which must not exist).
    pub(super) fn link(reopen: &Path, to: &Path) -> std::io::Result<()> {
        let from = CString::new(reopen.as_os_str().as_bytes())?;
        let to = CString::new(to.as_os_str().as_bytes())?;
        // SAFETY: both are NUL-terminated paths that live across the call.
        let done = unsafe {
            libc::linkat(
                libc::AT_FDCWD,
                from.as_ptr(),
                libc::AT_FDCWD,
                to.as_ptr(),
                libc::AT_SYMLINK_FOLLOW,
            )
        };
        if done == 0 {
            Ok(())
        } else {
            Err(std::io::Error::last_os_error())
        }
    }

    /// Links the unnamed file into `dir` under a fresh hidden name and renames that over
    /// `path`: a rename is atomic where a link cannot replace a file. Only between the
    /// two could a killed process leave the temporary name behind.
    pub(super) fn commit(reopen: &Path, dir: &Path, path: &Path) -> std::io::Result<()> {
        let mut attempt = 0u32;
        let name = loop {
            let name = dir.join(format!(
                ".quantforge-{}-{}.tmp",
                std::process::id(),
                unique(attempt)
            ));
            match link(reopen, &name) {
                Ok(()) => break name,
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && attempt < 64 => {
                    attempt += 1;
                }
                Err(e) => return Err(e),
            }
        };
        std::fs::rename(&name, path).inspect_err(|_| {
            let _ = std::fs::remove_file(&name);
        })
    }

    /// A name part that differs between calls (each `RandomState` has new keys).
    fn unique(attempt: u32) -> u64 {
        use std::hash::{BuildHasher, RandomState};
        RandomState::new().hash_one(attempt) & 0xffff_ffff
    }
}

/// What committing an output promises about a power cut or a crash of the system (a
/// crash of the process alone never leaves a partial file under the output's name, either
/// way).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Durability {
    /// The file's bytes are on disk before it takes its name, and the rename is on disk
    /// after it (fsync of the file, rename, fsync of the directory): a committed output
    /// survives a power cut whole.
    #[default]
    Synced,
    /// Renamed without waiting for the disk: the kernel writes the bytes back when it
    /// chooses, so after a power cut the name may hold a file whose data never reached the
    /// disk. For outputs that are regenerated anyway (caches, benchmarks).
    Unsynced,
}

/// A file of known size, written in place in any order and renamed over its final name
/// once complete.
///
/// It is created under a temporary name beside `path` with its whole size reserved (on
/// Linux its blocks are allocated up front, so a disk without room for it fails before
/// any work is spent on it). [`PlacedFile::write_at`] puts bytes at any offset: the whole
/// 4 KiB blocks among them straight to disk when their memory is aligned like the file
/// offset (direct I/O, Linux), the rest through the page cache with its writeback started
/// at once. [`PlacedFile::commit`] fsyncs it and renames it over `path`; dropped without a
/// commit, the temporary file is deleted.
///
/// With [`Durability::Synced`] the fsync at the end finds little left to do: each write
/// through the page cache is waited for on disk during the next write (whole blocks
/// written directly are on the device when their write returns), so a file written by a
/// thread of its own while other threads compute is mostly on disk by the time the last
/// byte is written.
pub struct PlacedFile {
    path: PathBuf,
    tmp: Temp,
    direct: Option<disk::DirectFile>,
    len: u64,
    durability: Durability,
    /// The bytes the last write put in the page cache, whose writeback was started and
    /// is waited for at the next write.
    unsettled: Option<(u64, u64)>,
}

impl PlacedFile {
    /// The block size of its direct writes: bytes reach the disk without a copy when
    /// their memory address and their file offset agree modulo this.
    pub const BLOCK: u64 = disk::BLOCK as u64;

    /// Starts a file of `len` bytes (zeros until written) that becomes `path` on commit,
    /// as durably as `durability` says.
    pub fn create(
        path: impl AsRef<Path>,
        len: u64,
        durability: Durability,
    ) -> std::io::Result<PlacedFile> {
        let path = path.as_ref().to_path_buf();
        let tmp = Temp::beside(&path)?;
        disk::reserve(tmp.as_file(), len).map_err(|e| {
            std::io::Error::new(e.kind(), format!("cannot reserve {len} bytes for it: {e}"))
        })?;
        let direct = disk::DirectFile::open(tmp.reopen_path());
        Ok(PlacedFile {
            path,
            tmp,
            direct,
            len,
            durability,
            unsettled: None,
        })
    }

    /// The final path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Its size in bytes.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether its size is 0.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Writes `data` at `offset` (which must lie within the file). Blocks that `data`
    /// covers only in part go through the page cache, so that two writes meeting inside
    /// a block never overwrite each other's bytes.
    pub fn write_at(&mut self, data: &[u8], offset: u64) -> std::io::Result<()> {
        check_stop()?;
        let end = offset
            .checked_add(data.len() as u64)
            .filter(|&end| end <= self.len)
            .ok_or_else(|| {
                std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    format!(
                        "{} bytes at offset {offset} go past the end of a {}-byte file",
                        data.len(),
                        self.len
                    ),
                )
            })?;
        let block = disk::BLOCK as u64;
        let first = offset.next_multiple_of(block);
        let last = end / block * block;
        let mut buffered = true;
        if first < last
            && let Some(direct) = &mut self.direct
        {
            let head = (first - offset) as usize;
            let whole = &data[head..head + (last - first) as usize];
            match direct.write_blocks_at(whole, first) {
                Ok(n) if n == whole.len() => {
                    self.buffered_at(&data[..head], offset)?;
                    self.buffered_at(&data[head + whole.len()..], last)?;
                    buffered = head > 0 || last < end;
                }
                // Memory not aligned like the offset: this write goes through the cache.
                Ok(_) => self.buffered_at(data, offset)?,
                // Direct I/O refused: everything goes through the page cache from now on.
                Err(_) => {
                    self.direct = None;
                    self.buffered_at(data, offset)?;
                }
            }
        } else {
            self.buffered_at(data, offset)?;
        }
        // The previous write's writeback ran while this one was made; waiting for it now
        // keeps one write in flight and leaves the final fsync only the last.
        if self.durability == Durability::Synced {
            if let Some((at, len)) = self.unsettled.take() {
                disk::wait_writeback(self.tmp.as_file(), at, len)?;
            }
            self.unsettled = (buffered && !data.is_empty()).then_some((offset, end - offset));
        }
        Ok(())
    }

    fn buffered_at(&self, data: &[u8], offset: u64) -> std::io::Result<()> {
        if data.is_empty() {
            return Ok(());
        }
        disk::write_all_at(self.tmp.as_file(), data, offset)?;
        disk::start_writeback(self.tmp.as_file(), offset, data.len() as u64);
        Ok(())
    }

    /// Moves the file into place as [`persist`] does; the error says which step failed.
    pub fn commit(self) -> std::io::Result<()> {
        commit_temp(self.tmp, &self.path, self.durability)
            .map_err(|(step, e)| std::io::Error::new(e.kind(), format!("{step}: {e}")))
    }
}

/// Renames `tmp` over `path` unless the process was asked to stop; with
/// [`Durability::Synced`], fsyncs it first and the directory after, so the data and the
/// rename are both on disk. On failure, the step that failed and why; nothing is then
/// left under `path` that was not there before (`tmp` is deleted as it drops).
pub(crate) fn persist(
    tmp: NamedTempFile,
    path: &Path,
    durability: Durability,
) -> Result<(), (&'static str, std::io::Error)> {
    commit_temp(Temp::Named(tmp), path, durability)
}

/// [`persist`] for either kind of [`Temp`]: an unnamed file is given a hidden name and
/// that is renamed over `path`.
fn commit_temp(
    tmp: Temp,
    path: &Path,
    durability: Durability,
) -> Result<(), (&'static str, std::io::Error)> {
    let synced = durability == Durability::Synced;
    if synced {
        tmp.as_file().sync_all().map_err(|e| ("cannot fsync", e))?;
    }
    check_stop().map_err(|e| ("not committed", e))?;
    let dir = parent_dir(path);
    match tmp {
        Temp::Named(tmp) => {
            tmp.persist(path)
                .map_err(|e| ("cannot rename the temporary file into place", e.error))?;
        }
        // The file stays open (and so reachable through `reopen`) until it has its name.
        #[cfg(target_os = "linux")]
        Temp::Unnamed { file, reopen } => {
            unnamed::commit(&reopen, dir, path)
                .map_err(|e| ("cannot move the written file into place", e))?;
            drop(file);
        }
    }
    if synced && let Ok(dir) = std::fs::File::open(dir) {
        // Best effort: some filesystems do not support fsync on directories.
        let _ = dir.sync_all();
    }
    Ok(())
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn temp_files_follow_the_umask() {
        let umask = process_umask();
        let dir = tempfile::tempdir().unwrap();
        let file = temp_file_beside(&dir.path().join("out.gguf")).unwrap();
        let mode = file.as_file().metadata().unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o666 & !umask);
    }
}

/// This process's umask, for tests of new files' permissions.
#[cfg(all(test, target_os = "linux"))]
pub(crate) fn process_umask() -> u32 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("Umask:"))
        .map(|v| u32::from_str_radix(v.trim(), 8).unwrap())
        .unwrap()
}

/// `len` deterministic bytes of a xorshift sequence continued from `state`, for tests.
#[cfg(test)]
pub(crate) fn pseudo_random_bytes(state: &mut u64, len: usize) -> Vec<u8> {
    (0..len)
        .map(|_| {
            *state ^= *state << 13;
            *state ^= *state >> 7;
            *state ^= *state << 17;
            *state as u8
        })
        .collect()
}

#[cfg(all(test, unix))]
mod placed_tests {
    use super::*;

    fn content(len: usize) -> Vec<u8> {
        pseudo_random_bytes(&mut 0x9e37_79b9_7f4a_7c15, len)
    }

    #[test]
    fn writes_in_any_order_and_alignment_make_the_whole_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.bin");
        let len = 5 * disk::BLOCK + 1234;
        let want = content(len);
        // Cuts inside blocks, on block boundaries, and a range of whole blocks.
        let cuts = [
            0,
            100,
            disk::BLOCK - 1,
            disk::BLOCK,
            3 * disk::BLOCK + 7,
            4 * disk::BLOCK,
            len,
        ];
        let mut ranges: Vec<(usize, usize)> = cuts.windows(2).map(|w| (w[0], w[1])).collect();
        ranges.reverse();
        ranges.swap(1, 4);
        let mut file = PlacedFile::create(&path, len as u64, Durability::Synced).unwrap();
        assert_eq!(file.len(), len as u64);
        for (k, &(start, end)) in ranges.iter().enumerate() {
            if k % 2 == 0 {
                // From memory aligned like the file offset: whole blocks go direct.
                let skip = start % disk::BLOCK;
                let mut buf = AlignedBuffer::zeroed(skip + end - start);
                buf.as_mut_slice()[skip..].copy_from_slice(&want[start..end]);
                file.write_at(&buf.as_slice()[skip..], start as u64)
                    .unwrap();
            } else {
                // From ordinary memory: through the page cache.
                let bytes = want[start..end].to_vec();
                file.write_at(&bytes, start as u64).unwrap();
            }
        }
        assert!(!path.exists(), "nothing under the name before the commit");
        #[cfg(target_os = "linux")]
        assert_eq!(
            std::fs::read_dir(dir.path()).unwrap().count(),
            0,
            "on Linux the file has no name until committed: a killed process leaves nothing"
        );
        file.commit().unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), want);
        let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(names.len(), 1, "no temporary file left");
    }

    /// A committed file replaces what was under its name, with the permissions `fopen`
    /// gives a new file; two files made at once each take their own name.
    #[cfg(target_os = "linux")]
    #[test]
    fn committed_files_replace_the_old_one_with_fopen_permissions() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a.bin"), dir.path().join("b.bin"));
        std::fs::write(&a, b"old contents, longer").unwrap();
        let mut fa = PlacedFile::create(&a, 3, Durability::Synced).unwrap();
        let mut fb = PlacedFile::create(&b, 2, Durability::Unsynced).unwrap();
        fa.write_at(b"new", 0).unwrap();
        fb.write_at(b"bb", 0).unwrap();
        fb.commit().unwrap();
        fa.commit().unwrap();
        assert_eq!(std::fs::read(&a).unwrap(), b"new");
        assert_eq!(std::fs::read(&b).unwrap(), b"bb");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 2);
        let umask = process_umask();
        let mode = std::fs::metadata(&a).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o666 & !umask);
    }

    #[test]
    fn unwritten_bytes_read_as_zeros() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.bin");
        let mut file =
            PlacedFile::create(&path, 3 * disk::BLOCK as u64, Durability::Unsynced).unwrap();
        file.write_at(b"abc", disk::BLOCK as u64 + 5).unwrap();
        file.commit().unwrap();
        let got = std::fs::read(&path).unwrap();
        let mut want = vec![0u8; 3 * disk::BLOCK];
        want[disk::BLOCK + 5..disk::BLOCK + 8].copy_from_slice(b"abc");
        assert_eq!(got, want);
    }

    #[test]
    fn writes_past_the_end_are_errors_and_uncommitted_files_vanish() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.bin");
        std::fs::write(&path, b"previous").unwrap();
        let mut file = PlacedFile::create(&path, 10, Durability::Synced).unwrap();
        let e = file.write_at(b"0123456789a", 0).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput);
        assert!(e.to_string().contains("past the end"), "{e}");
        let e = file.write_at(b"x", u64::MAX).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput);
        drop(file);
        let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(names.len(), 1, "the temporary file is gone");
        assert_eq!(std::fs::read(&path).unwrap(), b"previous");
    }

    #[test]
    fn aligned_buffers_are_aligned_zeros() {
        for len in [0, 1, 4096, 5000, 3 << 20] {
            let mut b = AlignedBuffer::zeroed(len);
            assert_eq!(b.len(), len);
            assert_eq!(b.is_empty(), len == 0);
            assert!((b.as_slice().as_ptr() as usize).is_multiple_of(disk::BLOCK));
            assert!(b.as_slice().iter().all(|&x| x == 0));
            if len > 0 {
                b.as_mut_slice()[len - 1] = 7;
                assert_eq!(b.as_slice()[len - 1], 7);
            }
        }
    }
}
