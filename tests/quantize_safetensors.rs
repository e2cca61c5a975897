//! `quantforge quantize` from safetensors: a model that went GGUF -> safetensors
//! quantizes to the very bytes its GGUF does; a safetensors file without a GGUF model's
//! metadata is refused with exit code 2, naming the input, leaving nothing behind.

mod model_cli;

use model_cli::{arg as s, names, quantforge, success as ok, tiny};

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
