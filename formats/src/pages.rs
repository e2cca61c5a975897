//! Page hints for the read-only file mappings the readers hand out views of: read a range
//! ahead before it is used (`MADV_WILLNEED`), let it leave the process's resident set once
//! done (`MADV_DONTNEED`). They change how much memory a pass over a large file holds,
//! never what it reads.

use memmap2::{Advice, Mmap, UncheckedAdvice};

/// Asks the kernel to start reading `len` bytes of `map` at `offset`.
pub(crate) fn prefetch(map: &Mmap, offset: usize, len: usize) -> std::io::Result<()> {
    map.advise_range(Advice::WillNeed, offset, len)
}

/// Lets `len` bytes of `map` at `offset` leave the resident set; reading them again
/// faults the same bytes back in from the file.
///
/// # Safety
///
/// `map` must map a file read-only (as `Mmap::map` does), not anonymous memory: only then
/// do dropped pages come back with the same contents, so that slices borrowed from the
/// map stay valid.
pub(crate) unsafe fn release(map: &Mmap, offset: usize, len: usize) -> std::io::Result<()> {
    // SAFETY: the caller guarantees a read-only file mapping, which this process never
    // writes to, so every page holds the file's bytes and comes back unchanged after
    // MADV_DONTNEED; the mapping itself stays in place.
    unsafe { map.unchecked_advise_range(UncheckedAdvice::DontNeed, offset, len) }
}
