//! Fuzzes the GGUF parser on arbitrary bytes: it never panics, and its peak heap use
//! never exceeds `parse_allocation_bound(input length)` (measured by a counting global
//! allocator, so a violation fails even below libFuzzer's -malloc_limit_mb). Whatever it
//! accepts must be usable: every tensor viewed, the header re-encoded.

#![no_main]

use libfuzzer_sys::fuzz_target;
use quantforge_formats::gguf::{GgufFile, GgufHeader, parse_allocation_bound};
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

struct Counting;

static CURRENT: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards every call to the system allocator unchanged; only counts sizes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let now = CURRENT.fetch_add(layout.size(), Relaxed) + layout.size();
        PEAK.fetch_max(now, Relaxed);
        // SAFETY: the caller's contract is passed on as is.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        CURRENT.fetch_sub(layout.size(), Relaxed);
        // SAFETY: the caller's contract is passed on as is.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fuzz_target!(|data: &[u8]| {
    let base = CURRENT.load(Relaxed);
    PEAK.store(base, Relaxed);
    let parsed = GgufHeader::parse(data);
    let peak = PEAK.load(Relaxed) - base;
    let bound = parse_allocation_bound(data.len());
    assert!(
        peak <= bound,
        "parsing {} bytes allocated {peak} bytes, above the bound {bound}",
        data.len()
    );
    let Ok((header, layout)) = parsed else { return };
    let (bytes, again) = header.encode().expect("an accepted header re-encodes");
    assert_eq!(again, layout);
    assert_eq!(&bytes[..layout.header_size as usize], &data[..layout.header_size as usize]);

    let file = GgufFile::from_bytes(data.to_vec()).expect("the owning reader agrees");
    for view in file.tensor_views() {
        assert_eq!(view.data().len() as u64, view.info().n_bytes());
        assert_eq!(file.tensor(view.name()).unwrap().offset(), view.offset());
    }
});
