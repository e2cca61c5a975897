//! The legacy format: averaging by ncall, the optional trailer, names, errors.

use super::*;

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
