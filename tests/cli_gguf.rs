//! `quantforge inspect`, `convert` and `set-meta` as a user runs them: outputs, exact
//! bytes, exit code 2 with a one-line reason on bad input, hostile files rejected within a
//! second under a 100 MiB address-space limit, and no partial output files.

#[path = "../formats/tests/gguf_common/mod.rs"]
mod gguf_common;

use gguf_common::{GEMMA_SHA256, Raw, gemma_gguf, repo_root, sha256, small_gguf};
use quantforge::formats::gguf::{Array, GgufBuilder, GgufFile, Value, split_path};
use quantforge::kernels::GgmlType;
use serde_json::Value as Json;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

fn quantforge(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_quantforge"))
        .args(args)
        .output()
        .expect("run quantforge")
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn golden() -> PathBuf {
    repo_root().join("golden/gguf/small.gguf")
}

fn stdout(out: &Output) -> String {
    assert!(
        out.status.success(),
        "exit {:?}: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout.clone()).unwrap()
}

fn assert_user_error(out: &Output, needle: &str) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "stderr: {stderr}");
    assert_eq!(stderr.lines().count(), 1, "not one line: {stderr}");
    assert!(stderr.contains(needle), "'{needle}' not in: {stderr}");
}

fn files_in(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

#[test]
fn inspect_lists_types_values_and_tensors() {
    let text = stdout(&quantforge(&["inspect", s(&golden())]));
    for line in [
        "GGUF v3, 1728 bytes, alignment 64, data at offset 1216, 23 keys, 5 tensors",
        "test.u16              u16         60000",
        "test.str              str         \"héllo, wörld ✓\"",
        "test.arr_str          arr[str]    [\"a\", \"\", \"ç\"] (len 3)",
        "test.nested           arr[arr]    [[1, 2], [\"x\"], [[true], [false, true]], [0.25]] (len 4)",
        "q8_0.weight  q8_0      [32, 2]",
    ] {
        assert!(text.contains(line), "missing {line:?} in:\n{text}");
    }

    let json: Json =
        serde_json::from_str(&stdout(&quantforge(&["inspect", "--json", s(&golden())]))).unwrap();
    assert_eq!(json["format"], "gguf");
    assert_eq!(json["parts"][0]["alignment"], 64);
    let meta = json["metadata"].as_array().unwrap();
    assert_eq!(meta.len(), 23);
    assert_eq!(
        meta[2],
        serde_json::json!({"key": "test.u8", "type": "u8", "value": 200})
    );
    assert_eq!(
        meta[11]["value"],
        serde_json::json!(18_000_000_000_000_000_000u64)
    );
    let tensors = json["tensors"].as_array().unwrap();
    assert_eq!(tensors[2]["ne"], serde_json::json!([8, 1]));
    assert_eq!(tensors[2]["shape"], serde_json::json!([1, 8]));
    assert_eq!(tensors[4]["type"], "q4_K");
}

#[test]
fn long_arrays_are_abbreviated_unless_full() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("long.gguf");
    let mut b = GgufBuilder::new();
    b.metadata_mut()
        .set("long", Array::U32((0..100).collect()))
        .unwrap();
    b.metadata_mut()
        .set("nan", Array::F32(vec![f32::NAN, f32::INFINITY]))
        .unwrap();
    b.write(&path).unwrap();
    let short = stdout(&quantforge(&["inspect", s(&path)]));
    assert!(
        short.contains("[0, 1, 2, 3, 4, 5, 6, 7, ... 92 more] (len 100)"),
        "{short}"
    );
    let full = stdout(&quantforge(&["inspect", "--full", s(&path)]));
    assert!(full.contains("98, 99] (len 100)"), "{full}");
    let json: Json =
        serde_json::from_str(&stdout(&quantforge(&["inspect", "--json", s(&path)]))).unwrap();
    assert_eq!(json["metadata"][0]["len"], 100);
    assert_eq!(json["metadata"][0]["truncated"], true);
    assert_eq!(json["metadata"][0]["value"].as_array().unwrap().len(), 8);
    assert_eq!(
        json["metadata"][1]["value"],
        serde_json::json!(["NaN", "inf"])
    );
    let json: Json = serde_json::from_str(&stdout(&quantforge(&[
        "inspect",
        "--json",
        "--full",
        s(&path),
    ])))
    .unwrap();
    assert_eq!(json["metadata"][0]["value"].as_array().unwrap().len(), 100);
}

