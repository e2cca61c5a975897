//! Small Hugging Face model folders with random weights and real tokenizers, rebuilt
//! exactly from a seed and llama.cpp's vocabulary files (`models/ggml-vocab-*.gguf` of the
//! llama.cpp the converter comes from; `scripts/fetch-models` extracts them). Their
//! conversions by llama.cpp's `convert_hf_to_gguf.py` are recorded in
//! `tests/hf/fixtures.json`; `tests/hf_convert.rs` checks quantforge against them and
//! `scripts/check-hf-convert` re-checks the converter live.
#![allow(dead_code)] // the test and the generator each use their part

use quantforge::formats::gguf::{Array, GgufFile, Value};
use quantforge::hf::tokenizer::pre;
use serde_json::{Map, Value as Json, json};
use std::path::Path;

/// Writes one fixture into a folder, reading vocabularies from the first path.
pub type Builder = fn(&Path, &Path);

/// Every fixture: (folder name, builder).
pub const FIXTURES: &[(&str, Builder)] = &[
    ("llama-bpe-tiny", llama_bpe),
    ("qwen2-tiny", qwen2),
    ("qwen3-tiny", qwen3),
    ("mistral-f16-tiny", mistral_f16),
    ("qwen3-sharded", qwen3_sharded),
    ("llama2-spm-tiny", llama2_spm),
    ("gemma2-tiny", gemma2),
    ("gemma3-tiny", gemma3_spm),
    ("gemma3-bpe-tiny", gemma3_bpe),
    ("embeddinggemma-tiny", embeddinggemma),
    ("phi3-tiny", phi3_128k),
    ("phi3-4k-tiny", phi3_4k),
    ("qwen3moe-tiny", qwen3_moe),
    ("qwen3moe-fused-tiny", qwen3_moe_fused),
    ("qwen3-fp8-tiny", qwen3_fp8),
    ("llama-fp8-tiny", llama_fp8),
    ("mixtral-tiny", mixtral),
    ("llama32-tiny", llama32),
];

/// Writes every fixture under `out`, reading vocabularies from `vocabs`.
pub fn write_all(vocabs: &Path, out: &Path) {
    for (name, build) in FIXTURES {
        let dir = out.join(name);
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        build(vocabs, &dir);
    }
}

/// The `pre_tokenizer` of a pre-tokenizer quantforge knows by configuration (the fixtures
/// are built from that table, so the converter's hashes of them check it).
fn known_pre(name: &str) -> Json {
    pre::known()
        .into_iter()
        .find(|k| k.name == name)
        .map(|k| k.pre_tokenizer)
        .expect("a known pre-tokenizer")
}

/// splitmix64: the same numbers on every machine.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Roughly normal, from the sum of four uniforms.
    fn normal(&mut self, scale: f32) -> f32 {
        let s: f32 = (0..4)
            .map(|_| (self.next() >> 40) as f32 / (1u64 << 24) as f32)
            .sum();
        (s - 2.0) * scale * 1.7
    }
}

fn bf16(x: f32) -> [u8; 2] {
    let b = x.to_bits();
    let r = (b + 0x7fff + ((b >> 16) & 1)) >> 16;
    (r as u16).to_le_bytes()
}

/// A tensor of a safetensors file: name, dtype, shape, values.
struct St {
    name: String,
    dtype: &'static str,
    shape: Vec<usize>,
    data: Vec<u8>,
}

fn random_f16(rng: &mut Rng, name: &str, shape: &[usize], scale: f32, offset: f32) -> St {
    let n: usize = shape.iter().product();
    let mut data = Vec::with_capacity(n * 2);
    for _ in 0..n {
        data.extend_from_slice(&half::f16::from_f32(offset + rng.normal(scale)).to_le_bytes());
    }
    St {
        name: name.to_string(),
        dtype: "F16",
        shape: shape.to_vec(),
        data,
    }
}

fn random_bf16(rng: &mut Rng, name: &str, shape: &[usize], scale: f32, offset: f32) -> St {
    let n: usize = shape.iter().product();
    let mut data = Vec::with_capacity(n * 2);
    for _ in 0..n {
        data.extend_from_slice(&bf16(offset + rng.normal(scale)));
    }
    St {
        name: name.to_string(),
        dtype: "BF16",
        shape: shape.to_vec(),
        data,
    }
}

/// Draws one tensor: (rng, name, shape, scale, offset).
type Draw = fn(&mut Rng, &str, &[usize], f32, f32) -> St;

/// Pushes block `l` of a Llama-style model, widths `[embd, ff, q_rows, kv_rows]`: Q, K, V,
/// output, gate, up and down weights, then the two norms, in that order of draws.
fn llama_block(t: &mut Vec<St>, rng: &mut Rng, draw: Draw, l: usize, dims: [usize; 4]) {
    let [embd, ff, q_rows, kv_rows] = dims;
    let p = format!("model.layers.{l}");
    let shapes: [(&str, [usize; 2]); 7] = [
        ("self_attn.q_proj", [q_rows, embd]),
        ("self_attn.k_proj", [kv_rows, embd]),
        ("self_attn.v_proj", [kv_rows, embd]),
        ("self_attn.o_proj", [embd, q_rows]),
        ("mlp.gate_proj", [ff, embd]),
        ("mlp.up_proj", [ff, embd]),
        ("mlp.down_proj", [embd, ff]),
    ];
    for (name, shape) in shapes {
        t.push(draw(rng, &format!("{p}.{name}.weight"), &shape, 0.05, 0.0));
    }
    for norm in ["input_layernorm", "post_attention_layernorm"] {
        t.push(draw(rng, &format!("{p}.{norm}.weight"), &[embd], 0.05, 1.0));
    }
}

/// Writes `tensors` as `parts` shards `model-0000K-of-0000N.safetensors` (tensors dealt
/// out in turn, so each shard holds names from all over the model) and the
/// `model.safetensors.index.json` that maps them, as `save_pretrained` shards a model.
fn write_sharded(dir: &Path, tensors: Vec<St>, parts: usize) {
    let mut shards: Vec<Vec<St>> = (0..parts).map(|_| Vec::new()).collect();
    let mut weight_map = Map::new();
    let mut total = 0usize;
    for (i, t) in tensors.into_iter().enumerate() {
        let k = i % parts;
        weight_map.insert(
            t.name.clone(),
            json!(format!("model-{:05}-of-{parts:05}.safetensors", k + 1)),
        );
        total += t.data.len();
        shards[k].push(t);
    }
    for (k, shard) in shards.into_iter().enumerate() {
        write_safetensors(
            &dir.join(format!("model-{:05}-of-{parts:05}.safetensors", k + 1)),
            shard,
        );
    }
    write_json(
        &dir.join("model.safetensors.index.json"),
        &json!({"metadata": {"total_size": total}, "weight_map": weight_map}),
    );
}

/// Writes a safetensors file as Hugging Face's library does: keys sorted, data in order.
fn write_safetensors(path: &Path, mut tensors: Vec<St>) {
    tensors.sort_by(|a, b| a.name.cmp(&b.name));
    let mut header = Map::new();
    header.insert("__metadata__".into(), json!({"format": "pt"}));
    let mut at = 0usize;
    for t in &tensors {
        header.insert(
            t.name.clone(),
            json!({"dtype": t.dtype, "shape": t.shape, "data_offsets": [at, at + t.data.len()]}),
        );
        at += t.data.len();
    }
    let mut h = serde_json::to_vec(&Json::Object(header)).unwrap();
    while !h.len().is_multiple_of(8) {
        h.push(b' ');
    }
    let mut out = Vec::with_capacity(8 + h.len() + at);
    out.extend_from_slice(&(h.len() as u64).to_le_bytes());
    out.extend_from_slice(&h);
    for t in &tensors {
        out.extend_from_slice(&t.data);
    }
    std::fs::write(path, out).unwrap();
}

fn write_json(path: &Path, v: &Json) {
    std::fs::write(path, serde_json::to_string_pretty(v).unwrap() + "\n").unwrap();
}

/// Protobuf: a varint.
fn pb_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Protobuf: a length-delimited field.
fn pb_bytes(out: &mut Vec<u8>, field: u64, b: &[u8]) {
    pb_varint(out, field << 3 | 2);
    pb_varint(out, b.len() as u64);
    out.extend_from_slice(b);
}

/// Protobuf: a varint field.
fn pb_uint(out: &mut Vec<u8>, field: u64, v: u64) {
    pb_varint(out, field << 3);
    pb_varint(out, v);
}

