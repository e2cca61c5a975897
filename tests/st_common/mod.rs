//! Helpers shared by the root crate's safetensors tests: the real-model cache of
//! `docs/testing.md` and file digests.
#![allow(dead_code)] // each test binary uses its own subset

use std::path::{Path, PathBuf};
use std::process::Command;

/// A file from the real-model cache (`$QF_MODEL_CACHE`, default `<repo>/.cache/models`),
/// fetched by `scripts/fetch-models` if missing. `None`, with a printed reason, only when
/// `QF_SKIP_REAL_MODELS=1`; a failed fetch fails the test.
pub fn real_model(rel: &str) -> Option<PathBuf> {
    if std::env::var("QF_SKIP_REAL_MODELS").as_deref() == Ok("1") {
        eprintln!("SKIPPED: real model {rel} not used because QF_SKIP_REAL_MODELS=1");
        return None;
    }
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let cache = std::env::var_os("QF_MODEL_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join(".cache/models"));
    let path = cache.join(rel);
    if !path.exists() {
        let status = Command::new(root.join("scripts/fetch-models"))
            .env("QF_MODEL_CACHE", &cache)
            .status()
            .expect("cannot run scripts/fetch-models");
        assert!(status.success(), "scripts/fetch-models failed: {status}");
    }
    assert!(
        path.exists(),
        "{} missing after fetch-models",
        path.display()
    );
    Some(path)
}

/// The real all-MiniLM-L6-v2 `model.safetensors`.
pub fn minilm() -> Option<PathBuf> {
    real_model("all-minilm-l6-v2/model.safetensors")
}

/// sha256 of a file, by the coreutils `sha256sum`.
pub fn sha256(path: &Path) -> String {
    let out = Command::new("sha256sum")
        .arg(path)
        .output()
        .expect("cannot run sha256sum");
    assert!(out.status.success());
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .next()
        .unwrap_or_default()
        .to_owned()
}
