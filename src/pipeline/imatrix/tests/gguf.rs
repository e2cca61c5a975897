//! The GGUF format: per-expert averaging, rounding of counts, odd tensors, errors.

use super::*;

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
