//! Property tests: random headers (metadata of every value type, arrays of every element
//! type, arrays of arrays, non-UTF-8 strings, NaN payloads, random alignment and version)
//! and random tensors of every ggml type go through write -> read -> write with equal
//! bytes, equal headers and equal tensor data.

use proptest::collection::vec;
use proptest::prelude::*;
use quantforge_formats::gguf::{
    Array, GgufBuilder, GgufFile, GgufHeader, GgufString, GgufWriter, KEY_ALIGNMENT, Value,
};
use quantforge_kernels::GgmlType;

fn gguf_string() -> impl Strategy<Value = GgufString> {
    prop_oneof![
        "[a-zA-Z0-9 _.é✓]{0,12}".prop_map(GgufString::from),
        vec(any::<u8>(), 0..12).prop_map(GgufString::from_bytes),
    ]
}

fn leaf_array() -> impl Strategy<Value = Array> {
    let n = 0..6usize;
    prop_oneof![
        vec(any::<u8>(), n.clone()).prop_map(Array::U8),
        vec(any::<i8>(), n.clone()).prop_map(Array::I8),
        vec(any::<u16>(), n.clone()).prop_map(Array::U16),
        vec(any::<i16>(), n.clone()).prop_map(Array::I16),
        vec(any::<u32>(), n.clone()).prop_map(Array::U32),
        vec(any::<i32>(), n.clone()).prop_map(Array::I32),
        vec(any::<u32>().prop_map(f32::from_bits), n.clone()).prop_map(Array::F32),
        vec(any::<bool>(), n.clone()).prop_map(Array::Bool),
        vec(gguf_string(), n.clone()).prop_map(|v| Array::String(v.into())),
        vec(any::<u64>(), n.clone()).prop_map(Array::U64),
        vec(any::<i64>(), n.clone()).prop_map(Array::I64),
        vec(any::<u64>().prop_map(f64::from_bits), n).prop_map(Array::F64),
    ]
}

fn array() -> impl Strategy<Value = Array> {
    leaf_array().prop_recursive(3, 24, 4, |inner| vec(inner, 0..4).prop_map(Array::Array))
}

fn value() -> impl Strategy<Value = Value> {
    prop_oneof![
        any::<u8>().prop_map(Value::U8),
        any::<i8>().prop_map(Value::I8),
        any::<u16>().prop_map(Value::U16),
        any::<i16>().prop_map(Value::I16),
        any::<u32>().prop_map(Value::U32),
        any::<i32>().prop_map(Value::I32),
        any::<u32>().prop_map(|b| Value::F32(f32::from_bits(b))),
        any::<bool>().prop_map(Value::Bool),
        gguf_string().prop_map(Value::String),
        array().prop_map(Value::Array),
        any::<u64>().prop_map(Value::U64),
        any::<i64>().prop_map(Value::I64),
        any::<u64>().prop_map(|b| Value::F64(f64::from_bits(b))),
    ]
}

/// One tensor: type, dimensions (ne order, 0..=4 of them), and data bytes.
fn tensor() -> impl Strategy<Value = (GgmlType, Vec<u64>, Vec<u8>)> {
    (
        prop::sample::select(GgmlType::ALL.to_vec()),
        0..=2u64,
        vec(0..=3u64, 0..=3),
        any::<bool>(),
        any::<u64>(),
    )
        .prop_map(|(ty, blocks, rest, scalar, seed)| {
            let ne: Vec<u64> = if scalar && ty.block_size() == 1 {
                Vec::new() // n_dims = 0
            } else {
                std::iter::once(blocks * ty.block_size() as u64)
                    .chain(rest)
                    .collect()
            };
            let n_bytes = if ne.contains(&0) {
                0
            } else {
                ne.iter().product::<u64>() / ty.block_size() as u64 * ty.type_size() as u64
            };
            let mut x = seed | 1;
            let data = (0..n_bytes)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x as u8
                })
                .collect();
            (ty, ne, data)
        })
}

#[derive(Debug)]
struct Case {
    version: u32,
    alignment: Option<(usize, u32)>,
    metadata: Vec<(String, Value)>,
    tensors: Vec<(String, GgmlType, Vec<u64>, Vec<u8>)>,
}

