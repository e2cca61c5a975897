//! Expectations written out from llama.cpp's rules for synthetic llama- and gemma-shaped
//! models; the live comparison against llama.cpp itself is in
//! `ggml-ref/tests/llama_quantize_plan.rs`.

use super::*;

mod mixes;
mod models;
mod options;
mod order;

use GgmlType as T;

const F16: GgmlType = T::F16;
const F32: GgmlType = T::F32;

/// A llama-shaped model: 8 layers, n_embd 512 (every row a multiple of 256), 8 query heads
/// sharing 4 key/value heads, an untied output.
fn llama(n_layer: u32) -> (ModelParams, Vec<TensorSpec>) {
    let mut t = vec![
        TensorSpec::new("token_embd.weight", [512, 1000, 1, 1], F16),
        TensorSpec::new("output_norm.weight", [512, 1, 1, 1], F32),
        TensorSpec::new("output.weight", [512, 1000, 1, 1], F16),
        TensorSpec::new("rope_freqs.weight", [32, 1, 1, 1], F32),
    ];
    for i in 0..n_layer {
        let l = |s: &str| format!("blk.{i}.{s}");
        t.extend([
            TensorSpec::new(l("attn_norm.weight"), [512, 1, 1, 1], F32),
            TensorSpec::new(l("attn_q.weight"), [512, 512, 1, 1], F16),
            TensorSpec::new(l("attn_k.weight"), [512, 256, 1, 1], F16),
            TensorSpec::new(l("attn_v.weight"), [512, 256, 1, 1], F16),
            TensorSpec::new(l("attn_output.weight"), [512, 512, 1, 1], F16),
            TensorSpec::new(l("ffn_norm.weight"), [512, 1, 1, 1], F32),
            TensorSpec::new(l("ffn_gate.weight"), [512, 1024, 1, 1], F16),
            TensorSpec::new(l("ffn_up.weight"), [512, 1024, 1, 1], F16),
            TensorSpec::new(l("ffn_down.weight"), [1024, 512, 1, 1], F16),
        ]);
    }
    (ModelParams::new("llama", n_layer, 8, 4), t)
}

/// A gemma3-270M-shaped model: n_embd 640 (not a multiple of 256), 4 query heads on one
/// key/value head of 256, tied embeddings, 18 layers.
fn gemma() -> (ModelParams, Vec<TensorSpec>) {
    let mut t = vec![
        TensorSpec::new("token_embd.weight", [640, 2048, 1, 1], F16),
        TensorSpec::new("output_norm.weight", [640, 1, 1, 1], F32),
    ];
    for i in 0..18 {
        let l = |s: &str| format!("blk.{i}.{s}");
        t.extend([
            TensorSpec::new(l("attn_norm.weight"), [640, 1, 1, 1], F32),
            TensorSpec::new(l("attn_q.weight"), [640, 1024, 1, 1], F16),
            TensorSpec::new(l("attn_q_norm.weight"), [256, 1, 1, 1], F32),
            TensorSpec::new(l("attn_k.weight"), [640, 256, 1, 1], F16),
            TensorSpec::new(l("attn_k_norm.weight"), [256, 1, 1, 1], F32),
            TensorSpec::new(l("attn_v.weight"), [640, 256, 1, 1], F16),
            TensorSpec::new(l("attn_output.weight"), [1024, 640, 1, 1], F16),
            TensorSpec::new(l("post_attention_norm.weight"), [640, 1, 1, 1], F32),
            TensorSpec::new(l("ffn_norm.weight"), [640, 1, 1, 1], F32),
            TensorSpec::new(l("ffn_gate.weight"), [640, 2048, 1, 1], F16),
            TensorSpec::new(l("ffn_up.weight"), [640, 2048, 1, 1], F16),
            TensorSpec::new(l("ffn_down.weight"), [2048, 640, 1, 1], F16),
            TensorSpec::new(l("post_ffw_norm.weight"), [640, 1, 1, 1], F32),
        ]);
    }
    (ModelParams::new("gemma3", 18, 4, 1), t)
}

fn run(model: &ModelParams, tensors: &[TensorSpec], preset: &str) -> Plan {
    let preset = Preset::parse(preset).expect("a preset");
    plan(model, tensors, &Options::new(preset)).expect("a plan")
}

/// The layer of `blk.N.` names (none for global tensors).
fn layer(name: &str) -> Option<i64> {
    layer_of(name)
}

/// Asserts every tensor's target against `expected(name, source)`.
fn check(plan: &Plan, what: &str, expected: impl Fn(&str, GgmlType) -> GgmlType) {
    let mut wrong = Vec::new();
    for t in &plan.tensors {
        let want = expected(&t.name, t.source);
        if t.target != want {
            wrong.push(format!(
                "{}: got {} want {want} ({})",
                t.name, t.target, t.reason
            ));
        }
    }
    assert!(wrong.is_empty(), "{what}:\n{}", wrong.join("\n"));
}

/// 1-D tensors keep their type in every preset.
fn kept_1d(name: &str) -> bool {
    name.ends_with("norm.weight") || name == "rope_freqs.weight"
}

/// use_more_bits for 8 layers: the first eighth, the last eighth, every third between.
const MORE_BITS_8: [i64; 4] = [0, 3, 6, 7];
/// ... and for 18 layers.
const MORE_BITS_18: [i64; 9] = [0, 1, 4, 7, 10, 13, 15, 16, 17];

fn in_layers(name: &str, layers: &[i64]) -> bool {
    layer(name).is_some_and(|l| layers.contains(&l))
}
