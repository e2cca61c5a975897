//! Loading, filtering and checking a matrix, and its use by the tensors of a plan.

use super::*;

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
        source_name: name.to_string(),
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
