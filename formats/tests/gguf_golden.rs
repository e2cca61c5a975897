//! golden/gguf/small.gguf, written by gguf-py (golden/gguf/make_small_gguf.py): read
//! exactly (every key with its wire type and value, every tensor) and re-emitted byte for
//! byte; plus a staleness check that regenerates it when gguf-py is installed.

mod gguf_common;

use gguf_common::repo_root;
use quantforge_formats::gguf::{Array, GgufBuilder, GgufFile, GgufString, GgufWriter, Value};
use quantforge_kernels::GgmlType;
use std::path::PathBuf;

fn golden_path() -> PathBuf {
    repo_root().join("golden/gguf/small.gguf")
}

fn s(text: &str) -> GgufString {
    text.into()
}

#[test]
fn gguf_py_file_is_read_exactly() {
    let file = GgufFile::open(golden_path()).unwrap();
    assert_eq!(file.header().version(), 3);
    let expected: Vec<(&str, Value)> = vec![
        ("general.architecture", "llama".into()),
        ("general.name", "quantforge golden: gguf-py small".into()),
        ("test.u8", Value::U8(200)),
        ("test.i8", Value::I8(-100)),
        ("test.u16", Value::U16(60000)),
        ("test.i16", Value::I16(-30000)),
        ("test.u32", Value::U32(4_000_000_000)),
        ("test.i32", Value::I32(-2_000_000_000)),
        ("test.f32", Value::F32(0.1)),
        ("test.bool", Value::Bool(true)),
        ("test.str", "héllo, wörld ✓".into()),
        ("test.u64", Value::U64(18_000_000_000_000_000_000)),
        ("test.i64", Value::I64(-9_000_000_000_000_000_000)),
        ("test.f64", Value::F64(-2.5e-300)),
        ("test.arr_i32", Array::I32(vec![1, -2, 3]).into()),
        ("test.arr_f32", Array::F32(vec![0.5, -1.25]).into()),
        ("test.arr_bool", Array::Bool(vec![true, false, true]).into()),
        (
            "test.arr_str",
            Array::String(vec![s("a"), s(""), s("ç")].into()).into(),
        ),
        ("test.arr_u16", Array::U16(vec![1, 65535]).into()),
        ("test.arr_u64", Array::U64(vec![u64::MAX]).into()),
        ("test.arr_f64", Array::F64(vec![1.0, -0.0]).into()),
        (
            "test.nested",
            Array::Array(vec![
                Array::I32(vec![1, 2]),
                Array::String(vec![s("x")].into()),
                Array::Array(vec![
                    Array::Bool(vec![true]),
                    Array::Bool(vec![false, true]),
                ]),
                Array::F32(vec![0.25]),
            ])
            .into(),
        ),
        ("general.alignment", Value::U32(64)),
    ];
    let found: Vec<(&str, &Value)> = file.metadata().iter().collect();
    assert_eq!(found.len(), expected.len());
    for ((key, value), (want_key, want)) in found.iter().zip(&expected) {
        assert_eq!(key, want_key);
        assert_eq!(*value, want, "{key}");
    }
    // -0.0 is kept as -0.0 (bitwise equality), not as 0.0.
    assert_ne!(
        file.metadata().get("test.arr_f64"),
        Some(&Array::F64(vec![1.0, 0.0]).into())
    );
    assert_eq!(file.layout().alignment, 64);

    let tensors: Vec<_> = file
        .tensor_views()
        .map(|v| {
            (
                v.name(),
                v.ty(),
                v.ne().to_vec(),
                v.offset(),
                v.data().len(),
            )
        })
        .collect();
    assert_eq!(
        tensors,
        vec![
            ("f32.weight", GgmlType::F32, vec![4, 3], 1216, 48),
            ("f16.weight", GgmlType::F16, vec![8, 2], 1280, 32),
            ("i32.row", GgmlType::I32, vec![8, 1], 1344, 32),
            ("q8_0.weight", GgmlType::Q8_0, vec![32, 2], 1408, 68),
            ("q4_K.weight", GgmlType::Q4_K, vec![256, 1], 1536, 144),
        ]
    );
    let row = file.tensor("i32.row").unwrap();
    assert_eq!(row.shape(), vec![1, 8]);
    let ints: Vec<i32> = row
        .data()
        .chunks_exact(4)
        .map(|b| i32::from_le_bytes(b.try_into().unwrap()))
        .collect();
    assert_eq!(ints, (0..8).collect::<Vec<_>>());
    assert!(file.has_canonical_length());
}

#[test]
fn mmap_heap_and_bytes_readers_agree() {
    let mapped = GgufFile::open(golden_path()).unwrap();
    let heap = GgufFile::read(golden_path()).unwrap();
    let bytes = GgufFile::from_bytes(std::fs::read(golden_path()).unwrap()).unwrap();
    assert!(mapped.is_mmap() && !heap.is_mmap() && !bytes.is_mmap());
    assert_eq!(mapped.path(), Some(golden_path().as_path()));
    assert_eq!(bytes.path(), None);
    for other in [&heap, &bytes] {
        assert_eq!(other.header(), mapped.header());
        assert_eq!(other.layout(), mapped.layout());
        assert_eq!(other.bytes(), mapped.bytes());
        // Hints are no-ops in memory.
        let v = other.tensor("q4_K.weight").unwrap();
        other.prefetch(&v).unwrap();
        other.release(&v).unwrap();
    }
    let v = mapped.tensor("q4_K.weight").unwrap();
    mapped.prefetch(&v).unwrap();
    mapped.release(&v).unwrap();
    assert_eq!(v.data().len(), 144);
    assert!(mapped.release_bytes(mapped.file_size(), 1).is_err());
}

#[test]
fn gguf_py_file_reemits_byte_identically() {
    let original = std::fs::read(golden_path()).unwrap();
    let file = GgufFile::from_bytes(original.clone()).unwrap();
    let mut w = GgufWriter::new(Vec::new(), file.header()).unwrap();
    for v in file.tensor_views() {
        w.write_tensor(v.name(), v.data()).unwrap();
    }
    assert_eq!(w.finish().unwrap(), original);

    // Rebuilding the same file key by key and tensor by tensor through the builder gives
    // the same bytes too: nothing is carried over but typed values.
    let mut b = GgufBuilder::new();
    for (key, _) in file.metadata().iter() {
        b.metadata_mut().copy_from(file.metadata(), key).unwrap();
    }
    for v in file.tensor_views() {
        b.add_tensor(v.name(), v.ty(), v.ne(), v.data()).unwrap();
    }
    assert_eq!(b.to_bytes().unwrap(), original);
}

#[test]
fn golden_file_is_what_the_generator_writes() {
    let python = std::process::Command::new("python3")
        .args(["-c", "import gguf"])
        .output();
    if !matches!(&python, Ok(out) if out.status.success()) {
        eprintln!(
            "SKIPPED: python3 with the gguf package is not installed (pip install gguf==0.19.0); \
             golden/gguf/small.gguf not regenerated"
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("small.gguf");
    let status = std::process::Command::new("python3")
        .arg(repo_root().join("golden/gguf/make_small_gguf.py"))
        .arg(&out)
        .stdout(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(status.success());
    assert!(
        std::fs::read(&out).unwrap() == std::fs::read(golden_path()).unwrap(),
        "golden/gguf/small.gguf is stale: rerun golden/gguf/make_small_gguf.py"
    );
}
