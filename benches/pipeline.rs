//! The whole `quantize` job, end to end: plan, widen, quantize and write a GGUF model,
//! beside llama.cpp's own quantizer (`llama_model_quantize`, with `--features ggml`) on
//! the same input, preset and thread count. Throughput is the input's tensor bytes per
//! second.
//!
//! `QF_BENCH_MODEL` names the input GGUF (default: the repository's tiny llama,
//! `golden/tiny-llama-f16.gguf`; for real numbers use a full model such as Gemma-3-270M
//! turned into F16); `QF_BENCH_PRESET` the target (default `Q4_K_M`); `QF_BENCH_THREADS`
//! the threads of both (default: one per CPU).

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use quantforge::formats::gguf::GgufModel;
use quantforge::pipeline::plan::{ModelParams, Options, Preset, plan};
use quantforge::pipeline::run::{self, RunOptions};
use std::path::PathBuf;

fn settings() -> (PathBuf, Preset, usize) {
    let model = std::env::var_os("QF_BENCH_MODEL")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("golden/tiny-llama-f16.gguf")
        });
    let preset = std::env::var("QF_BENCH_PRESET").unwrap_or_else(|_| "Q4_K_M".into());
    let preset = Preset::parse(&preset).expect("QF_BENCH_PRESET names a llama-quantize type");
    let threads = std::env::var("QF_BENCH_THREADS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    (model, preset, threads)
}

fn pipeline(c: &mut Criterion) {
    let (input, preset, threads) = settings();
    let model = GgufModel::open(&input).expect("the benchmark model opens");
    let params = ModelParams::from_gguf(model.metadata()).expect("a model quantize can plan");
    let specs = run::tensor_specs(&model).expect("the tensor list");
    let mut options = Options::new(preset);
    options.allow_requantize = true;
    let plan = plan(&params, &specs, &options).expect("a plan");
    let bytes: u64 = model.tensors().map(|t| t.data().len() as u64).sum();
    let dir = tempfile::tempdir().expect("a temporary directory");
    let out = dir.path().join("out.gguf");

    let name = input
        .file_name()
        .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
    let mut g = c.benchmark_group(format!("quantize {name} to {preset}"));
    g.sample_size(10);
    g.throughput(Throughput::Bytes(bytes));
    let run_options = RunOptions {
        threads,
        ..RunOptions::default()
    };
    g.bench_function("quantforge", |b| {
        b.iter(|| run::run(&model, &plan, &out, &run_options, |_| {}).expect("the run succeeds"))
    });
    #[cfg(feature = "ggml")]
    {
        let mut q = ggml_ref::llama::Quantize::new(preset.ftype.code());
        q.nthread = i32::try_from(threads).unwrap_or(0);
        q.allow_requantize = true;
        q.only_copy = preset.copy;
        let theirs = dir.path().join("llama.gguf");
        g.bench_function("llama.cpp", |b| {
            b.iter(|| ggml_ref::llama::quantize(&input, &theirs, &q).expect("llama.cpp runs"))
        });
    }
    g.finish();
}

criterion_group!(benches, pipeline);
criterion_main!(benches);
