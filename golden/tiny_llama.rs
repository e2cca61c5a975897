//! A small llama-architecture model in f16 with deterministic pseudo-random weights: the
//! model the README's first command quantizes, and the llama-shaped input of the tests
//! that compare quantforge's plan and output with llama.cpp's.
//!
//! Shared as a source file: `golden/gen_tiny_llama.rs` (the generator,
//! `cargo run --example gen-tiny-llama`) and the tests include it with `#[path]`. It needs only `quantforge_formats` and
//! `quantforge_kernels`.

#![allow(dead_code)] // each includer uses its own subset

use quantforge_formats::gguf::{GgufBuilder, GgufError, Value};
use quantforge_kernels::GgmlType;
use std::path::Path;

/// The shape and seed of a generated model.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TinyLlama {
    /// Embedding width (row length of most weights).
    pub n_embd: u64,
    /// Feed-forward width (row length of `ffn_down`).
    pub n_ff: u64,
    /// Number of layers.
    pub n_layer: u32,
    /// Query heads.
    pub n_head: u32,
    /// Key/value heads.
    pub n_head_kv: u32,
    /// Vocabulary size (rows of `token_embd` and `output`).
    pub n_vocab: u64,
    /// Whether `output.weight` is left out (the embedding doubles as it).
    pub tied: bool,
    /// Experts per layer (0: a dense feed-forward); two of them are used per token.
    pub n_expert: u32,
    /// Seed of the weights.
    pub seed: u64,
}

impl TinyLlama {
    /// The committed model `golden/tiny-llama-f16.gguf`: every row a multiple of 256,
    /// four query heads on one key/value head, about 5 MB.
    pub const COMMITTED: TinyLlama = TinyLlama {
        n_embd: 256,
        n_ff: 512,
        n_layer: 4,
        n_head: 4,
        n_head_kv: 1,
        n_vocab: 1024,
        tied: false,
        n_expert: 0,
        seed: 0x5EED_1A3A,
    };

    /// About 20 M weights: a second or two of IQ4_XS on one thread, written in many
    /// slabs, for the tests that stop or watch a run while it goes.
    pub const MID_SIZED: TinyLlama = TinyLlama {
        n_embd: 512,
        n_ff: 2048,
        n_layer: 4,
        n_head: 4,
        n_head_kv: 1,
        n_vocab: 4096,
        tied: false,
        n_expert: 0,
        seed: 7,
    };

    /// Every tensor (name, ggml dimensions, type) in file order.
    pub fn tensors(&self) -> Vec<(String, [u64; 4], GgmlType)> {
        let (e, f, v) = (self.n_embd, self.n_ff, self.n_vocab);
        let head = e / u64::from(self.n_head);
        let kv = head * u64::from(self.n_head_kv);
        let w = |name: String, ne0: u64, ne1: u64| (name, [ne0, ne1, 1, 1], GgmlType::F16);
        let x = u64::from(self.n_expert);
        let experts = |name: String, ne0: u64, ne1: u64| (name, [ne0, ne1, x, 1], GgmlType::F16);
        let norm = |name: String| (name, [e, 1, 1, 1], GgmlType::F32);
        let mut t = vec![w("token_embd.weight".into(), e, v)];
        for i in 0..self.n_layer {
            let l = |s: &str| format!("blk.{i}.{s}");
            t.extend([
                norm(l("attn_norm.weight")),
                w(l("attn_q.weight"), e, e),
                w(l("attn_k.weight"), e, kv),
                w(l("attn_v.weight"), e, kv),
                w(l("attn_output.weight"), e, e),
                norm(l("ffn_norm.weight")),
            ]);
            if self.n_expert == 0 {
                t.extend([
                    w(l("ffn_gate.weight"), e, f),
                    w(l("ffn_up.weight"), e, f),
                    w(l("ffn_down.weight"), f, e),
                ]);
            } else {
                t.extend([
                    (l("ffn_gate_inp.weight"), [e, x, 1, 1], GgmlType::F32),
                    experts(l("ffn_gate_exps.weight"), e, f),
                    experts(l("ffn_up_exps.weight"), e, f),
                    experts(l("ffn_down_exps.weight"), f, e),
                ]);
            }
        }
        t.push(norm("output_norm.weight".into()));
        if !self.tied {
            t.push(w("output.weight".into(), e, v));
        }
        t
    }

