//! Container conversion (`quantforge::convert`): safetensors -> GGUF -> safetensors and
//! GGUF -> safetensors -> GGUF give back the same bytes, for synthetic files covering
//! every dtype, odd layouts and typed GGUF metadata, and for the real models of
//! `docs/testing.md` (MiniLM safetensors, Gemma Q4_K_M GGUF).

mod st_common;

use quantforge::convert::{
    KEY_GGML_TYPES, KEY_SAFETENSORS_HEADER, gguf_to_safetensors, safetensors_to_gguf,
};
use quantforge_formats::gguf::{Array, GgufBuilder, GgufFile, GgufString, Value};
use quantforge_formats::safetensors::{
    Dtype, Order, SafeTensors, TensorView, serialize, write_sharded,
};
use quantforge_kernels::GgmlType;
use st_common::{minilm, real_model, sha256};
use std::path::{Path, PathBuf};
use std::time::Instant;

fn bytes(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(97).wrapping_add(seed))
        .collect()
}

/// One tensor of every dtype, plus a scalar, an empty tensor and a rank-5 tensor.
fn every_dtype() -> Vec<(String, Dtype, Vec<usize>, Vec<u8>)> {
    let mut v: Vec<_> = Dtype::ALL
        .iter()
        .enumerate()
        .map(|(i, &d)| {
            let shape = vec![2, 4];
            let len = 8 * d.bit_size() / 8;
            (
                format!("t.{}", d.name().to_lowercase()),
                d,
                shape,
                bytes(len, i as u8),
            )
        })
        .collect();
    v.push(("scalar".into(), Dtype::F32, vec![], bytes(4, 1)));
    v.push(("empty".into(), Dtype::BF16, vec![3, 0], vec![]));
    v.push(("rank5".into(), Dtype::U8, vec![2, 1, 3, 1, 2], bytes(12, 2)));
    v
}

fn views(t: &[(String, Dtype, Vec<usize>, Vec<u8>)]) -> Vec<TensorView<'_>> {
    t.iter()
        .map(|(n, d, s, b)| TensorView::new(n, *d, s.clone(), b).unwrap())
        .collect()
}

/// safetensors -> GGUF -> safetensors; returns the GGUF path.
fn there_and_back(st: &Path, dir: &Path) -> (PathBuf, Vec<u8>) {
    let gguf = dir.join("out.gguf");
    let back = dir.join("back.safetensors");
    safetensors_to_gguf(st, &gguf).unwrap();
    let report = gguf_to_safetensors(&gguf, &back).unwrap();
    assert!(report.restored, "the recorded header was not reused");
    (gguf, std::fs::read(back).unwrap())
}

#[test]
fn every_dtype_goes_to_gguf_and_back_byte_identically() {
    let dir = tempfile::tempdir().unwrap();
    let t = every_dtype();
    let meta = vec![
        ("format".to_owned(), "pt".to_owned()),
        ("note".to_owned(), "é \"q\"".to_owned()),
    ];
    let original = serialize(views(&t), Some(&meta), Order::Canonical).unwrap();
    let st = dir.path().join("model.safetensors");
    std::fs::write(&st, &original).unwrap();
    let (gguf, back) = there_and_back(&st, dir.path());
    assert!(back == original);

    // The GGUF holds the data under the carrier types, names and string metadata kept.
    let g = GgufFile::open(&gguf).unwrap();
    assert_eq!(g.metadata().get_str("format").unwrap(), "pt");
    assert_eq!(g.metadata().get_str("note").unwrap(), "é \"q\"");
    let header = g.metadata().get_str(KEY_SAFETENSORS_HEADER).unwrap();
    assert_eq!(
        header.as_bytes(),
        SafeTensors::from_bytes(&original).unwrap().header_bytes()
    );
    let ty = |name: &str| g.tensor(name).unwrap().ty();
    assert_eq!(ty("t.f32"), GgmlType::F32);
    assert_eq!(ty("t.bf16"), GgmlType::BF16);
    assert_eq!(ty("t.u16"), GgmlType::I16);
    assert_eq!(ty("t.f8_e4m3"), GgmlType::I8);
    assert_eq!(ty("t.c64"), GgmlType::F32);
    assert_eq!(g.tensor("t.f16").unwrap().ne(), [4, 2]);
    assert_eq!(g.tensor("rank5").unwrap().ne(), [2, 1, 3, 2]);
    for (name, _, _, data) in &t {
        assert_eq!(g.tensor(name).unwrap().data(), &data[..], "{name}");
    }
}

#[test]
fn any_valid_layout_comes_back_exactly() {
    // A header no Hugging Face writer would produce: spaces, tensors out of offset order,
    // metadata last, unknown fields, no padding to 8.
    let dir = tempfile::tempdir().unwrap();
    let header = r#"{ "b": {"dtype": "F16", "shape": [2], "data_offsets": [4, 8], "x": 1},
  "a": {"dtype": "I32", "shape": [1], "data_offsets": [0, 4]}, "__metadata__": {"z": "1", "a": "2"} }"#;
    let mut original = (header.len() as u64).to_le_bytes().to_vec();
    original.extend_from_slice(header.as_bytes());
    original.extend_from_slice(&bytes(8, 9));
    SafeTensors::from_bytes(&original).unwrap();
    let st = dir.path().join("odd.safetensors");
    std::fs::write(&st, &original).unwrap();
    let (_, back) = there_and_back(&st, dir.path());
    assert_eq!(back, original);
}

