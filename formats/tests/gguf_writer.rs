//! The writing side: builder, streaming writer (order, chunks, padding, failures), atomic
//! files, split planning and naming, split-set validation, and the metadata API.

mod gguf_common;

use gguf_common::small_gguf;
use quantforge_formats::gguf::{
    AtomicFile, GgufBuilder, GgufError, GgufFile, GgufHeader, GgufModel, GgufWriter, KEY_ALIGNMENT,
    Metadata, SplitLimits, TensorInfo, Value, plan_split, split_path, split_prefix,
};
use quantforge_kernels::GgmlType;
use std::io::Write;
use std::path::Path;

fn files_in(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// Three tensors: `a` (f32 x 3 = 12 bytes), `b` (q8_0 x 64 = 68 bytes), `c` (f16 x 0).
fn three_tensor_builder<'a>() -> GgufBuilder<'a> {
    let mut b = GgufBuilder::new();
    b.metadata_mut().set("general.name", "w").unwrap();
    b.declare_tensor("a", GgmlType::F32, &[3]).unwrap();
    b.add_tensor("b", GgmlType::Q8_0, &[64], vec![5u8; 68])
        .unwrap();
    b.declare_tensor("c", GgmlType::F16, &[0, 7]).unwrap();
    b
}

#[test]
fn declared_tensors_stream_in_order_and_given_ones_follow_by_themselves() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("out.gguf");
    let mut w = three_tensor_builder().create(&path).unwrap();
    assert_eq!(w.next_tensor().unwrap().name(), "a");
    // Nothing is under the final name until commit.
    assert!(!path.exists());
    w.write_chunk(&[1, 2, 3, 4]).unwrap();
    w.write_chunk(&[5, 6, 7, 8, 9, 10, 11, 12]).unwrap();
    // "b" had data: written as soon as "a" completed. "c" (0 bytes) is next.
    assert_eq!(w.next_tensor().unwrap().name(), "c");
    w.write_tensor("c", &[]).unwrap();
    assert!(w.next_tensor().is_none());
    w.commit().unwrap();
    assert_eq!(files_in(dir.path()), ["out.gguf"]);

    let file = GgufFile::open(&path).unwrap();
    let data: Vec<&[u8]> = file.tensor_views().map(|v| v.data()).collect();
    assert_eq!(data[0], &[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]);
    assert_eq!(data[1], &[5u8; 68][..]);
    assert!(data[2].is_empty());
    // Every tensor padded to 32, the last included (it is empty: no padding needed).
    let offsets: Vec<u64> = file.layout().offsets.clone();
    assert_eq!(offsets, [0, 32, 128]);
    assert_eq!(file.file_size(), file.layout().data_offset + 128);
}

#[test]
fn out_of_order_oversized_and_missing_data_are_errors() {
    let mut w = three_tensor_builder().stream(Vec::new()).unwrap();
    let msg = w.write_tensor("b", &[0; 68]).unwrap_err().to_string();
    assert!(msg.contains("'b' given, but 'a' comes next"), "{msg}");
    let err = w.write_tensor("a", &[0; 11]).unwrap_err();
    assert!(
        matches!(
            err,
            GgufError::DataSize {
                expected: 12,
                got: 11,
                ..
            }
        ),
        "{err}"
    );
    w.write_chunk(&[0; 8]).unwrap();
    let msg = w.write_chunk(&[0; 5]).unwrap_err().to_string();
    assert!(msg.contains("only 4 of its 12 bytes left"), "{msg}");
    let msg = w.write_tensor("a", &[0; 12]).unwrap_err().to_string();
    assert!(
        msg.contains("after 8 bytes of it were written in chunks"),
        "{msg}"
    );
    w.write_chunk(&[0; 4]).unwrap();
    let msg = w.finish().unwrap_err().to_string();
    assert!(
        msg.contains("1 tensors unwritten, starting with 'c'"),
        "{msg}"
    );
}

#[test]
fn an_unfinished_or_failed_file_leaves_nothing_behind() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("out.gguf");
    std::fs::write(&path, b"old contents").unwrap();
    let mut w = three_tensor_builder().create(&path).unwrap();
    w.write_chunk(&[0; 12]).unwrap();
    let err = w.commit().unwrap_err();
    assert!(err.to_string().contains("unwritten"), "{err}");
    // The old file is untouched and no temporary file is left.
    assert_eq!(files_in(dir.path()), ["out.gguf"]);
    assert_eq!(std::fs::read(&path).unwrap(), b"old contents");

    // Dropped without commit: same.
    let mut f = AtomicFile::create(&path).unwrap();
    f.write_all(b"new").unwrap();
    drop(f);
    assert_eq!(files_in(dir.path()), ["out.gguf"]);
    assert_eq!(std::fs::read(&path).unwrap(), b"old contents");

    // Committed: replaced.
    let mut f = AtomicFile::create(&path).unwrap();
    f.write_all(b"new").unwrap();
    f.commit().unwrap();
    assert_eq!(std::fs::read(&path).unwrap(), b"new");
    assert_eq!(files_in(dir.path()), ["out.gguf"]);
}

