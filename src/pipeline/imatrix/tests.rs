//! Hand-built files of both formats with values worked out from llama-quantize's rules;
//! the comparison of whole quantizations with llama.cpp is in
//! `ggml-ref/tests/llama_quantize_imatrix.rs`.

use super::files::{gguf_builder, legacy_bytes};
use super::*;
use crate::pipeline::plan::Reason;
use quantforge_formats::gguf::GgufBuilder;

fn legacy(bytes: Vec<u8>) -> Imatrix {
    Imatrix::from_bytes(bytes).expect("a valid legacy imatrix")
}

fn gguf(b: GgufBuilder<'_>) -> Result<Imatrix, ImatrixError> {
    Imatrix::from_bytes(b.to_bytes().expect("encode"))
}

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

#[test]
fn legacy_values_are_divided_by_a_positive_ncall() {
    let m = legacy(legacy_bytes(
        &[
            ("blk.0.attn_q.weight", 4, &[4.0, 2.0, 1.0, 0.5]),
            ("blk.0.ffn_down.weight", 0, &[3.0, 5.0]),
            ("blk.0.ffn_up.weight", -2, &[6.0]),
        ],
        Some((17, "wiki.train.raw")),
    ));
    assert_eq!(m.format(), ImatrixFormat::Legacy);
    assert_eq!(m.len(), 3);
    assert_eq!(
        m.get("blk.0.attn_q.weight").unwrap(),
        &[1.0, 0.5, 0.25, 0.125]
    );
    // ncall 0 or negative: the values as stored.
    assert_eq!(m.get("blk.0.ffn_down.weight").unwrap(), &[3.0, 5.0]);
    assert_eq!(m.get("blk.0.ffn_up.weight").unwrap(), &[6.0]);
    assert_eq!(m.chunk_count(), 17);
    assert_eq!(m.datasets(), &[b"wiki.train.raw".to_vec()]);
    // Division in f32, by ncall converted to f32.
    let m = legacy(legacy_bytes(&[("w", 3, &[1.0])], None));
    assert_eq!(m.get("w").unwrap()[0].to_bits(), (1.0f32 / 3.0).to_bits());
}

#[test]
fn legacy_trailer_is_optional_and_read_as_far_as_it_goes() {
    let entries: &[(&str, i32, &[f32])] = &[("w", 1, &[1.0])];
    let m = legacy(legacy_bytes(entries, None));
    assert_eq!((m.chunk_count(), m.datasets().len()), (0, 0));

    // Two bytes of chunk count: the low bytes of the int, nothing else.
    let mut bytes = legacy_bytes(entries, None);
    bytes.extend_from_slice(&[0x34, 0x12]);
    let m = legacy(bytes);
    assert_eq!((m.chunk_count(), m.datasets().len()), (0x1234, 0));

    // A dataset name longer than what is left is not read.
    let mut bytes = legacy_bytes(entries, Some((5, "abc")));
    let n = bytes.len();
    bytes[n - 7..n - 3].copy_from_slice(&4i32.to_le_bytes());
    let m = legacy(bytes);
    assert_eq!((m.chunk_count(), m.datasets().len()), (5, 0));

    // A dataset name is a C string: it ends at the first NUL.
    let m = legacy(legacy_bytes(entries, Some((5, "ab\0cd"))));
    assert_eq!(m.datasets(), &[b"ab".to_vec()]);
    // An empty one is no dataset.
    let m = legacy(legacy_bytes(entries, Some((5, ""))));
    assert!(m.datasets().is_empty());
}

#[test]
fn legacy_names_are_c_strings_and_the_last_of_a_name_wins() {
    let m = legacy(legacy_bytes(
        &[
            ("w\0junk", 1, &[1.0]),
            ("v", 1, &[2.0]),
            ("w", 2, &[8.0, 4.0]),
        ],
        None,
    ));
    assert_eq!(m.len(), 2);
    assert_eq!(m.get("w").unwrap(), &[4.0, 2.0]);
    let names: Vec<&[u8]> = m.entries().map(|(n, _)| n).collect();
    assert_eq!(names, [&b"v"[..], b"w"]);
}

