//! Fuzzes the GGUF parser on arbitrary bytes: it never panics, and its peak heap use
//! never exceeds `parse_allocation_bound(input length)` (measured by a counting global
//! allocator, so a violation fails even below libFuzzer's -malloc_limit_mb). Whatever it
//! accepts must be usable: every tensor viewed, the header re-encoded to the same bytes.

#![no_main]

#[path = "../../formats/tests/gguf_common/counting_alloc.rs"]
mod counting_alloc;

use counting_alloc::{Counting, peak_during};
use libfuzzer_sys::fuzz_target;
use quantforge_formats::gguf::{GgufFile, GgufHeader, parse_allocation_bound};

#[global_allocator]
static GLOBAL: Counting = Counting;

fuzz_target!(|data: &[u8]| {
    let mut parsed = None;
    let peak = peak_during(|| parsed = Some(GgufHeader::parse(data)));
    let bound = parse_allocation_bound(data.len());
    assert!(
        peak <= bound,
        "parsing {} bytes allocated {peak} bytes, above the bound {bound}",
        data.len()
    );
    let Some(Ok((header, layout))) = parsed else {
        return;
    };
    let (bytes, again) = header.encode().expect("an accepted header re-encodes");
    assert_eq!(again, layout);
    let n = layout.header_size as usize;
    assert_eq!(&bytes[..n], &data[..n]);

    let file = GgufFile::from_bytes(data.to_vec()).expect("the owning reader agrees");
    for view in file.tensor_views() {
        assert_eq!(view.data().len() as u64, view.info().n_bytes());
        assert_eq!(file.tensor(view.name()).unwrap().offset(), view.offset());
    }
});