/// A sink that fails after `left` bytes.
struct Failing {
    left: usize,
}

impl Write for Failing {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.left == 0 {
            return Err(std::io::Error::other("disk full"));
        }
        let n = buf.len().min(self.left);
        self.left -= n;
        Ok(n)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn a_write_error_poisons_the_writer() {
    let header = three_tensor_builder().header().clone();
    let err = GgufWriter::new(Failing { left: 10 }, &header)
        .err()
        .unwrap();
    assert!(err.to_string().contains("disk full"), "{err}");
    let (bytes, _) = header.encode().unwrap();
    let mut w = GgufWriter::new(
        Failing {
            left: bytes.len() + 4,
        },
        &header,
    )
    .unwrap();
    assert!(w.write_chunk(&[0; 8]).is_err());
    let msg = w.write_chunk(&[0; 4]).unwrap_err().to_string();
    assert!(msg.contains("an earlier write failed"), "{msg}");
}

#[test]
fn builder_rejects_bad_tensors() {
    let mut b = GgufBuilder::new();
    let err = b
        .add_tensor("t", GgmlType::Q4_K, &[256], vec![0; 143])
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "tensor 't': 143 bytes of data given, its q4_K shape needs 144"
    );
    b.declare_tensor("t", GgmlType::F32, &[1]).unwrap();
    assert!(matches!(
        b.declare_tensor("t", GgmlType::F32, &[1]),
        Err(GgufError::DuplicateTensor { .. })
    ));
    assert!(b.declare_tensor("", GgmlType::F32, &[1]).is_err());
    assert!(b.declare_tensor("r", GgmlType::Q8_0, &[33]).is_err());
    assert!(
        b.declare_tensor("d", GgmlType::F32, &[1, 1, 1, 1, 1])
            .is_err()
    );
    assert!(b.set_version(1).is_err());
    b.set_version(2).unwrap();
    let mut w = b.stream(Vec::new()).unwrap();
    w.write_tensor("t", &[0; 4]).unwrap();
    let bytes = w.finish().unwrap();
    assert_eq!(&bytes[..8], b"GGUF\x02\0\0\0");
    assert_eq!(GgufFile::from_bytes(bytes).unwrap().header().version(), 2);
}

#[test]
fn alignment_from_metadata_lays_out_the_data() {
    let mut b = GgufBuilder::new();
    b.metadata_mut()
        .set(KEY_ALIGNMENT, Value::U32(128))
        .unwrap();
    b.add_tensor("x", GgmlType::I8, &[3], vec![1, 2, 3])
        .unwrap();
    b.add_tensor("y", GgmlType::I8, &[130], vec![9; 130])
        .unwrap();
    let bytes = b.to_bytes().unwrap();
    let file = GgufFile::from_bytes(bytes.clone()).unwrap();
    assert_eq!(file.layout().data_offset % 128, 0);
    assert_eq!(file.layout().offsets, [0, 128]);
    assert_eq!(bytes.len() as u64, file.layout().data_offset + 128 + 256);
    assert!(
        bytes[file.layout().data_offset as usize + 3..][..125]
            .iter()
            .all(|&b| b == 0)
    );

    let mut h = GgufHeader::new();
    h.metadata_mut()
        .set(KEY_ALIGNMENT, Value::U64(128))
        .unwrap();
    assert!(matches!(h.encode(), Err(GgufError::BadAlignment { .. })));
}

