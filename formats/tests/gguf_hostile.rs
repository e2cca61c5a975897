//! Hostile and broken files: every one is an error with a useful message, fast, never a
//! panic. (Memory bounds: gguf_alloc.rs; the CLI under a 100 MiB limit: tests/cli_gguf.rs.)

mod gguf_common;

use gguf_common::{Raw, repo_root, small_gguf};
use quantforge_formats::gguf::{GgufError, GgufFile, MAX_ARRAY_DEPTH};
use std::time::{Duration, Instant};

/// Parses `bytes`, expecting an error, within a second; returns the error.
fn reject(label: &str, bytes: Vec<u8>) -> GgufError {
    let start = Instant::now();
    let result = GgufFile::from_bytes(bytes);
    let elapsed = start.elapsed();
    assert!(
        elapsed < Duration::from_secs(1),
        "{label}: took {elapsed:?}"
    );
    match result {
        Ok(_) => panic!("{label}: accepted"),
        Err(e) => e,
    }
}

fn reject_with(label: &str, bytes: Vec<u8>, needle: &str) {
    let msg = reject(label, bytes).to_string();
    assert!(
        msg.contains(needle),
        "{label}: message {msg:?} lacks {needle:?}"
    );
}

#[test]
fn every_truncation_of_a_valid_file_is_an_error_naming_what_is_missing() {
    for (label, full) in [
        ("small", small_gguf()),
        (
            "gguf-py golden",
            std::fs::read(repo_root().join("golden/gguf/small.gguf")).unwrap(),
        ),
    ] {
        let file = GgufFile::from_bytes(full.clone()).unwrap();
        let last = file.tensor_views().last().unwrap();
        let data_end = last.offset() as usize + last.data().len();
        let data_offset = file.layout().data_offset as usize;
        for len in 0..full.len() {
            let result = GgufFile::from_bytes(full[..len].to_vec());
            if len >= data_end {
                // Only the last tensor's padding is missing: still a readable file.
                assert!(result.is_ok(), "{label}: prefix {len} rejected");
                continue;
            }
            let err = result
                .err()
                .unwrap_or_else(|| panic!("{label}: prefix {len} accepted"));
            if len >= data_offset {
                // Inside the data: the error names the first tensor that is cut short.
                let cut = file
                    .tensor_views()
                    .find(|v| v.offset() as usize + v.data().len() > len)
                    .unwrap();
                match err {
                    GgufError::TensorTruncated { name, missing, .. } => {
                        assert_eq!(name, cut.name(), "{label}: prefix {len}");
                        assert_eq!(
                            missing as usize,
                            cut.offset() as usize + cut.data().len() - len
                        );
                    }
                    other => panic!("{label}: prefix {len}: {other}"),
                }
            } else {
                assert!(
                    matches!(
                        err,
                        GgufError::Truncated { .. }
                            | GgufError::CountTooLarge { .. }
                            | GgufError::TensorTruncated { .. }
                    ),
                    "{label}: prefix {len}: {err}"
                );
            }
        }
    }
}

#[test]
fn truncation_message_says_tensor_and_missing_bytes() {
    let full = small_gguf();
    let err = GgufFile::from_bytes(full[..full.len() - 40].to_vec()).unwrap_err();
    // c.bias (f16 x 5 = 10 bytes) is the last tensor, padded to 32: cutting 40 bytes
    // leaves it 18 bytes short.
    assert_eq!(
        err.to_string(),
        format!(
            "tensor 'c.bias' is truncated: its 10 bytes at offset {} end 18 bytes past the \
             end of the file ({} bytes)",
            full.len() - 32,
            full.len() - 40
        )
    );
}

#[test]
fn huge_counts_are_rejected_before_allocating() {
    let n = 1u64 << 60;
    reject_with(
        "2^60 tensors",
        Raw::header(3, n, 0).0,
        "tensor count is 1152921504606846976",
    );
    reject_with(
        "2^60 keys",
        Raw::header(3, 0, n).0,
        "key-value count is 1152921504606846976",
    );
    reject_with(
        "u64::MAX keys",
        Raw::header(3, 0, u64::MAX).0,
        "key-value count",
    );
    for elem in [0u32, 4, 8, 9, 12] {
        let bytes = Raw::header(3, 0, 1).array_kv("k", elem, n).0;
        reject_with(
            &format!("2^60 elements of type {elem}"),
            bytes,
            "length of arr[",
        );
    }
}

#[test]
fn four_gib_string_lengths_are_rejected() {
    let len = 1u64 << 32;
    // 64 bytes of filler so that the counts pass and the lengths are what is checked.
    let filler = [0u8; 64];
    let key = Raw::header(3, 0, 1).u64(len).bytes(&filler).0;
    reject_with("key", key, "key 0 needs 4294967296 bytes");
    let value = Raw::header(3, 0, 1)
        .str("k")
        .u32(8)
        .u64(len)
        .bytes(&filler)
        .0;
    reject_with(
        "str value",
        value,
        "value of key 'k' needs 4294967296 bytes",
    );
    let element = Raw::header(3, 0, 1)
        .array_kv("k", 8, 1)
        .u64(len)
        .bytes(&filler)
        .0;
    reject_with(
        "array element",
        element,
        "string 0 of key 'k' needs 4294967296",
    );
    let name = Raw::header(3, 1, 0).u64(len).bytes(&filler).0;
    reject_with("tensor name", name, "name of tensor 0 needs 4294967296");
    let max = Raw::header(3, 0, 1)
        .str("k")
        .u32(8)
        .u64(u64::MAX)
        .bytes(&filler)
        .0;
    reject_with("u64::MAX string", max, "needs 18446744073709551615 bytes");
}

