//! Byte-identity with the Hugging Face `safetensors` crate (0.6, a dev-dependency), both
//! ways, over random tensor sets; and validation parity on mutated files: whatever one
//! accepts the other accepts, except where this crate is documented to be stricter
//! (repeated names or keys) or newer (dtypes 0.6 lacks: C64, F8_*FNUZ).

mod st_common;

use proptest::prelude::*;
use quantforge_formats::safetensors::{Dtype, Error, Order, SafeTensors, serialize};
use safetensors::tensor::{Dtype as HfDtype, TensorView as HfView};
use st_common::{Owned, tensor_sets};
use std::collections::HashMap;

/// The dtypes both crates know, with HF's name for each.
fn hf_dtype(d: Dtype) -> Option<HfDtype> {
    Some(match d {
        Dtype::Bool => HfDtype::BOOL,
        Dtype::F4 => HfDtype::F4,
        Dtype::F6E2M3 => HfDtype::F6_E2M3,
        Dtype::F6E3M2 => HfDtype::F6_E3M2,
        Dtype::U8 => HfDtype::U8,
        Dtype::I8 => HfDtype::I8,
        Dtype::F8E5M2 => HfDtype::F8_E5M2,
        Dtype::F8E4M3 => HfDtype::F8_E4M3,
        Dtype::F8E8M0 => HfDtype::F8_E8M0,
        Dtype::I16 => HfDtype::I16,
        Dtype::U16 => HfDtype::U16,
        Dtype::F16 => HfDtype::F16,
        Dtype::BF16 => HfDtype::BF16,
        Dtype::I32 => HfDtype::I32,
        Dtype::U32 => HfDtype::U32,
        Dtype::F32 => HfDtype::F32,
        Dtype::F64 => HfDtype::F64,
        Dtype::I64 => HfDtype::I64,
        Dtype::U64 => HfDtype::U64,
        Dtype::C64 | Dtype::F8E4M3Fnuz | Dtype::F8E5M2Fnuz => return None,
    })
}

fn name() -> impl Strategy<Value = String> {
    // Plain names, and ones that exercise JSON escaping (quotes, backslashes, control
    // characters, DEL, non-ASCII, astral plane).
    prop_oneof![
        "[a-z][a-z0-9_.]{0,12}",
        "[a-z\"\\\\/\u{0}-\u{1f}\u{7f}é中😀 ]{0,6}",
    ]
}

fn tensors() -> impl Strategy<Value = Vec<Owned>> {
    let shared: Vec<Dtype> = Dtype::ALL
        .iter()
        .copied()
        .filter(|&d| hf_dtype(d).is_some())
        .collect();
    tensor_sets(name(), shared, 5, 8)
}

fn metadata() -> impl Strategy<Value = Option<Vec<(String, String)>>> {
    proptest::option::of(
        proptest::collection::hash_map(name(), name(), 0..4).prop_map(|m| m.into_iter().collect()),
    )
}

/// Upstream writes invalid JSON (`{},"__metadata__":{}}`) for no tensors and an empty
/// metadata map (its `serialize_map(Some(0))` closes the object before the entry); we
/// write `{"__metadata__":{}}` there instead, so that case is compared separately.
fn hf_writes_invalid_json(tensors: &[Owned], metadata: &Option<Vec<(String, String)>>) -> bool {
    tensors.is_empty() && metadata.as_ref().is_some_and(Vec::is_empty)
}