#[test]
fn split_plans_follow_gguf_split() {
    let mut h = GgufHeader::new();
    h.metadata_mut().set("general.name", "s").unwrap();
    h.metadata_mut().set(KEY_ALIGNMENT, Value::U32(64)).unwrap();
    for (i, n) in [10u64, 100, 1000, 10].iter().enumerate() {
        h.push_tensor(TensorInfo::new(format!("t{i}"), GgmlType::I8, &[*n]).unwrap())
            .unwrap();
    }
    let names = |parts: &[GgufHeader]| -> Vec<Vec<String>> {
        parts
            .iter()
            .map(|p| p.tensors().iter().map(|t| t.name().to_string()).collect())
            .collect()
    };
    // Padded sizes 64, 128, 1024, 64: at most 200 bytes per part; t2 alone exceeds it.
    let parts = plan_split(
        &h,
        SplitLimits {
            max_bytes: Some(200),
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(names(&parts), [vec!["t0", "t1"], vec!["t2"], vec!["t3"]]);
    let first: Vec<&str> = parts[0].metadata().keys().collect();
    assert_eq!(
        first,
        [
            "general.name",
            "general.alignment",
            "split.no",
            "split.tensors.count",
            "split.count"
        ]
    );
    let later: Vec<(&str, &Value)> = parts[2].metadata().iter().collect();
    assert_eq!(
        later,
        [
            ("split.no", &Value::U16(2)),
            ("split.tensors.count", &Value::I32(4)),
            ("split.count", &Value::U16(3)),
            ("general.alignment", &Value::U32(64)),
        ]
    );
    let parts = plan_split(
        &h,
        SplitLimits {
            max_tensors: Some(3),
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(names(&parts), [vec!["t0", "t1", "t2"], vec!["t3"]]);
    let both = SplitLimits {
        max_tensors: Some(1),
        max_bytes: Some(1 << 20),
    };
    assert_eq!(plan_split(&h, both).unwrap().len(), 4);
    assert_eq!(plan_split(&GgufHeader::new(), both).unwrap().len(), 1);
    let zero = SplitLimits {
        max_tensors: Some(0),
        ..Default::default()
    };
    assert!(plan_split(&h, zero).is_err());
}

#[test]
fn split_names_are_llama_cpps() {
    let p = split_path(Path::new("dir/model"), 0, 3);
    assert_eq!(p, Path::new("dir/model-00001-of-00003.gguf"));
    assert_eq!(split_prefix(&p, 0, 3).unwrap(), Path::new("dir/model"));
    assert_eq!(split_prefix(&p, 1, 3), None);
    assert_eq!(split_prefix(Path::new("-00001-of-00003.gguf"), 0, 3), None);
    assert_eq!(
        split_path(Path::new("m"), 65534, 65535),
        Path::new("m-65535-of-65535.gguf")
    );
}

#[test]
fn split_sets_are_checked_when_opened() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.gguf");
    std::fs::write(&input, small_gguf()).unwrap();
    let model = GgufModel::open(&input).unwrap();
    let prefix = dir.path().join("m");
    let limits = SplitLimits {
        max_tensors: Some(1),
        ..Default::default()
    };
    let paths = model.write_split(&prefix, limits).unwrap();
    let open = |i: usize| GgufFile::open(&paths[i]).unwrap();
    assert_eq!(
        GgufModel::from_parts(vec![open(0), open(1), open(2)])
            .unwrap()
            .n_tensors(),
        3
    );
    let msg = GgufModel::from_parts(vec![open(0), open(2), open(1)])
        .unwrap_err()
        .to_string();
    assert!(
        msg.contains("is part 3 of 3, expected part 2 of 3"),
        "{msg}"
    );
    let msg = GgufModel::from_parts(vec![open(0), open(1)])
        .unwrap_err()
        .to_string();
    assert!(
        msg.contains("split.count is 3 but 2 files are given"),
        "{msg}"
    );
    // A part renamed out of the pattern cannot be found from the first.
    std::fs::rename(&paths[0], dir.path().join("first.gguf")).unwrap();
    let msg = GgufModel::open(dir.path().join("first.gguf"))
        .unwrap_err()
        .to_string();
    assert!(
        msg.contains("does not end in -00001-of-00003.gguf"),
        "{msg}"
    );
}

#[test]
fn metadata_api_keeps_types_and_order() {
    let mut m = Metadata::new();
    assert_eq!(m.set("a", Value::U8(1)).unwrap(), None);
    m.set("b", "text").unwrap();
    m.set("c", Value::I64(-1)).unwrap();
    assert_eq!(m.set("a", Value::U32(2)).unwrap(), Some(Value::U8(1)));
    assert_eq!(m.keys().collect::<Vec<_>>(), ["a", "b", "c"]);
    assert_eq!(m.get_u32("a").unwrap(), 2);
    assert_eq!(
        m.get_u8("a").unwrap_err().to_string(),
        "key 'a' is u32, not u8"
    );
    assert_eq!(m.get_uint("a").unwrap(), 2);
    assert!(m.get_uint("c").is_err());
    assert_eq!(m.get_str("b").unwrap(), "text");
    assert_eq!(
        m.get_str("zz").unwrap_err().to_string(),
        "key 'zz' not found"
    );
    assert_eq!(m.remove("b"), Some(Value::from("text")));
    assert_eq!(m.keys().collect::<Vec<_>>(), ["a", "c"]);
    assert_eq!(m.position("c"), Some(1));
    assert!(m.set("", Value::U8(0)).is_err());
    let mut other = Metadata::new();
    other.copy_from(&m, "c").unwrap();
    assert!(other.copy_from(&m, "b").is_err());
    other.copy_all_from(&m);
    assert_eq!(other.keys().collect::<Vec<_>>(), ["c", "a"]);
}

#[test]
fn files_too_short_to_map_are_errors() {
    let dir = tempfile::tempdir().unwrap();
    for (name, bytes) in [("empty", &b""[..]), ("gg", b"GG"), ("gguf", b"GGUF")] {
        let path = dir.path().join(name);
        std::fs::write(&path, bytes).unwrap();
        let msg = GgufFile::open(&path).unwrap_err().to_string();
        assert!(msg.contains("truncated header"), "{name}: {msg}");
        assert!(GgufModel::open(&path).is_err());
    }
    let missing = GgufFile::open(dir.path().join("nope"))
        .unwrap_err()
        .to_string();
    assert!(missing.contains("nope: cannot open"), "{missing}");
}