#[test]
fn arrays_nested_a_million_deep_are_rejected_at_the_depth_limit() {
    let raw = Raw::header(3, 0, 1).nested_kv("deep", 1_000_000);
    let msg = reject("1e6-deep array", raw.0).to_string();
    assert!(
        msg.contains(&format!("nested deeper than {MAX_ARRAY_DEPTH} levels")),
        "{msg}"
    );
    // Exactly at the limit is fine.
    let raw = Raw::header(3, 0, 1).nested_kv("ok", MAX_ARRAY_DEPTH);
    GgufFile::from_bytes(raw.0).unwrap();
}

#[test]
fn offsets_past_the_end_and_off_layout_are_rejected() {
    let off = Raw::header(3, 1, 0)
        .tensor("t", &[8], 0, 1 << 40)
        .data(32)
        .0;
    reject_with(
        "offset 2^40",
        off,
        "data offset 1099511627776 differs from 0",
    );
    let misplaced = Raw::header(3, 2, 0)
        .tensor("a", &[8], 0, 0)
        .tensor("b", &[8], 0, 0)
        .data(64)
        .0;
    reject_with(
        "second tensor at 0",
        misplaced,
        "tensor 'b': data offset 0 differs from 32",
    );
    let unaligned = Raw::header(3, 2, 0)
        .tensor("a", &[1], 0, 0)
        .tensor("b", &[1], 0, 4)
        .data(64)
        .0;
    reject_with("unaligned", unaligned, "differs from 32");
    let huge = Raw::header(3, 1, 0)
        .tensor("big", &[1 << 20, 1 << 20], 0, 0)
        .data(32)
        .0;
    reject_with(
        "4 TiB tensor in a tiny file",
        huge,
        "tensor 'big' is truncated",
    );
    let no_data = Raw::header(3, 1, 0).tensor("t", &[8], 0, 0).0;
    reject_with(
        "data section missing",
        no_data,
        "padding before the tensor data",
    );
}

#[test]
fn bad_alignments_are_rejected() {
    for (label, value, needle) in [
        ("zero", 0u32, "not a power of two"),
        ("three", 3, "not a power of two"),
        ("2^31", 1 << 31, "above the limit"),
        ("2^21", 1 << 21, "above the limit"),
    ] {
        let bytes = Raw::header(3, 0, 1).kv_u32("general.alignment", value).0;
        reject_with(label, bytes, needle);
    }
    let as_u64 = Raw::header(3, 0, 1)
        .str("general.alignment")
        .u32(10)
        .u64(32)
        .0;
    reject_with("u64", as_u64, "must be u32, is u64");
}

#[test]
fn invalid_items_are_rejected_with_their_name() {
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("empty file", vec![], "truncated header: magic"),
        ("bad magic", b"GGML\x03\0\0\0".to_vec(), "not a GGUF file"),
        (
            "version 1",
            Raw::header(1, 0, 0).0,
            "version 1 is not supported",
        ),
        (
            "version 4",
            Raw::header(4, 0, 0).0,
            "version 4 is not supported",
        ),
        (
            "duplicate key",
            Raw::header(3, 0, 2).kv_u32("a", 1).kv_u32("a", 2).0,
            "duplicate key 'a'",
        ),
        (
            "empty key",
            Raw::header(3, 0, 1).kv_u32("", 1).0,
            "key 0 at offset 24 is empty",
        ),
        (
            "non-UTF-8 key",
            Raw::header(3, 0, 1)
                .u64(2)
                .bytes(&[0xff, 0xfe])
                .u32(0)
                .bytes(&[0])
                .0,
            "not valid UTF-8",
        ),
        (
            "value type 13",
            Raw::header(3, 0, 1).str("k").u32(13).u32(0).0,
            "type of key 'k' has invalid value type 13",
        ),
        (
            "bool 2",
            Raw::header(3, 0, 1).str("k").u32(7).bytes(&[2]).0,
            "bool byte 2",
        ),
        (
            "duplicate tensor",
            Raw::header(3, 2, 0)
                .tensor("t", &[8], 0, 0)
                .tensor("t", &[8], 0, 32)
                .data(64)
                .0,
            "duplicate tensor name 't'",
        ),
        (
            "5 dims",
            Raw::header(3, 1, 0).tensor("t", &[1, 1, 1, 1, 1], 0, 0).0,
            "5 dimensions",
        ),
        (
            "negative dim",
            Raw::header(3, 1, 0).tensor("t", &[8, u64::MAX], 0, 0).0,
            "above i64::MAX",
        ),
        (
            "element count overflow",
            Raw::header(3, 1, 0)
                .tensor("t", &[1 << 32, 1 << 32], 0, 0)
                .0,
            "more than i64::MAX elements",
        ),
        (
            "row not whole blocks",
            Raw::header(3, 1, 0).tensor("t", &[33], 8, 0).0,
            "33 elements per row is not a whole number of q8_0 blocks",
        ),
        (
            "removed type",
            Raw::header(3, 1, 0).tensor("t", &[32], 4, 0).0,
            "q4_2",
        ),
        (
            "unknown type",
            Raw::header(3, 1, 0).tensor("t", &[32], 99, 0).0,
            "unknown ggml type code 99",
        ),
    ];
    for (label, bytes, needle) in cases {
        reject_with(label, bytes, needle);
    }
}

#[test]
fn a_file_with_only_metadata_needs_no_padding() {
    // ggml seeks to the data section only when there are tensors.
    let bytes = Raw::header(3, 0, 1).kv_u32("a", 1).0;
    let file = GgufFile::from_bytes(bytes).unwrap();
    assert_eq!(file.metadata().get_u32("a").unwrap(), 1);
    assert!(!file.has_canonical_length());
}