#[test]
fn convert_reemits_gguf_py_output_byte_identically() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("copy.gguf");
    let printed = stdout(&quantforge(&["convert", s(&golden()), s(&out)]));
    assert!(printed.contains("5 tensors, 1728 bytes"), "{printed}");
    assert_eq!(
        std::fs::read(&out).unwrap(),
        std::fs::read(golden()).unwrap()
    );
    assert_eq!(files_in(dir.path()), ["copy.gguf"]);
}

#[test]
fn convert_splits_and_merges_small_files() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.gguf");
    std::fs::write(&input, small_gguf()).unwrap();
    let out = dir.path().join("parts.gguf");
    stdout(&quantforge(&[
        "convert",
        "--split-max-tensors",
        "1",
        s(&input),
        s(&out),
    ]));
    let prefix = dir.path().join("parts");
    let first = split_path(&prefix, 0, 3);
    assert_eq!(
        files_in(dir.path()),
        [
            "in.gguf",
            "parts-00001-of-00003.gguf",
            "parts-00002-of-00003.gguf",
            "parts-00003-of-00003.gguf"
        ]
    );
    let text = stdout(&quantforge(&["inspect", s(&first)]));
    assert!(text.contains("tensors (3,"), "{text}");
    let merged = dir.path().join("merged.gguf");
    stdout(&quantforge(&["convert", s(&first), s(&merged)]));
    assert_eq!(std::fs::read(&merged).unwrap(), small_gguf());

    // A later part is not a model on its own.
    let second = split_path(&prefix, 1, 3);
    let out = quantforge(&["convert", s(&second), s(&dir.path().join("x.gguf"))]);
    assert_user_error(&out, "open the first part");
    // A missing part is named.
    std::fs::remove_file(split_path(&prefix, 2, 3)).unwrap();
    let out = quantforge(&["convert", s(&first), s(&dir.path().join("x.gguf"))]);
    assert_user_error(&out, "parts-00003-of-00003.gguf: cannot open");
    assert!(!dir.path().join("x.gguf").exists());

    for bad in ["0", "1.5G", "2X", ""] {
        let out = quantforge(&[
            "convert",
            "--split-max-size",
            bad,
            s(&input),
            s(&out_path(&dir)),
        ]);
        assert_eq!(out.status.code(), Some(2), "--split-max-size {bad:?}");
    }
}

fn out_path(dir: &tempfile::TempDir) -> PathBuf {
    dir.path().join("unused.gguf")
}

#[test]
fn set_meta_changes_values_in_place_and_keeps_tensors() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("meta.gguf");
    stdout(&quantforge(&[
        "set-meta",
        s(&golden()),
        s(&out),
        "test.u16=u32:7",
        "general.name=str:a:b=c",
        "new.key=arr[arr[u8]]:[[1],[2,3]]",
        "test.f32=f32:nan",
        "--delete",
        "test.i8",
    ]));
    let before = GgufFile::open(golden()).unwrap();
    let after = GgufFile::open(&out).unwrap();
    let meta = after.metadata();
    assert_eq!(meta.get("test.u16"), Some(&Value::U32(7)));
    assert_eq!(meta.get_str("general.name").unwrap(), "a:b=c");
    assert!(meta.get("test.f32").unwrap().as_f32().unwrap().is_nan());
    assert!(!meta.contains_key("test.i8"));
    assert_eq!(
        meta.get("new.key"),
        Some(&Value::Array(Array::Array(vec![
            Array::U8(vec![1]),
            Array::U8(vec![2, 3])
        ])))
    );
    let keys: Vec<&str> = meta.keys().collect();
    let mut expected: Vec<&str> = before
        .metadata()
        .keys()
        .filter(|k| *k != "test.i8")
        .collect();
    expected.push("new.key");
    assert_eq!(
        keys, expected,
        "existing keys keep their place, new ones go last"
    );
    for (a, b) in before.tensor_views().zip(after.tensor_views()) {
        assert_eq!((a.name(), a.data()), (b.name(), b.data()));
    }

    // Changing the alignment re-lays the data out.
    let realigned = dir.path().join("realigned.gguf");
    stdout(&quantforge(&[
        "set-meta",
        s(&golden()),
        s(&realigned),
        "general.alignment=u32:256",
    ]));
    let file = GgufFile::open(&realigned).unwrap();
    assert!(file.tensor_views().all(|v| v.offset() % 256 == 0));

    for (args, needle) in [
        (vec!["test.u8=u8:256"], "'256' is not a valid u8"),
        (vec!["general.alignment=u32:3"], "not a power of two"),
        (vec!["general.alignment=u64:32"], "must be u32"),
        (vec!["nokey"], "expected KEY=TYPE:VALUE"),
        (vec!["split.no=u16:1"], "split.* keys"),
        (vec!["--delete", "absent"], "--delete absent: no such key"),
        (vec![], "nothing to do"),
    ] {
        let bad = dir.path().join("bad.gguf");
        let input = golden();
        let mut all = vec!["set-meta", s(&input), s(&bad)];
        all.extend(args);
        assert_user_error(&quantforge(&all), needle);
        assert!(!bad.exists());
    }
}

