//! The manifests `quantize` writes beside every output (`FILE.qf.json`) and `quantforge
//! verify`: the digests are those of the files' bytes (and of the source's tensors), a
//! split set made part by part on separate runs verifies, and a corrupted, truncated or
//! missing part is caught with exit code 2.

mod model_cli;

use model_cli::{arg as s, fails_naming, quantforge, success, tiny};
use quantforge::formats::gguf::GgufModel;
use quantforge::pipeline::run::digest::rows_digest;
use serde_json::Value;
use std::path::{Path, PathBuf};

fn manifest(file: &Path) -> Value {
    let mut name = file.as_os_str().to_owned();
    name.push(".qf.json");
    serde_json::from_str(&std::fs::read_to_string(PathBuf::from(name)).unwrap()).unwrap()
}

/// Flips one byte of `file` at `at`.
fn flip(file: &Path, at: usize) {
    let mut bytes = std::fs::read(file).unwrap();
    bytes[at] ^= 0x40;
    std::fs::write(file, bytes).unwrap();
}

#[test]
fn the_manifest_holds_the_digests_of_source_and_output_tensors() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("q.gguf");
    success(&quantforge(&[
        "quantize",
        "-q",
        s(&tiny()),
        s(&out),
        "Q4_K_M",
    ]));
    let m = manifest(&out);
    assert_eq!(m["preset"], "Q4_K_M");
    assert_eq!(m["file"], "q.gguf");
    assert_eq!(m["set"], serde_json::json!(["q.gguf"]));
    assert_eq!(m["size"], std::fs::metadata(&out).unwrap().len());
    let source = GgufModel::open(tiny()).unwrap();
    let output = GgufModel::open(&out).unwrap();
    let tensors = m["tensors"].as_array().unwrap();
    assert_eq!(tensors.len(), output.n_tensors());
    for t in tensors {
        let name = t["name"].as_str().unwrap();
        let digest_of = |model: &GgufModel, key: &str| {
            let v = model.tensors().find(|v| v.name() == name).unwrap();
            let row = v.ty().row_size(v.ne()[0] as usize).unwrap();
            let want = format!("{:016x}", rows_digest(v.data(), row, 0));
            assert_eq!(t[key], want.as_str(), "{name} {key}");
        };
        digest_of(&source, "source_digest");
        digest_of(&output, "digest");
    }
    assert!(success(&quantforge(&["verify", s(&out)])).starts_with("ok: 1 file(s), 39 tensors"));
}

#[test]
fn verify_catches_changed_bytes_anywhere() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("q.gguf");
    success(&quantforge(&[
        "quantize",
        "-q",
        s(&tiny()),
        s(&out),
        "Q8_0",
    ]));
    let original = std::fs::read(&out).unwrap();
    let m = manifest(&out);
    let header = m["header"]["bytes"].as_u64().unwrap() as usize;
    let last = &m["tensors"].as_array().unwrap().last().unwrap().clone();
    let last_at = (last["offset"].as_u64().unwrap() + last["size"].as_u64().unwrap()) as usize - 1;
    let name = last["name"].as_str().unwrap();
    flip(&out, last_at);
    fails_naming(&quantforge(&["verify", s(&out)]), &format!("tensor {name}"));
    std::fs::write(&out, &original).unwrap();
    flip(&out, header / 2);
    fails_naming(&quantforge(&["verify", s(&out)]), "header differs");
    std::fs::write(&out, &original[..original.len() - 1]).unwrap();
    fails_naming(
        &quantforge(&["verify", s(&out)]),
        "bytes, the manifest says",
    );
    std::fs::write(&out, &original).unwrap();
    success(&quantforge(&["verify", s(&out)]));
    std::fs::remove_file(dir.path().join("q.gguf.qf.json")).unwrap();
    fails_naming(&quantforge(&["verify", s(&out)]), "no manifest");
}

#[test]
fn a_set_made_part_by_part_verifies_and_a_lost_part_does_not() {
    let dir = tempfile::tempdir().unwrap();
    let prefix = dir.path().join("q.gguf");
    // Three separate runs, one part each, as a job array would make them.
    for k in ["3", "1", "2"] {
        success(&quantforge(&[
            "quantize",
            "-q",
            s(&tiny()),
            s(&prefix),
            "Q4_K_M",
            "--split-max-tensors",
            "13",
            "--only-part",
            k,
        ]));
    }
    let part = |k: u32| dir.path().join(format!("q-{k:05}-of-00003.gguf"));
    assert_eq!(manifest(&part(2))["part"], 2);
    for k in 1..=3 {
        let text = success(&quantforge(&["verify", s(&part(k))]));
        assert!(text.starts_with("ok: 3 file(s), 39 tensors"), "{text}");
    }
    flip(
        &part(2),
        std::fs::metadata(part(2)).unwrap().len() as usize - 100,
    );
    fails_naming(
        &quantforge(&["verify", s(&part(1))]),
        "q-00002-of-00003.gguf: 1 tensor(s) differ",
    );
    std::fs::remove_file(part(1)).unwrap();
    std::fs::remove_file(dir.path().join("q-00001-of-00003.gguf.qf.json")).unwrap();
    // Asked about the lost part itself, the other parts' manifests tell the set.
    fails_naming(
        &quantforge(&["verify", s(&part(1))]),
        "2 of 3 file(s) fail: q-00001-of-00003.gguf",
    );
}

#[test]
fn every_output_of_a_one_pass_run_and_of_a_copy_verifies() {
    let dir = tempfile::tempdir().unwrap();
    success(&quantforge(&[
        "quantize",
        "-q",
        s(&tiny()),
        "--types",
        "Q4_K_M,COPY,IQ4_XS",
        "--out-dir",
        s(dir.path()),
    ]));
    for preset in ["Q4_K_M", "COPY", "IQ4_XS"] {
        let file = dir.path().join(format!("tiny-llama-f16-{preset}.gguf"));
        success(&quantforge(&["verify", s(&file)]));
        // A copied tensor's output digest is its source digest.
        if preset == "COPY" {
            for t in manifest(&file)["tensors"].as_array().unwrap() {
                assert_eq!(t["digest"], t["source_digest"]);
            }
        }
    }
}