#[test]
fn legacy_errors_name_the_entry_and_offset() {
    let no_data = |bytes: Vec<u8>| {
        assert!(matches!(
            Imatrix::from_bytes(bytes),
            Err(ImatrixError::NoData)
        ))
    };
    no_data(Vec::new());
    no_data(vec![1, 0]);
    no_data(0i32.to_le_bytes().to_vec());
    no_data((-3i32).to_le_bytes().to_vec());

    let good = legacy_bytes(&[("ab", 1, &[1.0, 2.0])], None);
    // Cut inside the name of entry 1 (count 4 bytes, length 4 bytes, name at 8).
    match Imatrix::from_bytes(good[..9].to_vec()) {
        Err(ImatrixError::Truncated {
            what: "name",
            entry: 1,
            offset: 8,
            needed: 2,
            available: 1,
        }) => {}
        other => panic!("{other:?}"),
    }
    // Cut inside the values.
    match Imatrix::from_bytes(good[..good.len() - 1].to_vec()) {
        Err(ImatrixError::Truncated {
            what: "values",
            entry: 1,
            offset: 18,
            needed: 8,
            available: 7,
        }) => {}
        other => panic!("{other:?}"),
    }
    // Two entries announced, one present.
    let mut two = good.clone();
    two[..4].copy_from_slice(&2i32.to_le_bytes());
    assert!(matches!(
        Imatrix::from_bytes(two),
        Err(ImatrixError::Truncated {
            what: "name length",
            entry: 2,
            ..
        })
    ));

    let mut negative = good.clone();
    negative[4..8].copy_from_slice(&(-1i32).to_le_bytes());
    assert!(matches!(
        Imatrix::from_bytes(negative),
        Err(ImatrixError::NegativeNameLength {
            entry: 1,
            offset: 4,
            len: -1
        })
    ));

    let mut no_values = good.clone();
    no_values[14..18].copy_from_slice(&0i32.to_le_bytes());
    match Imatrix::from_bytes(no_values) {
        Err(ImatrixError::BadValueCount {
            entry: 1,
            name,
            offset: 14,
            count: 0,
        }) => assert_eq!(name, "ab"),
        other => panic!("{other:?}"),
    }

    // A huge count is refused from the file size, before anything is allocated.
    let mut huge = good.clone();
    huge[14..18].copy_from_slice(&i32::MAX.to_le_bytes());
    match Imatrix::from_bytes(huge) {
        Err(ImatrixError::Truncated {
            what: "values",
            needed,
            available: 8,
            ..
        }) => assert_eq!(needed, i32::MAX as u64 * 4),
        other => panic!("{other:?}"),
    }
    let mut huge_name = good;
    huge_name[4..8].copy_from_slice(&i32::MAX.to_le_bytes());
    assert!(matches!(
        Imatrix::from_bytes(huge_name),
        Err(ImatrixError::Truncated { what: "name", .. })
    ));
}

#[test]
fn gguf_sums_are_averaged_per_expert_and_idle_experts_get_ones() {
    let sums = [2.0, 4.0, 6.0, 10.0, 20.0, 30.0, 7.0, 14.0, 21.0];
    let m = gguf(
        gguf_builder(
            &[
                ("blk.0.ffn_down_exps.weight", &sums, &[2.0, 0.0, 3.5]),
                ("blk.0.attn_q.weight", &[3.0, 6.0], &[3.0]),
            ],
            &["calibration.txt", "more.txt"],
            42,
            512,
        )
        .unwrap(),
    )
    .unwrap();
    assert_eq!(m.format(), ImatrixFormat::Gguf);
    assert_eq!(m.len(), 2);
    // Counts are rounded as lround does: 3.5 -> 4.
    assert_eq!(
        m.get("blk.0.ffn_down_exps.weight").unwrap(),
        &[1.0, 2.0, 3.0, 1.0, 1.0, 1.0, 1.75, 3.5, 5.25]
    );
    assert_eq!(m.get("blk.0.attn_q.weight").unwrap(), &[1.0, 2.0]);
    assert_eq!(m.chunk_count(), 42);
    assert_eq!(
        m.datasets(),
        &[b"calibration.txt".to_vec(), b"more.txt".to_vec()]
    );
}

#[test]
fn gguf_counts_round_like_lround() {
    let counts = [0.4, 0.5, 2.5, -1.0, -0.5, f32::NAN, f32::INFINITY, 1e20];
    let sums = [10.0; 8];
    let m = gguf(gguf_builder(&[("w", &sums, &counts)], &["d"], 1, 1).unwrap()).unwrap();
    // 0.4 -> 0 (ones); 0.5 -> 1; 2.5 -> 3; negatives, NaN, inf and 1e20 -> LONG_MIN (ones).
    assert_eq!(
        m.get("w").unwrap(),
        &[1.0, 10.0, 10.0 / 3.0, 1.0, 1.0, 1.0, 1.0, 1.0]
    );
}

