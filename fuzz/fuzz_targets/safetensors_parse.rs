//! Fuzzes every safetensors parser: whole-file validation, stream frames, the header JSON
//! alone and shard indexes. Whatever validation accepts must be fully usable (every
//! tensor viewed, sliced, decoded) and must re-emit to a file that parses to the same
//! header. Nothing may panic, and allocation is bounded by the input (libFuzzer's
//! -rss_limit_mb and -malloc_limit_mb catch violations).

#![no_main]

use libfuzzer_sys::fuzz_target;
use quantforge_formats::safetensors::{Header, Order, SafeTensors, ShardIndex, serialize};
use std::io::Cursor;

fuzz_target!(|data: &[u8]| {
    if let Ok(file) = SafeTensors::from_bytes(data) {
        for t in file.tensors() {
            let _ = t.to_f32();
            if let Some(&rows) = t.shape().first() {
                let _ = t.rows(rows / 2..rows);
                let ranges: Vec<_> = t.shape().iter().map(|&d| d / 3..d - d / 3).collect();
                if let Ok(slice) = t.slice(&ranges) {
                    assert_eq!(slice.to_vec().len(), slice.byte_len());
                }
            }
        }
        let again = serialize(file.tensors(), file.metadata(), Order::AsGiven)
            .expect("a valid file re-emits");
        let back = SafeTensors::from_bytes(&again).expect("a re-emitted file parses");
        assert_eq!(back.header().tensors(), file.header().tensors());
        assert_eq!(back.metadata(), file.metadata());
    }
    let mut stream = Cursor::new(data);
    while let Ok(Some(_)) = SafeTensors::read_frame(&mut stream) {}
    let _ = Header::parse(data);
    let _ = ShardIndex::parse(data);
});
