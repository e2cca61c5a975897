//! The committed `golden/tiny-llama-f16.gguf` is exactly what its generator writes, and
//! plans like a llama model should.

#[path = "../golden/tiny_llama.rs"]
mod tiny_llama;

use quantforge::GgmlType;
use quantforge::formats::gguf::GgufFile;
use quantforge::pipeline::plan::{ModelParams, Options, Preset, TensorSpec, plan};
use std::path::Path;
use tiny_llama::TinyLlama;

fn committed() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("golden/tiny-llama-f16.gguf")
}

#[test]
fn committed_model_is_current() {
    let want = TinyLlama::COMMITTED.to_bytes().unwrap();
    let got = std::fs::read(committed()).unwrap();
    assert!(
        got == want,
        "golden/tiny-llama-f16.gguf is stale; run `cargo run --example gen-tiny-llama`"
    );
}

#[test]
fn committed_model_plans_as_a_llama() {
    let file = GgufFile::open(committed()).unwrap();
    let model = ModelParams::from_gguf(file.metadata()).unwrap();
    assert_eq!(model, {
        let mut m = ModelParams::new("llama", 4, 4, 1);
        m.file_type = Some(1);
        m
    });
    let tensors: Vec<TensorSpec> = file
        .tensors()
        .iter()
        .map(|t| TensorSpec::new(t.name(), t.ne4(), t.ty()))
        .collect();
    assert_eq!(tensors.len(), TinyLlama::COMMITTED.tensors().len());
    let p = plan(
        &model,
        &tensors,
        &Options::new(Preset::parse("Q4_K_M").unwrap()),
    )
    .unwrap();
    p.check_runnable().unwrap();
    assert_eq!(p.n_fallback, 0, "every row is a multiple of 256");
    let count = |ty| p.tensors.iter().filter(|t| t.target == ty).count();
    // attn_v and ffn_down of layers 2 and 3 (use_more_bits of 4 layers) and output.weight.
    assert_eq!(count(GgmlType::Q6_K), 5);
    assert_eq!(count(GgmlType::F32), 9); // norms
    assert_eq!(count(GgmlType::Q4_K), tensors.len() - 14);
}