/// Runs `quantforge ARGS` under a 100 MiB address-space limit; expects exit code 2 with
/// one line on stderr within a second. glibc gives each new thread (the interrupt
/// handler's) an arena of its own, reserving 64 to 128 MiB of address space at the
/// thread's first allocation, whenever that comes: one arena keeps that reservation, which
/// no input asks for, out of the limit.
fn rejected_quickly_in_100_mib(label: &str, args: &[&str]) -> String {
    let start = Instant::now();
    let out = Command::new("prlimit")
        .env("MALLOC_ARENA_MAX", "1")
        .arg(format!("--as={}", 100 << 20))
        .arg(env!("CARGO_BIN_EXE_quantforge"))
        .args(args)
        .output()
        .expect("run prlimit (util-linux)");
    let elapsed = start.elapsed();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(2), "{label}: {stderr}");
    assert_eq!(stderr.lines().count(), 1, "{label}: {stderr}");
    assert!(
        !stderr.contains("panicked") && !stderr.contains("memory allocation"),
        "{label}: {stderr}"
    );
    assert!(
        elapsed < Duration::from_secs(1),
        "{label}: took {elapsed:?}"
    );
    stderr
}

#[test]
fn hostile_files_exit_2_within_a_second_and_100_mib() {
    let dir = tempfile::tempdir().unwrap();
    let filler = [0u8; 64];
    let deep = Raw::header(3, 0, 1).nested_kv("deep", 1_000_000);
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("empty", vec![], "0 bytes, starts with"),
        ("not gguf", b"PK\x03\x04 zip".to_vec(), "bytes, starts with"),
        (
            "2^60 tensors",
            Raw::header(3, 1 << 60, 0).bytes(&filler).0,
            "tensor count is 1152921504606846976",
        ),
        (
            "2^60 keys",
            Raw::header(3, 0, 1 << 60).bytes(&filler).0,
            "key-value count is 1152921504606846976",
        ),
        (
            "2^60 array elements",
            Raw::header(3, 0, 1)
                .array_kv("k", 8, 1 << 60)
                .bytes(&filler)
                .0,
            "length of arr[str] in key 'k' is 1152921504606846976",
        ),
        (
            "4 GiB string",
            Raw::header(3, 0, 1)
                .str("k")
                .u32(8)
                .u64(1 << 32)
                .bytes(&filler)
                .0,
            "needs 4294967296 bytes",
        ),
        (
            "4 GiB key",
            Raw::header(3, 0, 1).u64(1 << 32).bytes(&filler).0,
            "needs 4294967296 bytes",
        ),
        ("1e6-deep arrays", deep.0, "nested deeper than 32 levels"),
        (
            "offset past the end",
            Raw::header(3, 1, 0)
                .tensor("t", &[8], 0, 1 << 40)
                .data(32)
                .0,
            "data offset 1099511627776 differs from 0",
        ),
        (
            "tensor past the end",
            Raw::header(3, 1, 0)
                .tensor("t", &[1 << 30], 0, 0)
                .data(32)
                .0,
            "tensor 't' is truncated",
        ),
        (
            "alignment 3",
            Raw::header(3, 0, 1).kv_u32("general.alignment", 3).0,
            "not a power of two",
        ),
        (
            "alignment 2^31",
            Raw::header(3, 0, 1).kv_u32("general.alignment", 1 << 31).0,
            "above the limit",
        ),
        (
            "alignment as string",
            Raw::header(3, 0, 1)
                .str("general.alignment")
                .u32(8)
                .str("32")
                .0,
            "must be u32, is str",
        ),
    ];
    for (label, bytes, needle) in cases {
        let path = dir.path().join("hostile.gguf");
        std::fs::write(&path, &bytes).unwrap();
        let out = dir.path().join("out.gguf");
        for args in [
            vec!["inspect", s(&path)],
            vec!["inspect", "--json", s(&path)],
            vec!["convert", s(&path), s(&out)],
            vec!["set-meta", s(&path), s(&out), "a=u8:1"],
        ] {
            let stderr = rejected_quickly_in_100_mib(label, &args);
            assert!(stderr.contains(needle), "{label}: {stderr}");
        }
        assert!(!out.exists(), "{label}: output left behind");
    }

    // Truncated at every header boundary (every 7th byte of the header, and inside each
    // tensor's data), through the CLI.
    let full = std::fs::read(golden()).unwrap();
    let file = GgufFile::from_bytes(full.clone()).unwrap();
    let mut cuts: Vec<usize> = (0..file.layout().data_offset as usize).step_by(7).collect();
    cuts.extend(file.tensor_views().map(|v| v.offset() as usize + 1));
    for cut in cuts {
        let path = dir.path().join("cut.gguf");
        std::fs::write(&path, &full[..cut]).unwrap();
        rejected_quickly_in_100_mib(&format!("cut at {cut}"), &["inspect", s(&path)]);
    }
    assert_eq!(files_in(dir.path()), ["cut.gguf", "hostile.gguf"]);
}