fn hf_serialize(tensors: &[Owned], metadata: &Option<Vec<(String, String)>>) -> Vec<u8> {
    let views: Vec<(String, HfView<'_>)> = tensors
        .iter()
        .map(|t| {
            let view = HfView::new(hf_dtype(t.dtype).unwrap(), t.shape.clone(), &t.data).unwrap();
            (t.name.clone(), view)
        })
        .collect();
    let info = metadata
        .as_ref()
        .map(|m| m.iter().cloned().collect::<HashMap<_, _>>());
    safetensors::serialize(views, info).unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Same tensors and metadata (in the order HF happened to emit its HashMap): the
    /// same bytes. With at most one metadata key the order question does not arise.
    #[test]
    fn our_writer_matches_hf(tensors in tensors(), metadata in metadata()) {
        prop_assume!(!hf_writes_invalid_json(&tensors, &metadata));
        let hf = hf_serialize(&tensors, &metadata);
        let hf_order = SafeTensors::from_bytes(&hf).unwrap().metadata().map(<[_]>::to_vec);
        let ours = serialize(tensors.iter().map(Owned::view), hf_order.as_deref(), Order::Canonical).unwrap();
        prop_assert_eq!(&ours, &hf);
        if metadata.as_ref().is_none_or(|m| m.len() <= 1) {
            let direct = serialize(tensors.iter().map(Owned::view), metadata.as_deref(), Order::Canonical).unwrap();
            prop_assert_eq!(direct, hf);
        }
    }

    /// HF reads what we write: same names, dtypes, shapes, bytes, metadata.
    #[test]
    fn hf_reads_ours(tensors in tensors(), metadata in metadata()) {
        let ours = serialize(tensors.iter().map(Owned::view), metadata.as_deref(), Order::Canonical).unwrap();
        let hf = safetensors::SafeTensors::deserialize(&ours).unwrap();
        prop_assert_eq!(hf.len(), tensors.len());
        for t in &tensors {
            let v = hf.tensor(&t.name).unwrap();
            prop_assert_eq!(v.dtype(), hf_dtype(t.dtype).unwrap());
            prop_assert_eq!(v.shape(), &t.shape[..]);
            prop_assert_eq!(v.data(), &t.data[..]);
        }
        let (_, hf_meta) = safetensors::SafeTensors::read_metadata(&ours).unwrap();
        let want = metadata.map(|m| m.into_iter().collect::<HashMap<_, _>>());
        prop_assert_eq!(hf_meta.metadata(), &want);
    }

    /// We read what HF writes, and re-emitting it in its own order gives its bytes.
    #[test]
    fn we_read_hf(tensors in tensors(), metadata in metadata()) {
        prop_assume!(!hf_writes_invalid_json(&tensors, &metadata));
        let hf = hf_serialize(&tensors, &metadata);
        let file = SafeTensors::from_bytes(&hf).unwrap();
        prop_assert_eq!(file.len(), tensors.len());
        for t in &tensors {
            let v = file.tensor(&t.name).unwrap();
            prop_assert_eq!(v.dtype(), t.dtype);
            prop_assert_eq!(v.shape(), &t.shape[..]);
            prop_assert_eq!(v.data(), &t.data[..]);
        }
        let again = serialize(file.tensors(), file.metadata(), Order::AsGiven).unwrap();
        prop_assert_eq!(again, hf);
    }

    /// Random damage to a valid file: both crates accept or both reject.
    #[test]
    fn validation_matches_hf(
        tensors in tensors(),
        metadata in metadata(),
        edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..4),
        cut in proptest::option::of(any::<prop::sample::Index>()),
        extra in proptest::collection::vec(any::<u8>(), 0..3),
    ) {
        let mut bytes = hf_serialize(&tensors, &metadata);
        let header_end = 8 + u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
        for (at, value) in edits {
            // Mostly damage the header, where the validation is.
            let i = at.index(header_end);
            bytes[i] = value;
        }
        if let Some(cut) = cut {
            bytes.truncate(cut.index(bytes.len() + 1));
        }
        bytes.extend_from_slice(&extra);
        same_verdict(&bytes)?;
    }
}

