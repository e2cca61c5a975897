//! The real Gemma-3-270M Q4_K_M GGUF written by llama.cpp (`docs/testing.md`): parsed,
//! listed, re-emitted byte-identically, split and merged back byte-identically.

mod gguf_common;

use gguf_common::{GEMMA_SHA256, GEMMA_SIZE, gemma_gguf, sha256};
use quantforge_formats::gguf::{
    Array, GgufFile, GgufModel, KEY_SPLIT_COUNT, KEY_SPLIT_NO, KEY_SPLIT_TENSORS_COUNT,
    SplitLimits, Value, ValueType, split_path,
};
use quantforge_kernels::GgmlType;
use std::collections::BTreeMap;
use std::time::Instant;

#[test]
fn gemma_is_parsed_with_its_keys_and_tensors() {
    let Some(path) = gemma_gguf() else { return };
    let file = GgufFile::open(&path).unwrap();
    assert_eq!(file.file_size(), GEMMA_SIZE);
    assert_eq!(file.header().version(), 3);
    assert!(file.has_canonical_length());

    // 33 key-value pairs in the header; gguf-py's GGUFReader lists 36 "fields" because
    // it adds GGUF.version, GGUF.tensor_count and GGUF.kv_count.
    let meta = file.metadata();
    assert_eq!(meta.len(), 33);
    assert_eq!(meta.keys().next(), Some("general.architecture"));
    assert_eq!(meta.get_str("general.architecture").unwrap(), "gemma3");
    assert_eq!(meta.get_u32("gemma3.block_count").unwrap(), 18);
    assert_eq!(meta.get_u32("gemma3.embedding_length").unwrap(), 640);
    assert_eq!(meta.get_u32("general.file_type").unwrap(), 15); // MOSTLY_Q4_K_M
    assert!(meta.get_bool("tokenizer.ggml.add_bos_token").unwrap());
    assert_eq!(
        meta.get("gemma3.rope.freq_base").unwrap().value_type(),
        ValueType::F32
    );
    let Array::String(tokens) = meta.get_array("tokenizer.ggml.tokens").unwrap() else {
        panic!("tokens are not strings")
    };
    assert_eq!(tokens.len(), 262_144);
    let Array::F32(scores) = meta.get_array("tokenizer.ggml.scores").unwrap() else {
        panic!("scores are not f32")
    };
    assert_eq!(scores.len(), 262_144);
    assert!(matches!(
        meta.get_array("tokenizer.ggml.token_type").unwrap(),
        Array::I32(v) if v.len() == 262_144
    ));
    assert!(meta.get_u32("general.architecture").is_err());

    assert_eq!(file.tensors().len(), 236);
    let mut by_type = BTreeMap::new();
    for t in file.tensors() {
        *by_type.entry(t.ty()).or_insert(0) += 1;
    }
    assert_eq!(
        by_type,
        BTreeMap::from([
            (GgmlType::F32, 109),
            (GgmlType::Q5_0, 81),
            (GgmlType::Q4_K, 27),
            (GgmlType::Q8_0, 10),
            (GgmlType::Q6_K, 9),
        ])
    );
    let first = file.tensor_at(0).unwrap();
    assert_eq!(first.name(), "output_norm.weight");
    assert_eq!(first.ne(), &[640]);
    assert_eq!(first.offset(), 6_525_120);
    let last = file.tensor_at(235).unwrap();
    assert_eq!(last.offset() + last.data().len() as u64, GEMMA_SIZE);
    let embd = file.tensor("token_embd.weight").unwrap();
    assert_eq!(embd.shape(), vec![262_144, 640]);
    assert_eq!(embd.ne(), &[640, 262_144]);
}

#[test]
fn gemma_reemit_is_byte_identical() {
    let Some(path) = gemma_gguf() else { return };
    assert_eq!(
        sha256(&path),
        GEMMA_SHA256,
        "cached input is not the Gemma GGUF"
    );
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("gemma.gguf");
    let model = GgufModel::open(&path).unwrap();
    assert!(!model.is_split());
    let start = Instant::now();
    model.write_merged(&out).unwrap();
    eprintln!("re-emit of {GEMMA_SIZE} bytes: {:?}", start.elapsed());
    assert_eq!(sha256(&out), GEMMA_SHA256);

    // The header alone re-encodes to the same bytes.
    let file = GgufFile::open(&path).unwrap();
    let (bytes, layout) = file.header().encode().unwrap();
    assert_eq!(layout, *file.layout());
    assert_eq!(&bytes[..], &file.bytes()[..layout.data_offset as usize]);
}

#[test]
fn gemma_split_then_merge_is_byte_identical() {
    let Some(path) = gemma_gguf() else { return };
    let dir = tempfile::tempdir().unwrap();
    let model = GgufModel::open(&path).unwrap();
    for (label, limits, parts) in [
        (
            "size",
            SplitLimits {
                max_bytes: Some(100_000_000),
                ..Default::default()
            },
            3,
        ),
        (
            "tensors",
            SplitLimits {
                max_tensors: Some(100),
                ..Default::default()
            },
            3,
        ),
    ] {
        let prefix = dir.path().join(format!("gemma-{label}"));
        let paths = model.write_split(&prefix, limits).unwrap();
        assert_eq!(paths.len(), parts, "{label}");
        assert_eq!(paths[0], split_path(&prefix, 0, parts as u16));
        for (i, p) in paths.iter().enumerate() {
            let part = GgufFile::open(p).unwrap();
            let meta = part.metadata();
            assert_eq!(meta.get(KEY_SPLIT_NO), Some(&Value::U16(i as u16)));
            assert_eq!(meta.get(KEY_SPLIT_COUNT), Some(&Value::U16(parts as u16)));
            assert_eq!(meta.get(KEY_SPLIT_TENSORS_COUNT), Some(&Value::I32(236)));
            if i > 0 {
                assert_eq!(
                    meta.len(),
                    3,
                    "{label}: only the first part has the metadata"
                );
            }
            if limits.max_tensors.is_some() {
                assert!(part.tensors().len() <= 100);
            }
        }
        let set = GgufModel::open(&paths[0]).unwrap();
        assert!(set.is_split());
        assert_eq!(set.n_tensors(), 236);
        assert_eq!(set.tensor("output_norm.weight").unwrap().part(), 0);
        assert_eq!(
            set.tensor("blk.17.post_ffw_norm.weight").unwrap().part(),
            parts - 1
        );
        // Opening a later part is refused with a reason.
        let err = GgufModel::open(&paths[1]).unwrap_err().to_string();
        assert!(err.contains("open the first part"), "{err}");

        let merged = dir.path().join(format!("merged-{label}.gguf"));
        set.write_merged(&merged).unwrap();
        assert_eq!(sha256(&merged), GEMMA_SHA256, "{label}");
        std::fs::remove_file(&merged).unwrap();
        for p in paths {
            std::fs::remove_file(p).unwrap();
        }
    }
}
