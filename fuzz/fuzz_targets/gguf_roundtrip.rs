//! Fuzzes GGUF parse -> write -> parse: any file the reader accepts is re-emitted by the
//! streaming writer into a file that parses to an equal header (floats bitwise) and equal
//! tensor data, whose header bytes are the input's header bytes exactly, and whose own
//! re-emit is identical to it.

#![no_main]

use libfuzzer_sys::fuzz_target;
use quantforge_formats::gguf::{GgufFile, GgufWriter};

fn reemit(file: &GgufFile) -> Vec<u8> {
    let mut w = GgufWriter::new(Vec::new(), file.header()).expect("an accepted header writes");
    for v in file.tensor_views() {
        w.write_tensor(v.name(), v.data())
            .expect("tensor data writes");
    }
    w.finish().expect("every tensor was written")
}

fuzz_target!(|data: &[u8]| {
    let Ok(file) = GgufFile::from_bytes(data.to_vec()) else {
        return;
    };
    let first = reemit(&file);
    let header_size = file.layout().header_size as usize;
    assert_eq!(&first[..header_size], &data[..header_size]);
    let again = GgufFile::from_bytes(first.clone()).expect("a re-emitted file parses");
    assert_eq!(again.header(), file.header());
    assert_eq!(again.layout(), file.layout());
    assert!(again.has_canonical_length());
    for (a, b) in file.tensor_views().zip(again.tensor_views()) {
        assert_eq!(a.offset(), b.offset());
        assert_eq!(a.data(), b.data());
    }
    assert_eq!(reemit(&again), first);
});
