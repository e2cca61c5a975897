//! Under mmap, nothing reads tensor data nobody asked for.
//!
//! A 16 MiB file of 16 one-MiB tensors is written and evicted from the page cache
//! (fsync + `POSIX_FADV_DONTNEED`); `mincore(2)` on the reader's own mapping then shows
//! which of its pages the kernel has read. Opening reads the header's pages only; reading
//! one tensor reads that tensor's pages only (the pages at its two ends may be shared with
//! neighbours); `prefetch` reads exactly one tensor ahead; `release` drops a tensor's pages
//! from the process (its resident set, per /proc/self/smaps).

mod mapping_rss;

use mapping_rss::mapping_rss_kib;
use quantforge_formats::gguf::{GgufBuilder, GgufFile, TensorView};
use quantforge_kernels::GgmlType;
use std::os::fd::AsRawFd;
use std::path::Path;
use std::time::{Duration, Instant};

const TENSORS: usize = 16;
const TENSOR_BYTES: usize = 1 << 20;

fn page() -> usize {
    // SAFETY: sysconf has no preconditions.
    usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap()
}

/// Writes the test file and evicts it from the page cache. False if the filesystem keeps
/// it resident anyway (tmpfs), where residency says nothing.
fn write_evicted(path: &Path) -> bool {
    let mut b = GgufBuilder::new();
    b.metadata_mut().set("general.name", "mmap test").unwrap();
    for i in 0..TENSORS {
        let data = vec![(i + 1) as u8; TENSOR_BYTES];
        b.add_tensor(format!("t{i}"), GgmlType::I8, &[TENSOR_BYTES as u64], data)
            .unwrap();
    }
    b.write(path).unwrap();
    let file = std::fs::File::open(path).unwrap();
    file.sync_all().unwrap();
    // SAFETY: valid open file descriptor; the call only drops clean cached pages.
    let rc = unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    assert_eq!(rc, 0);
    let file = GgufFile::open(path).unwrap();
    resident_pages(&file, 0, file.bytes().len()) < file.bytes().len() / page() / 2
}

/// Number of resident pages among those overlapping `bytes[start..end]` of the mapping.
fn resident_pages(file: &GgufFile, start: usize, end: usize) -> usize {
    let page = page();
    let base = file.bytes().as_ptr() as usize;
    assert_eq!(base % page, 0, "mapping is page-aligned");
    let first = start / page;
    let last = end.div_ceil(page);
    if last <= first {
        return 0;
    }
    let mut vec = vec![0u8; last - first];
    // SAFETY: [base + first*page, base + last*page) lies within the mapping (rounded up
    // to whole pages, which the kernel maps); `vec` has one byte per page.
    let rc = unsafe {
        libc::mincore(
            (base + first * page) as *mut libc::c_void,
            (last - first) * page,
            vec.as_mut_ptr(),
        )
    };
    assert_eq!(rc, 0, "mincore failed: {}", std::io::Error::last_os_error());
    vec.iter().filter(|&&b| b & 1 != 0).count()
}

/// Pages resident outside `keep` (byte ranges), across the whole file.
fn resident_outside(file: &GgufFile, keep: &[(usize, usize)]) -> Vec<String> {
    let page = page();
    let mut out = Vec::new();
    for v in file.tensor_views() {
        let (start, end) = (v.offset() as usize, v.offset() as usize + v.data().len());
        // Only the pages wholly inside this tensor and outside every kept range.
        let mut p = start.div_ceil(page) * page;
        while p + page <= end {
            let kept = keep.iter().any(|&(a, b)| p + page > a && p < b);
            if !kept && resident_pages(file, p, p + page) > 0 {
                out.push(format!("{} page at {p}", v.name()));
            }
            p += page;
        }
    }
    out
}

fn span(v: &TensorView<'_>) -> (usize, usize) {
    (v.offset() as usize, v.offset() as usize + v.data().len())
}

#[test]
fn mmap_reads_only_what_is_asked_for() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pages.gguf");
    if !write_evicted(&path) {
        eprintln!("SKIPPED: this filesystem keeps evicted pages resident (tmpfs?)");
        return;
    }

    let file = GgufFile::open(&path).unwrap();
    assert!(file.is_mmap());
    let header = (0, file.layout().data_offset as usize);
    let untouched = resident_outside(&file, &[header]);
    assert!(
        untouched.is_empty(),
        "opening read tensor data: {untouched:?}"
    );

    // Read one tensor, byte by byte, without any hint.
    let t5 = file.tensor("t5").unwrap();
    let sum: u64 = t5.data().iter().map(|&b| u64::from(b)).sum();
    assert_eq!(sum, 6 * TENSOR_BYTES as u64);
    let pages = TENSOR_BYTES / page();
    assert!(resident_pages(&file, span(&t5).0, span(&t5).1) >= pages);
    let stray = resident_outside(&file, &[header, span(&t5)]);
    assert!(stray.is_empty(), "reading t5 read other tensors: {stray:?}");

    // Prefetch one tensor: it becomes resident (asynchronously), nothing else does.
    let t10 = file.tensor("t10").unwrap();
    file.prefetch(&t10).unwrap();
    let start = Instant::now();
    while resident_pages(&file, span(&t10).0, span(&t10).1) < pages {
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "prefetch of t10 did not read it"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    let stray = resident_outside(&file, &[header, span(&t5), span(&t10)]);
    assert!(
        stray.is_empty(),
        "prefetching t10 read other tensors: {stray:?}"
    );

    // Release: the tensor's pages leave this process's resident set.
    let rss_before = mapping_rss_kib(file.bytes().as_ptr());
    file.release(&t5).unwrap();
    let rss_after = mapping_rss_kib(file.bytes().as_ptr());
    assert!(
        rss_before - rss_after >= (TENSOR_BYTES / 1024) as u64 - 8,
        "release dropped {} KiB of {} KiB",
        rss_before - rss_after,
        TENSOR_BYTES / 1024
    );
    // The view still reads correctly afterwards.
    assert!(t5.data().iter().all(|&b| b == 6));
}
