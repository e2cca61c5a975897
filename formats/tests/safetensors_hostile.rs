//! Hostile and broken files: every loader (bytes, file, mmap, stream frame) returns an
//! error that says what is wrong and names the tensor where there is one; none panics,
//! and none allocates more than the input justifies (a 2^63 header length, a 200 MB
//! header, or data lengths near 2^63 are rejected before any allocation they would need).

use quantforge_formats::safetensors::{Error, SafeTensors};
use std::io::Cursor;

/// A file from header text and data length.
fn file(header: &str, data_len: usize) -> Vec<u8> {
    let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
    bytes.extend_from_slice(header.as_bytes());
    bytes.resize(bytes.len() + data_len, 0);
    bytes
}

fn with_len(len: u64, rest: &[u8]) -> Vec<u8> {
    let mut bytes = len.to_le_bytes().to_vec();
    bytes.extend_from_slice(rest);
    bytes
}

/// (what, bytes, text the error must contain).
fn cases() -> Vec<(&'static str, Vec<u8>, &'static str)> {
    let two = |a: &str, b: &str| format!("{{\"a\":{a},\"b\":{b}}}");
    vec![
        ("empty", Vec::new(), "too short"),
        ("five bytes", vec![1, 2, 3, 4, 5], "too short"),
        (
            "header length 2^63",
            with_len(1 << 63, b"{}"),
            "exceeds the limit",
        ),
        (
            "header length 200 MB",
            with_len(200_000_000, b"{}"),
            "exceeds the limit",
        ),
        ("header past end", with_len(64, b"{}"), "runs past the end"),
        (
            "invalid UTF-8",
            file("{\"\u{e9}\":1}", 0)
                .into_iter()
                .map(|b| if b == 0xa9 { 0xff } else { b })
                .collect(),
            "UTF-8",
        ),
        (
            "not JSON",
            file("{not json}", 0),
            "not valid safetensors JSON",
        ),
        ("array", file("[]", 0), "not valid safetensors JSON"),
        (
            "deep nesting",
            file(
                &format!("{{\"t\":{}{}}}", "[".repeat(100_000), "]".repeat(100_000)),
                0,
            ),
            "tensor `t`",
        ),
        (
            "overlapping offsets",
            file(
                &two(
                    r#"{"dtype":"U8","shape":[4],"data_offsets":[0,4]}"#,
                    r#"{"dtype":"U8","shape":[4],"data_offsets":[2,6]}"#,
                ),
                6,
            ),
            "tensor `b`: data_offsets [2, 6] overlap",
        ),
        (
            "gapped offsets",
            file(
                &two(
                    r#"{"dtype":"U8","shape":[4],"data_offsets":[0,4]}"#,
                    r#"{"dtype":"U8","shape":[4],"data_offsets":[6,10]}"#,
                ),
                10,
            ),
            "tensor `b`: data_offsets [6, 10] leave a gap of 2",
        ),
        (
            "offsets end before begin",
            file(
                r#"{"a":{"dtype":"U8","shape":[0],"data_offsets":[0,0]},"b":{"dtype":"U8","shape":[0],"data_offsets":[4,0]}}"#,
                4,
            ),
            "tensor `b`",
        ),
        (
            "shape product overflow",
            file(
                r#"{"w":{"dtype":"F32","shape":[65536,65536,65536,65536],"data_offsets":[0,0]}}"#,
                0,
            ),
            "tensor `w`: F32 shape [65536, 65536, 65536, 65536] overflows",
        ),
        (
            "byte size overflow",
            file(
                r#"{"w":{"dtype":"U64","shape":[576460752303423488],"data_offsets":[0,0]}}"#,
                0,
            ),
            "tensor `w`",
        ),
        (
            "size mismatch",
            file(
                r#"{"w":{"dtype":"F16","shape":[3],"data_offsets":[0,4]}}"#,
                4,
            ),
            "tensor `w`: F16 shape [3] needs 6 bytes",
        ),
        (
            "sub-byte misaligned",
            file(
                r#"{"w":{"dtype":"F6_E3M2","shape":[3],"data_offsets":[0,3]}}"#,
                3,
            ),
            "tensor `w`: 3 elements of F6_E3M2",
        ),
        (
            "trailing bytes",
            file(
                r#"{"w":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}}"#,
                5,
            ),
            "3 trailing bytes",
        ),
        (
            "truncated",
            file(
                r#"{"w":{"dtype":"U8","shape":[9],"data_offsets":[0,9]}}"#,
                5,
            ),
            "tensor `w` is truncated: the data buffer is 4 bytes short",
        ),
        (
            "huge declared data",
            file(
                r#"{"w":{"dtype":"U8","shape":[576460752303423488],"data_offsets":[0,576460752303423488]}}"#,
                16,
            ),
            "tensor `w` is truncated",
        ),
        (
            "duplicate tensor",
            file(
                r#"{"w":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"w":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}"#,
                1,
            ),
            "tensor `w` is declared twice",
        ),
        (
            "duplicate metadata key",
            file(r#"{"__metadata__":{"k":"1","k":"2"}}"#, 0),
            "`k` appears twice",
        ),
        (
            "two __metadata__",
            file(r#"{"__metadata__":{},"__metadata__":{}}"#, 0),
            "two __metadata__",
        ),
        (
            "non-string metadata",
            file(r#"{"__metadata__":{"k":{"x":1}}}"#, 0),
            "value of `k`",
        ),
        (
            "unknown dtype",
            file(
                r#"{"w":{"dtype":"F128","shape":[],"data_offsets":[0,16]}}"#,
                16,
            ),
            "tensor `w`: invalid entry: unknown dtype `F128`",
        ),
        (
            "negative dimension",
            file(
                r#"{"w":{"dtype":"U8","shape":[-1],"data_offsets":[0,0]}}"#,
                0,
            ),
            "tensor `w`: invalid entry",
        ),
        (
            "missing field",
            file(r#"{"w":{"dtype":"U8","shape":[1]}}"#, 1),
            "missing field `data_offsets`",
        ),
        (
            "three offsets",
            file(
                r#"{"w":{"dtype":"U8","shape":[1],"data_offsets":[0,1,2]}}"#,
                1,
            ),
            "tensor `w`",
        ),
    ]
}

#[test]
fn every_loader_rejects_every_case_with_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    for (what, bytes, needle) in cases() {
        let from_bytes = SafeTensors::from_bytes(&bytes).map(|_| ()).unwrap_err();
        assert!(
            from_bytes.to_string().contains(needle),
            "{what}: from_bytes: {from_bytes}"
        );

        let path = dir.path().join("hostile.safetensors");
        std::fs::write(&path, &bytes).unwrap();
        for (loader, result) in [
            ("read", SafeTensors::read(&path).map(|_| ())),
            ("mmap", SafeTensors::mmap(&path).map(|_| ())),
        ] {
            let err = result.unwrap_err().to_string();
            assert!(err.contains(needle), "{what}: {loader}: {err}");
            assert!(
                err.contains("hostile.safetensors"),
                "{what}: {loader} names the file: {err}"
            );
        }

        let frame = SafeTensors::read_frame(&mut Cursor::new(&bytes));
        match (what, frame) {
            // A stream cannot tell trailing bytes from the next frame, and an empty
            // stream is a clean end.
            ("trailing bytes", Ok(Some(_))) | ("empty", Ok(None)) => {}
            (_, Ok(_)) => panic!("{what}: read_frame accepted it"),
            (_, Err(e)) => assert!(e.to_string().contains(needle), "{what}: read_frame: {e}"),
        }
    }
}

#[test]
fn a_200_mb_header_is_refused_before_it_is_read() {
    // A real (sparse) file whose header is 200 MB of spaces after `{}`: refused from the
    // length alone, by every file loader.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("big-header.safetensors");
    let n: u64 = 200_000_000;
    let f = std::fs::File::create(&path).unwrap();
    f.set_len(8 + n).unwrap();
    std::os::unix::fs::FileExt::write_all_at(&f, &n.to_le_bytes(), 0).unwrap();
    std::os::unix::fs::FileExt::write_all_at(&f, b"{}", 8).unwrap();
    for result in [SafeTensors::read(&path), SafeTensors::mmap(&path)] {
        let err = result.unwrap_err();
        let Error::File { error, .. } = &err else {
            panic!("{err}")
        };
        assert!(
            matches!(**error, Error::HeaderTooLarge { len: 200_000_000 }),
            "{err}"
        );
    }
    let mut stream = std::fs::File::open(&path).unwrap();
    let err = SafeTensors::read_frame(&mut stream).unwrap_err();
    assert!(matches!(err, Error::HeaderTooLarge { .. }), "{err}");
}

#[test]
fn a_stream_that_ends_early_allocates_only_what_arrived() {
    // The header promises 2^59 bytes; the stream has 1 MiB. The reader must fail with
    // the shortfall, having grown its buffer only with what arrived.
    let header = r#"{"w":{"dtype":"U8","shape":[576460752303423488],"data_offsets":[0,576460752303423488]}}"#;
    let bytes = file(header, 1 << 20);
    let err = SafeTensors::read_frame(&mut Cursor::new(&bytes)).unwrap_err();
    match err {
        Error::Truncated { name, missing } => {
            assert_eq!(name, "w");
            assert_eq!(missing, (1u64 << 59) - (1 << 20));
        }
        e => panic!("{e}"),
    }
}
