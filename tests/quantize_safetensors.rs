//! `quantforge quantize` from safetensors: a model that went GGUF -> safetensors
//! quantizes to the very bytes its GGUF does; a safetensors file without a GGUF model's
//! metadata is refused with exit code 2, naming the input, leaving nothing behind.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn quantforge(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_quantforge"))
        .args(args)
        .output()
        .expect("run quantforge")
}

fn ok(out: &Output) {
    assert!(
        out.status.success(),
        "exit {:?}: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn tiny() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("golden/tiny-llama-f16.gguf")
}

fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

#[test]
fn a_gguf_model_through_safetensors_quantizes_to_the_same_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let st = dir.path().join("tiny.safetensors");
    ok(&quantforge(&["convert", s(&tiny()), s(&st)]));
    for preset in ["Q4_K_M", "Q8_0"] {
        let from_st = dir.path().join(format!("st-{preset}.gguf"));
        let from_gguf = dir.path().join(format!("gguf-{preset}.gguf"));
        ok(&quantforge(&[
            "quantize",
            s(&st),
            s(&from_st),
            preset,
            "--quiet",
        ]));
        ok(&quantforge(&[
            "quantize",
            s(&tiny()),
            s(&from_gguf),
            preset,
            "--quiet",
        ]));
        assert!(
            std::fs::read(&from_st).unwrap() == std::fs::read(&from_gguf).unwrap(),
            "{preset}: the outputs differ"
        );
    }
    // The staging copy is gone.
    assert_eq!(
        names(dir.path()),
        [
            "gguf-Q4_K_M.gguf",
            "gguf-Q8_0.gguf",
            "st-Q4_K_M.gguf",
            "st-Q8_0.gguf",
            "tiny.safetensors"
        ]
    );
}

#[test]
fn safetensors_without_a_gguf_model_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let st = dir.path().join("plain.safetensors");
    let header = br#"{"w":{"dtype":"F32","shape":[2,32],"data_offsets":[0,256]}}"#;
    let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
    bytes.extend_from_slice(header);
    bytes.extend(std::iter::repeat_n(0u8, 256));
    std::fs::write(&st, bytes).unwrap();
    let out = quantforge(&["quantize", s(&st), s(&dir.path().join("q.gguf")), "Q8_0"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("general.architecture"), "{stderr}");
    assert!(stderr.contains(s(&st)), "{stderr}");
    assert_eq!(names(dir.path()), ["plain.safetensors"]);
}