/// A GGUF imatrix built tensor by tensor, with the three metadata keys.
fn raw_gguf(tensors: &[(&str, GgmlType, &[u64], Vec<u8>)]) -> GgufBuilder<'static> {
    let mut b = gguf_builder(&[], &["d"], 3, 512).unwrap();
    for (name, ty, ne, data) in tensors {
        b.add_tensor(*name, *ty, ne, data.clone()).unwrap();
    }
    b
}

#[test]
fn gguf_sums_that_are_not_whole_rows_leave_zeros_at_the_end() {
    let m = gguf(raw_gguf(&[
        ("w.in_sum2", GgmlType::F32, &[7], f32_bytes(&[1.0; 7])),
        ("w.counts", GgmlType::F32, &[2], f32_bytes(&[1.0, 2.0])),
    ]))
    .unwrap();
    assert_eq!(m.get("w").unwrap(), &[1.0, 1.0, 1.0, 0.5, 0.5, 0.5, 0.0]);
}

#[test]
fn gguf_other_tensors_are_ignored_and_empty_entries_skipped() {
    let m = gguf(raw_gguf(&[
        ("unrelated", GgmlType::F32, &[2], f32_bytes(&[1.0, 2.0])),
        ("w.in_sum", GgmlType::F32, &[2], f32_bytes(&[5.0, 5.0])),
        ("w.in_sum2", GgmlType::F32, &[2], f32_bytes(&[4.0, 8.0])),
        ("w.counts", GgmlType::F32, &[1], f32_bytes(&[4.0])),
        ("empty.in_sum2", GgmlType::F32, &[0], Vec::new()),
        ("empty.counts", GgmlType::F32, &[1], f32_bytes(&[1.0])),
    ]))
    .unwrap();
    assert_eq!(m.len(), 1);
    assert_eq!(m.get("w").unwrap(), &[1.0, 2.0]);
    assert_eq!(m.skipped(), &[b"empty".to_vec()]);

    // Only unrelated tensors: a valid file with no entries, used as no imatrix at all.
    let m = gguf(raw_gguf(&[(
        "unrelated",
        GgmlType::F32,
        &[2],
        f32_bytes(&[1.0, 2.0]),
    )]))
    .unwrap();
    assert!(m.is_empty());
}

#[test]
fn gguf_errors() {
    let entry = |name: &str| {
        vec![
            (
                format!("{name}.in_sum2"),
                GgmlType::F32,
                vec![2u64],
                f32_bytes(&[1.0, 2.0]),
            ),
            (
                format!("{name}.counts"),
                GgmlType::F32,
                vec![1u64],
                f32_bytes(&[1.0]),
            ),
        ]
    };
    let with_meta = |keys: &[(&str, Value)]| {
        let mut b = GgufBuilder::new();
        for (k, v) in keys {
            b.metadata_mut().set(*k, v.clone()).unwrap();
        }
        for (name, ty, ne, data) in entry("w") {
            b.add_tensor(name, ty, &ne, data).unwrap();
        }
        gguf(b)
    };
    let datasets = || Value::Array(Array::String(vec!["d"].into()));
    match with_meta(&[("imatrix.datasets", datasets())]) {
        Err(ImatrixError::MissingMetadata(keys)) => {
            assert_eq!(keys, "imatrix.chunk_count, imatrix.chunk_size")
        }
        other => panic!("{other:?}"),
    }
    match with_meta(&[
        ("imatrix.datasets", datasets()),
        ("imatrix.chunk_count", Value::U64(3)),
        ("imatrix.chunk_size", Value::U32(512)),
    ]) {
        Err(ImatrixError::MetadataType {
            key: "imatrix.chunk_count",
            found,
        }) => assert_eq!(found, "u64"),
        other => panic!("{other:?}"),
    }
    // A datasets key of another type counts as present but gives no dataset.
    let m = with_meta(&[
        ("imatrix.datasets", Value::from("d")),
        ("imatrix.chunk_count", Value::U32(3)),
        ("imatrix.chunk_size", Value::U32(512)),
    ])
    .unwrap();
    assert!(m.datasets().is_empty());

    // No tensors at all.
    assert!(matches!(
        gguf(gguf_builder(&[], &["d"], 1, 1).unwrap()),
        Err(ImatrixError::NoData)
    ));
    // Sums without counts, counts without sums.
    let bad_entry =
        |tensors: &[(&str, GgmlType, &[u64], Vec<u8>)], needle: &str| match gguf(raw_gguf(tensors))
        {
            Err(ImatrixError::BadEntry { name, problem }) => {
                assert_eq!(name, "w");
                assert!(problem.contains(needle), "{problem}");
            }
            other => panic!("{other:?}"),
        };
    let sums = f32_bytes(&[1.0, 2.0]);
    let one = f32_bytes(&[1.0]);
    bad_entry(
        &[("w.in_sum2", GgmlType::F32, &[2], sums.clone())],
        "mismatched",
    );
    bad_entry(
        &[("w.counts", GgmlType::F32, &[1], one.clone())],
        "mismatched",
    );
    bad_entry(
        &[
            ("w.in_sum", GgmlType::F32, &[1], one.clone()),
            ("w.in_sum2", GgmlType::F32, &[2], sums.clone()),
            ("w.counts", GgmlType::F32, &[1], one.clone()),
        ],
        ".in_sum has 1 elements",
    );
    bad_entry(
        &[
            ("w.in_sum2", GgmlType::F32, &[2], sums.clone()),
            ("w.counts", GgmlType::F16, &[1], vec![0, 0x3c]),
        ],
        ".counts is f16",
    );
    // A truncated container is a GGUF error.
    let mut bytes = raw_gguf(&[
        ("w.in_sum2", GgmlType::F32, &[2], sums),
        ("w.counts", GgmlType::F32, &[1], one),
    ])
    .to_bytes()
    .unwrap();
    bytes.truncate(bytes.len() - 30);
    assert!(matches!(
        Imatrix::from_bytes(bytes),
        Err(ImatrixError::Gguf(_))
    ));
}

