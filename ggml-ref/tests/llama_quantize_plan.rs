//! quantforge's quantization plan against llama.cpp's quantizer itself: for each preset,
//! `llama_model_quantize` writes a file and every tensor's type in it (and the order of
//! the tensors, and `general.file_type` / `general.quantization_version`) must be what
//! `quantforge::pipeline::plan` decided.
//!
//! Inputs: the generated llama model of `golden/tiny_llama.rs` (rows multiples of 256),
//! a llama model with shapes drawn from a seed nobody chose (`QF_PLAN_SEED` to replay;
//! printed otherwise), and the real Gemma-3-270M turned into F16 as llama.cpp does it
//! (`QF_SKIP_REAL_MODELS=1` skips it). `QF_PLAN_PRESETS=Q4_K_M,Q8_0` limits the presets.
//!
//! llama.cpp's answer for a run seen before is remembered by its output's digest
//! (`ggml_ref::remembered`); its file is then the one quantforge writes when the digests
//! agree, and llama.cpp runs again only when they do not.

mod llama_common;
#[path = "../../golden/tiny_llama.rs"]
mod tiny_llama;

use llama_common::*;

use ggml_ref::llama::{Quantize, quantize};
use quantforge::GgmlType;
use quantforge::pipeline::plan::{ModelParams, Options, Preset, TensorSpec, TensorTypeRule, plan};
use quantforge_formats::gguf::GgufFile;
use std::path::Path;
use tiny_llama::TinyLlama;

/// More presets that need no importance matrix, checked on the small models only.
const MORE_PRESETS: [&str; 6] = ["IQ4_NL", "IQ4_XS", "IQ3_S", "IQ3_M", "MXFP4_MOE", "Q2_0"];

fn threads() -> i32 {
    std::thread::available_parallelism().map_or(1, |n| n.get() as i32)
}

/// The tensor list of a GGUF as the plan takes it.
fn specs(file: &GgufFile) -> Vec<TensorSpec> {
    file.tensors()
        .iter()
        .enumerate()
        .map(|(i, t)| TensorSpec {
            name: t.name().to_string(),
            ne: t.ne4(),
            ty: t.ty(),
            split: 0,
            offset: i as u64,
        })
        .collect()
}

/// The same run for llama.cpp.
fn llama_params(o: &Options) -> Quantize {
    let mut q = Quantize::new(o.ftype.code());
    q.only_copy = o.only_copy;
    q.pure = o.pure;
    q.quantize_output_tensor = o.quantize_output_tensor;
    q.allow_requantize = o.allow_requantize;
    q.output_tensor_type = o.output_tensor_type.map(|t| t.code());
    q.token_embedding_type = o.token_embedding_type.map(|t| t.code());
    q.tensor_types = o
        .tensor_types
        .iter()
        .map(|r| (r.pattern.clone(), r.ty.code()))
        .collect();
    q.nthread = threads();
    q
}

/// Quantizes `input` with llama.cpp for one preset and lists every difference between
/// its output and the plan.
fn compare(input: &Path, preset_name: &str, dir: &Path) -> Vec<String> {
    let preset = Preset::parse(preset_name).expect("a preset");
    compare_with(input, preset_name, &Options::new(preset), dir)
}

/// Like [`compare`] with any options; `label` names the case in messages.
fn compare_with(input: &Path, label: &str, options: &Options, dir: &Path) -> Vec<String> {
    let src = GgufFile::open(input).expect("input GGUF");
    let model = ModelParams::from_gguf(src.metadata()).expect("hyperparameters");
    let tensors = specs(&src);
    let plan = plan(&model, &tensors, options).expect("a plan");

    let out = dir.join("out.gguf");
    let q = llama_params(options);
    let reference = match llama_reference(input, &out, &q) {
        Ok(r) => r,
        Err(e) => return vec![format!("{label}: {e}")],
    };
    // A remembered answer is llama.cpp's file by its digest: quantforge writes the run,
    // and when the digests agree that file is llama.cpp's. Otherwise llama.cpp runs.
    let ours_is_theirs = || {
        quantforge_quantize(input, &out, options).is_ok()
            && reference.matches(&out).unwrap_or(false)
    };
    if !reference.written
        && !ours_is_theirs()
        && let Err(e) = quantize(input, &out, &q)
    {
        return vec![format!("{label}: {e}")];
    }
    let got = GgufFile::open(&out).expect("llama.cpp's output");
    let mut diffs = Vec::new();
    let meta = got.metadata();
    let ftype = meta.get_uint("general.file_type").ok();
    if ftype != Some(u64::from(plan.file_type)) {
        diffs.push(format!(
            "{label}: general.file_type {ftype:?}, plan {}",
            plan.file_type
        ));
    }
    let qv = meta.get_uint("general.quantization_version").ok();
    if qv != Some(u64::from(plan.quantization_version)) {
        diffs.push(format!("{label}: general.quantization_version {qv:?}"));
    }
    if got.tensors().len() != plan.tensors.len() {
        diffs.push(format!(
            "{label}: {} tensors, plan {}",
            got.tensors().len(),
            plan.tensors.len()
        ));
    }
    for (i, (t, p)) in got.tensors().iter().zip(&plan.tensors).enumerate() {
        if t.name() != p.name {
            diffs.push(format!(
                "{label}: tensor #{i} is {}, plan has {}",
                t.name(),
                p.name
            ));
        } else if t.ty() != p.target {
            diffs.push(format!(
                "{label}: {} [{:?}] is {}, plan {} ({}{})",
                p.name,
                p.ne,
                t.ty(),
                p.target,
                p.reason,
                p.fallback
                    .map(|f| format!(", fallback from {}", f.wanted))
                    .unwrap_or_default()
            ));
        }
    }
    drop(got);
    let _ = std::fs::remove_file(&out);
    diffs
}

