//! Round trips through every loader and writer: proptest over random tensor sets (every
//! dtype), stream frames, the streamed positional writer from several threads, atomic
//! replacement, and slicing against a naive gather.

#[cfg(target_os = "linux")]
mod mapping_rss;
mod st_common;

#[cfg(target_os = "linux")]
use mapping_rss::mapping_rss_kib;
use proptest::prelude::*;
use quantforge_formats::safetensors::{
    Dtype, Error, FileWriter, Layout, Order, SafeTensors, TensorSpec, TensorView, serialize,
    write_file,
};
use st_common::{Owned, tensor_sets};
use std::io::{Cursor, Read};

fn tensors() -> impl Strategy<Value = Vec<Owned>> {
    tensor_sets("[a-zA-Z0-9_.é]{1,10}", Dtype::ALL.to_vec(), 6, 10)
}

fn assert_same(file: &SafeTensors<'_>, tensors: &[Owned]) {
    assert_eq!(file.len(), tensors.len());
    for t in tensors {
        let v = file.tensor(&t.name).unwrap();
        assert_eq!(
            (v.dtype(), v.shape(), v.data()),
            (t.dtype, &t.shape[..], &t.data[..])
        );
    }
}

/// A reader that hands out one byte per call, to exercise short reads.
struct Trickle<R>(R);

impl<R: Read> Read for Trickle<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = buf.len().min(1);
        self.0.read(&mut buf[..n])
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn every_loader_reads_what_the_writer_wrote(tensors in tensors(), meta in proptest::option::of(proptest::collection::vec(("[a-z]{1,4}", ".{0,8}"), 0..3))) {
        let mut meta = meta;
        if let Some(m) = meta.as_mut() {
            let mut seen = std::collections::HashSet::new();
            m.retain(|(k, _)| seen.insert(k.clone()));
        }
        let bytes = serialize(tensors.iter().map(Owned::view), meta.as_deref(), Order::Canonical).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.safetensors");
        write_file(&path, tensors.iter().map(Owned::view), meta.as_deref(), Order::Canonical).unwrap();
        prop_assert_eq!(&std::fs::read(&path).unwrap(), &bytes);
        for file in [
            SafeTensors::from_bytes(&bytes).unwrap(),
            SafeTensors::from_vec(bytes.clone()).unwrap(),
            SafeTensors::read(&path).unwrap(),
            SafeTensors::mmap(&path).unwrap(),
            SafeTensors::read_frame(&mut Trickle(Cursor::new(&bytes))).unwrap().unwrap(),
        ] {
            assert_same(&file, &tensors);
            prop_assert_eq!(file.metadata(), meta.as_deref());
            prop_assert_eq!(file.as_bytes(), &bytes[..]);
        }
        // The file order is kept when asked.
        let reversed: Vec<_> = tensors.iter().rev().map(Owned::view).collect();
        let as_given = serialize(reversed.clone(), None, Order::AsGiven).unwrap();
        let names: Vec<_> = SafeTensors::from_bytes(&as_given).unwrap().names().map(str::to_owned).collect();
        prop_assert_eq!(names, reversed.iter().map(|v| v.name().to_owned()).collect::<Vec<_>>());
    }

    #[test]
    fn streamed_positional_writes_from_threads_match_serialize(tensors in tensors(), seed in any::<u64>()) {
        let expected = serialize(tensors.iter().map(Owned::view), None, Order::Canonical).unwrap();
        let layout = Layout::new(tensors.iter().map(|t| TensorSpec::from(&t.view())), None, Order::Canonical).unwrap();
        prop_assert_eq!(layout.prefix(), &expected[..layout.data_start()]);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("streamed.safetensors");
        let writer = FileWriter::create(&path, layout).unwrap();
        // Cut each tensor into pieces of pseudo-random size; threads take pieces in
        // reverse, interleaved order.
        let mut pieces = Vec::new();
        let mut state = seed | 1;
        for t in &tensors {
            let mut at = 0;
            while at < t.data.len() {
                state ^= state << 13; state ^= state >> 7; state ^= state << 17;
                let len = 1 + (state % 7) as usize;
                let end = (at + len).min(t.data.len());
                pieces.push((t.name.as_str(), at, &t.data[at..end]));
                at = end;
            }
        }
        pieces.reverse();
        std::thread::scope(|s| {
            for k in 0..3 {
                let writer = &writer;
                let pieces = &pieces;
                s.spawn(move || {
                    for (name, at, bytes) in pieces.iter().skip(k).step_by(3) {
                        writer.write_at(name, *at, bytes).unwrap();
                    }
                });
            }
        });
        writer.finish().unwrap();
        prop_assert_eq!(std::fs::read(&path).unwrap(), expected);
    }

    /// Slices against a naive gather, element by element.
    #[test]
    fn slices_match_a_naive_gather(
        shape in proptest::collection::vec(1usize..5, 1..4),
        picks in proptest::collection::vec((any::<prop::sample::Index>(), any::<prop::sample::Index>()), 1..4),
    ) {
        let n: usize = shape.iter().product();
        let data: Vec<u8> = (0..n * 4).map(|i| i as u8).collect();
        let view = TensorView::new("t", Dtype::F32, shape.clone(), &data).unwrap();
        let ranges: Vec<_> = picks.iter().zip(&shape).map(|((a, b), &d)| {
            let (a, b) = (a.index(d + 1), b.index(d + 1));
            a.min(b)..a.max(b)
        }).collect();
        let slice = view.slice(&ranges).unwrap();
        let mut naive = Vec::new();
        for flat in 0..n {
            let mut idx = vec![0; shape.len()];
            let mut rest = flat;
            for (i, &d) in shape.iter().enumerate().rev() {
                idx[i] = rest % d;
                rest /= d;
            }
            if ranges.iter().zip(&idx).all(|(r, i)| r.contains(i)) {
                naive.extend_from_slice(&data[flat * 4..flat * 4 + 4]);
            }
        }
        prop_assert_eq!(slice.to_vec(), naive.clone());
        prop_assert_eq!(slice.byte_len(), naive.len());
        let floats: Vec<f32> = naive.chunks_exact(4).map(|b| f32::from_le_bytes(b.try_into().unwrap())).collect();
        let decoded = slice.to_f32().unwrap();
        prop_assert_eq!(decoded.iter().map(|f| f.to_bits()).collect::<Vec<_>>(), floats.iter().map(|f| f.to_bits()).collect::<Vec<_>>());
    }
}

