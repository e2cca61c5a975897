//! Rules that depend on the model: experts, grouped-query attention, size, metadata.

use super::*;

#[test]
fn moe_rules_read_the_layer_from_the_name() {
    let mut m = ModelParams::new("llama", 4, 32, 8);
    m.n_expert = 8;
    let mut ts = Vec::new();
    // Experts deliberately listed out of layer order.
    for i in [3, 0, 2, 1] {
        let l = |s: &str| format!("blk.{i}.{s}");
        ts.extend([
            TensorSpec::new(l("attn_v.weight"), [256, 256, 1, 1], F16),
            TensorSpec::new(l("attn_k.weight"), [256, 256, 1, 1], F16),
            TensorSpec::new(l("attn_output.weight"), [256, 256, 1, 1], F16),
            TensorSpec::new(l("ffn_gate_inp.weight"), [256, 8, 1, 1], F32),
            TensorSpec::new(l("ffn_down_exps.weight"), [256, 256, 8, 1], F16),
            TensorSpec::new(l("ffn_up_exps.weight"), [256, 256, 8, 1], F16),
        ]);
    }
    ts.push(TensorSpec::new("output.weight", [256, 64, 1, 1], F16));
    let p = run(&m, &ts, "Q4_K_M");
    check(&p, "MoE Q4_K_M", |n, src| {
        if n.contains("ffn_gate_inp") {
            src
        } else if n.contains("attn_v") || n.contains("attn_k") {
            T::Q8_0
        } else if n.contains("attn_output") {
            T::Q5_K
        } else if n == "output.weight" {
            T::Q6_K
        } else if n.contains("ffn_down") && in_layers(n, &[2, 3]) {
            // use_more_bits(layer, 4): layer >= 3, or layer % 3 == 2.
            T::Q6_K
        } else {
            T::Q4_K
        }
    });
    let p = run(&m, &ts, "MXFP4_MOE");
    check(&p, "MXFP4_MOE", |n, src| {
        if n.contains("ffn_gate_inp") {
            src
        } else if n.contains("_exps") {
            T::MXFP4
        } else {
            T::Q8_0
        }
    });

    ts.push(TensorSpec::new(
        "ffn_down_exps.weight",
        [256, 256, 8, 1],
        F16,
    ));
    let err = plan(&m, &ts, &Options::new(Preset::parse("Q4_K_M").unwrap())).unwrap_err();
    assert!(matches!(err, PlanError::NoLayer { .. }), "{err}");
    ts.pop();
    ts.push(TensorSpec::new(
        "blk.4.ffn_down_exps.weight",
        [256, 256, 8, 1],
        F16,
    ));
    let err = plan(&m, &ts, &Options::new(Preset::parse("Q4_K_M").unwrap())).unwrap_err();
    assert!(matches!(err, PlanError::BadLayer { layer: 4, .. }), "{err}");
}

#[test]
fn low_bit_mixes_use_gqa() {
    let (mut m, ts) = llama(8);
    let attn_v = |m: &ModelParams, preset: &str| {
        let p = run(m, &ts, preset);
        p.tensors
            .iter()
            .find(|t| t.name == "blk.4.attn_v.weight")
            .unwrap()
            .target
    };
    assert_eq!(attn_v(&m, "Q2_K"), T::Q3_K);
    m.n_head_kv = 2; // gqa 4
    assert_eq!(attn_v(&m, "Q2_K"), T::Q4_K);
    assert_eq!(attn_v(&m, "IQ4_NL"), T::Q5_K);
    m.n_head_kv = 0;
    assert_eq!(m.n_gqa(), 0);
}

#[test]
fn seventy_b_gets_more_bits_for_attn_v() {
    let (mut m, ts) = llama(80);
    assert!(m.is_70b());
    assert!(!llama(79).0.is_70b());
    let p = run(&m, &ts, "Q3_K_M");
    let t = p
        .tensors
        .iter()
        .find(|t| t.name == "blk.40.attn_v.weight")
        .unwrap();
    assert_eq!(t.target, T::Q5_K);
    m.n_head_kv = 8;
    assert!(!m.is_70b(), "65B: no grouped-query attention");
    let q = ModelParams::new("qwen2", 80, 64, 64);
    assert!(q.is_70b());
}

#[test]
fn invalid_inputs_are_errors() {
    let (m, mut ts) = llama(1);
    let o = Options::new(Preset {
        name: "NVFP4",
        ftype: FileType::NVFP4,
        copy: false,
    });
    assert!(matches!(
        plan(&m, &ts, &o),
        Err(PlanError::InvalidFileType(_))
    ));
    ts.push(ts[0].clone());
    assert!(matches!(
        plan(&m, &ts, &Options::new(Preset::parse("Q8_0").unwrap())),
        Err(PlanError::DuplicateTensor(_))
    ));
}

#[test]
fn model_params_from_gguf_metadata() {
    use quantforge_formats::gguf::{Array, Metadata, Value};
    let mut meta = Metadata::new();
    meta.set("general.architecture", Value::from("llama"))
        .unwrap();
    assert!(matches!(
        ModelParams::from_gguf(&meta),
        Err(PlanError::Metadata(_))
    ));
    meta.set("llama.block_count", Value::U32(3)).unwrap();
    meta.set(
        "llama.attention.head_count",
        Value::Array(Array::U32(vec![8, 8, 8])),
    )
    .unwrap();
    meta.set("llama.attention.head_count_kv", Value::U32(2))
        .unwrap();
    meta.set("general.file_type", Value::U32(1)).unwrap();
    let p = ModelParams::from_gguf(&meta).unwrap();
    assert_eq!((p.n_layer, p.n_head, p.n_head_kv, p.n_gqa()), (3, 8, 2, 4));
    assert_eq!(p.file_type, Some(1));
    meta.set(
        "llama.attention.head_count",
        Value::Array(Array::U32(vec![8, 8])),
    )
    .unwrap();
    assert!(ModelParams::from_gguf(&meta).is_err());
    meta.set("llama.attention.head_count", Value::U32(8))
        .unwrap();
    meta.set("llama.block_count", Value::U32(513)).unwrap();
    assert!(ModelParams::from_gguf(&meta).is_err());
    meta.set("llama.block_count", Value::F32(3.0)).unwrap();
    assert!(ModelParams::from_gguf(&meta).is_err());
}
