//! `quantforge inspect` and `quantforge convert` on safetensors, as a user runs them:
//! hostile files give exit code 2 with a one-line reason naming the file (and tensor),
//! under a 256 MiB address-space limit (so no allocation the file cannot justify), and
//! leave no output; the real MiniLM model goes to GGUF and back with the same sha256.

mod st_common;

use quantforge_formats::safetensors::{Dtype, Order, TensorView, serialize, write_sharded};
use st_common::{minilm, sha256};
use std::path::Path;
use std::process::{Command, Output};

/// Runs quantforge with its address space capped at 256 MiB (`ulimit -v`).
fn quantforge_capped(args: &[&str]) -> Output {
    let mut script = String::from("ulimit -v 262144 && exec \"$0\"");
    for i in 1..=args.len() {
        script.push_str(&format!(" \"${i}\""));
    }
    Command::new("sh")
        .arg("-c")
        .arg(script)
        .arg(env!("CARGO_BIN_EXE_quantforge"))
        .args(args)
        .output()
        .expect("run quantforge")
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn file(header: &str, data_len: usize) -> Vec<u8> {
    let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
    bytes.extend_from_slice(header.as_bytes());
    bytes.resize(bytes.len() + data_len, 0);
    bytes
}

/// (file name, contents, text stderr must contain).
fn hostile() -> Vec<(&'static str, Vec<u8>, &'static str)> {
    let mut len_2p63 = (1u64 << 63).to_le_bytes().to_vec();
    len_2p63.extend_from_slice(b"{}");
    let mut bad_utf8 = file("{\"\u{e9}\":1}", 0);
    for b in &mut bad_utf8 {
        if *b == 0xa9 {
            *b = 0xff;
        }
    }
    let u8s = |name: &str, offsets: &str| {
        format!(r#""{name}":{{"dtype":"U8","shape":[4],"data_offsets":{offsets}}}"#)
    };
    vec![
        (
            "len-2p63.safetensors",
            len_2p63,
            "header length 9223372036854775808 exceeds the limit",
        ),
        // Same, but named .bin: recognised by its first bytes.
        (
            "len-2p63.bin",
            {
                let mut b = (1u64 << 63).to_le_bytes().to_vec();
                b.extend_from_slice(b"{}");
                b
            },
            "exceeds the limit",
        ),
        (
            "overlap.safetensors",
            file(
                &format!("{{{},{}}}", u8s("a", "[0,4]"), u8s("b", "[2,6]")),
                6,
            ),
            "tensor `b`: data_offsets [2, 6] overlap",
        ),
        (
            "gap.safetensors",
            file(
                &format!("{{{},{}}}", u8s("a", "[0,4]"), u8s("b", "[6,10]")),
                10,
            ),
            "tensor `b`: data_offsets [6, 10] leave a gap",
        ),
        (
            "overflow.safetensors",
            file(
                r#"{"w":{"dtype":"F32","shape":[65536,65536,65536,65536],"data_offsets":[0,0]}}"#,
                0,
            ),
            "tensor `w`: F32 shape [65536, 65536, 65536, 65536] overflows",
        ),
        (
            "trailing.safetensors",
            file(&format!("{{{}}}", u8s("a", "[0,4]")), 9),
            "5 trailing bytes",
        ),
        ("utf8.safetensors", bad_utf8, "header is not valid UTF-8"),
        (
            "dup.safetensors",
            file(
                &format!("{{{},{}}}", u8s("w", "[0,4]"), u8s("w", "[0,4]")),
                4,
            ),
            "tensor `w` is declared twice",
        ),
        (
            "dupmeta.safetensors",
            file(r#"{"__metadata__":{"k":"a","k":"b"}}"#, 0),
            "__metadata__ key `k` appears twice",
        ),
        (
            "truncated.safetensors",
            file(&format!("{{{}}}", u8s("w", "[0,4]")), 1),
            "tensor `w` is truncated",
        ),
        (
            "huge-data.safetensors",
            file(
                r#"{"w":{"dtype":"U8","shape":[576460752303423488],"data_offsets":[0,576460752303423488]}}"#,
                64,
            ),
            "tensor `w` is truncated",
        ),
        ("empty.safetensors", Vec::new(), "too short"),
    ]
}

fn assert_user_error(out: &Output, needles: &[&str]) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "stderr: {stderr}");
    assert_eq!(stderr.trim_end().lines().count(), 1, "one line: {stderr}");
    for needle in needles {
        assert!(stderr.contains(needle), "{needle:?} not in: {stderr}");
    }
    assert!(
        out.stdout.is_empty(),
        "stdout: {}",
        String::from_utf8_lossy(&out.stdout)
    );
}

#[test]
fn hostile_files_exit_2_with_the_reason_in_bounded_memory() {
    let dir = tempfile::tempdir().unwrap();
    for (name, bytes, reason) in hostile() {
        let path = dir.path().join(name);
        std::fs::write(&path, &bytes).unwrap();
        assert_user_error(&quantforge_capped(&["inspect", s(&path)]), &[name, reason]);
        let out = dir.path().join("out.gguf");
        assert_user_error(
            &quantforge_capped(&["convert", s(&path), s(&out)]),
            &[name, reason],
        );
        assert!(!out.exists(), "{name}: output left behind");
    }
    let leftovers: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.starts_with('.'))
        .collect();
    assert!(leftovers.is_empty(), "temporary files left: {leftovers:?}");
}

