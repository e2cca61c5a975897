//! Model folders: sharded output read back as one set, the huggingface_hub split rule,
//! transformers' and diffusers' file names and variants, `config.json`, and every way an
//! index and its shards can disagree.

use quantforge_formats::safetensors::{
    Dtype, Error, ModelFolder, Order, SafeTensors, ShardIndex, TensorView, serialize, write_file,
    write_sharded,
};
use std::path::Path;

fn bytes(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

/// Tensors of 40, 8, 100 (bigger than the 64-byte limit used below), 16 and 32 bytes.
fn sample() -> Vec<(String, Dtype, Vec<usize>, Vec<u8>)> {
    vec![
        ("a.weight".into(), Dtype::F32, vec![10], bytes(40, 1)),
        ("b.bias".into(), Dtype::BF16, vec![4], bytes(8, 2)),
        ("c.big".into(), Dtype::U8, vec![10, 10], bytes(100, 3)),
        ("d.x".into(), Dtype::F16, vec![2, 4], bytes(16, 4)),
        ("e.y".into(), Dtype::I64, vec![4], bytes(32, 5)),
    ]
}

fn views(t: &[(String, Dtype, Vec<usize>, Vec<u8>)]) -> Vec<TensorView<'_>> {
    t.iter()
        .map(|(n, d, s, b)| TensorView::new(n, *d, s.clone(), b).unwrap())
        .collect()
}

fn meta() -> Vec<(String, String)> {
    vec![("format".into(), "pt".into())]
}

#[test]
fn sharded_output_reads_back_as_one_set() {
    let dir = tempfile::tempdir().unwrap();
    let t = sample();
    let written = write_sharded(dir.path(), "model", views(&t), Some(&meta()), 64).unwrap();
    let names: Vec<_> = written
        .iter()
        .map(|p| p.file_name().unwrap().to_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        names,
        [
            "model-00001-of-00003.safetensors",
            "model-00002-of-00003.safetensors",
            "model-00003-of-00003.safetensors",
            "model.safetensors.index.json"
        ]
    );
    let model = ModelFolder::open(dir.path()).unwrap();
    assert_eq!(model.len(), 5);
    for (n, d, s, b) in &t {
        let v = model.tensor(n).unwrap();
        assert_eq!((v.dtype(), v.shape(), v.data()), (*d, &s[..], &b[..]));
    }
    // huggingface_hub's rule: a (40) opens a shard; b (8) fits; c (100) is over the
    // limit and gets a shard of its own, emitted before the open one is closed; d (16)
    // fills the open one to exactly 64; e (32) would pass 64, so it starts the last.
    assert_eq!(
        model.shard_of("a.weight"),
        Some("model-00002-of-00003.safetensors")
    );
    assert_eq!(
        model.shard_of("b.bias"),
        Some("model-00002-of-00003.safetensors")
    );
    assert_eq!(
        model.shard_of("c.big"),
        Some("model-00001-of-00003.safetensors")
    );
    assert_eq!(
        model.shard_of("d.x"),
        Some("model-00002-of-00003.safetensors")
    );
    assert_eq!(
        model.shard_of("e.y"),
        Some("model-00003-of-00003.safetensors")
    );
    let index = model.index().unwrap();
    assert_eq!(index.total_size(), Some(196));
    assert_eq!(model.metadata(), Some(&meta()[..]));
    // Each shard is exactly what the canonical writer makes of its tensors.
    let shard = std::fs::read(dir.path().join("model-00002-of-00003.safetensors")).unwrap();
    let alone = serialize(
        views(&[t[0].clone(), t[1].clone(), t[3].clone()]),
        Some(&meta()),
        Order::Canonical,
    )
    .unwrap();
    assert_eq!(shard, alone);
    // The index is as transformers writes it.
    let text = std::fs::read_to_string(dir.path().join("model.safetensors.index.json")).unwrap();
    assert!(text.starts_with("{\n  \"metadata\": {\n    \"total_size\": 196\n  },\n  \"weight_map\": {\n    \"a.weight\": \"model-00002-of-00003.safetensors\",\n"), "{text}");
    assert!(text.ends_with("}\n"));
    // Also opened through the index path or a shard path.
    assert_eq!(
        ModelFolder::open(dir.path().join("model.safetensors.index.json"))
            .unwrap()
            .len(),
        5
    );
    assert_eq!(
        ModelFolder::open(dir.path().join("model-00003-of-00003.safetensors"))
            .unwrap()
            .len(),
        1
    );
}

#[test]
fn one_shard_is_a_plain_file() {
    let dir = tempfile::tempdir().unwrap();
    let t = sample();
    let written = write_sharded(dir.path(), "model", views(&t), None, 1 << 20).unwrap();
    assert_eq!(written, [dir.path().join("model.safetensors")]);
    let model = ModelFolder::open(dir.path()).unwrap();
    assert!(model.index().is_none());
    assert_eq!(model.tensors().count(), 5);
    let err = write_sharded(dir.path(), "model", views(&t), None, 0).unwrap_err();
    assert!(matches!(err, Error::ZeroShardSize));
}

