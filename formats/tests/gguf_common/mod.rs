//! Helpers shared by the GGUF integration tests (and, by `#[path]`, the CLI tests): the
//! real-model cache, small valid files, raw bytes for broken ones, an allocation counter.
#![allow(dead_code)] // each test binary uses its own subset

pub mod counting_alloc;

use quantforge_formats::gguf::{Array, GgufBuilder, Value};
use quantforge_kernels::GgmlType;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// The repository root (this file is also compiled into the root crate's tests).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .find(|dir| dir.join("scripts/fetch-models").exists())
        .expect("the repository root holds scripts/fetch-models")
        .to_path_buf()
}

/// The real Gemma-3-270M Q4_K_M GGUF from the model cache, fetched by
/// `scripts/fetch-models` if missing. `None` (with a printed reason) only when
/// `QF_SKIP_REAL_MODELS=1`; a failed fetch fails the test.
pub fn gemma_gguf() -> Option<PathBuf> {
    real_model("gemma3-270m-q4_k_m.gguf")
}

/// sha256 of the real Gemma GGUF (`docs/testing.md`, "Real files").
pub const GEMMA_SHA256: &str = "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818";
/// Its size in bytes.
pub const GEMMA_SIZE: u64 = 253_113_024;

fn real_model(name: &str) -> Option<PathBuf> {
    if std::env::var("QF_SKIP_REAL_MODELS").as_deref() == Ok("1") {
        eprintln!("SKIPPED: real model {name} not used because QF_SKIP_REAL_MODELS=1");
        return None;
    }
    static CACHE: OnceLock<PathBuf> = OnceLock::new();
    let cache = CACHE.get_or_init(|| {
        let cache = std::env::var_os("QF_MODEL_CACHE")
            .map(PathBuf::from)
            .unwrap_or_else(|| repo_root().join(".cache/models"));
        if !cache.join("gemma3-270m-q4_k_m.gguf").exists()
            || !cache.join("all-minilm-l6-v2/model.safetensors").exists()
        {
            let status = std::process::Command::new(repo_root().join("scripts/fetch-models"))
                .env("QF_MODEL_CACHE", &cache)
                .status()
                .expect("cannot run scripts/fetch-models");
            assert!(status.success(), "scripts/fetch-models failed: {status}");
        }
        cache
    });
    let path = cache.join(name);
    assert!(
        path.exists(),
        "{} missing after fetch-models",
        path.display()
    );
    Some(path)
}

/// sha256 of a file, by the coreutils `sha256sum`.
pub fn sha256(path: &Path) -> String {
    let out = std::process::Command::new("sha256sum")
        .arg(path)
        .output()
        .expect("cannot run sha256sum");
    assert!(out.status.success());
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .next()
        .unwrap_or_default()
        .to_string()
}

/// A small valid GGUF: a few keys of several types and three tensors (f32, q8_0, f16).
pub fn small_gguf() -> Vec<u8> {
    let mut b = GgufBuilder::new();
    let m = b.metadata_mut();
    m.set("general.architecture", "llama").unwrap();
    m.set("general.name", "tiny").unwrap();
    m.set("llama.block_count", Value::U32(2)).unwrap();
    m.set("llama.rope.freq_base", Value::F32(10000.0)).unwrap();
    m.set(
        "tokenizer.ggml.tokens",
        Array::String(vec!["<s>", "</s>", "a"].into()),
    )
    .unwrap();
    m.set("tokenizer.ggml.add_bos_token", true).unwrap();
    let f32_data: Vec<u8> = (0..12u32).flat_map(|i| (i as f32).to_le_bytes()).collect();
    b.add_tensor("a.weight", GgmlType::F32, &[4, 3], f32_data)
        .unwrap();
    b.add_tensor("b.weight", GgmlType::Q8_0, &[32, 2], vec![7u8; 68])
        .unwrap();
    b.add_tensor("c.bias", GgmlType::F16, &[5], vec![1u8; 10])
        .unwrap();
    b.to_bytes().unwrap()
}

/// Raw little-endian GGUF bytes, item by item, with no checks: for building bad files.
#[derive(Default)]
pub struct Raw(pub Vec<u8>);

impl Raw {
    pub fn header(version: u32, n_tensors: u64, n_kv: u64) -> Raw {
        Raw::default()
            .bytes(b"GGUF")
            .u32(version)
            .u64(n_tensors)
            .u64(n_kv)
    }
    pub fn bytes(mut self, b: &[u8]) -> Raw {
        self.0.extend_from_slice(b);
        self
    }
    pub fn u32(self, v: u32) -> Raw {
        self.bytes(&v.to_le_bytes())
    }
    pub fn u64(self, v: u64) -> Raw {
        self.bytes(&v.to_le_bytes())
    }
    pub fn str(self, s: &str) -> Raw {
        self.u64(s.len() as u64).bytes(s.as_bytes())
    }
    /// A key whose value is an array header: element type `elem`, `count` elements (the
    /// elements themselves are up to the caller).
    pub fn array_kv(self, key: &str, elem: u32, count: u64) -> Raw {
        self.str(key).u32(9).u32(elem).u64(count)
    }
    /// A key whose value is `depth` arrays nested in one another, the innermost an empty
    /// `arr[u8]` (depth 1 is a plain empty array).
    pub fn nested_kv(self, key: &str, depth: usize) -> Raw {
        let mut r = self.str(key).u32(9);
        for _ in 1..depth {
            r = r.u32(9).u64(1);
        }
        r.u32(0).u64(0)
    }
    /// A key with a u32 value.
    pub fn kv_u32(self, key: &str, v: u32) -> Raw {
        self.str(key).u32(4).u32(v)
    }
    /// A tensor entry.
    pub fn tensor(self, name: &str, ne: &[u64], ty: u32, offset: u64) -> Raw {
        let mut r = self.str(name).u32(ne.len() as u32);
        for &d in ne {
            r = r.u64(d);
        }
        r.u32(ty).u64(offset)
    }
    /// Zero bytes up to a multiple of 32, then `n` data bytes.
    pub fn data(mut self, n: usize) -> Raw {
        self.0.resize(self.0.len().div_ceil(32) * 32 + n, 0);
        self
    }
}