#[test]
fn a_changed_gguf_comes_back_as_a_fresh_file() {
    // Convert, then alter the GGUF (a tensor dropped, a key changed): the recorded header
    // no longer describes it, so a fresh file is written, with dtypes from the header
    // where the tensors still fit.
    let dir = tempfile::tempdir().unwrap();
    let t = every_dtype();
    let st = dir.path().join("model.safetensors");
    std::fs::write(
        &st,
        serialize(
            views(&t),
            Some(&[("format".into(), "pt".into())]),
            Order::Canonical,
        )
        .unwrap(),
    )
    .unwrap();
    let gguf = dir.path().join("out.gguf");
    safetensors_to_gguf(&st, &gguf).unwrap();
    let g = GgufFile::open(&gguf).unwrap();
    let mut b = GgufBuilder::new();
    b.metadata_mut().copy_all_from(g.metadata());
    b.metadata_mut().set("format", "changed").unwrap();
    for v in g.tensor_views().filter(|v| v.name() != "t.i8") {
        b.add_tensor(v.name(), v.ty(), v.ne(), v.data()).unwrap();
    }
    let changed = dir.path().join("changed.gguf");
    b.write(&changed).unwrap();
    let back = dir.path().join("back.safetensors");
    let report = gguf_to_safetensors(&changed, &back).unwrap();
    assert!(!report.restored);
    let file = SafeTensors::read(&back).unwrap();
    assert_eq!(file.len(), t.len() - 1);
    assert_eq!(file.metadata_value("format"), Some("changed"));
    for (name, dtype, shape, data) in t.iter().filter(|x| x.0 != "t.i8") {
        let v = file.tensor(name).unwrap();
        assert_eq!(
            (v.dtype(), v.shape(), v.data()),
            (*dtype, &shape[..], &data[..]),
            "{name}"
        );
    }
}

/// A GGUF with typed keys of every kind and block-type tensors.
fn typed_gguf(version: u32) -> Vec<u8> {
    let mut b = GgufBuilder::new();
    b.set_version(version).unwrap();
    let m = b.metadata_mut();
    m.set("general.architecture", "llama").unwrap();
    m.set("general.alignment", Value::U32(64)).unwrap();
    m.set("llama.block_count", Value::U32(2)).unwrap();
    m.set("x.i8", Value::I8(-5)).unwrap();
    m.set("x.u64", Value::U64(u64::MAX)).unwrap();
    m.set("x.nan", Value::F32(f32::from_bits(0x7fc0_1234)))
        .unwrap();
    m.set("x.f64", Value::F64(-0.0)).unwrap();
    m.set("x.bool", false).unwrap();
    m.set(
        "x.bytes",
        Value::String(GgufString::from(vec![0xff, 0xfe, 0x41])),
    )
    .unwrap();
    m.set(
        "tokenizer.ggml.tokens",
        Array::String(vec!["<s>", "é", "\n"].into()),
    )
    .unwrap();
    m.set(
        "tokenizer.ggml.scores",
        Array::F32(vec![0.0, -1.5, f32::INFINITY]),
    )
    .unwrap();
    m.set(
        "x.nested",
        Array::Array(vec![Array::U8(vec![1, 2]), Array::Bool(vec![true])]),
    )
    .unwrap();
    m.set("general.name", "tiny model").unwrap();
    b.add_tensor(
        "token_embd.weight",
        GgmlType::Q4_K,
        &[256, 3],
        bytes(144 * 3, 1),
    )
    .unwrap();
    b.add_tensor("output_norm.weight", GgmlType::F32, &[8], bytes(32, 2))
        .unwrap();
    b.add_tensor(
        "blk.0.attn_q.weight",
        GgmlType::Q8_0,
        &[64, 2, 1],
        bytes(68 * 2, 3),
    )
    .unwrap();
    b.add_tensor("blk.0.ffn.weight", GgmlType::F16, &[4, 2], bytes(16, 4))
        .unwrap();
    b.add_tensor("ids", GgmlType::I32, &[3], bytes(12, 5))
        .unwrap();
    b.to_bytes().unwrap()
}