    /// A builder holding the GGUF file: llama hyperparameters, `general.file_type` 1 (mostly f16), and
    /// weights drawn from a xorshift generator (norm weights near 1, the rest small).
    pub fn builder(&self) -> Result<GgufBuilder<'static>, GgufError> {
        let mut b = GgufBuilder::new();
        let m = b.metadata_mut();
        m.set("general.architecture", Value::from("llama"))?;
        m.set("general.name", Value::from("tiny-llama"))?;
        m.set("general.file_type", Value::U32(1))?;
        m.set("llama.context_length", Value::U32(256))?;
        m.set("llama.embedding_length", Value::U32(self.n_embd as u32))?;
        m.set("llama.feed_forward_length", Value::U32(self.n_ff as u32))?;
        m.set("llama.block_count", Value::U32(self.n_layer))?;
        m.set("llama.attention.head_count", Value::U32(self.n_head))?;
        m.set("llama.attention.head_count_kv", Value::U32(self.n_head_kv))?;
        m.set("llama.rope.freq_base", Value::F32(10000.0))?;
        m.set("llama.attention.layer_norm_rms_epsilon", Value::F32(1e-5))?;
        m.set("llama.vocab_size", Value::U32(self.n_vocab as u32))?;
        // No tokenizer: llama.cpp loads the model with `vocab_size` dummy tokens.
        m.set("tokenizer.ggml.model", Value::from("no_vocab"))?;
        if self.n_expert > 0 {
            m.set("llama.expert_count", Value::U32(self.n_expert))?;
            m.set("llama.expert_used_count", Value::U32(2.min(self.n_expert)))?;
        }
        let mut rng = XorShift(self.seed | 1);
        for (name, ne, ty) in self.tensors() {
            let n = ne.iter().product::<u64>() as usize;
            let values: Vec<f32> = if ty == GgmlType::F32 && ne[1] == 1 {
                (0..n).map(|_| 1.0 + 0.1 * rng.symmetric()).collect()
            } else {
                (0..n)
                    .map(|_| 0.05 * rng.symmetric() * rng.symmetric())
                    .collect()
            };
            let data = match ty {
                GgmlType::F32 => values.iter().flat_map(|x| x.to_le_bytes()).collect(),
                _ => {
                    let mut out = vec![0u8; n * ty.type_size()];
                    quantforge_kernels::quantize(ty, &values, ne[0] as usize, None, &mut out)
                        .expect("finite values convert to f16");
                    out
                }
            };
            let dims = if ne[2] > 1 { 3 } else { 2 };
            b.add_tensor(name, ty, &ne[..dims], data)?;
        }
        Ok(b)
    }

    /// Pseudo-random importance data for every weight matrix but the token embedding
    /// (which llama-imatrix never sees), as llama-imatrix collects it: per tensor its
    /// name, `ne0` sums per expert and one whole count per expert.
    pub fn imatrix_entries(&self) -> Vec<(String, Vec<f32>, Vec<f32>)> {
        let mut rng = XorShift((self.seed ^ 0x1A7_81C5) | 1);
        let mut entries = Vec::new();
        for (name, ne, _) in self.tensors() {
            if ne[1] == 1 || name == "token_embd.weight" {
                continue;
            }
            let experts = ne[2] as usize;
            let sums = (0..ne[0] as usize * experts)
                .map(|_| 50.0 * rng.unit() * rng.unit())
                .collect();
            let counts = (0..experts)
                .map(|_| (1.0 + 600.0 * rng.unit()).floor())
                .collect();
            entries.push((name, sums, counts));
        }
        entries
    }

    /// The whole file in memory.
    pub fn to_bytes(&self) -> Result<Vec<u8>, GgufError> {
        self.builder()?.to_bytes()
    }

    /// Writes the file atomically.
    pub fn write(&self, path: &Path) -> Result<(), GgufError> {
        self.builder()?.write(path)
    }
}

/// xorshift64: fixed, portable pseudo-random numbers.
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    /// Uniform in [0, 1).
    fn unit(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 24) as f32
    }

    /// Uniform in [-1, 1).
    fn symmetric(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    }
}
