//! Fuzzes the importance-matrix reader (legacy and GGUF formats) on arbitrary bytes: it
//! never panics, and its peak heap use stays within the GGUF parser's bound plus 8 bytes
//! per input byte (the values it keeps are at most the input's floats, and every entry
//! costs at least 16 bytes of input). Whatever it accepts must be usable: each entry
//! looked up by name, the finiteness check and the metadata built.

#![no_main]

#[path = "../../formats/tests/gguf_common/counting_alloc.rs"]
mod counting_alloc;

use counting_alloc::{Counting, peak_during};
use libfuzzer_sys::fuzz_target;
use quantforge::pipeline::imatrix::Imatrix;
use quantforge_formats::gguf::parse_allocation_bound;

#[global_allocator]
static GLOBAL: Counting = Counting;

fuzz_target!(|data: &[u8]| {
    let bytes = data.to_vec();
    let mut parsed = None;
    let peak = peak_during(|| parsed = Some(Imatrix::from_bytes(bytes)));
    let bound = parse_allocation_bound(data.len()).saturating_add(data.len().saturating_mul(8));
    assert!(
        peak <= bound,
        "reading {} bytes allocated {peak} bytes, above the bound {bound}",
        data.len()
    );
    let Some(Ok(m)) = parsed else {
        return;
    };
    for (name, values) in m.entries() {
        if let Ok(name) = std::str::from_utf8(name) {
            assert!(m.get(name).is_some_and(|v| std::ptr::eq(v, values)));
        }
    }
    let _ = m.check_finite();
    let meta = m.metadata(b"imatrix.gguf");
    assert!(meta.len() >= 2);
});