fn case() -> impl Strategy<Value = Case> {
    (
        prop_oneof![Just(2u32), Just(3u32)],
        proptest::option::of((any::<usize>(), 0..=9u32)),
        vec(("[a-z][a-z0-9_.]{0,10}", value()), 0..10),
        vec(("[a-z][a-z0-9_.]{0,10}", tensor()), 0..6),
    )
        .prop_map(|(version, alignment, metadata, tensors)| {
            let mut seen = std::collections::HashSet::new();
            let metadata = metadata
                .into_iter()
                .filter(|(k, _)| k != KEY_ALIGNMENT && seen.insert(k.clone()))
                .collect();
            let mut seen = std::collections::HashSet::new();
            let tensors = tensors
                .into_iter()
                .filter(|(name, _)| seen.insert(name.clone()))
                .map(|(name, (ty, ne, data))| (name, ty, ne, data))
                .collect();
            Case {
                version,
                alignment: alignment.map(|(pos, log2)| (pos, 1u32 << log2)),
                metadata,
                tensors,
            }
        })
}

fn build(case: &Case) -> (GgufHeader, Vec<u8>) {
    let mut b = GgufBuilder::new();
    b.set_version(case.version).unwrap();
    for (i, (key, value)) in case.metadata.iter().enumerate() {
        if let Some((pos, align)) = case.alignment
            && pos % (case.metadata.len() + 1) == i
        {
            b.metadata_mut()
                .set(KEY_ALIGNMENT, Value::U32(align))
                .unwrap();
        }
        b.metadata_mut().set(key.clone(), value.clone()).unwrap();
    }
    if let Some((pos, align)) = case.alignment
        && pos % (case.metadata.len() + 1) == case.metadata.len()
    {
        b.metadata_mut()
            .set(KEY_ALIGNMENT, Value::U32(align))
            .unwrap();
    }
    for (name, ty, ne, data) in &case.tensors {
        b.add_tensor(name.clone(), *ty, ne, data.as_slice())
            .unwrap();
    }
    let header = b.header().clone();
    (header, b.to_bytes().unwrap())
}

fn reemit(file: &GgufFile) -> Vec<u8> {
    let mut w = GgufWriter::new(Vec::new(), file.header()).unwrap();
    for v in file.tensor_views() {
        w.write_tensor(v.name(), v.data()).unwrap();
    }
    w.finish().unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn write_read_write_is_identical(case in case()) {
        let (header, bytes) = build(&case);
        let file = GgufFile::from_bytes(bytes.clone()).unwrap();
        prop_assert_eq!(file.header(), &header);
        prop_assert!(file.has_canonical_length());
        prop_assert_eq!(file.layout().file_size(), bytes.len() as u64);
        for (view, (name, ty, ne, data)) in file.tensor_views().zip(&case.tensors) {
            prop_assert_eq!(view.name(), name.as_str());
            prop_assert_eq!(view.ty(), *ty);
            prop_assert_eq!(view.ne(), ne.as_slice());
            prop_assert_eq!(view.data(), data.as_slice());
            prop_assert_eq!(view.offset() % file.layout().alignment, 0);
        }
        for (key, value) in &case.metadata {
            prop_assert_eq!(file.metadata().get(key), Some(value));
        }
        prop_assert_eq!(reemit(&file), bytes);
    }

    #[test]
    fn replacing_a_value_in_place_keeps_the_order(case in case(), new in value()) {
        prop_assume!(!case.metadata.is_empty());
        let (header, _) = build(&case);
        let key = case.metadata[case.metadata.len() / 2].0.clone();
        let mut changed = header.clone();
        changed.metadata_mut().set(key.clone(), new.clone()).unwrap();
        let keys: Vec<&str> = changed.metadata().keys().collect();
        let before: Vec<&str> = header.metadata().keys().collect();
        prop_assert_eq!(keys, before);
        prop_assert_eq!(changed.metadata().get(&key), Some(&new));
        let (bytes, _) = changed.encode().unwrap();
        let mut file_bytes = bytes;
        for (_, _, _, data) in &case.tensors {
            let align = changed.alignment().unwrap() as usize;
            file_bytes.extend_from_slice(data);
            file_bytes.resize(file_bytes.len().div_ceil(align) * align, 0);
        }
        let file = GgufFile::from_bytes(file_bytes).unwrap();
        prop_assert_eq!(file.header(), &changed);
    }
}
