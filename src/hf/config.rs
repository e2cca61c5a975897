//! `config.json` as the converter sees it: the converter loads it through `transformers`'
//! `AutoConfig(...).to_dict()`, so a key the file leaves out still has the config class's
//! default. The defaults of the keys the converter reads are listed per model type here.

use crate::error::{Context, Error, Result, bail};
use serde_json::{Map, Value as Json, json};
use std::path::{Path, PathBuf};

/// `config.json` with its config class's defaults.
#[derive(Clone, Debug)]
pub struct Config {
    path: PathBuf,
    map: Map<String, Json>,
}

/// Defaults of `transformers`' `BertConfig` for the keys the converter reads.
fn bert_defaults() -> Json {
    json!({
        "vocab_size": 30522,
        "hidden_size": 768,
        "num_hidden_layers": 12,
        "num_attention_heads": 12,
        "intermediate_size": 3072,
        "max_position_embeddings": 512,
        "type_vocab_size": 2,
        "layer_norm_eps": 1e-12,
        "pad_token_id": 0,
    })
}

/// Defaults of `LlamaConfig`.
fn llama_defaults() -> Json {
    json!({
        "vocab_size": 32000,
        "hidden_size": 4096,
        "intermediate_size": 11008,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "max_position_embeddings": 2048,
        "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0,
        "tie_word_embeddings": false,
    })
}

/// Defaults of `MistralConfig`.
fn mistral_defaults() -> Json {
    json!({
        "vocab_size": 32000,
        "hidden_size": 4096,
        "intermediate_size": 14336,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "max_position_embeddings": 131072,
        "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0,
        "sliding_window": 4096,
        "tie_word_embeddings": false,
    })
}

/// Defaults of `MixtralConfig`: `MistralConfig`'s sizes, its own norm epsilon, rope
/// base and experts, no sliding window, and an explicit null head size.
fn mixtral_defaults() -> Json {
    let mut d = mistral_defaults();
    for (k, v) in [
        ("head_dim", Json::Null),
        ("rms_norm_eps", json!(1e-5)),
        ("rope_theta", json!(1000000.0)),
        ("sliding_window", Json::Null),
        ("num_experts_per_tok", json!(2)),
        ("num_local_experts", json!(8)),
    ] {
        d[k] = v;
    }
    d
}

/// Defaults of `Qwen2Config` and `Qwen3Config` (whose head size defaults to 128;
/// Qwen2's config has no head size at all).
fn qwen_defaults(v3: bool) -> Json {
    let mut d = json!({
        "vocab_size": 151936,
        "hidden_size": 4096,
        "intermediate_size": 22016,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "max_position_embeddings": 32768,
        "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0,
    });
    if v3 {
        d["head_dim"] = json!(128);
    }
    d
}

/// Defaults of `Gemma2Config`.
fn gemma2_defaults() -> Json {
    json!({
        "vocab_size": 256000,
        "hidden_size": 2304,
        "intermediate_size": 9216,
        "num_hidden_layers": 26,
        "num_attention_heads": 8,
        "num_key_value_heads": 4,
        "head_dim": 256,
        "max_position_embeddings": 8192,
        "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0,
        "attn_logit_softcapping": 50.0,
        "final_logit_softcapping": 30.0,
        "sliding_window": 4096,
    })
}

/// Defaults of `Gemma3TextConfig`.
fn gemma3_defaults() -> Json {
    json!({
        "vocab_size": 262208,
        "hidden_size": 2304,
        "intermediate_size": 9216,
        "num_hidden_layers": 26,
        "num_attention_heads": 8,
        "num_key_value_heads": 4,
        "head_dim": 256,
        "max_position_embeddings": 131072,
        "rms_norm_eps": 1e-6,
        "rope_theta": 1_000_000.0,
        "rope_local_base_freq": 10000.0,
        "sliding_window": 4096,
        "final_logit_softcapping": null,
        "attn_logit_softcapping": null,
        "rope_scaling": null,
    })
}

/// Defaults of `Qwen3MoeConfig`.
fn qwen3_moe_defaults() -> Json {
    json!({
        "vocab_size": 151936,
        "hidden_size": 2048,
        "intermediate_size": 6144,
        "num_hidden_layers": 24,
        "num_attention_heads": 32,
        "num_key_value_heads": 4,
        "max_position_embeddings": 32768,
        "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0,
        "num_experts": 128,
        "num_experts_per_tok": 8,
        "moe_intermediate_size": 768,
        "rope_scaling": null,
        "sliding_window": null,
        "tie_word_embeddings": false,
    })
}

/// Defaults of `Phi3Config`.
fn phi3_defaults() -> Json {
    json!({
        "vocab_size": 32064,
        "hidden_size": 3072,
        "intermediate_size": 8192,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "max_position_embeddings": 4096,
        "original_max_position_embeddings": 4096,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "partial_rotary_factor": 1.0,
        "sliding_window": null,
        "rope_scaling": null,
        "tie_word_embeddings": false,
    })
}

impl Config {
    /// Reads `DIR/config.json`; an error names the file when it is missing or not a JSON
    /// object.
    pub fn load(dir: &Path) -> Result<Config> {
        let path = dir.join("config.json");
        let text = std::fs::read_to_string(&path)
            .map_err(|e| Error::invalid(format!("{}: {e}", path.display())))?;
        let value: Json = serde_json::from_str(&text)
            .map_err(|e| Error::invalid(format!("{}: not valid JSON: {e}", path.display())))?;
        let Json::Object(mut map) = value else {
            bail!("{}: not a JSON object", path.display());
        };
        // The converter moves `text_config` to the top level (multimodal wrappers).
        if let Some(Json::Object(text)) = map.get("text_config").cloned() {
            for (k, v) in text {
                map.insert(k, v);
            }
        }
        Ok(Config { path, map })
    }

