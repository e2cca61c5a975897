//! `quantforge quantize DIR OUT TYPE` on a Hugging Face folder against the two-step road it
//! replaces: the converter's GGUF with the checkpoint's own float type (written here by
//! quantforge's `convert`, whose output tests/hf_convert.rs proves equal to
//! `convert_hf_to_gguf.py`'s byte for byte) quantized by llama.cpp's
//! `llama_model_quantize`. The one-pass file must be identical, for the real
//! all-MiniLM-L6-v2 (f32) and the generated folders: Qwen2/Qwen3 and Llama (bf16), and
//! Mistral (f16, whose Q/K rows are read in interleaved head groups across several tasks).

#[path = "../../golden/hf_fixtures.rs"]
mod hf_fixtures;
mod llama_common;
#[path = "../../golden/tiny_llama.rs"]
mod tiny_llama;

use ggml_ref::llama::{Quantize, quantize};
use llama_common::{first_difference, real_model, threads};
use quantforge::hf::{ConvertOptions, HfFolder, HfModel, OutType};
use quantforge::model::ModelSource;
use quantforge::pipeline::plan::{ModelParams, Options, Preset, plan};
use quantforge::pipeline::run::{RunOptions, run, tensor_specs};
use std::path::Path;

const PRESETS: [&str; 5] = ["Q4_K_M", "Q8_0", "IQ4_XS", "Q6_K", "COPY"];

fn one_pass(dir: &Path, out: &Path, preset: &str) {
    let model = HfModel::open(dir).unwrap();
    let md = model.gguf_metadata().unwrap();
    let params = ModelParams::from_gguf(&md).unwrap();
    let options = Options::new(Preset::parse(preset).unwrap());
    let p = plan(&params, &tensor_specs(&model).unwrap(), &options).unwrap();
    p.check_runnable().unwrap();
    let run_options = RunOptions {
        threads: threads(),
        ..RunOptions::default()
    };
    run(&model, &p, out, &run_options, |_| {}).unwrap();
}

fn check(what: &str, dir: &Path, outtype: OutType) {
    let tmp = tempfile::tempdir().unwrap();
    let converted = tmp.path().join("converted.gguf");
    let folder = HfFolder::open(dir).unwrap();
    let conv = folder
        .conversion(&ConvertOptions {
            outtype,
            ..ConvertOptions::default()
        })
        .unwrap();
    quantforge::hf::write(&conv, &converted).unwrap();
    let mut failures = Vec::new();
    for preset in PRESETS {
        let (ours, theirs) = (tmp.path().join("ours.gguf"), tmp.path().join("llama.gguf"));
        one_pass(dir, &ours, preset);
        let options = Options::new(Preset::parse(preset).unwrap());
        let mut q = Quantize::new(options.ftype.code());
        q.only_copy = options.only_copy;
        q.nthread = threads() as i32;
        quantize(&converted, &theirs, &q).unwrap();
        if let Some(d) = first_difference(&ours, &theirs) {
            failures.push(format!("{what} {preset}: {d}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn one_pass_equals_converter_then_llama_quantize() {
    let Some(tok) = real_model("all-minilm-l6-v2/tokenizer.json") else {
        return;
    };
    check("all-MiniLM-L6-v2", tok.parent().unwrap(), OutType::F32);
    let vocab = real_model("llama-vocabs/ggml-vocab-qwen2.gguf").unwrap();
    let fx = tempfile::tempdir().unwrap();
    hf_fixtures::write_all(vocab.parent().unwrap(), fx.path());
    check("qwen2-tiny", &fx.path().join("qwen2-tiny"), OutType::Bf16);
    check("qwen3-tiny", &fx.path().join("qwen3-tiny"), OutType::Bf16);
    check(
        "llama-bpe-tiny",
        &fx.path().join("llama-bpe-tiny"),
        OutType::Bf16,
    );
    check(
        "mistral-f16-tiny",
        &fx.path().join("mistral-f16-tiny"),
        OutType::F16,
    );
}