#[test]
fn frames_back_to_back_leave_the_stream_after_each() {
    let a = [1u8, 2, 3];
    let b = [9u8; 8];
    let frames = [
        serialize(
            [TensorView::new("a", Dtype::U8, vec![3], &a).unwrap()],
            None,
            Order::Canonical,
        )
        .unwrap(),
        serialize([], Some(&[("k".into(), "v".into())]), Order::Canonical).unwrap(),
        serialize(
            [TensorView::new("b", Dtype::F16, vec![2, 2], &b).unwrap()],
            None,
            Order::Canonical,
        )
        .unwrap(),
    ];
    let stream: Vec<u8> = frames.concat();
    let mut reader = Trickle(Cursor::new(&stream));
    for frame in &frames {
        let got = SafeTensors::read_frame(&mut reader).unwrap().unwrap();
        assert_eq!(got.as_bytes(), &frame[..]);
    }
    assert!(SafeTensors::read_frame(&mut reader).unwrap().is_none());
    // A frame cut inside its header is an error, not a clean end.
    let cut = &frames[0][..12];
    let err = SafeTensors::read_frame(&mut Cursor::new(cut)).unwrap_err();
    assert!(matches!(err, Error::HeaderPastEnd { .. }), "{err}");
}

#[test]
fn unfinished_or_failed_writes_leave_the_target_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("model.safetensors");
    std::fs::write(&path, b"previous").unwrap();
    let specs = [
        TensorSpec {
            name: "a".into(),
            dtype: Dtype::F32,
            shape: vec![4],
        },
        TensorSpec {
            name: "b".into(),
            dtype: Dtype::U8,
            shape: vec![3],
        },
    ];
    let layout = Layout::new(specs.clone(), None, Order::Canonical).unwrap();
    let writer = FileWriter::create(&path, layout.clone()).unwrap();
    writer.write_at("a", 0, &[0; 16]).unwrap();
    writer.write_at("b", 1, &[0; 2]).unwrap();
    let err = writer.write_at("b", 2, &[0; 2]).unwrap_err().to_string();
    assert!(
        err.contains("tensor `b`: write of 2 bytes at offset 2 exceeds its 3 bytes"),
        "{err}"
    );
    let err = writer.write_at("c", 0, &[0]).unwrap_err().to_string();
    assert!(err.contains("tensor `c` not found"), "{err}");
    let err = writer.write_tensor("a", &[0; 3]).unwrap_err().to_string();
    assert!(err.contains("3 bytes of data given"), "{err}");
    let err = writer.finish().unwrap_err().to_string();
    assert!(
        err.contains("tensor `b`: 1 of its 3 bytes were never written"),
        "{err}"
    );
    assert_eq!(std::fs::read(&path).unwrap(), b"previous");

    // Dropped without finishing: nothing left behind.
    drop(FileWriter::create(&path, layout.clone()).unwrap());
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, ["model.safetensors"]);

    // Streamed through io::Write, then replaced atomically.
    let writer = FileWriter::create(&path, layout).unwrap();
    std::io::copy(
        &mut Cursor::new(vec![7u8; 16]),
        &mut writer.tensor_writer("a").unwrap(),
    )
    .unwrap();
    writer.write_tensor("b", &[1, 2, 3]).unwrap();
    writer.finish().unwrap();
    let file = SafeTensors::read(&path).unwrap();
    assert_eq!(file.tensor("a").unwrap().data(), &[7u8; 16]);
    assert_eq!(file.tensor("b").unwrap().data(), &[1, 2, 3]);
}