    /// The config with the defaults of the class `architecture` is loaded through.
    pub fn with_defaults(mut self, architecture: &str) -> Config {
        let defaults = match architecture {
            "BertModel"
            | "BertForMaskedLM"
            | "CamembertModel"
            | "BertForSequenceClassification" => bert_defaults(),
            "LLaMAForCausalLM" | "LlamaForCausalLM" | "LlamaModel" => llama_defaults(),
            "MistralForCausalLM" => mistral_defaults(),
            "MixtralForCausalLM" => mixtral_defaults(),
            "Qwen2ForCausalLM" | "Qwen2Model" => qwen_defaults(false),
            "Qwen3ForCausalLM" | "Qwen3Model" => qwen_defaults(true),
            "Gemma2ForCausalLM" => gemma2_defaults(),
            "Gemma3ForCausalLM" | "Gemma3TextModel" => gemma3_defaults(),
            "Phi3ForCausalLM" => phi3_defaults(),
            "Qwen3MoeForCausalLM" => qwen3_moe_defaults(),
            _ => json!({}),
        };
        if let Json::Object(d) = defaults {
            for (k, v) in d {
                // A key the file has keeps its value, null included (the config class
                // keeps an explicit None).
                self.map.entry(k).or_insert(v);
            }
        }
        // Gemma3TextConfig halves the sliding window (plus one) for bidirectional
        // attention (EmbeddingGemma), and `to_dict` gives the halved value.
        if matches!(architecture, "Gemma3ForCausalLM" | "Gemma3TextModel")
            && self.map.get("use_bidirectional_attention") == Some(&Json::Bool(true))
            && let Some(sw) = self.map.get("sliding_window").and_then(Json::as_u64)
        {
            self.map.insert("sliding_window".into(), json!(sw / 2 + 1));
        }
        if architecture == "Phi3ForCausalLM" {
            // Phi3Config: a missing or null KV head count is the head count; rope scaling
            // of the old types `su` and `yarn` is `longrope`.
            if self.get("num_key_value_heads").is_none()
                && let Some(h) = self.map.get("num_attention_heads").cloned()
            {
                self.map.insert("num_key_value_heads".into(), h);
            }
            if let Some(Json::Object(rs)) = self.map.get_mut("rope_scaling")
                && matches!(rs.get("type").and_then(Json::as_str), Some("su" | "yarn"))
            {
                rs.insert("type".into(), json!("longrope"));
            }
        }
        // Qwen2Config and Qwen3Config take the head count for a missing KV head count.
        if architecture.starts_with("Qwen")
            && self.get("num_key_value_heads").is_none()
            && let Some(h) = self.map.get("num_attention_heads").cloned()
        {
            self.map.insert("num_key_value_heads".into(), h);
        }
        // LlamaConfig, MistralConfig and MixtralConfig take the head count for a null KV
        // head count (the last two default to 8 when the key is absent); LlamaConfig also
        // derives a missing head size, the others leave it unset.
        let mistral = matches!(architecture, "MistralForCausalLM" | "MixtralForCausalLM");
        if mistral
            || matches!(
                architecture,
                "LLaMAForCausalLM" | "LlamaForCausalLM" | "LlamaModel"
            )
        {
            let heads = self.map.get("num_attention_heads").and_then(Json::as_u64);
            let kv = match self.map.get("num_key_value_heads") {
                None if mistral => Some(8),
                Some(v) if !v.is_null() => None,
                _ => heads,
            };
            if let Some(kv) = kv {
                self.map.insert("num_key_value_heads".into(), json!(kv));
            }
            if !mistral
                && self.get("head_dim").is_none()
                && let (Some(h), Some(n)) = (
                    self.map.get("hidden_size").and_then(Json::as_u64),
                    heads.filter(|&n| n > 0),
                )
            {
                self.map.insert("head_dim".into(), json!(h / n));
            }
        }
        self
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// `architectures[0]`.
    pub fn architecture(&self) -> Result<String> {
        self.map
            .get("architectures")
            .and_then(|a| a.as_array())
            .and_then(|a| a.first())
            .and_then(|a| a.as_str())
            .map(str::to_string)
            .with_context(|| {
                format!(
                    "{}: no `architectures` list naming the model class",
                    self.path.display()
                )
            })
    }

    /// A key's value.
    pub fn get(&self, key: &str) -> Option<&Json> {
        self.map.get(key).filter(|v| !v.is_null())
    }

    /// The first of `keys` present (the converter's `find_hparam(..., optional=True)`).
    pub fn find<'k>(&self, keys: &[&'k str]) -> Option<(&'k str, &Json)> {
        keys.iter()
            .find_map(|k| self.map.get(*k).map(|v| (*k, v)))
            .filter(|(_, v)| !v.is_null())
    }

    /// The number of blocks (`num_hidden_layers` or its other names).
    pub fn block_count(&self) -> Result<u64> {
        let (key, v) = self
            .find(&["n_layers", "num_hidden_layers", "n_layer", "num_layers"])
            .with_context(|| format!("{}: no `num_hidden_layers`", self.path.display()))?;
        v.as_u64()
            .with_context(|| format!("{}: `{key}` is {v}, not a layer count", self.path.display()))
    }
}
