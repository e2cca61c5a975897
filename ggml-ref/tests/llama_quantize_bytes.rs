//! `quantforge::pipeline::run` against llama.cpp's quantizer, byte for byte: for each
//! preset both quantize the same GGUF and the two files must be identical (header,
//! metadata and its order, tensor types, tensor bytes, padding).
//!
//! Inputs as in `llama_quantize_plan.rs`: the generated llama (rows multiples of 256), a
//! llama with drawn shapes (`QF_PLAN_SEED` replays), and the real Gemma-3-270M turned
//! into F16 (by llama.cpp and by quantforge, which must agree too; `QF_SKIP_REAL_MODELS=1`
//! skips it). `QF_PLAN_PRESETS=Q4_K_M,Q8_0` limits the presets.
//!
//! llama.cpp's side of each comparison is its output's SHA-256, remembered between runs
//! for the same input bytes, options and llama.cpp build (`ggml_ref::remembered`;
//! `GGML_REF_NO_CACHE=1` runs it every time); on a difference llama.cpp runs again so the
//! message names the first differing byte.

mod llama_common;
#[path = "../../golden/tiny_llama.rs"]
mod tiny_llama;

use llama_common::*;

use ggml_ref::llama::{Quantize, quantize};
use quantforge::pipeline::plan::{ModelParams, Options, Preset, plan};
use quantforge::pipeline::run::{RunOptions, run, tensor_specs};
use quantforge_formats::gguf::GgufModel;
use std::path::Path;
use std::time::Instant;
use tiny_llama::TinyLlama;

/// More presets whose every type quantforge can write, for the small models.
const MORE_PRESETS: [&str; 6] = ["IQ4_NL", "IQ4_XS", "MXFP4_MOE", "Q2_0", "IQ3_S", "IQ3_M"];

/// llama-quantize's parameters for `options`.
fn llama_params(options: &Options) -> Quantize {
    let mut q = Quantize::new(options.ftype.code());
    q.only_copy = options.only_copy;
    q.allow_requantize = options.allow_requantize;
    q.nthread = threads() as i32;
    q
}

/// Quantizes `input` both ways for each preset; fails listing every preset that differs.
fn check_all(what: &str, input: &Path, presets: &[&str]) {
    let dir = tempfile::tempdir().expect("temp dir");
    let (ours, theirs) = (dir.path().join("ours.gguf"), dir.path().join("llama.gguf"));
    let mut failures = Vec::new();
    for name in presets {
        let options = Options::new(Preset::parse(name).expect("a preset"));
        let q = llama_params(&options);
        let t0 = Instant::now();
        let reference = llama_reference(input, &theirs, &q).map_err(|e| format!("llama.cpp: {e}"));
        let t1 = Instant::now();
        let result =
            reference.and_then(|r| quantforge_quantize(input, &ours, &options).map(|()| r));
        let (llama, qf) = (t1 - t0, t1.elapsed());
        let remembered = result.as_ref().is_ok_and(|r| !r.written);
        eprintln!(
            "  {name:<7} llama.cpp {:>7.3} s{}, quantforge {:>7.3} s ({} threads)",
            llama.as_secs_f64(),
            if remembered { " (remembered)" } else { "" },
            qf.as_secs_f64(),
            threads()
        );
        match result {
            Err(e) => failures.push(format!("{name}: {e}")),
            Ok(reference) => {
                if let Some(diff) = difference(&reference, input, &q, &ours, &theirs) {
                    failures.push(format!("{name}: {diff}"));
                }
            }
        }
    }
    eprintln!(
        "{what}: {} of {} presets byte-identical to llama.cpp",
        presets.len() - failures.len(),
        presets.len()
    );
    assert!(failures.is_empty(), "{what}:\n{}", failures.join("\n"));
}

#[test]
fn tiny_llama_bytes_every_preset() {
    let dir = tempfile::tempdir().unwrap();
    let input = write_model(dir.path(), &TinyLlama::COMMITTED);
    let all = presets_and(&MORE_PRESETS);
    check_all("tiny llama", &input, &all);
}

#[test]
fn moe_llama_bytes_every_preset() {
    let dir = tempfile::tempdir().unwrap();
    let model = TinyLlama {
        n_layer: 3,
        n_ff: 256,
        n_expert: 8,
        ..TinyLlama::COMMITTED
    };
    let input = write_model(dir.path(), &model);
    let all = presets_and(&MORE_PRESETS);
    check_all("MoE llama", &input, &all);
}

/// Shapes nobody chose (see `llama_quantize_plan.rs`).
#[test]
fn llama_with_drawn_shapes_bytes_every_preset() {
    let (seed, model) = drawn_model();
    let dir = tempfile::tempdir().unwrap();
    let input = write_model(dir.path(), &model);
    let all = presets_and(&MORE_PRESETS);
    check_all(&format!("drawn llama (QF_PLAN_SEED={seed})"), &input, &all);
}

#[test]
fn real_gemma_bytes_every_preset() {
    let dir = tempfile::tempdir().unwrap();
    // Made by quantforge, checked against llama.cpp's Q4_K_M -> F16 --allow-requantize.
    let Some(f16) = gemma_f16(dir.path()) else {
        return;
    };
    // IQ3_S and IQ3_M are the i-quant presets llama.cpp runs without an importance matrix.
    check_all(
        "real Gemma-3-270M F16",
        &f16,
        &presets_and(&["IQ3_S", "IQ3_M"]),
    );
}

/// `--keep-split` on a model in three files: the three outputs byte-identical to the
/// three llama.cpp writes, for a few presets.
#[test]
fn keep_split_outputs_are_llama_cpp_files() {
    use quantforge::pipeline::run::OutputLayout;
    use quantforge_formats::gguf::{SplitLimits, split_path};
    let dir = tempfile::tempdir().unwrap();
    let single = write_model(dir.path(), &TinyLlama::COMMITTED);
    let whole = GgufModel::open(&single).unwrap();
    let per_part = whole.n_tensors().div_ceil(3);
    let input_prefix = dir.path().join("in");
    let parts = whole
        .write_split(
            &input_prefix,
            SplitLimits {
                max_tensors: Some(per_part),
                max_bytes: None,
            },
        )
        .unwrap();
    assert_eq!(parts.len(), 3);
    let mut failures = Vec::new();
    for name in ["Q4_K_M", "Q8_0", "Q5_K_S"] {
        let mut options = Options::new(Preset::parse(name).unwrap());
        options.keep_split = true;
        let theirs = dir.path().join(format!("llama-{name}"));
        let ours = dir.path().join(format!("ours-{name}"));
        let mut q = Quantize::new(options.ftype.code());
        q.keep_split = true;
        q.nthread = threads() as i32;
        quantize(&parts[0], &theirs, &q).expect("llama.cpp quantizes the set");

        let model = GgufModel::open(&parts[0]).unwrap();
        let params = ModelParams::from_gguf(model.metadata()).unwrap();
        let plan = plan(&params, &tensor_specs(&model).unwrap(), &options).unwrap();
        let run_options = RunOptions {
            threads: threads(),
            layout: OutputLayout::KeepSplit,
            ..RunOptions::default()
        };
        let summary = run(&model, &plan, &ours, &run_options, |_| {}).unwrap();
        assert_eq!(summary.files.len(), 3);
        for no in 0..3 {
            let (a, b) = (split_path(&ours, no, 3), split_path(&theirs, no, 3));
            assert_eq!(summary.files[usize::from(no)], a);
            if let Some(diff) = first_difference(&a, &b) {
                failures.push(format!("{name} part {no}: {diff}"));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