#[test]
fn decoding_goes_through_the_exact_converters() {
    let bits: Vec<u16> = (0..=u16::MAX).collect();
    let bytes: Vec<u8> = bits.iter().flat_map(|b| b.to_le_bytes()).collect();
    for (dtype, convert) in [
        (
            Dtype::F16,
            quantforge_kernels::num::fp16_to_fp32 as fn(u16) -> f32,
        ),
        (Dtype::BF16, quantforge_kernels::num::bf16_to_fp32),
    ] {
        let view = TensorView::new("h", dtype, vec![bits.len()], &bytes).unwrap();
        let got = view.to_f32().unwrap();
        for (&b, g) in bits.iter().zip(&got) {
            let want = convert(b);
            assert!(
                want.to_bits() == g.to_bits() || (want.is_nan() && g.is_nan()),
                "{dtype} {b:#06x}"
            );
        }
    }
    let all: Vec<u8> = (0..=255).collect();
    let e4m3 = TensorView::new("q", Dtype::F8E4M3, vec![256], &all)
        .unwrap()
        .to_f32()
        .unwrap();
    assert_eq!(e4m3[0x7E], 448.0);
    let err = TensorView::new("i", Dtype::I32, vec![1], &[0; 4])
        .unwrap()
        .to_f32()
        .unwrap_err();
    assert!(
        err.to_string().contains("tensor `i`: cannot decode I32"),
        "{err}"
    );
}

/// `prefetch` and `release` on a mapped file: released pages leave the resident set and
/// read back unchanged; bytes from elsewhere are refused; a file in memory ignores hints.
#[cfg(target_os = "linux")]
#[test]
fn mapped_pages_are_prefetched_and_released_on_request() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pages.safetensors");
    let data = vec![7u8; 4 << 20];
    let view = TensorView::new("w", Dtype::U8, vec![data.len()], &data).unwrap();
    write_file(&path, [view], None, Order::Canonical).unwrap();

    let file = SafeTensors::mmap(&path).unwrap();
    let w = file.tensor("w").unwrap();
    file.prefetch(w.data()).unwrap();
    assert!(w.data().iter().all(|&b| b == 7));
    let base = file.as_bytes().as_ptr();
    let before = mapping_rss_kib(base);
    file.release(w.data()).unwrap();
    let after = mapping_rss_kib(base);
    assert!(
        before - after >= (4 << 10) - 8,
        "release dropped {} KiB of 4096 KiB",
        before - after
    );
    assert!(w.data().iter().all(|&b| b == 7));

    let elsewhere = vec![7u8; 16];
    assert!(file.release(&elsewhere).is_err());
    assert!(file.prefetch(&elsewhere).is_err());
    let in_memory = SafeTensors::read(&path).unwrap();
    let w = in_memory.tensor("w").unwrap();
    in_memory.release(w.data()).unwrap();
}