#[test]
fn gemma_convert_split_merge_via_cli_is_byte_identical() {
    let Some(gemma) = gemma_gguf() else { return };
    let dir = tempfile::tempdir().unwrap();
    let copy = dir.path().join("copy.gguf");
    stdout(&quantforge(&["convert", s(&gemma), s(&copy)]));
    assert_eq!(sha256(&copy), GEMMA_SHA256);
    std::fs::remove_file(&copy).unwrap();

    let printed = stdout(&quantforge(&[
        "convert",
        "--split-max-size",
        "100M",
        s(&gemma),
        s(&dir.path().join("gemma.gguf")),
    ]));
    assert_eq!(printed.lines().count(), 3, "{printed}");
    let first = dir.path().join("gemma-00001-of-00003.gguf");
    let text = stdout(&quantforge(&["inspect", s(&first)]));
    assert!(
        text.contains("tensors (236, 246587904 bytes of data)"),
        "{text}"
    );
    assert!(
        text.contains("metadata (36 keys)"),
        "33 + 3 split keys: {text}"
    );
    let merged = dir.path().join("merged.gguf");
    stdout(&quantforge(&["convert", s(&first), s(&merged)]));
    assert_eq!(sha256(&merged), GEMMA_SHA256);

    let json: Json =
        serde_json::from_str(&stdout(&quantforge(&["inspect", "--json", s(&gemma)]))).unwrap();
    assert_eq!(json["metadata"].as_array().unwrap().len(), 33);
    assert_eq!(json["tensors"].as_array().unwrap().len(), 236);
}

#[test]
fn writing_over_the_input_is_atomic_and_correct() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.gguf");
    let mut b = GgufBuilder::new();
    b.metadata_mut().set("a", Value::U8(1)).unwrap();
    b.add_tensor("t", GgmlType::F32, &[4], vec![3u8; 16])
        .unwrap();
    b.write(&path).unwrap();
    stdout(&quantforge(&["set-meta", s(&path), s(&path), "a=u8:2"]));
    let file = GgufFile::open(&path).unwrap();
    assert_eq!(file.metadata().get("a"), Some(&Value::U8(2)));
    assert_eq!(file.tensor("t").unwrap().data(), &[3u8; 16]);
    assert_eq!(files_in(dir.path()), ["m.gguf"]);
}