/// Compare the two crates' verdicts on one input.
fn same_verdict(bytes: &[u8]) -> Result<bool, TestCaseError> {
    let theirs = std::panic::catch_unwind(|| safetensors::SafeTensors::deserialize(bytes).is_ok())
        .unwrap_or(false);
    match SafeTensors::from_bytes(bytes) {
        Ok(file) => {
            let newer = file.tensors().any(|t| hf_dtype(t.dtype()).is_none());
            prop_assert!(
                theirs || newer,
                "we accept what HF rejects: {:?}",
                String::from_utf8_lossy(bytes)
            );
            Ok(true)
        }
        Err(e) => {
            let stricter = matches!(
                e,
                Error::DuplicateTensor { .. }
                    | Error::DuplicateMetadataKey { .. }
                    | Error::DuplicateMetadataSection
            );
            prop_assert!(
                !theirs || stricter,
                "HF accepts what we reject ({e}): {:?}",
                String::from_utf8_lossy(bytes)
            );
            Ok(false)
        }
    }
}

/// A header entry built from small random parts, so offsets, sizes and names collide.
fn raw_entry() -> impl Strategy<Value = String> {
    let dtype = prop_oneof![
        proptest::sample::select(
            Dtype::ALL
                .iter()
                .map(|d| d.name().to_owned())
                .collect::<Vec<_>>()
        ),
        Just("f32".to_owned()),
    ];
    (
        proptest::sample::select(vec!["a", "b", "c", "__metadata__"]),
        dtype,
        proptest::collection::vec(0i64..4, 0..3),
        (0u64..12, 0u64..12),
    )
        .prop_map(|(name, dtype, shape, (b, e))| {
            if name == "__metadata__" {
                return format!("\"__metadata__\":{{\"k\":\"{dtype}\"}}");
            }
            let shape: Vec<String> = shape.iter().map(i64::to_string).collect();
            format!(
                "\"{name}\":{{\"dtype\":\"{dtype}\",\"shape\":[{}],\"data_offsets\":[{b},{e}]}}",
                shape.join(",")
            )
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4096))]

    /// Headers assembled from colliding parts (gaps, overlaps, wrong sizes, repeated
    /// names, sub-byte sizes, unknown dtypes) and data of random length: same verdict.
    #[test]
    fn validation_matches_hf_on_assembled_headers(
        entries in proptest::collection::vec(raw_entry(), 0..4),
        data_len in proptest::option::of(0usize..16),
        pad in 0usize..3,
    ) {
        let json = format!("{{{}}}{}", entries.join(","), " ".repeat(pad));
        let mut bytes = (json.len() as u64).to_le_bytes().to_vec();
        bytes.extend_from_slice(json.as_bytes());
        // Half the time, exactly as much data as the furthest offset asks for.
        let furthest = SafeTensors::from_bytes(&bytes).err().and_then(|e| match e {
            Error::Truncated { missing, .. } => Some(missing as usize),
            _ => None,
        });
        bytes.extend(std::iter::repeat_n(0u8, data_len.or(furthest).unwrap_or(0)));
        same_verdict(&bytes)?;
    }
}

#[test]
fn every_dtype_round_trips_through_hf() {
    for &dtype in Dtype::ALL {
        let Some(hf) = hf_dtype(dtype) else { continue };
        let data = vec![7u8; 8 * dtype.bit_size() / 8];
        let t = Owned {
            name: format!("t_{dtype}"),
            dtype,
            shape: vec![2, 4],
            data,
        };
        let ours = serialize([t.view()], None, Order::Canonical).unwrap();
        assert_eq!(
            ours,
            hf_serialize(std::slice::from_ref(&t), &None),
            "{dtype}"
        );
        assert_eq!(
            safetensors::SafeTensors::deserialize(&ours)
                .unwrap()
                .tensor(&t.name)
                .unwrap()
                .dtype(),
            hf
        );
    }
}

#[test]
fn empty_metadata_without_tensors_is_valid_json_here() {
    let hf = hf_serialize(&[], &Some(Vec::new()));
    assert!(
        safetensors::SafeTensors::deserialize(&hf).is_err(),
        "upstream fixed its bug"
    );
    let ours = serialize([], Some(&[]), Order::Canonical).unwrap();
    assert_eq!(&ours[8..], b"{\"__metadata__\":{}}     ");
    assert!(safetensors::SafeTensors::deserialize(&ours).is_ok());
}