/// Runs every preset on `input`, reports each one's verdict, fails listing all differences.
fn check_all(what: &str, input: &Path, presets: &[&str]) {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut all = Vec::new();
    let mut matched = 0;
    for p in presets {
        let diffs = compare(input, p, dir.path());
        if diffs.is_empty() {
            matched += 1;
        }
        all.extend(diffs);
    }
    eprintln!(
        "{what}: {matched} of {} presets give the types llama.cpp chose",
        presets.len()
    );
    assert!(all.is_empty(), "{what}:\n{}", all.join("\n"));
}

/// llama-quantize's options, each against llama.cpp on the generated llama.
#[test]
fn tiny_llama_options() {
    let dir = tempfile::tempdir().unwrap();
    let input = write_model(dir.path(), &TinyLlama::COMMITTED);
    let rule = |arg: &str| TensorTypeRule::parse(arg).unwrap();
    let mut cases: Vec<(String, Options)> = Vec::new();
    for preset in ["Q4_K_M", "Q2_K", "Q3_K_M", "TQ1_0", "F16"] {
        let base = Options::new(Preset::parse(preset).unwrap());
        let mut o = base.clone();
        o.pure = true;
        cases.push((format!("{preset} --pure"), o));
        let mut o = base.clone();
        o.quantize_output_tensor = false;
        cases.push((format!("{preset} --leave-output-tensor"), o));
        let mut o = base.clone();
        o.output_tensor_type = Some(GgmlType::Q8_0);
        o.token_embedding_type = Some(GgmlType::Q3_K);
        cases.push((
            format!("{preset} --output-tensor-type q8_0 --token-embedding-type q3_K"),
            o,
        ));
        let mut o = base.clone();
        o.tensor_types = vec![
            rule("ATTN_V=q8_0"),
            rule(r"blk\.[0-1]\.ffn_down=f16"),
            rule("ffn=q5_K"),
            rule("output=iq4_nl"),
        ];
        cases.push((format!("{preset} --tensor-type ..."), o));
        let mut o = base;
        o.pure = true;
        o.tensor_types = vec![rule("attn_q=q6_K")];
        cases.push((format!("{preset} --pure --tensor-type attn_q=q6_K"), o));
    }
    let mut all = Vec::new();
    for (label, options) in &cases {
        all.extend(compare_with(&input, label, options, dir.path()));
    }
    eprintln!(
        "tiny llama options: {} cases, {} differences",
        cases.len(),
        all.len()
    );
    assert!(all.is_empty(), "{}", all.join("\n"));
}

/// A mixture-of-experts llama with 8 experts, the count llama.cpp's mixes single out.
#[test]
fn moe_llama_every_preset() {
    let dir = tempfile::tempdir().unwrap();
    let model = TinyLlama {
        n_layer: 3,
        n_ff: 256,
        n_expert: 8,
        ..TinyLlama::COMMITTED
    };
    let input = write_model(dir.path(), &model);
    let all = presets_and(&MORE_PRESETS);
    check_all("MoE llama (8 experts)", &input, &all);
}

#[test]
fn tiny_llama_every_preset() {
    let dir = tempfile::tempdir().unwrap();
    let input = write_model(dir.path(), &TinyLlama::COMMITTED);
    let all = presets_and(&MORE_PRESETS);
    check_all("tiny llama", &input, &all);
}

/// Shapes nobody chose: row lengths that are multiples of 16 only (so some fall back to
/// 32-blocks and some to f16), 1 to 12 layers, grouped-query attention or not, tied
/// embeddings or not, dense or 2, 4 or 8 experts.
#[test]
fn llama_with_drawn_shapes_every_preset() {
    let (seed, model) = drawn_model();
    let dir = tempfile::tempdir().unwrap();
    let input = write_model(dir.path(), &model);
    let all = presets_and(&MORE_PRESETS);
    check_all(&format!("drawn llama (QF_PLAN_SEED={seed})"), &input, &all);
}

#[test]
fn real_gemma_f16_every_preset() {
    let Some(q4) = gemma_q4_k_m() else { return };
    let dir = tempfile::tempdir().unwrap();
    // llama.cpp's Q4_K_M -> F16, byte for byte (made by quantforge, checked against it).
    let f16 = gemma_f16(dir.path()).expect("the real model");
    // The F16 model itself is what the plan says F16 makes of the Q4_K_M.
    let diffs = {
        let src = GgufFile::open(&q4).unwrap();
        let model = ModelParams::from_gguf(src.metadata()).unwrap();
        let mut o = Options::new(Preset::parse("F16").unwrap());
        o.allow_requantize = true;
        let p = plan(&model, &specs(&src), &o).unwrap();
        p.check_runnable().unwrap();
        let got = GgufFile::open(&f16).unwrap();
        got.tensors()
            .iter()
            .zip(&p.tensors)
            .filter(|(t, p)| t.name() != p.name || t.ty() != p.target)
            .map(|(t, p)| format!("{} {} vs plan {} {}", t.name(), t.ty(), p.name, p.target))
            .collect::<Vec<_>>()
    };
    assert!(diffs.is_empty(), "Q4_K_M -> F16:\n{}", diffs.join("\n"));
    check_all("real Gemma-3-270M F16", &f16, &presets(&PRESETS));
}