/// A SentencePiece `tokenizer.model` (BPE with byte fallback, as Llama 2's) holding the
/// tokens, scores and types of a llama.cpp vocabulary file.
fn write_sentencepiece(path: &Path, tokens: &[String], scores: &[f32], types: &[i32]) {
    let mut out = Vec::new();
    for ((t, s), ty) in tokens.iter().zip(scores).zip(types) {
        let mut piece = Vec::new();
        pb_bytes(&mut piece, 1, t.as_bytes());
        pb_varint(&mut piece, 2 << 3 | 5);
        piece.extend_from_slice(&s.to_le_bytes());
        if *ty != 1 {
            pb_uint(&mut piece, 3, *ty as u64);
        }
        pb_bytes(&mut out, 1, &piece);
    }
    let mut trainer = Vec::new();
    pb_uint(&mut trainer, 3, 2); // model_type: BPE
    pb_uint(&mut trainer, 4, tokens.len() as u64); // vocab_size
    pb_uint(&mut trainer, 35, 1); // byte_fallback
    pb_uint(&mut trainer, 40, 0); // unk_id
    pb_uint(&mut trainer, 41, 1); // bos_id
    pb_uint(&mut trainer, 42, 2); // eos_id
    pb_uint(&mut trainer, 43, u64::MAX); // pad_id: -1
    pb_bytes(&mut out, 2, &trainer);
    let mut normalizer = Vec::new();
    pb_bytes(&mut normalizer, 1, b"identity");
    pb_uint(&mut normalizer, 3, 1); // add_dummy_prefix
    pb_uint(&mut normalizer, 4, 0); // remove_extra_whitespaces
    pb_uint(&mut normalizer, 5, 1); // escape_whitespaces
    pb_bytes(&mut out, 3, &normalizer);
    std::fs::write(path, out).unwrap();
}

/// Tokens, types and merges of a llama.cpp vocabulary file.
fn read_vocab(path: &Path) -> (Vec<String>, Vec<i32>, Vec<String>) {
    let f = GgufFile::open(path).unwrap();
    let md = f.metadata();
    let strings = |key: &str| -> Vec<String> {
        match md.get(key) {
            Some(Value::Array(Array::String(a))) => a
                .iter()
                .map(|s| String::from_utf8(s.to_vec()).unwrap())
                .collect(),
            _ => Vec::new(),
        }
    };
    let types = match md.get("tokenizer.ggml.token_type") {
        Some(Value::Array(Array::I32(t))) => t.clone(),
        _ => panic!("{}: no token types", path.display()),
    };
    (
        strings("tokenizer.ggml.tokens"),
        types,
        strings("tokenizer.ggml.merges"),
    )
}