#[test]
fn load_names_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.dat");
    std::fs::write(&path, &legacy_bytes(&[("ab", 1, &[1.0])], None)[..9]).unwrap();
    let err = Imatrix::load(&path).unwrap_err().to_string();
    assert!(err.contains("bad.dat"), "{err}");
    assert!(err.contains("entry 1 at offset 8"), "{err}");

    let path = dir.path().join("bad.gguf");
    let mut bytes = gguf_builder(&[("w", &[1.0], &[1.0])], &["d"], 1, 1)
        .unwrap()
        .to_bytes()
        .unwrap();
    bytes.truncate(bytes.len() - 30);
    std::fs::write(&path, bytes).unwrap();
    let err = Imatrix::load(&path).unwrap_err().to_string();
    assert!(err.contains("bad.gguf"), "{err}");

    let err = Imatrix::load(&dir.path().join("missing.dat")).unwrap_err();
    assert!(matches!(err, ImatrixError::Io { .. }), "{err}");
    assert!(err.to_string().contains("missing.dat"), "{err}");

    let path = dir.path().join("good.gguf");
    gguf_builder(&[("w", &[2.0, 4.0], &[2.0])], &["d"], 1, 1)
        .unwrap()
        .write(&path)
        .unwrap();
    assert_eq!(Imatrix::load(&path).unwrap().get("w").unwrap(), &[1.0, 2.0]);
}

#[test]
fn filters_match_substrings() {
    let m = legacy(legacy_bytes(
        &[
            ("blk.0.attn_v.weight", 1, &[1.0]),
            ("blk.0.ffn_down.weight", 1, &[1.0]),
            ("blk.1.attn_v.weight", 1, &[1.0]),
            ("output.weight", 1, &[1.0]),
        ],
        None,
    ));
    let names = |filter: WeightFilter| {
        let mut m = m.clone();
        m.retain(&filter);
        m.entries()
            .map(|(n, _)| String::from_utf8(n.to_vec()).unwrap())
            .collect::<Vec<_>>()
    };
    let s = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    assert_eq!(names(WeightFilter::All).len(), 4);
    assert_eq!(
        names(WeightFilter::new(s(&["attn_v", "output"]), vec![]).unwrap()),
        s(&[
            "blk.0.attn_v.weight",
            "blk.1.attn_v.weight",
            "output.weight"
        ])
    );
    assert_eq!(
        names(WeightFilter::new(vec![], s(&["blk.0."])).unwrap()),
        s(&["blk.1.attn_v.weight", "output.weight"])
    );
    // An empty string is contained in every name.
    assert!(names(WeightFilter::new(vec![], s(&[""])).unwrap()).is_empty());
    assert!(matches!(
        WeightFilter::new(s(&["a"]), s(&["b"])),
        Err(ImatrixError::IncludeAndExclude)
    ));
}

#[test]
fn non_finite_values_are_refused_naming_entry_and_index() {
    let m = legacy(legacy_bytes(
        &[("a", 1, &[1.0, 2.0]), ("b", 1, &[1.0, f32::INFINITY])],
        None,
    ));
    match m.check_finite() {
        Err(ImatrixError::NonFinite {
            name,
            index: 1,
            value,
        }) => {
            assert_eq!((name.as_str(), value), ("b", f32::INFINITY))
        }
        other => panic!("{other:?}"),
    }
    let mut m = m;
    m.retain(&WeightFilter::Exclude(vec!["b".to_string()]));
    m.check_finite().unwrap();
}

