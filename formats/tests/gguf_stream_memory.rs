//! Writing from a model is streaming: re-emitting the real Gemma GGUF (whose largest
//! tensor, token_embd, is 178 MB) raises this process's peak resident set by far less
//! than that tensor. Alone in its binary so no other test's memory is counted.

mod gguf_common;

use gguf_common::{GEMMA_SHA256, gemma_gguf, sha256};
use quantforge_formats::gguf::GgufModel;

/// Peak resident set (VmHWM) of this process, in bytes.
fn peak_rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .expect("VmHWM in /proc/self/status");
    let kib: u64 = line
        .trim_start_matches("VmHWM:")
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .unwrap();
    kib * 1024
}

#[test]
fn reemit_keeps_the_resident_set_bounded() {
    let Some(path) = gemma_gguf() else { return };
    let model = GgufModel::open(&path).unwrap();
    let largest = model.tensors().map(|v| v.data().len()).max().unwrap() as u64;
    assert!(largest > 150 << 20);
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("copy.gguf");
    // Writing "5" resets the peak to the current resident set (Linux >= 4.0).
    std::fs::write("/proc/self/clear_refs", "5").unwrap();
    let before = peak_rss();
    model.write_merged(&out).unwrap();
    let grown = peak_rss().saturating_sub(before);
    eprintln!(
        "re-emit raised the peak resident set by {} MiB (largest tensor {} MiB)",
        grown >> 20,
        largest >> 20
    );
    assert!(
        grown < 64 << 20,
        "re-emit raised the peak resident set by {grown} bytes"
    );
    assert_eq!(sha256(&out), GEMMA_SHA256);
}