#[test]
fn a_200_mb_header_is_refused_in_bounded_memory() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("big-header.safetensors");
    let n: u64 = 200_000_000;
    let f = std::fs::File::create(&path).unwrap();
    f.set_len(8 + n).unwrap(); // sparse: 200 MB of header that is never read
    std::os::unix::fs::FileExt::write_all_at(&f, &n.to_le_bytes(), 0).unwrap();
    std::os::unix::fs::FileExt::write_all_at(&f, b"{}", 8).unwrap();
    let reason = "header length 200000000 exceeds the limit of 100000000 bytes";
    assert_user_error(&quantforge_capped(&["inspect", s(&path)]), &[reason]);
    let out = dir.path().join("o.gguf");
    assert_user_error(
        &quantforge_capped(&["convert", s(&path), s(&out)]),
        &[reason],
    );
}

#[test]
fn folders_are_inspected_and_converted_as_one_model() {
    let dir = tempfile::tempdir().unwrap();
    let a: Vec<u8> = (0..64).collect();
    let b: Vec<u8> = (0..48).collect();
    let tensors = [
        TensorView::new("a.weight", Dtype::F32, vec![4, 4], &a).unwrap(),
        TensorView::new("b.weight", Dtype::BF16, vec![24], &b).unwrap(),
    ];
    let folder = dir.path().join("model");
    std::fs::create_dir(&folder).unwrap();
    write_sharded(
        &folder,
        "model",
        tensors.clone(),
        Some(&[("format".into(), "pt".into())]),
        64,
    )
    .unwrap();
    std::fs::write(folder.join("config.json"), br#"{"model_type": "llama"}"#).unwrap();

    let out = quantforge_capped(&["inspect", s(&folder)]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("index: 2 tensors in 2 shards, total_size 112"),
        "{text}"
    );
    assert!(text.contains("model_type  \"llama\""), "{text}");
    assert!(text.contains("model-00002-of-00002.safetensors"), "{text}");

    let out = quantforge_capped(&[
        "inspect",
        "--json",
        s(&folder.join("model.safetensors.index.json")),
    ]);
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["format"], "safetensors");
    assert_eq!(json["tensors"].as_array().unwrap().len(), 2);
    assert_eq!(json["config"]["model_type"], "llama");

    // Folder -> GGUF -> one safetensors file: the canonical file of all the tensors,
    // which is also what converting the folder straight to safetensors gives.
    let gguf = dir.path().join("m.gguf");
    let merged = dir.path().join("m.safetensors");
    let canonical = dir.path().join("c.safetensors");
    let expected = serialize(
        tensors,
        Some(&[("format".into(), "pt".into())]),
        Order::Canonical,
    )
    .unwrap();
    assert_eq!(
        quantforge_capped(&["convert", s(&folder), s(&gguf)])
            .status
            .code(),
        Some(0)
    );
    assert_eq!(
        quantforge_capped(&["convert", s(&gguf), s(&merged)])
            .status
            .code(),
        Some(0)
    );
    assert_eq!(std::fs::read(&merged).unwrap(), expected);
    assert_eq!(
        quantforge_capped(&["convert", s(&folder), s(&canonical)])
            .status
            .code(),
        Some(0)
    );
    assert_eq!(std::fs::read(&canonical).unwrap(), expected);

    let out = quantforge_capped(&["convert", "--split-max-tensors", "1", s(&gguf), s(&merged)]);
    assert_user_error(&out, &["apply to GGUF-to-GGUF conversion"]);
}

#[test]
fn minilm_convert_to_gguf_and_back_gives_the_same_sha256() {
    let Some(model) = minilm() else { return };
    let dir = tempfile::tempdir().unwrap();
    let gguf = dir.path().join("out.gguf");
    let back = dir.path().join("back.safetensors");
    let run = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_quantforge"))
            .args(args)
            .output()
            .unwrap();
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    assert!(run(&["convert", s(&model), s(&gguf)]).contains("104 tensors"));
    let inspected = run(&["inspect", s(&gguf)]);
    assert!(inspected.contains("safetensors.header"), "{inspected}");
    run(&["convert", s(&gguf), s(&back)]);
    assert_eq!(sha256(&back), sha256(&model));
}
