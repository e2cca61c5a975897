//! `quantforge quantize DIR OUT TYPE` on a Hugging Face folder against the two-step road it
//! replaces: the converter's GGUF with the checkpoint's own float type (written here by
//! quantforge's `convert`, whose output tests/hf_convert.rs proves equal to
//! `convert_hf_to_gguf.py`'s byte for byte) quantized by llama.cpp's
//! `llama_model_quantize`. The one-pass file must be identical, for the real
//! all-MiniLM-L6-v2 (f32) and the generated folders: Qwen2/Qwen3 and Llama (bf16), and
//! Mistral (f16, whose Q/K rows are read in interleaved head groups across several tasks);
//! every preset with and without an importance matrix.

#[path = "../../golden/hf_fixtures.rs"]
mod hf_fixtures;
#[path = "../../src/pipeline/imatrix/files.rs"]
mod imatrix_files;
mod llama_common;
#[path = "../../golden/tiny_llama.rs"]
mod tiny_llama;

use ggml_ref::llama::Quantize;
use llama_common::{difference, llama_reference, real_model, recorded_name, threads};
use quantforge::hf::{ConvertOptions, HfFolder, HfModel, OutType};
use quantforge::model::ModelSource;
use quantforge::pipeline::imatrix::Imatrix;
use quantforge::pipeline::plan::{ModelParams, Options, Preset, plan};
use quantforge::pipeline::run::{RunOptions, run, tensor_specs};
use quantforge_formats::gguf::{GgufModel, Value};
use std::path::Path;

const PRESETS: [&str; 5] = ["Q4_K_M", "Q8_0", "IQ4_XS", "Q6_K", "COPY"];

/// A random importance matrix (GGUF format) for every weight matrix of the GGUF at
/// `model`, as llama-imatrix would collect one (no `token_embd`, which it never sees).
fn random_imatrix(model: &Path, path: &Path) -> Imatrix {
    let mut state = 0x1234_5678_9abc_def1u64;
    let mut unit = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state >> 40) as f32 / (1u64 << 24) as f32
    };
    let m = GgufModel::open(model).unwrap();
    let mut entries = Vec::new();
    for t in m.tensors() {
        let ne = t.ne();
        if ne.len() < 2 || ne[1] == 1 || t.name() == "token_embd.weight" {
            continue;
        }
        // A MoE tensor has one row of sums and one count per expert.
        let experts = ne.get(2).copied().unwrap_or(1).max(1);
        let sums: Vec<f32> = (0..ne[0] * experts)
            .map(|_| 50.0 * unit() * unit())
            .collect();
        entries.push((t.name().to_string(), sums, vec![123.0f32; experts as usize]));
    }
    let refs: Vec<_> = entries
        .iter()
        .map(|(n, s, c)| (n.as_str(), s.as_slice(), c.as_slice()))
        .collect();
    imatrix_files::gguf_builder(&refs, &["random.txt"], 37, 512)
        .and_then(|b| b.write(path))
        .unwrap();
    Imatrix::load(path).unwrap()
}

fn one_pass(dir: &Path, out: &Path, preset: &str, imatrix: Option<(&Imatrix, &Path)>) {
    let model = HfModel::open(dir).unwrap();
    let md = model.gguf_metadata().unwrap();
    let params = ModelParams::from_gguf(&md).unwrap();
    let mut options = Options::new(Preset::parse(preset).unwrap());
    options.has_imatrix = imatrix.is_some();
    let p = plan(&params, &tensor_specs(&model).unwrap(), &options).unwrap();
    p.check_runnable().unwrap();
    let run_options = RunOptions {
        threads: threads(),
        kv_overrides: imatrix
            .map(|(m, f)| m.metadata(recorded_name(f)))
            .unwrap_or_default(),
        imatrix: imatrix.map(|(m, _)| m.clone()),
        ..RunOptions::default()
    };
    run(&model, &p, out, &run_options, |_| {}).unwrap();
}

/// llama.cpp's form of an imatrix key (llama-quantize writes them as overrides).
fn kv_value(value: &Value) -> ggml_ref::llama::KvValue {
    use ggml_ref::llama::KvValue;
    match value {
        Value::U32(v) => KvValue::Int(i64::from(*v)),
        Value::String(s) => KvValue::Str(s.as_bytes().to_vec()),
        other => panic!("no override of type {}", other.type_name()),
    }
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
    let imatrix_file = tmp.path().join("imatrix.gguf");
    let imatrix = random_imatrix(&converted, &imatrix_file);
    let mut failures = Vec::new();
    for preset in PRESETS {
        for with_imatrix in [false, true] {
            if with_imatrix && preset == "COPY" {
                continue;
            }
            let m = with_imatrix.then_some((&imatrix, imatrix_file.as_path()));
            let (ours, theirs) = (tmp.path().join("ours.gguf"), tmp.path().join("llama.gguf"));
            one_pass(dir, &ours, preset, m);
            let options = Options::new(Preset::parse(preset).unwrap());
            let mut q = Quantize::new(options.ftype.code());
            q.only_copy = options.only_copy;
            q.nthread = threads() as i32;
            if let Some((m, f)) = m {
                q.imatrix = m
                    .entries()
                    .map(|(name, values)| (name.to_vec(), values.to_vec()))
                    .collect();
                q.kv_overrides = m
                    .metadata(recorded_name(f))
                    .iter()
                    .map(|(k, v)| (k.clone(), kv_value(v)))
                    .collect();
            }
            let reference = llama_reference(&converted, &theirs, &q).unwrap();
            if let Some(d) = difference(&reference, &converted, &q, &ours, &theirs) {
                let how = if with_imatrix { " with an imatrix" } else { "" };
                failures.push(format!("{what} {preset}{how}: {d}"));
            }
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
    // Each fixture with its checkpoint's own float type; the FP8 ones' weights are
    // dequantized to f32 as they are read.
    for (name, outtype) in [
        ("qwen2-tiny", OutType::Bf16),
        ("qwen3-tiny", OutType::Bf16),
        ("llama-bpe-tiny", OutType::Bf16),
        ("mistral-f16-tiny", OutType::F16),
        ("gemma2-tiny", OutType::Bf16),
        ("gemma3-tiny", OutType::F16),
        ("gemma3-bpe-tiny", OutType::Bf16),
        ("phi3-tiny", OutType::Bf16),
        ("qwen3moe-tiny", OutType::Bf16),
        ("qwen3moe-fused-tiny", OutType::Bf16),
        ("phi3-4k-tiny", OutType::F16),
        ("embeddinggemma-tiny", OutType::F32),
        ("mixtral-tiny", OutType::Bf16),
        ("llama32-tiny", OutType::Bf16),
        ("qwen3-fp8-tiny", OutType::F32),
        ("llama-fp8-tiny", OutType::F32),
    ] {
        check(name, &fx.path().join(name), outtype);
    }
}