#[test]
fn diffusers_names_variants_and_config() {
    let dir = tempfile::tempdir().unwrap();
    let t = sample();
    write_file(
        dir.path().join("diffusion_pytorch_model.fp16.safetensors"),
        views(&t[..1]),
        None,
        Order::Canonical,
    )
    .unwrap();
    write_sharded(dir.path(), "diffusion_pytorch_model", views(&t), None, 64).unwrap();
    std::fs::write(
        dir.path().join("config.json"),
        br#"{"_class_name": "UNet2DConditionModel", "sample_size": 64}"#,
    )
    .unwrap();
    let model = ModelFolder::open(dir.path()).unwrap();
    assert_eq!(model.len(), 5);
    assert_eq!(model.config().unwrap()["sample_size"], 64);
    let fp16 = ModelFolder::open_variant(dir.path(), Some("fp16")).unwrap();
    assert_eq!(fp16.len(), 1);
    let err = ModelFolder::open_variant(dir.path(), Some("bf16"))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("no model.bf16.safetensors, model.safetensors.index.bf16.json"),
        "{err}"
    );

    std::fs::write(dir.path().join("config.json"), b"{oops").unwrap();
    let err = ModelFolder::open(dir.path()).unwrap_err().to_string();
    assert!(
        err.contains("config.json") && err.contains("key must be a string"),
        "{err}"
    );
}

/// A sharded folder of `sample()` to break in one way.
fn broken(edit: impl FnOnce(&Path)) -> String {
    let dir = tempfile::tempdir().unwrap();
    write_sharded(dir.path(), "model", views(&sample()), None, 64).unwrap();
    edit(dir.path());
    ModelFolder::open(dir.path()).unwrap_err().to_string()
}

fn rewrite_index(dir: &Path, edit: impl FnOnce(&mut ShardIndex)) {
    let path = dir.join("model.safetensors.index.json");
    let mut index = ShardIndex::parse(&std::fs::read(&path).unwrap()).unwrap();
    edit(&mut index);
    std::fs::write(&path, index.to_json()).unwrap();
}

#[test]
fn index_and_shards_must_agree() {
    let err = broken(|d| std::fs::remove_file(d.join("model-00003-of-00003.safetensors")).unwrap());
    assert!(
        err.contains(
            "shard model-00003-of-00003.safetensors (holding tensor `e.y` per the index) is missing"
        ),
        "{err}"
    );

    let err = broken(|d| {
        rewrite_index(d, |i| {
            i.weight_map
                .push(("ghost".into(), "model-00001-of-00003.safetensors".into()))
        })
    });
    assert!(err.contains("tensor `ghost`: the index places it in model-00001-of-00003.safetensors, which does not hold it"), "{err}");

    let err = broken(|d| rewrite_index(d, |i| i.weight_map.retain(|(n, _)| n != "d.x")));
    assert!(
        err.contains("tensor `d.x` in shard model-00002-of-00003.safetensors is not listed"),
        "{err}"
    );

    // c.big (shard 1 per the index) copied into shard 3 as well.
    let err = broken(|d| {
        let t = sample();
        let both = [t[2].clone(), t[4].clone()];
        write_file(
            d.join("model-00003-of-00003.safetensors"),
            views(&both),
            None,
            Order::Canonical,
        )
        .unwrap();
    });
    assert!(err.contains("tensor `c.big` is in both model-00001-of-00003.safetensors and model-00003-of-00003.safetensors"), "{err}");

    let err = broken(|d| rewrite_index(d, |i| i.weight_map[0].1 = "../escape.safetensors".into()));
    assert!(
        err.contains("is not a relative path inside the folder"),
        "{err}"
    );

    let err = broken(|d| {
        std::fs::write(
            d.join("model.safetensors.index.json"),
            br#"{"weight_map":{"a":"x","a":"y"}}"#,
        )
        .unwrap()
    });
    assert!(err.contains("key `a` appears twice"), "{err}");

    let err = broken(|d| {
        let p = d.join("model-00002-of-00003.safetensors");
        let mut b = std::fs::read(&p).unwrap();
        b.pop();
        std::fs::write(&p, b).unwrap();
    });
    assert!(
        err.contains("model-00002-of-00003.safetensors") && err.contains("truncated"),
        "{err}"
    );
}

#[test]
fn an_empty_folder_says_what_it_looked_for() {
    let dir = tempfile::tempdir().unwrap();
    let err = ModelFolder::open(dir.path()).unwrap_err().to_string();
    assert!(err.contains("no model.safetensors, model.safetensors.index.json, diffusion_pytorch_model.safetensors, diffusion_pytorch_model.safetensors.index.json found"), "{err}");
    let single = dir.path().join("x.safetensors");
    write_file(&single, [], None, Order::Canonical).unwrap();
    assert!(SafeTensors::read(&single).unwrap().is_empty());
}