/// A Llama-3-style model: byte-level BPE `tokenizer.json` rebuilt from
/// `ggml-vocab-llama-bpe.gguf`, bf16 weights, grouped-query attention.
fn llama_bpe(vocabs: &Path, dir: &Path) {
    let (tokens, types, merges) = read_vocab(&vocabs.join("ggml-vocab-llama-bpe.gguf"));
    let mut vocab = Map::new();
    let mut added = Vec::new();
    for (i, (t, ty)) in tokens.iter().zip(&types).enumerate() {
        if *ty == 3 {
            added.push(
                json!({"id": i, "content": t, "single_word": false, "lstrip": false,
                "rstrip": false, "normalized": false, "special": true}),
            );
        } else {
            vocab.insert(t.clone(), json!(i));
        }
    }
    let bos = "<|begin_of_text|>";
    let tokenizer = json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "added_tokens": added,
        "normalizer": null,
        "pre_tokenizer": known_pre("llama-bpe"),
        "post_processor": {"type": "Sequence", "processors": [
            {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": false, "use_regex": true},
            {"type": "TemplateProcessing",
             "single": [{"SpecialToken": {"id": bos, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
             "pair": [{"SpecialToken": {"id": bos, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                      {"SpecialToken": {"id": bos, "type_id": 1}}, {"Sequence": {"id": "B", "type_id": 1}}],
             "special_tokens": {bos: {"id": bos, "ids": [128000], "tokens": [bos]}}}
        ]},
        "decoder": {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true},
        "model": {"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": null,
                  "end_of_word_suffix": null, "fuse_unk": false, "byte_fallback": false,
                  "ignore_merges": true, "vocab": vocab, "merges": merges}
    });
    write_json(&dir.join("tokenizer.json"), &tokenizer);
    write_json(
        &dir.join("tokenizer_config.json"),
        &json!({
            "bos_token": bos,
            "eos_token": "<|eot_id|>",
            "clean_up_tokenization_spaces": true,
            "model_max_length": 131072,
            "tokenizer_class": "PreTrainedTokenizerFast",
            "chat_template": "{{ bos_token }}{% for m in messages %}<|start_header_id|>{{ m['role'] }}<|end_header_id|>\n\n{{ m['content'] }}<|eot_id|>{% endfor %}"
        }),
    );
    write_json(
        &dir.join("generation_config.json"),
        &json!({"bos_token_id": 128000, "eos_token_id": [128001, 128009], "do_sample": true,
                "temperature": 0.6, "top_p": 0.9, "transformers_version": "4.57.6"}),
    );
    let (embd, ff, layers, heads, kv, vocab_n) =
        (64usize, 160usize, 2usize, 4usize, 2usize, tokens.len());
    let head_dim = embd / heads;
    write_json(
        &dir.join("config.json"),
        &json!({
            "architectures": ["LlamaForCausalLM"],
            "attention_bias": false,
            "attention_dropout": 0.0,
            "bos_token_id": 128000,
            "eos_token_id": 128009,
            "head_dim": head_dim,
            "hidden_act": "silu",
            "hidden_size": embd,
            "initializer_range": 0.02,
            "intermediate_size": ff,
            "max_position_embeddings": 2048,
            "mlp_bias": false,
            "model_type": "llama",
            "num_attention_heads": heads,
            "num_hidden_layers": layers,
            "num_key_value_heads": kv,
            "pretraining_tp": 1,
            "rms_norm_eps": 1e-5,
            "rope_scaling": null,
            "rope_theta": 500000.0,
            "tie_word_embeddings": false,
            "torch_dtype": "bfloat16",
            "transformers_version": "4.57.6",
            "use_cache": true,
            "vocab_size": vocab_n
        }),
    );
    let mut rng = Rng(0x51_6c_6c_61_6d_61);
    let mut t = vec![
        random_bf16(
            &mut rng,
            "model.embed_tokens.weight",
            &[vocab_n, embd],
            0.02,
            0.0,
        ),
        random_bf16(&mut rng, "lm_head.weight", &[vocab_n, embd], 0.02, 0.0),
        random_bf16(&mut rng, "model.norm.weight", &[embd], 0.05, 1.0),
    ];
    for l in 0..layers {
        llama_block(
            &mut t,
            &mut rng,
            random_bf16,
            l,
            [embd, ff, heads * head_dim, kv * head_dim],
        );
    }
    write_safetensors(&dir.join("model.safetensors"), t);
}

/// A Qwen2-style `tokenizer.json` and `tokenizer_config.json` from `ggml-vocab-qwen2.gguf`:
/// NFC, byte-level BPE, no BOS; returns the number of tokens it defines.
fn qwen_tokenizer(vocabs: &Path, dir: &Path) -> usize {
    let (tokens, types, merges) = read_vocab(&vocabs.join("ggml-vocab-qwen2.gguf"));
    let mut vocab = Map::new();
    let mut added = Vec::new();
    let mut n = 0;
    for (i, (t, ty)) in tokens.iter().zip(&types).enumerate() {
        match ty {
            1 => vocab.insert(t.clone(), json!(i)).map_or((), |_| ()),
            3 => added.push(
                json!({"id": i, "content": t, "single_word": false, "lstrip": false,
                "rstrip": false, "normalized": false, "special": true}),
            ),
            _ => continue,
        }
        n = i + 1;
    }
    let byte_level = pre::byte_level(false, false);
    let tokenizer = json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "added_tokens": added,
        "normalizer": {"type": "NFC"},
        "pre_tokenizer": known_pre("qwen2"),
        "post_processor": byte_level,
        "decoder": byte_level,
        "model": {"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": "",
                  "end_of_word_suffix": "", "fuse_unk": false, "byte_fallback": false,
                  "ignore_merges": false, "vocab": vocab, "merges": merges}
    });
    write_json(&dir.join("tokenizer.json"), &tokenizer);
    write_json(
        &dir.join("tokenizer_config.json"),
        &json!({
            "add_prefix_space": false,
            "bos_token": null,
            "eos_token": "<|im_end|>",
            "pad_token": "<|endoftext|>",
            "errors": "replace",
            "model_max_length": 32768,
            "split_special_tokens": false,
            "tokenizer_class": "Qwen2Tokenizer",
            "unk_token": null,
            "chat_template": "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
        }),
    );
    n
}

/// A Qwen2-style model: attention biases, bf16 weights, an untied output.
fn qwen2(vocabs: &Path, dir: &Path) {
    qwen_tokenizer(vocabs, dir);
    let (embd, ff, layers, heads, kv, vocab_n) =
        (64usize, 128usize, 2usize, 4usize, 2usize, 151936usize);
    let head_dim = embd / heads;
    write_json(
        &dir.join("config.json"),
        &json!({
            "architectures": ["Qwen2ForCausalLM"],
            "attention_dropout": 0.0,
            "bos_token_id": 151643,
            "eos_token_id": 151645,
            "hidden_act": "silu",
            "hidden_size": embd,
            "initializer_range": 0.02,
            "intermediate_size": ff,
            "max_position_embeddings": 32768,
            "max_window_layers": 21,
            "model_type": "qwen2",
            "num_attention_heads": heads,
            "num_hidden_layers": layers,
            "num_key_value_heads": kv,
            "rms_norm_eps": 1e-6,
            "rope_scaling": null,
            "rope_theta": 1000000.0,
            "sliding_window": 32768,
            "tie_word_embeddings": false,
            "torch_dtype": "bfloat16",
            "transformers_version": "4.57.6",
            "use_cache": true,
            "use_sliding_window": false,
            "vocab_size": vocab_n
        }),
    );
    write_json(
        &dir.join("generation_config.json"),
        &json!({"bos_token_id": 151643, "do_sample": true, "eos_token_id": [151645, 151643],
                "pad_token_id": 151643, "repetition_penalty": 1.05, "temperature": 0.7,
                "top_k": 20, "top_p": 0.8, "transformers_version": "4.57.6"}),
    );
    let mut rng = Rng(0x0071_7765_6e32);
    let mut t = vec![
        random_bf16(
            &mut rng,
            "model.embed_tokens.weight",
            &[vocab_n, embd],
            0.02,
            0.0,
        ),
        random_bf16(&mut rng, "lm_head.weight", &[vocab_n, embd], 0.02, 0.0),
        random_bf16(&mut rng, "model.norm.weight", &[embd], 0.05, 1.0),
    ];
    for l in 0..layers {
        let p = format!("model.layers.{l}");
        for (name, rows) in [
            ("q", heads * head_dim),
            ("k", kv * head_dim),
            ("v", kv * head_dim),
        ] {
            t.push(random_bf16(
                &mut rng,
                &format!("{p}.self_attn.{name}_proj.weight"),
                &[rows, embd],
                0.05,
                0.0,
            ));
            t.push(random_bf16(
                &mut rng,
                &format!("{p}.self_attn.{name}_proj.bias"),
                &[rows],
                0.05,
                0.0,
            ));
        }
        t.push(random_bf16(
            &mut rng,
            &format!("{p}.self_attn.o_proj.weight"),
            &[embd, heads * head_dim],
            0.05,
            0.0,
        ));
        t.push(random_bf16(
            &mut rng,
            &format!("{p}.mlp.gate_proj.weight"),
            &[ff, embd],
            0.05,
            0.0,
        ));
        t.push(random_bf16(
            &mut rng,
            &format!("{p}.mlp.up_proj.weight"),
            &[ff, embd],
            0.05,
            0.0,
        ));
        t.push(random_bf16(
            &mut rng,
            &format!("{p}.mlp.down_proj.weight"),
            &[embd, ff],
            0.05,
            0.0,
        ));
        t.push(random_bf16(
            &mut rng,
            &format!("{p}.input_layernorm.weight"),
            &[embd],
            0.05,
            1.0,
        ));
        t.push(random_bf16(
            &mut rng,
            &format!("{p}.post_attention_layernorm.weight"),
            &[embd],
            0.05,
            1.0,
        ));
    }
    write_safetensors(&dir.join("model.safetensors"), t);
}

/// A Qwen3-style model: Q/K norms, an explicit head size, tied embeddings.
fn qwen3(vocabs: &Path, dir: &Path) {
    let t = qwen3_files(vocabs, dir);
    write_safetensors(&dir.join("model.safetensors"), t);
}

/// The Qwen3-style model in three shards with an index.
fn qwen3_sharded(vocabs: &Path, dir: &Path) {
    let t = qwen3_files(vocabs, dir);
    write_sharded(dir, t, 3);
}

/// The Qwen3-style model's files but its weights, which it returns.
fn qwen3_files(vocabs: &Path, dir: &Path) -> Vec<St> {
    qwen_tokenizer(vocabs, dir);
    let (embd, ff, layers, heads, kv, head_dim, vocab_n) = (
        64usize,
        192usize,
        2usize,
        4usize,
        2usize,
        32usize,
        151936usize,
    );
    write_json(
        &dir.join("config.json"),
        &json!({
            "architectures": ["Qwen3ForCausalLM"],
            "attention_bias": false,
            "attention_dropout": 0.0,
            "bos_token_id": 151643,
            "eos_token_id": 151645,
            "head_dim": head_dim,
            "hidden_act": "silu",
            "hidden_size": embd,
            "initializer_range": 0.02,
            "intermediate_size": ff,
            "max_position_embeddings": 40960,
            "max_window_layers": 28,
            "model_type": "qwen3",
            "num_attention_heads": heads,
            "num_hidden_layers": layers,
            "num_key_value_heads": kv,
            "rms_norm_eps": 1e-6,
            "rope_scaling": null,
            "rope_theta": 1000000,
            "sliding_window": null,
            "tie_word_embeddings": true,
            "torch_dtype": "bfloat16",
            "transformers_version": "4.57.6",
            "use_cache": true,
            "use_sliding_window": false,
            "vocab_size": vocab_n
        }),
    );
    let mut rng = Rng(0x0071_7765_6e33);
    let mut t = vec![
        random_bf16(
            &mut rng,
            "model.embed_tokens.weight",
            &[vocab_n, embd],
            0.02,
            0.0,
        ),
        random_bf16(&mut rng, "model.norm.weight", &[embd], 0.05, 1.0),
    ];
    for l in 0..layers {
        let p = format!("model.layers.{l}");
        t.push(random_bf16(
            &mut rng,
            &format!("{p}.self_attn.q_proj.weight"),
            &[heads * head_dim, embd],
            0.05,
            0.0,
        ));
        t.push(random_bf16(
            &mut rng,
            &format!("{p}.self_attn.k_proj.weight"),
            &[kv * head_dim, embd],
            0.05,
            0.0,
        ));
        t.push(random_bf16(
            &mut rng,
            &format!("{p}.self_attn.v_proj.weight"),
            &[kv * head_dim, embd],
            0.05,
            0.0,
        ));
        t.push(random_bf16(
            &mut rng,
            &format!("{p}.self_attn.o_proj.weight"),
            &[embd, heads * head_dim],
            0.05,
            0.0,
        ));
        t.push(random_bf16(
            &mut rng,
            &format!("{p}.self_attn.q_norm.weight"),
            &[head_dim],
            0.05,
            1.0,
        ));
        t.push(random_bf16(
            &mut rng,
            &format!("{p}.self_attn.k_norm.weight"),
            &[head_dim],
            0.05,
            1.0,
        ));
        t.push(random_bf16(
            &mut rng,
            &format!("{p}.mlp.gate_proj.weight"),
            &[ff, embd],
            0.05,
            0.0,
        ));
        t.push(random_bf16(
            &mut rng,
            &format!("{p}.mlp.up_proj.weight"),
            &[ff, embd],
            0.05,
            0.0,
        ));
        t.push(random_bf16(
            &mut rng,
            &format!("{p}.mlp.down_proj.weight"),
            &[embd, ff],
            0.05,
            0.0,
        ));
        t.push(random_bf16(
            &mut rng,
            &format!("{p}.input_layernorm.weight"),
            &[embd],
            0.05,
            1.0,
        ));
        t.push(random_bf16(
            &mut rng,
            &format!("{p}.post_attention_layernorm.weight"),
            &[embd],
            0.05,
            1.0,
        ));
    }
    t
}

/// GPT-2's byte-level BPE `tokenizer.json` from `ggml-vocab-gpt-2.gguf`; returns its size.
fn gpt2_tokenizer(vocabs: &Path, dir: &Path) -> usize {
    let (tokens, types, merges) = read_vocab(&vocabs.join("ggml-vocab-gpt-2.gguf"));
    let mut vocab = Map::new();
    let mut added = Vec::new();
    for (i, (t, ty)) in tokens.iter().zip(&types).enumerate() {
        vocab.insert(t.clone(), json!(i));
        if *ty == 3 || t == "<|endoftext|>" {
            added.push(
                json!({"id": i, "content": t, "single_word": false, "lstrip": false,
                "rstrip": false, "normalized": true, "special": true}),
            );
        }
    }
    let byte_level = known_pre("gpt-2");
    write_json(
        &dir.join("tokenizer.json"),
        &json!({
            "version": "1.0", "truncation": null, "padding": null, "added_tokens": added,
            "normalizer": null, "pre_tokenizer": byte_level, "post_processor": byte_level,
            "decoder": byte_level,
            "model": {"type": "BPE", "dropout": null, "unk_token": null,
                      "continuing_subword_prefix": "", "end_of_word_suffix": "", "fuse_unk": false,
                      "byte_fallback": false, "ignore_merges": false, "vocab": vocab, "merges": merges}
        }),
    );
    write_json(
        &dir.join("tokenizer_config.json"),
        &json!({"bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>", "unk_token": "<|endoftext|>",
                "add_prefix_space": false, "model_max_length": 1024, "tokenizer_class": "GPT2Tokenizer"}),
    );
    tokens.len()
}

/// A Mistral-style model in f16: heads of 80 rows (so a quantizer task of 204 rows is
/// rounded to whole heads and a Q weight takes two), grouped-query attention, tied
/// embeddings, GPT-2's vocabulary.
fn mistral_f16(vocabs: &Path, dir: &Path) {
    let vocab_n = gpt2_tokenizer(vocabs, dir);
    let (embd, ff, layers, heads, kv) = (320usize, 512usize, 2usize, 4usize, 2usize);
    let head_dim = embd / heads;
    write_json(
        &dir.join("config.json"),
        &json!({
            "architectures": ["MistralForCausalLM"],
            "attention_dropout": 0.0,
            "bos_token_id": 50256,
            "eos_token_id": 50256,
            "hidden_act": "silu",
            "hidden_size": embd,
            "initializer_range": 0.02,
            "intermediate_size": ff,
            "max_position_embeddings": 32768,
            "model_type": "mistral",
            "num_attention_heads": heads,
            "num_hidden_layers": layers,
            "num_key_value_heads": kv,
            "rms_norm_eps": 1e-5,
            "rope_theta": 1000000.0,
            "sliding_window": null,
            "tie_word_embeddings": true,
            "torch_dtype": "float16",
            "transformers_version": "4.57.6",
            "use_cache": true,
            "vocab_size": vocab_n
        }),
    );
    let mut rng = Rng(0x006d_6973_7472);
    let mut t = vec![
        random_f16(
            &mut rng,
            "model.embed_tokens.weight",
            &[vocab_n, embd],
            0.02,
            0.0,
        ),
        random_f16(&mut rng, "model.norm.weight", &[embd], 0.05, 1.0),
    ];
    for l in 0..layers {
        llama_block(
            &mut t,
            &mut rng,
            random_f16,
            l,
            [embd, ff, heads * head_dim, kv * head_dim],
        );
    }
    write_safetensors(&dir.join("model.safetensors"), t);
}

/// A Llama-3.2-shaped benchmark folder (not a test fixture): width 2048, 32 heads of 64
/// rows, 8 KV heads, feed-forward 8192, tied embeddings, `layers` blocks, bf16, the
/// llama-bpe vocabulary; about 262M + 61M per block parameters.
pub fn llama_bench(vocabs: &Path, dir: &Path, layers: usize) {
    llama_bpe(vocabs, dir);
    let (embd, ff, heads, kv, vocab_n) = (2048usize, 8192usize, 32usize, 8usize, 128256usize);
    let head_dim = embd / heads;
    let mut config: Json =
        serde_json::from_str(&std::fs::read_to_string(dir.join("config.json")).unwrap()).unwrap();
    config["hidden_size"] = json!(embd);
    config["intermediate_size"] = json!(ff);
    config["num_attention_heads"] = json!(heads);
    config["num_key_value_heads"] = json!(kv);
    config["num_hidden_layers"] = json!(layers);
    config["head_dim"] = json!(head_dim);
    config["tie_word_embeddings"] = json!(true);
    write_json(&dir.join("config.json"), &config);
    let mut rng = Rng(0x0062_656e_6368);
    let mut t = vec![
        random_bf16(
            &mut rng,
            "model.embed_tokens.weight",
            &[vocab_n, embd],
            0.02,
            0.0,
        ),
        random_bf16(&mut rng, "model.norm.weight", &[embd], 0.05, 1.0),
    ];
    for l in 0..layers {
        llama_block(
            &mut t,
            &mut rng,
            random_bf16,
            l,
            [embd, ff, heads * head_dim, kv * head_dim],
        );
    }
    write_safetensors(&dir.join("model.safetensors"), t);
}

/// A Llama-2-style model: a SentencePiece `tokenizer.model` rebuilt from
/// `ggml-vocab-llama-spm.gguf`, f16 weights, full multi-head attention, an added token in
/// `tokenizer_config.json`.
/// Writes `tokenizer.model` rebuilt from `ggml-vocab-llama-spm.gguf`; returns its size.
fn spm_tokenizer(vocabs: &Path, dir: &Path) -> usize {
    let path = vocabs.join("ggml-vocab-llama-spm.gguf");
    let (tokens, types, _) = read_vocab(&path);
    let f = GgufFile::open(&path).unwrap();
    let scores = match f.metadata().get("tokenizer.ggml.scores") {
        Some(Value::Array(Array::F32(s))) => s.clone(),
        _ => panic!("{}: no scores", path.display()),
    };
    write_sentencepiece(&dir.join("tokenizer.model"), &tokens, &scores, &types);
    tokens.len()
}

fn llama2_spm(vocabs: &Path, dir: &Path) {
    let n_tokens = spm_tokenizer(vocabs, dir);
    write_json(
        &dir.join("tokenizer_config.json"),
        &json!({
            "add_bos_token": true,
            "add_eos_token": false,
            "bos_token": {"__type": "AddedToken", "content": "<s>", "lstrip": false, "normalized": false, "rstrip": false, "single_word": false},
            "eos_token": {"__type": "AddedToken", "content": "</s>", "lstrip": false, "normalized": false, "rstrip": false, "single_word": false},
            "unk_token": {"__type": "AddedToken", "content": "<unk>", "lstrip": false, "normalized": false, "rstrip": false, "single_word": false},
            "pad_token": null,
            "added_tokens_decoder": {
                "0": {"content": "<unk>", "lstrip": false, "normalized": false, "rstrip": false, "single_word": false, "special": true},
                "1": {"content": "<s>", "lstrip": false, "normalized": false, "rstrip": false, "single_word": false, "special": true},
                "2": {"content": "</s>", "lstrip": false, "normalized": false, "rstrip": false, "single_word": false, "special": true},
                "31999": {"content": "<|user|>", "lstrip": false, "normalized": false, "rstrip": false, "single_word": false, "special": false}
            },
            "legacy": false,
            "model_max_length": 4096,
            "sp_model_kwargs": {},
            "tokenizer_class": "LlamaTokenizer",
            "chat_template": "{% for m in messages %}[INST] {{ m['content'] }} [/INST]{% endfor %}"
        }),
    );
    let (embd, ff, layers, heads, vocab_n) = (128usize, 256usize, 2usize, 4usize, n_tokens);
    let head_dim = embd / heads;
    write_json(
        &dir.join("config.json"),
        &json!({
            "architectures": ["LlamaForCausalLM"],
            "bos_token_id": 1,
            "eos_token_id": 2,
            "hidden_act": "silu",
            "hidden_size": embd,
            "initializer_range": 0.02,
            "intermediate_size": ff,
            "max_position_embeddings": 4096,
            "model_type": "llama",
            "num_attention_heads": heads,
            "num_hidden_layers": layers,
            "num_key_value_heads": heads,
            "pretraining_tp": 1,
            "rms_norm_eps": 1e-5,
            "rope_scaling": null,
            "tie_word_embeddings": false,
            "torch_dtype": "float16",
            "transformers_version": "4.57.6",
            "use_cache": true,
            "vocab_size": vocab_n
        }),
    );
    let mut rng = Rng(0x006c_6c32_7370);
    let mut t = vec![
        random_f16(
            &mut rng,
            "model.embed_tokens.weight",
            &[vocab_n, embd],
            0.02,
            0.0,
        ),
        random_f16(&mut rng, "lm_head.weight", &[vocab_n, embd], 0.02, 0.0),
        random_f16(&mut rng, "model.norm.weight", &[embd], 0.05, 1.0),
    ];
    for l in 0..layers {
        llama_block(
            &mut t,
            &mut rng,
            random_f16,
            l,
            [embd, ff, heads * head_dim, heads * head_dim],
        );
    }
    write_safetensors(&dir.join("model.safetensors"), t);
}

/// Gemma's `tokenizer_config.json` over the SentencePiece vocabulary (with an added
/// token of its own, as Gemma's `<start_of_turn>`).
fn gemma_tokenizer_config(dir: &Path) {
    write_json(
        &dir.join("tokenizer_config.json"),
        &json!({
            "add_bos_token": true,
            "add_eos_token": false,
            "bos_token": "<s>",
            "eos_token": "</s>",
            "unk_token": "<unk>",
            "pad_token": "<unk>",
            "added_tokens_decoder": {
                "0": {"content": "<unk>", "lstrip": false, "normalized": false, "rstrip": false, "single_word": false, "special": true},
                "1": {"content": "<s>", "lstrip": false, "normalized": false, "rstrip": false, "single_word": false, "special": true},
                "2": {"content": "</s>", "lstrip": false, "normalized": false, "rstrip": false, "single_word": false, "special": true},
                "31998": {"content": "<start_of_turn>", "lstrip": false, "normalized": false, "rstrip": false, "single_word": false, "special": true},
                "31999": {"content": "<end_of_turn>", "lstrip": false, "normalized": false, "rstrip": false, "single_word": false, "special": true}
            },
            "sp_model_kwargs": {},
            "spaces_between_special_tokens": false,
            "tokenizer_class": "GemmaTokenizer",
            "use_default_system_prompt": false,
            "chat_template": "{{ bos_token }}{% for m in messages %}<start_of_turn>{{ m['role'] }}\n{{ m['content'] }}<end_of_turn>\n{% endfor %}"
        }),
    );
}

/// Pushes block `l` of a Gemma-style model (`prefix` `model.` or none): the attention
/// and MLP weights, then the sandwich norms stored as `w - 1` (values around 0), Gemma
/// 3's Q/K norms (`qk_norm`) among them.
#[allow(clippy::too_many_arguments)]
fn gemma_block(
    t: &mut Vec<St>,
    rng: &mut Rng,
    draw: Draw,
    prefix: &str,
    l: usize,
    dims: [usize; 4],
    head_dim: usize,
    qk_norm: bool,
) {
    let [embd, ff, q_rows, kv_rows] = dims;
    let p = format!("{prefix}layers.{l}");
    let shapes: [(&str, [usize; 2]); 7] = [
        ("self_attn.q_proj", [q_rows, embd]),
        ("self_attn.k_proj", [kv_rows, embd]),
        ("self_attn.v_proj", [kv_rows, embd]),
        ("self_attn.o_proj", [embd, q_rows]),
        ("mlp.gate_proj", [ff, embd]),
        ("mlp.up_proj", [ff, embd]),
        ("mlp.down_proj", [embd, ff]),
    ];
    for (name, shape) in shapes {
        t.push(draw(rng, &format!("{p}.{name}.weight"), &shape, 0.05, 0.0));
    }
    for norm in [
        "input_layernorm",
        "post_attention_layernorm",
        "pre_feedforward_layernorm",
        "post_feedforward_layernorm",
    ] {
        t.push(draw(rng, &format!("{p}.{norm}.weight"), &[embd], 0.3, 0.0));
    }
    if qk_norm {
        for norm in ["self_attn.q_norm", "self_attn.k_norm"] {
            t.push(draw(
                rng,
                &format!("{p}.{norm}.weight"),
                &[head_dim],
                0.3,
                0.0,
            ));
        }
    }
}

/// A Gemma-2-style model: bf16, SentencePiece, logit softcapping, an `lm_head` as
/// AutoAWQ checkpoints carry (which the converter drops).
fn gemma2(vocabs: &Path, dir: &Path) {
    let n_tokens = spm_tokenizer(vocabs, dir);
    gemma_tokenizer_config(dir);
    let (embd, ff, layers, heads, kv, head_dim) =
        (128usize, 384usize, 2usize, 4usize, 2usize, 48usize);
    write_json(
        &dir.join("config.json"),
        &json!({
            "architectures": ["Gemma2ForCausalLM"],
            "attention_bias": false,
            "attn_logit_softcapping": 50.0,
            "bos_token_id": 1,
            "eos_token_id": 2,
            "final_logit_softcapping": 30.0,
            "head_dim": head_dim,
            "hidden_activation": "gelu_pytorch_tanh",
            "hidden_size": embd,
            "intermediate_size": ff,
            "max_position_embeddings": 8192,
            "model_type": "gemma2",
            "num_attention_heads": heads,
            "num_hidden_layers": layers,
            "num_key_value_heads": kv,
            "pad_token_id": 0,
            "query_pre_attn_scalar": head_dim,
            "rms_norm_eps": 1e-6,
            "rope_theta": 10000.0,
            "sliding_window": 4096,
            "torch_dtype": "bfloat16",
            "transformers_version": "4.57.6",
            "vocab_size": n_tokens
        }),
    );
    let mut rng = Rng(0x6765_6d32);
    let mut t = vec![
        random_bf16(
            &mut rng,
            "model.embed_tokens.weight",
            &[n_tokens, embd],
            0.02,
            0.0,
        ),
        random_bf16(&mut rng, "lm_head.weight", &[n_tokens, embd], 0.02, 0.0),
        random_bf16(&mut rng, "model.norm.weight", &[embd], 0.3, 0.0),
    ];
    for l in 0..layers {
        gemma_block(
            &mut t,
            &mut rng,
            random_bf16,
            "model.",
            l,
            [embd, ff, heads * head_dim, kv * head_dim],
            head_dim,
            false,
        );
    }
    write_safetensors(&dir.join("model.safetensors"), t);
}

/// The `config.json` of a Gemma-3-style text model as `save_pretrained` writes it.
fn gemma3_config(arch: &str, dims: [usize; 6], vocab: usize, dtype: &str, extra: Json) -> Json {
    let [embd, ff, layers, heads, kv, head_dim] = dims;
    let mut c = json!({
        "_sliding_window_pattern": 6,
        "architectures": [arch],
        "attention_bias": false,
        "attention_dropout": 0.0,
        "attn_logit_softcapping": null,
        "bos_token_id": 2,
        "eos_token_id": 1,
        "final_logit_softcapping": null,
        "head_dim": head_dim,
        "hidden_activation": "gelu_pytorch_tanh",
        "hidden_size": embd,
        "initializer_range": 0.02,
        "intermediate_size": ff,
        "layer_types": (0..layers).map(|i| if (i + 1) % 6 == 0 { "full_attention" } else { "sliding_attention" }).collect::<Vec<_>>(),
        "max_position_embeddings": 32768,
        "model_type": "gemma3_text",
        "num_attention_heads": heads,
        "num_hidden_layers": layers,
        "num_key_value_heads": kv,
        "pad_token_id": 0,
        "query_pre_attn_scalar": head_dim,
        "rms_norm_eps": 1e-6,
        "rope_local_base_freq": 10000.0,
        "rope_scaling": null,
        "rope_theta": 1000000.0,
        "sliding_window": 512,
        "torch_dtype": dtype,
        "transformers_version": "4.57.6",
        "use_bidirectional_attention": false,
        "use_cache": true,
        "vocab_size": vocab
    });
    if let (Json::Object(c), Json::Object(extra)) = (&mut c, extra) {
        c.extend(extra);
    }
    c
}

/// Gemma 3's weights: embedding, final norm, blocks (`prefix` `model.` or none).
fn gemma3_tensors(
    rng: &mut Rng,
    draw: Draw,
    prefix: &str,
    rows: usize,
    dims: [usize; 6],
) -> Vec<St> {
    let [embd, ff, layers, heads, kv, head_dim] = dims;
    let mut t = vec![
        draw(
            rng,
            &format!("{prefix}embed_tokens.weight"),
            &[rows, embd],
            0.02,
            0.0,
        ),
        draw(rng, &format!("{prefix}norm.weight"), &[embd], 0.3, 0.0),
    ];
    for l in 0..layers {
        gemma_block(
            &mut t,
            rng,
            draw,
            prefix,
            l,
            [embd, ff, heads * head_dim, kv * head_dim],
            head_dim,
            true,
        );
    }
    t
}

/// A Gemma-3-style model: f16 (its norms' `+ 1` rounded to f16, as torch does),
/// SentencePiece, Q/K norms, linear rope scaling, a final logit softcap.
fn gemma3_spm(vocabs: &Path, dir: &Path) {
    let n_tokens = spm_tokenizer(vocabs, dir);
    gemma_tokenizer_config(dir);
    let dims = [96usize, 256, 3, 3, 1, 64];
    let extra = json!({
        "rope_scaling": {"factor": 8.0, "rope_type": "linear"},
        "final_logit_softcapping": 30.0,
    });
    write_json(
        &dir.join("config.json"),
        &gemma3_config("Gemma3ForCausalLM", dims, n_tokens, "float16", extra),
    );
    let mut rng = Rng(0x6765_6d33);
    let t = gemma3_tensors(&mut rng, random_f16, "model.", n_tokens, dims);
    write_safetensors(&dir.join("model.safetensors"), t);
}

/// A Gemma-3-style model with a byte-level BPE `tokenizer.json` and no `tokenizer.model`:
/// its embedding has rows past the vocabulary, which the converter drops.
fn gemma3_bpe(vocabs: &Path, dir: &Path) {
    let n_tokens = qwen_tokenizer(vocabs, dir);
    let vocab = n_tokens + 37;
    let dims = [64usize, 192, 2, 2, 1, 32];
    write_json(
        &dir.join("config.json"),
        &gemma3_config("Gemma3ForCausalLM", dims, vocab, "bfloat16", json!({})),
    );
    let mut rng = Rng(0x0067_3362_7065);
    let t = gemma3_tensors(&mut rng, random_bf16, "model.", vocab, dims);
    write_safetensors(&dir.join("model.safetensors"), t);
}

/// An EmbeddingGemma-style sentence-transformers folder (`Gemma3TextModel`): f32 weights
/// named without `model.`, bidirectional attention (whose config class halves the
/// sliding window the converter writes unhalved), mean pooling, two `Dense` modules.
fn embeddinggemma(vocabs: &Path, dir: &Path) {
    let n_tokens = spm_tokenizer(vocabs, dir);
    gemma_tokenizer_config(dir);
    let dims = [64usize, 128, 2, 2, 1, 32];
    let extra = json!({"use_bidirectional_attention": true, "sliding_window": 257});
    write_json(
        &dir.join("config.json"),
        &gemma3_config("Gemma3TextModel", dims, n_tokens, "float32", extra),
    );
    let random_f32 = |rng: &mut Rng, name: &str, shape: &[usize], scale: f32, offset: f32| {
        let n: usize = shape.iter().product();
        St {
            name: name.to_string(),
            dtype: "F32",
            shape: shape.to_vec(),
            data: (0..n)
                .flat_map(|_| (offset + rng.normal(scale)).to_le_bytes())
                .collect(),
        }
    };
    let mut rng = Rng(0x6567_656d);
    let t = gemma3_tensors(&mut rng, random_f32, "", n_tokens, dims);
    write_safetensors(&dir.join("model.safetensors"), t);
    write_json(
        &dir.join("modules.json"),
        &json!([
            {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
            {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
            {"idx": 2, "name": "2", "path": "2_Dense", "type": "sentence_transformers.models.Dense"},
            {"idx": 3, "name": "3", "path": "3_Dense", "type": "sentence_transformers.models.Dense"},
            {"idx": 4, "name": "4", "path": "4_Normalize", "type": "sentence_transformers.models.Normalize"}
        ]),
    );
    std::fs::create_dir_all(dir.join("1_Pooling")).unwrap();
    write_json(
        &dir.join("1_Pooling/config.json"),
        &json!({"word_embedding_dimension": dims[0], "pooling_mode_cls_token": false,
                "pooling_mode_mean_tokens": true, "pooling_mode_max_tokens": false,
                "pooling_mode_mean_sqrt_len_tokens": false, "pooling_mode_weightedmean_tokens": false,
                "pooling_mode_lasttoken": false, "include_prompt": true}),
    );
    let wide = 3 * dims[0];
    for (path, fin, fout) in [("2_Dense", dims[0], wide), ("3_Dense", wide, dims[0])] {
        std::fs::create_dir_all(dir.join(path)).unwrap();
        write_json(
            &dir.join(path).join("config.json"),
            &json!({"in_features": fin, "out_features": fout, "bias": false,
                    "activation_function": "torch.nn.modules.linear.Identity"}),
        );
        write_safetensors(
            &dir.join(path).join("model.safetensors"),
            vec![random_f32(
                &mut rng,
                "linear.weight",
                &[fout, fin],
                0.05,
                0.0,
            )],
        );
    }
    std::fs::create_dir_all(dir.join("4_Normalize")).unwrap();
}

/// Phi-3's tokenizer files over the SentencePiece vocabulary: `tokenizer.model`, a
/// Llama-2-style `tokenizer.json` and `tokenizer_config.json`, both listing Phi-3's added
/// tokens past the pieces (and `<unk>`, `<s>`, `</s>`, which Phi-3's reading makes control
/// tokens). Returns the number of pieces.
fn phi3_tokenizer(vocabs: &Path, dir: &Path) -> usize {
    let n = spm_tokenizer(vocabs, dir);
    let (tokens, _, _) = read_vocab(&vocabs.join("ggml-vocab-llama-spm.gguf"));
    let added: Vec<(usize, &str, bool)> = vec![
        (0, "<unk>", true),
        (1, "<s>", true),
        (2, "</s>", false),
        (n, "<|endoftext|>", true),
        (n + 1, "<|assistant|>", true),
        (n + 2, "<|placeholder1|>", true),
        (n + 3, "<|system|>", true),
        (n + 4, "<|end|>", true),
        (n + 5, "<|user|>", true),
        (n + 6, "<|plain|>", false),
    ];
    let entry = |id: usize, content: &str, special: bool| {
        json!({"id": id, "content": content, "single_word": false, "lstrip": false,
               "rstrip": special, "normalized": false, "special": special})
    };
    let vocab: Map<String, Json> = tokens
        .iter()
        .enumerate()
        .map(|(i, t)| (t.clone(), json!(i)))
        .collect();
    let bos = json!({"SpecialToken": {"id": "<s>", "type_id": 0}});
    write_json(
        &dir.join("tokenizer.json"),
        &json!({
            "version": "1.0",
            "truncation": null,
            "padding": null,
            "added_tokens": added.iter().map(|&(i, c, s)| entry(i, c, s)).collect::<Vec<_>>(),
            "normalizer": {"type": "Sequence", "normalizers": [
                {"type": "Prepend", "prepend": "\u{2581}"},
                {"type": "Replace", "pattern": {"String": " "}, "content": "\u{2581}"}]},
            "pre_tokenizer": null,
            "post_processor": {"type": "TemplateProcessing",
                "single": [bos, {"Sequence": {"id": "A", "type_id": 0}}],
                "pair": [bos, {"Sequence": {"id": "A", "type_id": 0}}, bos, {"Sequence": {"id": "B", "type_id": 1}}],
                "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}},
            "decoder": {"type": "Sequence", "decoders": [
                {"type": "Replace", "pattern": {"String": "\u{2581}"}, "content": " "},
                {"type": "ByteFallback"}, {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
            "model": {"type": "BPE", "dropout": null, "unk_token": "<unk>", "continuing_subword_prefix": null,
                      "end_of_word_suffix": null, "fuse_unk": true, "byte_fallback": true,
                      "ignore_merges": false, "vocab": vocab, "merges": []}
        }),
    );
    let decoder: Map<String, Json> = added
        .iter()
        .map(|&(i, c, s)| {
            (
                i.to_string(),
                json!({"content": c, "lstrip": false, "normalized": false,
                                    "rstrip": s, "single_word": false, "special": s}),
            )
        })
        .collect();
    write_json(
        &dir.join("tokenizer_config.json"),
        &json!({
            "add_bos_token": false,
            "add_eos_token": false,
            "added_tokens_decoder": decoder,
            "bos_token": "<s>",
            "chat_template": "{% for message in messages %}{{'<|' + message['role'] + '|>' + '\n' + message['content'] + '<|end|>\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|assistant|>\n' }}{% endif %}",
            "clean_up_tokenization_spaces": false,
            "eos_token": "<|endoftext|>",
            "legacy": false,
            "model_max_length": 131072,
            "pad_token": "<|endoftext|>",
            "padding_side": "left",
            "sp_model_kwargs": {},
            "tokenizer_class": "LlamaTokenizer",
            "unk_token": "<unk>",
            "use_default_system_prompt": false
        }),
    );
    n
}

/// Phi-3's weights: fused QKV and gate/up projections, bf16 or f16.
fn phi3_tensors(rng: &mut Rng, draw: Draw, vocab: usize, dims: [usize; 5]) -> Vec<St> {
    let [embd, ff, layers, heads, kv] = dims;
    let head_dim = embd / heads;
    let mut t = vec![
        draw(rng, "model.embed_tokens.weight", &[vocab, embd], 0.02, 0.0),
        draw(rng, "lm_head.weight", &[vocab, embd], 0.02, 0.0),
        draw(rng, "model.norm.weight", &[embd], 0.05, 1.0),
    ];
    for l in 0..layers {
        let p = format!("model.layers.{l}");
        let shapes: [(&str, [usize; 2]); 4] = [
            ("self_attn.qkv_proj", [(heads + 2 * kv) * head_dim, embd]),
            ("self_attn.o_proj", [embd, embd]),
            ("mlp.gate_up_proj", [2 * ff, embd]),
            ("mlp.down_proj", [embd, ff]),
        ];
        for (name, shape) in shapes {
            t.push(draw(rng, &format!("{p}.{name}.weight"), &shape, 0.05, 0.0));
        }
        for norm in ["input_layernorm", "post_attention_layernorm"] {
            t.push(draw(rng, &format!("{p}.{norm}.weight"), &[embd], 0.05, 1.0));
        }
    }
    t
}

/// A Phi-3-mini-128k-style model: bf16, LongRoPE factors (written as generated tensors),
/// a sliding window, Phi-3's added tokens over a vocabulary padded to `vocab_size`.
fn phi3_128k(vocabs: &Path, dir: &Path) {
    let n = phi3_tokenizer(vocabs, dir);
    let vocab = n + 64;
    let dims = [96usize, 256, 2, 3, 3];
    let half = dims[0] / dims[3] / 2;
    let long: Vec<f64> = (0..half).map(|i| 1.0 + 0.37 * i as f64 + 1e-9).collect();
    let short: Vec<f64> = (0..half).map(|i| 1.0 + 0.013 * i as f64).collect();
    write_json(
        &dir.join("config.json"),
        &json!({
            "architectures": ["Phi3ForCausalLM"],
            "attention_dropout": 0.0,
            "bos_token_id": 1,
            "embd_pdrop": 0.0,
            "eos_token_id": 32000,
            "hidden_act": "silu",
            "hidden_size": dims[0],
            "initializer_range": 0.02,
            "intermediate_size": dims[1],
            "max_position_embeddings": 131072,
            "model_type": "phi3",
            "num_attention_heads": dims[3],
            "num_hidden_layers": dims[2],
            "num_key_value_heads": dims[4],
            "original_max_position_embeddings": 4096,
            "pad_token_id": 32000,
            "resid_pdrop": 0.0,
            "rms_norm_eps": 1e-5,
            "rope_scaling": {"long_factor": long, "short_factor": short, "type": "longrope"},
            "rope_theta": 10000.0,
            "sliding_window": 262144,
            "tie_word_embeddings": false,
            "torch_dtype": "bfloat16",
            "transformers_version": "4.57.6",
            "use_cache": true,
            "vocab_size": vocab
        }),
    );
    let mut rng = Rng(0x7068_6933);
    let t = phi3_tensors(&mut rng, random_bf16, vocab, dims);
    write_safetensors(&dir.join("model.safetensors"), t);
}

/// A Phi-3-mini-4k-style model: f16, no rope scaling, a partial rotary factor, grouped
/// KV heads.
fn phi3_4k(vocabs: &Path, dir: &Path) {
    let n = phi3_tokenizer(vocabs, dir);
    let vocab = n + 64;
    let dims = [96usize, 192, 2, 3, 1];
    write_json(
        &dir.join("config.json"),
        &json!({
            "architectures": ["Phi3ForCausalLM"],
            "bos_token_id": 1,
            "eos_token_id": 32000,
            "hidden_act": "silu",
            "hidden_size": dims[0],
            "intermediate_size": dims[1],
            "max_position_embeddings": 4096,
            "model_type": "phi3",
            "num_attention_heads": dims[3],
            "num_hidden_layers": dims[2],
            "num_key_value_heads": dims[4],
            "partial_rotary_factor": 0.75,
            "rms_norm_eps": 1e-5,
            "rope_scaling": null,
            "sliding_window": 2047,
            "torch_dtype": "float16",
            "transformers_version": "4.57.6",
            "vocab_size": vocab
        }),
    );
    let mut rng = Rng(0x7068_6934);
    let t = phi3_tensors(&mut rng, random_f16, vocab, dims);
    write_safetensors(&dir.join("model.safetensors"), t);
}

/// A Qwen3-MoE-style model: bf16, eight experts per block stored one tensor per expert
/// (which the converter stacks into one 3-D tensor per projection), a router, Q/K norms,
/// GPT-2's vocabulary, in two shards that each hold experts of every block (so a block's
/// stacked tensors are written when its last expert is read, in the second shard).
fn qwen3_moe_files(vocabs: &Path, dir: &Path, fused: bool) {
    let vocab_n = gpt2_tokenizer(vocabs, dir);
    let (embd, ff, moe_ff, layers, heads, kv, head_dim, experts) = (
        256usize, 512usize, 256usize, 2usize, 4usize, 2usize, 64usize, 8usize,
    );
    write_json(
        &dir.join("config.json"),
        &json!({
            "architectures": ["Qwen3MoeForCausalLM"],
            "attention_bias": false,
            "attention_dropout": 0.0,
            "bos_token_id": 50256,
            "decoder_sparse_step": 1,
            "eos_token_id": 50256,
            "head_dim": head_dim,
            "hidden_act": "silu",
            "hidden_size": embd,
            "initializer_range": 0.02,
            "intermediate_size": ff,
            "max_position_embeddings": 40960,
            "max_window_layers": layers,
            "mlp_only_layers": [],
            "model_type": "qwen3_moe",
            "moe_intermediate_size": moe_ff,
            "norm_topk_prob": true,
            "num_attention_heads": heads,
            "num_experts": experts,
            "num_experts_per_tok": 2,
            "num_hidden_layers": layers,
            "num_key_value_heads": kv,
            "output_router_logits": false,
            "rms_norm_eps": 1e-6,
            "rope_scaling": null,
            "rope_theta": 1000000.0,
            "router_aux_loss_coef": 0.001,
            "sliding_window": null,
            "tie_word_embeddings": true,
            "torch_dtype": "bfloat16",
            "transformers_version": "4.57.6",
            "use_cache": true,
            "use_sliding_window": false,
            "vocab_size": vocab_n
        }),
    );
    let mut rng = Rng(0x0071_776d_6f65);
    let d = random_bf16;
    let mut t = vec![
        d(
            &mut rng,
            "model.embed_tokens.weight",
            &[vocab_n, embd],
            0.02,
            0.0,
        ),
        d(&mut rng, "model.norm.weight", &[embd], 0.05, 1.0),
    ];
    for l in 0..layers {
        let p = format!("model.layers.{l}");
        let q_rows = heads * head_dim;
        let kv_rows = kv * head_dim;
        for (name, shape) in [
            ("self_attn.q_proj", [q_rows, embd]),
            ("self_attn.k_proj", [kv_rows, embd]),
            ("self_attn.v_proj", [kv_rows, embd]),
            ("self_attn.o_proj", [embd, q_rows]),
            ("mlp.gate", [experts, embd]),
        ] {
            t.push(d(
                &mut rng,
                &format!("{p}.{name}.weight"),
                &shape,
                0.05,
                0.0,
            ));
        }
        if fused {
            let gate_up = [experts, 2 * moe_ff, embd];
            t.push(d(
                &mut rng,
                &format!("{p}.mlp.experts.gate_up_proj"),
                &gate_up,
                0.05,
                0.0,
            ));
            let down = [experts, embd, moe_ff];
            t.push(d(
                &mut rng,
                &format!("{p}.mlp.experts.down_proj"),
                &down,
                0.05,
                0.0,
            ));
        } else {
            for x in 0..experts {
                for (name, shape) in [
                    ("gate_proj", [moe_ff, embd]),
                    ("up_proj", [moe_ff, embd]),
                    ("down_proj", [embd, moe_ff]),
                ] {
                    let name = format!("{p}.mlp.experts.{x}.{name}.weight");
                    t.push(d(&mut rng, &name, &shape, 0.05, 0.0));
                }
            }
        }
        for norm in ["input_layernorm", "post_attention_layernorm"] {
            t.push(d(
                &mut rng,
                &format!("{p}.{norm}.weight"),
                &[embd],
                0.05,
                1.0,
            ));
        }
        for norm in ["self_attn.q_norm", "self_attn.k_norm"] {
            t.push(d(
                &mut rng,
                &format!("{p}.{norm}.weight"),
                &[head_dim],
                0.05,
                1.0,
            ));
        }
    }
    write_sharded(dir, t, 2);
}

fn qwen3_moe(vocabs: &Path, dir: &Path) {
    qwen3_moe_files(vocabs, dir, false);
}

/// The same model as transformers 5 saves it: each block's experts already stacked, the
/// gate and up projections fused (which the converter splits).
fn qwen3_moe_fused(vocabs: &Path, dir: &Path) {
    qwen3_moe_files(vocabs, dir, true);
}

/// How an FP8 fixture scales one weight.
#[derive(Clone, Copy)]
enum Fp8Scale {
    /// A `weight_block_size` grid of scales (the checkpoint's block), in this dtype.
    Blocks(&'static str),
    /// One scale per row.
    Rows,
    /// One scale for the tensor (a 0-D scale).
    Tensor,
}

/// Reads a safetensors file written by [`write_safetensors`] back into its tensors.
fn read_safetensors(path: &Path) -> Vec<St> {
    let bytes = std::fs::read(path).unwrap();
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let header: Map<String, Json> = serde_json::from_slice(&bytes[8..8 + n]).unwrap();
    let data = &bytes[8 + n..];
    let mut out = Vec::new();
    for (name, info) in header {
        if name == "__metadata__" {
            continue;
        }
        let dtype = match info["dtype"].as_str().unwrap() {
            "BF16" => "BF16",
            "F16" => "F16",
            "F32" => "F32",
            other => panic!("unexpected dtype {other}"),
        };
        let shape = info["shape"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d.as_u64().unwrap() as usize)
            .collect();
        let at = info["data_offsets"][0].as_u64().unwrap() as usize;
        let end = info["data_offsets"][1].as_u64().unwrap() as usize;
        out.push(St {
            name,
            dtype,
            shape,
            data: data[at..end].to_vec(),
        });
    }
    out
}

/// Makes the fixture in `dir` an FP8 checkpoint: each 2-D weight `pick` names becomes
/// random FP8 bytes (NaN codes left out) of the element type it says, beside a random
/// positive `<weight>_scale_inv` of the kind it says; the config gets
/// `quantization_config` with `block`, and each block's first FP8 weight an unused
/// `activation_scale`.
fn make_fp8(
    dir: &Path,
    seed: u64,
    block: Option<[usize; 2]>,
    pick: fn(&str) -> Option<(&'static str, Fp8Scale)>,
) {
    let mut rng = Rng(seed);
    let path = dir.join("model.safetensors");
    let mut out = Vec::new();
    let mut with_activation = std::collections::HashSet::new();
    for t in read_safetensors(&path) {
        let Some((dtype, kind)) = pick(&t.name).filter(|_| t.shape.len() == 2) else {
            out.push(t);
            continue;
        };
        let n: usize = t.shape.iter().product();
        let data = (0..n)
            .map(|_| {
                loop {
                    let b = (rng.next() >> 56) as u8;
                    // e4m3fn's NaN is 0x7f/0xff; e5m2's are exponent 31 with a mantissa.
                    let nan = match dtype {
                        "F8_E4M3" => b & 0x7f == 0x7f,
                        _ => b & 0x7c == 0x7c,
                    };
                    if !nan {
                        break b;
                    }
                }
            })
            .collect();
        let scale_shape = match kind {
            Fp8Scale::Blocks(_) => {
                let [br, bc] = block.expect("a block size");
                vec![t.shape[0].div_ceil(br), t.shape[1].div_ceil(bc)]
            }
            Fp8Scale::Rows => vec![t.shape[0]],
            Fp8Scale::Tensor => vec![],
        };
        let scale_dtype = match kind {
            Fp8Scale::Blocks(d) => d,
            _ => "F32",
        };
        let k: usize = scale_shape.iter().product();
        let mut scale = Vec::new();
        for _ in 0..k {
            let v = 0.5 + (rng.next() >> 40) as f32 / (1u64 << 24) as f32 / 64.0;
            match scale_dtype {
                "BF16" => scale.extend_from_slice(&bf16(v)),
                _ => scale.extend_from_slice(&v.to_le_bytes()),
            }
        }
        let block_name = t
            .name
            .rsplit_once(".layers.")
            .map(|(_, r)| r.split('.').next().unwrap_or_default().to_string());
        if let Some(b) = block_name
            && with_activation.insert(b)
        {
            out.push(St {
                name: t.name.replace(".weight", ".activation_scale"),
                dtype: "F32",
                shape: vec![],
                data: 1.0f32.to_le_bytes().to_vec(),
            });
        }
        out.push(St {
            name: format!("{}_scale_inv", t.name),
            dtype: scale_dtype,
            shape: scale_shape,
            data: scale,
        });
        out.push(St {
            name: t.name,
            dtype,
            shape: t.shape,
            data,
        });
    }
    write_safetensors(&path, out);
    let config_path = dir.join("config.json");
    let mut config: Json =
        serde_json::from_str(&std::fs::read_to_string(&config_path).unwrap()).unwrap();
    let mut q = json!({"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8"});
    if let Some(b) = block {
        q["weight_block_size"] = json!(b);
    }
    config["quantization_config"] = q;
    write_json(&config_path, &config);
}

/// The Qwen3-style model as an FP8 checkpoint with 48 x 40 blocks of bf16 scales, which
/// divide none of its widths evenly (the scales are cut to each weight).
fn qwen3_fp8(vocabs: &Path, dir: &Path) {
    qwen3(vocabs, dir);
    make_fp8(dir, 0x0066_7038_7133, Some([48, 40]), |name| {
        (name.contains(".self_attn.") && name.ends_with("_proj.weight") || name.contains(".mlp."))
            .then_some(("F8_E4M3", Fp8Scale::Blocks("BF16")))
    });
}

/// The Llama-BPE model as an FP8 checkpoint without blocks: per-row scales on the
/// attention (the Q and K rows permuted after scaling), a 0-D scale on the MLP's down
/// projection, E5M2 bytes in its up projection.
fn llama_fp8(vocabs: &Path, dir: &Path) {
    llama_bpe(vocabs, dir);
    make_fp8(dir, 0x0066_7038_6c6c, None, |name| {
        if name.contains(".self_attn.") {
            Some(("F8_E4M3", Fp8Scale::Rows))
        } else if name.ends_with("down_proj.weight") {
            Some(("F8_E4M3", Fp8Scale::Tensor))
        } else if name.ends_with("up_proj.weight") {
            Some(("F8_E5M2", Fp8Scale::Rows))
        } else {
            None
        }
    });
}

/// A Mixtral-style model: the SentencePiece vocabulary, four experts per block stored
/// one tensor per expert (`block_sparse_moe.experts.N.w1/w2/w3`) in two shards, 256-wide
/// expert rows so the k-quants apply, grouped-query attention.
fn mixtral(vocabs: &Path, dir: &Path) {
    let n_tokens = spm_tokenizer(vocabs, dir);
    write_json(
        &dir.join("tokenizer_config.json"),
        &json!({
            "add_bos_token": true,
            "add_eos_token": false,
            "bos_token": "<s>",
            "eos_token": "</s>",
            "unk_token": "<unk>",
            "legacy": true,
            "model_max_length": 1000000000,
            "tokenizer_class": "LlamaTokenizer",
            "chat_template": "{{ bos_token }}{% for m in messages %}[INST] {{ m['content'] }} [/INST]{% endfor %}"
        }),
    );
    let (embd, ff, layers, heads, kv, experts, vocab_n) =
        (256usize, 256usize, 2usize, 8usize, 2usize, 4usize, n_tokens);
    let head_dim = embd / heads;
    write_json(
        &dir.join("config.json"),
        &json!({
            "architectures": ["MixtralForCausalLM"],
            "attention_dropout": 0.0,
            "bos_token_id": 1,
            "eos_token_id": 2,
            "hidden_act": "silu",
            "hidden_size": embd,
            "initializer_range": 0.02,
            "intermediate_size": ff,
            "max_position_embeddings": 32768,
            "model_type": "mixtral",
            "num_attention_heads": heads,
            "num_experts_per_tok": 2,
            "num_hidden_layers": layers,
            "num_key_value_heads": kv,
            "num_local_experts": experts,
            "output_router_logits": false,
            "rms_norm_eps": 1e-5,
            "rope_theta": 1000000.0,
            "router_aux_loss_coef": 0.02,
            "sliding_window": null,
            "tie_word_embeddings": false,
            "torch_dtype": "bfloat16",
            "transformers_version": "4.57.6",
            "use_cache": true,
            "vocab_size": vocab_n
        }),
    );
    let mut rng = Rng(0x006d_6978_7472);
    let mut t = vec![
        random_bf16(
            &mut rng,
            "model.embed_tokens.weight",
            &[vocab_n, embd],
            0.02,
            0.0,
        ),
        random_bf16(&mut rng, "lm_head.weight", &[vocab_n, embd], 0.02, 0.0),
        random_bf16(&mut rng, "model.norm.weight", &[embd], 0.05, 1.0),
    ];
    for l in 0..layers {
        let p = format!("model.layers.{l}");
        for (name, shape) in [
            ("self_attn.q_proj", [heads * head_dim, embd]),
            ("self_attn.k_proj", [kv * head_dim, embd]),
            ("self_attn.v_proj", [kv * head_dim, embd]),
            ("self_attn.o_proj", [embd, heads * head_dim]),
            ("block_sparse_moe.gate", [experts, embd]),
        ] {
            t.push(random_bf16(
                &mut rng,
                &format!("{p}.{name}.weight"),
                &shape,
                0.05,
                0.0,
            ));
        }
        for x in 0..experts {
            for (w, shape) in [("w1", [ff, embd]), ("w2", [embd, ff]), ("w3", [ff, embd])] {
                t.push(random_bf16(
                    &mut rng,
                    &format!("{p}.block_sparse_moe.experts.{x}.{w}.weight"),
                    &shape,
                    0.05,
                    0.0,
                ));
            }
        }
        for norm in ["input_layernorm", "post_attention_layernorm"] {
            t.push(random_bf16(
                &mut rng,
                &format!("{p}.{norm}.weight"),
                &[embd],
                0.05,
                1.0,
            ));
        }
    }
    write_sharded(dir, t, 2);
}

/// A Llama-3.2-style model: llama3 rope scaling (the converter generates `rope_freqs`
/// from it), 64-wide heads, tied embeddings, bf16, GPT-2's vocabulary.
fn llama32(vocabs: &Path, dir: &Path) {
    let vocab_n = gpt2_tokenizer(vocabs, dir);
    let (embd, ff, layers, heads, kv) = (256usize, 512usize, 2usize, 4usize, 2usize);
    let head_dim = embd / heads;
    write_json(
        &dir.join("config.json"),
        &json!({
            "architectures": ["LlamaForCausalLM"],
            "attention_bias": false,
            "attention_dropout": 0.0,
            "bos_token_id": 50256,
            "eos_token_id": 50256,
            "head_dim": head_dim,
            "hidden_act": "silu",
            "hidden_size": embd,
            "initializer_range": 0.02,
            "intermediate_size": ff,
            "max_position_embeddings": 131072,
            "mlp_bias": false,
            "model_type": "llama",
            "num_attention_heads": heads,
            "num_hidden_layers": layers,
            "num_key_value_heads": kv,
            "pretraining_tp": 1,
            "rms_norm_eps": 1e-5,
            "rope_scaling": {
                "factor": 32.0,
                "high_freq_factor": 4.0,
                "low_freq_factor": 1.0,
                "original_max_position_embeddings": 8192,
                "rope_type": "llama3"
            },
            "rope_theta": 500000.0,
            "tie_word_embeddings": true,
            "torch_dtype": "bfloat16",
            "transformers_version": "4.57.6",
            "use_cache": true,
            "vocab_size": vocab_n
        }),
    );
    let mut rng = Rng(0x006c_6c33_3332);
    let mut t = vec![
        random_bf16(
            &mut rng,
            "model.embed_tokens.weight",
            &[vocab_n, embd],
            0.02,
            0.0,
        ),
        random_bf16(&mut rng, "model.norm.weight", &[embd], 0.05, 1.0),
    ];
    for l in 0..layers {
        llama_block(
            &mut t,
            &mut rng,
            random_bf16,
            l,
            [embd, ff, heads * head_dim, kv * head_dim],
        );
    }
    write_safetensors(&dir.join("model.safetensors"), t);
}