fn tensor(name: &str, ne: [u64; 4], target: GgmlType, requires_imatrix: bool) -> TensorPlan {
    TensorPlan {
        input_index: 0,
        name: name.to_string(),
        ne,
        source: GgmlType::F16,
        target,
        reason: Reason::Default,
        fallback: None,
        quantizable: true,
        requires_imatrix,
        split: 0,
    }
}

#[test]
fn tensors_take_their_entry_when_it_has_one_value_per_column_and_expert() {
    let m = legacy(legacy_bytes(
        &[
            ("blk.0.attn_q.weight", 1, &[1.0; 4]),
            ("blk.0.ffn_up_exps.weight", 1, &[1.0; 12]),
            ("blk.0.attn_k.weight", 1, &[1.0; 3]),
            ("token_embd.weight", 1, &[1.0; 3]),
            ("per_layer_token_embd.weight", 1, &[1.0; 3]),
        ],
        None,
    ));
    let q4 = GgmlType::Q4_K;
    let use_for =
        |name: &str, ne: [u64; 4], requires: bool| m.use_for(&tensor(name, ne, q4, requires));
    assert_eq!(
        use_for("blk.0.attn_q.weight", [4, 8, 1, 1], false).unwrap(),
        ImatrixUse::Used
    );
    // Experts: ne0 x ne2 values; ne1 does not matter.
    assert_eq!(
        use_for("blk.0.ffn_up_exps.weight", [4, 5, 3, 1], false).unwrap(),
        ImatrixUse::Used
    );
    assert_eq!(
        use_for("blk.0.attn_v.weight", [4, 8, 1, 1], false).unwrap(),
        ImatrixUse::NoEntry
    );
    match use_for("blk.0.attn_k.weight", [4, 8, 1, 1], false) {
        Err(ImatrixError::SizeMismatch {
            tensor,
            len: 3,
            expected: 4,
        }) => assert_eq!(tensor, "blk.0.attn_k.weight"),
        other => panic!("{other:?}"),
    }
    for embd in ["token_embd.weight", "per_layer_token_embd.weight"] {
        assert_eq!(
            use_for(embd, [4, 8, 1, 1], false).unwrap(),
            ImatrixUse::WrongSizeIgnored {
                len: 3,
                expected: 4
            }
        );
    }
    // A type that needs importance data and gets none.
    match use_for("blk.0.attn_v.weight", [4, 8, 1, 1], true) {
        Err(ImatrixError::Missing { tensor, ty }) => {
            assert_eq!((tensor.as_str(), ty), ("blk.0.attn_v.weight", q4))
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        use_for("blk.0.attn_q.weight", [4, 8, 1, 1], true).unwrap(),
        ImatrixUse::Used
    );
}

#[test]
fn metadata_keys_in_llama_quantize_order() {
    let m = legacy(legacy_bytes(
        &[("a", 1, &[1.0]), ("b", 1, &[1.0])],
        Some((12, "wiki.train.raw")),
    ));
    let meta = m.metadata(b"imatrix.dat");
    let keys: Vec<&str> = meta.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(
        keys,
        [KEY_FILE, KEY_DATASET, KEY_ENTRIES_COUNT, KEY_CHUNKS_COUNT]
    );
    assert_eq!(meta[0].1.as_str(), Some("imatrix.dat"));
    assert_eq!(meta[1].1.as_str(), Some("wiki.train.raw"));
    assert!(matches!(meta[2].1, Value::U32(2)));
    assert!(matches!(meta[3].1, Value::U32(12)));

    // No dataset, no chunks: those keys are left out; strings cut to 127 bytes.
    let m = legacy(legacy_bytes(&[("a", 1, &[1.0])], None));
    let long = "x".repeat(300);
    let meta = m.metadata(long.as_bytes());
    let keys: Vec<&str> = meta.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(keys, [KEY_FILE, KEY_ENTRIES_COUNT]);
    assert_eq!(meta[0].1.as_str().map(str::len), Some(127));

    // A GGUF chunk count of 2^31 or more is negative as an int: no chunks key.
    let m = gguf(gguf_builder(&[("w", &[1.0], &[1.0])], &["d"], 1 << 31, 1).unwrap()).unwrap();
    assert_eq!(m.chunk_count(), i32::MIN);
    let keys: Vec<String> = m.metadata(b"f").into_iter().map(|(k, _)| k).collect();
    assert_eq!(keys, [KEY_FILE, KEY_DATASET, KEY_ENTRIES_COUNT]);
}
