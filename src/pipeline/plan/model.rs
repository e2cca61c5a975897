//! The model hyperparameters the quantizer's rules read, as llama.cpp's loader gets them
//! from GGUF metadata (`llama_model_base::load_hparams` and the per-architecture
//! `load_arch_hparams`, which decide the `LLM_TYPE_70B` classification).

use super::PlanError;
use quantforge_formats::gguf::{Array, Metadata, Value};

/// llama.cpp's limit on `block_count` (`LLAMA_MAX_LAYERS`).
const MAX_LAYERS: u32 = 512;
/// llama.cpp's limit on `expert_count` (`LLAMA_MAX_EXPERTS`).
const MAX_EXPERTS: u32 = 1024;

/// What the rules need to know about a model: its architecture and the hyperparameters
/// llama.cpp reads before quantizing (`llama_hparams`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModelParams {
    /// `general.architecture` (`llama`, `gemma3`, `falcon`, ...).
    pub arch: String,
    /// `{arch}.block_count`: every layer, next-token-prediction layers included
    /// (`n_layer_all`); the layer count of the layer-dependent rules.
    pub n_layer: u32,
    /// `{arch}.nextn_predict_layers` (0 if absent).
    pub n_layer_nextn: u32,
    /// `{arch}.expert_count` (0 if absent).
    pub n_expert: u32,
    /// `{arch}.attention.head_count` of the first layer (0 if absent).
    pub n_head: u32,
    /// `{arch}.attention.head_count_kv` of the first layer (`n_head` if absent).
    pub n_head_kv: u32,
    /// The source's `general.file_type`, which `COPY` keeps.
    pub file_type: Option<u32>,
}

impl ModelParams {
    /// A dense model with `n_layer` layers and the given head counts.
    pub fn new(arch: impl Into<String>, n_layer: u32, n_head: u32, n_head_kv: u32) -> Self {
        ModelParams {
            arch: arch.into(),
            n_layer,
            n_layer_nextn: 0,
            n_expert: 0,
            n_head,
            n_head_kv,
            file_type: None,
        }
    }

    /// Reads the hyperparameters from GGUF metadata as llama.cpp's loader does
    /// (`llama_model_base::load_hparams`): `block_count` is required and at most 512; head
    /// counts may be one number or one per layer. Integers of any width are accepted.
    pub fn from_gguf(meta: &Metadata) -> Result<ModelParams, PlanError> {
        let bad = |msg: String| PlanError::Metadata(msg);
        let arch = meta
            .get_str("general.architecture")
            .map_err(|e| bad(e.to_string()))?
            .to_string();
        let file_type = optional_u32(meta, "general.file_type")?;
        let mut params = ModelParams::new(arch.clone(), 0, 0, 0);
        params.file_type = file_type;
        // llama.cpp reads no hyperparameters for CLIP (projector) files.
        if arch == "clip" {
            return Ok(params);
        }
        let key = |suffix: &str| format!("{arch}.{suffix}");
        let n_layer = optional_u32(meta, &key("block_count"))?
            .ok_or_else(|| bad(format!("key not found in model: {}", key("block_count"))))?;
        if n_layer == 0 || n_layer > MAX_LAYERS {
            return Err(bad(format!(
                "{} = {n_layer}, must be in 1..={MAX_LAYERS}",
                key("block_count")
            )));
        }
        params.n_layer = n_layer;
        params.n_layer_nextn = optional_u32(meta, &key("nextn_predict_layers"))?.unwrap_or(0);
        if params.n_layer_nextn > n_layer {
            return Err(bad(format!(
                "{} exceeds the block count",
                key("nextn_predict_layers")
            )));
        }
        params.n_expert = optional_u32(meta, &key("expert_count"))?.unwrap_or(0);
        if params.n_expert > MAX_EXPERTS {
            return Err(bad(format!(
                "{} = {} exceeds {MAX_EXPERTS}",
                key("expert_count"),
                params.n_expert
            )));
        }
        params.n_head =
            first_of_key_or_arr(meta, &key("attention.head_count"), n_layer)?.unwrap_or(0);
        params.n_head_kv = first_of_key_or_arr(meta, &key("attention.head_count_kv"), n_layer)?
            .unwrap_or(params.n_head);
        Ok(params)
    }

    /// Query heads per key/value head (`n_gqa()`, 0 when there are no key/value heads).
    pub fn n_gqa(&self) -> u32 {
        self.n_head.checked_div(self.n_head_kv).unwrap_or(0)
    }

    /// Whether llama.cpp classifies the model as a 70B (`LLM_TYPE_70B`), which gives
    /// `attn_v` more bits in the low-bit mixes.
    pub fn is_70b(&self) -> bool {
        let n_layer = self.n_layer - self.n_layer_nextn.min(self.n_layer);
        match self.arch.as_str() {
            "llama" => self.n_expert != 8 && n_layer == 80 && self.n_head != self.n_head_kv,
            "qwen2" | "deci" | "olmo" => n_layer == 80,
            "jais2" => n_layer == 68,
            _ => false,
        }
    }
}

fn optional_u32(meta: &Metadata, key: &str) -> Result<Option<u32>, PlanError> {
    let Some(value) = meta.get(key) else {
        return Ok(None);
    };
    value
        .as_u64_lossless()
        .and_then(|v| u32::try_from(v).ok())
        .map(Some)
        .ok_or_else(|| {
            PlanError::Metadata(format!(
                "{key} is {}, expected a 32-bit unsigned integer",
                value.type_name()
            ))
        })
}

/// A per-layer hyperparameter given as one number or as an array of one per layer;
/// the first layer's value.
fn first_of_key_or_arr(meta: &Metadata, key: &str, n_layer: u32) -> Result<Option<u32>, PlanError> {
    let Some(Value::Array(array)) = meta.get(key) else {
        return optional_u32(meta, key);
    };
    if array.len() != n_layer as usize {
        return Err(PlanError::Metadata(format!(
            "key {key} has wrong array length; expected {n_layer}, got {}",
            array.len()
        )));
    }
    let first = match array {
        Array::U32(v) => v.first().copied(),
        Array::I32(v) => v.first().map(|&x| x as u32),
        _ => {
            return Err(PlanError::Metadata(format!(
                "{key} is {}, expected an array of 32-bit integers",
                array.type_name()
            )));
        }
    };
    Ok(first)
}