#[test]
fn gguf_goes_to_safetensors_and_back_byte_identically() {
    for version in [2, 3] {
        let dir = tempfile::tempdir().unwrap();
        let original = typed_gguf(version);
        let gguf = dir.path().join("in.gguf");
        std::fs::write(&gguf, &original).unwrap();
        let st = dir.path().join("mid.safetensors");
        gguf_to_safetensors(&gguf, &st).unwrap();

        let file = SafeTensors::read(&st).unwrap();
        // String keys readable as themselves; tensors in GGUF order; block types as U8 rows.
        assert_eq!(file.metadata_value("general.name"), Some("tiny model"));
        assert_eq!(file.metadata_value("x.bytes"), None);
        let names: Vec<_> = file.names().collect();
        assert_eq!(
            names,
            [
                "token_embd.weight",
                "output_norm.weight",
                "blk.0.attn_q.weight",
                "blk.0.ffn.weight",
                "ids"
            ]
        );
        let q = file.tensor("token_embd.weight").unwrap();
        assert_eq!((q.dtype(), q.shape()), (Dtype::U8, &[3, 144][..]));
        assert_eq!(q.rows(1..2).unwrap().data(), &bytes(144 * 3, 1)[144..288]);
        assert_eq!(
            file.tensor("blk.0.attn_q.weight").unwrap().shape(),
            [1, 2, 68]
        );
        let types: serde_json::Value =
            serde_json::from_str(file.metadata_value(KEY_GGML_TYPES).unwrap()).unwrap();
        assert_eq!(types["token_embd.weight"], "q4_K");
        assert_eq!(file.tensor("blk.0.ffn.weight").unwrap().dtype(), Dtype::F16);

        let back = dir.path().join("back.gguf");
        let report = safetensors_to_gguf(&st, &back).unwrap();
        assert!(report.restored);
        assert!(
            std::fs::read(&back).unwrap() == original,
            "GGUF v{version} changed on the round trip"
        );
    }
}

#[test]
fn a_sharded_folder_converts_as_one_model() {
    let dir = tempfile::tempdir().unwrap();
    let t = every_dtype();
    let folder = dir.path().join("model");
    std::fs::create_dir(&folder).unwrap();
    write_sharded(
        &folder,
        "model",
        views(&t),
        Some(&[("format".into(), "pt".into())]),
        40,
    )
    .unwrap();
    let gguf = dir.path().join("m.gguf");
    let report = safetensors_to_gguf(&folder, &gguf).unwrap();
    assert_eq!(report.tensors, t.len());
    // Back comes the one canonical file the shards merge into.
    let back = dir.path().join("m.safetensors");
    assert!(gguf_to_safetensors(&gguf, &back).unwrap().restored);
    let meta = [("format".to_owned(), "pt".to_owned())];
    let merged = serialize(views(&t), Some(&meta), Order::Canonical).unwrap();
    assert!(std::fs::read(&back).unwrap() == merged);
}

#[test]
fn clashing_metadata_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let st = dir.path().join("m.safetensors");
    let meta = [("general.alignment".to_owned(), "64".to_owned())];
    std::fs::write(&st, serialize([], Some(&meta), Order::Canonical).unwrap()).unwrap();
    let err = safetensors_to_gguf(&st, &dir.path().join("o.gguf")).unwrap_err();
    assert!(
        format!("{err:#}").contains("`general.alignment` would clash"),
        "{err:#}"
    );
    assert!(!dir.path().join("o.gguf").exists());
}

// ---- real models -------------------------------------------------------------------

#[test]
fn real_minilm_to_gguf_and_back_is_identical() {
    let Some(st) = minilm() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let gguf = dir.path().join("minilm.gguf");
    let t = Instant::now();
    let there = safetensors_to_gguf(&st, &gguf).unwrap();
    let to_gguf = t.elapsed();
    let g = GgufFile::open(&gguf).unwrap();
    assert_eq!(g.tensors().len(), 104);
    assert_eq!(
        g.tensor("embeddings.word_embeddings.weight").unwrap().ne(),
        [384, 30522]
    );
    assert_eq!(
        g.tensor("embeddings.position_ids").unwrap().ty(),
        GgmlType::I64
    );
    let back = dir.path().join("back.safetensors");
    let t = Instant::now();
    gguf_to_safetensors(&gguf, &back).unwrap();
    let to_st = t.elapsed();
    let (a, b) = (sha256(&st), sha256(&back));
    assert_eq!(a, b);
    eprintln!(
        "MiniLM: {} tensors, {} data bytes; to GGUF {to_gguf:?} ({} bytes), back {to_st:?}; sha256 {b}",
        there.tensors,
        there.data_bytes,
        std::fs::metadata(&gguf).unwrap().len()
    );
}

#[test]
fn real_gemma_gguf_to_safetensors_and_back_is_identical() {
    let Some(gguf) = real_model("gemma3-270m-q4_k_m.gguf") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let st = dir.path().join("gemma.safetensors");
    let t = Instant::now();
    let there = gguf_to_safetensors(&gguf, &st).unwrap();
    let to_st = t.elapsed();
    let file = SafeTensors::mmap(&st).unwrap();
    assert_eq!(file.len(), there.tensors);
    assert_eq!(file.metadata_value("general.architecture"), Some("gemma3"));
    let back = dir.path().join("back.gguf");
    let t = Instant::now();
    safetensors_to_gguf(&st, &back).unwrap();
    let to_gguf = t.elapsed();
    assert_eq!(sha256(&back), sha256(&gguf));
    eprintln!(
        "Gemma: {} tensors; to safetensors {to_st:?} ({} bytes, header {} bytes), back {to_gguf:?}; sha256 equal",
        there.tensors,
        std::fs::metadata(&st).unwrap().len(),
        file.header_bytes().len()
    );
}
