//! The architectures a Hugging Face folder can hold, one module per converter class, and
//! the registry that picks one by `config.json`'s `architectures[0]`.
//!
//! Each [`Arch`] says what the converter's class does: which tensors it drops or renames
//! before mapping ([`Arch::filter`]), how it maps and reshapes them ([`Arch::modify`]),
//! which keys it writes ([`Arch::parameters`]) and how it reads the tokenizer
//! ([`Arch::vocab`]). The tensor-name tables are generated from the converter's gguf-py
//! (`super::tables`). Adding an architecture is one module and one [`REGISTRY`] entry.

mod bert;
mod gemma;
mod llama;
mod phi3;
mod qwen;

use super::Ctx;
use super::config::Config;
use super::tokenizer::special::read_object;
use crate::error::{Error, Result};
use quantforge_formats::gguf::{Array, Value};
use serde_json::{Map, Value as Json, json};
use std::collections::HashMap;

/// One tensor kind of an architecture: its GGUF name and the Hugging Face names mapped to
/// it (`{bid}` is the block number).
#[derive(Debug)]
pub struct KindEntry {
    /// The converter's `MODEL_TENSOR` name (`TOKEN_EMBD`).
    pub kind: &'static str,
    /// The GGUF name without suffix (`blk.{bid}.attn_q`).
    pub gguf: &'static str,
    /// Hugging Face names mapped to it, without `.weight`/`.bias`.
    pub hf: &'static [&'static str],
}

/// An architecture's GGUF name and tensor kinds, generated from gguf-py.
#[derive(Debug)]
pub struct ArchTable {
    /// `general.architecture` (`bert`, `llama`).
    pub name: &'static str,
    /// Kinds outside the blocks.
    pub global: &'static [KindEntry],
    /// Kinds of every block.
    pub block: &'static [KindEntry],
}

/// The converter's `TensorNameMap` for one architecture and block count: every Hugging
/// Face name (and every GGUF name, which maps to itself) to its kind and GGUF name.
pub struct TensorMap {
    map: HashMap<String, (&'static str, String)>,
    /// GGUF name (with `.weight`, block numbers filled in) to kind.
    kinds: HashMap<String, &'static str>,
}

impl TensorMap {
    /// Builds the map as the converter does: global kinds first, then each block's, a later
    /// insertion of the same name replacing an earlier one.
    pub fn new(table: &ArchTable, n_blocks: usize) -> TensorMap {
        let mut map = HashMap::new();
        let mut kinds = HashMap::new();
        for e in table.global {
            map.insert(e.gguf.to_string(), (e.kind, e.gguf.to_string()));
            for k in e.hf {
                map.insert(k.to_string(), (e.kind, e.gguf.to_string()));
            }
            kinds.insert(format!("{}.weight", e.gguf), e.kind);
        }
        for bid in 0..n_blocks {
            let b = bid.to_string();
            for e in table.block {
                let name = e.gguf.replace("{bid}", &b);
                map.insert(name.clone(), (e.kind, name.clone()));
                for k in e.hf {
                    map.insert(k.replace("{bid}", &b), (e.kind, name.clone()));
                }
                kinds.insert(format!("{name}.weight"), e.kind);
            }
        }
        TensorMap { map, kinds }
    }

    /// The GGUF name of Hugging Face tensor `name`, trying it whole and then without each
    /// of `suffixes` (which is put back), as `TensorNameMap.get_name`.
    pub fn get(&self, name: &str, suffixes: &[&str]) -> Option<String> {
        if let Some((_, n)) = self.map.get(name) {
            return Some(n.clone());
        }
        suffixes.iter().find_map(|s| {
            let stem = name.strip_suffix(s)?;
            self.map.get(stem).map(|(_, n)| format!("{n}{s}"))
        })
    }

    /// [`TensorMap::get`] with `.weight` and `.bias`, or the converter's error.
    pub fn map(&self, name: &str) -> Result<String> {
        self.get(name, &[".weight", ".bias"])
            .ok_or_else(|| Error::invalid(format!("cannot map tensor `{name}` to a GGUF name")))
    }

    /// The kind of GGUF tensor `name` when it is a kind's `.weight` (the converter's
    /// `match_model_tensor_name` with the default suffix).
    pub fn kind_of_weight(&self, name: &str) -> Option<&'static str> {
        self.kinds.get(name).copied()
    }
}

/// What `modify_tensors` makes of a source tensor.
#[derive(Clone, Debug, PartialEq)]
pub struct Modified {
    /// The GGUF name.
    pub name: String,
    /// Llama's Q/K rotary permutation with this many heads.
    pub permute: Option<usize>,
    /// A constant added to every value, in the precision the converter adds it in
    /// (Gemma's norms, stored as `w - 1`).
    pub shift: Option<f32>,
    /// Only the first this many rows of the outermost axis are kept (Gemma 3's
    /// embedding rows past the vocabulary).
    pub rows: Option<usize>,
}

impl Modified {
    /// Renamed only.
    pub fn name(name: String) -> Modified {
        Modified {
            name,
            permute: None,
            shift: None,
            rows: None,
        }
    }
}

/// What an architecture's `modify_tensors` does with a MoE expert tensor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Experts {
    /// Not an expert tensor.
    No,
    /// One expert's projection, buffered until all of its block's are read, then stacked
    /// (projections in [`ExpertStack::projections`] order, experts in order) into one
    /// 3-D tensor each.
    Buffer(ExpertStack),
    /// A stacked down projection (`mlp.experts.down_proj`, transformers 5): mapped as
    /// it is, `.weight` added.
    Down,
    /// Stacked fused gate and up projections (`mlp.experts.gate_up_proj`): each expert's
    /// first half of rows is the gate, the second the up projection.
    GateUp,
}

/// How a block's per-expert tensors are named and stacked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExpertStack {
    /// Experts per block.
    pub n: usize,
    /// The projections, in the order their stacks are written.
    pub projections: [&'static str; 3],
    /// One expert's tensor name, `{bid}`, `{xid}` and `{w}` standing for the block,
    /// expert and projection.
    pub source: &'static str,
    /// The stacked tensor's name before mapping, `{bid}` and `{w}` filled in.
    pub merged: &'static str,
}

impl ExpertStack {
    /// Qwen2MoeModel's naming (Qwen3-MoE).
    pub fn qwen(n: usize) -> ExpertStack {
        ExpertStack {
            n,
            projections: ["down_proj", "gate_proj", "up_proj"],
            source: "model.layers.{bid}.mlp.experts.{xid}.{w}.weight",
            merged: "model.layers.{bid}.mlp.experts.{w}.weight",
        }
    }

    /// LlamaModel's naming (Mixtral): `w1`, `w2`, `w3` are the gate, down and up
    /// projections, stacked in that order.
    pub fn mixtral(n: usize) -> ExpertStack {
        ExpertStack {
            n,
            projections: ["w1", "w2", "w3"],
            source: "model.layers.{bid}.block_sparse_moe.experts.{xid}.{w}.weight",
            merged: "layers.{bid}.feed_forward.experts.{w}.weight",
        }
    }

    /// Expert `xid`'s `w` tensor of block `bid`.
    pub fn source_name(&self, bid: usize, xid: usize, w: &str) -> String {
        self.source
            .replace("{bid}", &bid.to_string())
            .replace("{xid}", &xid.to_string())
            .replace("{w}", w)
    }

    /// The stacked `w` tensor of block `bid`.
    pub fn merged_name(&self, bid: usize, w: &str) -> String {
        self.merged
            .replace("{bid}", &bid.to_string())
            .replace("{w}", w)
    }
}

/// What one converter class does.
pub trait Arch: Sync {
    /// The architecture's table.
    fn table(&self) -> &'static ArchTable;

    /// The converter's `filter_tensors`: the name a source tensor goes on with, or `None`
    /// for one that is dropped.
    fn filter(&self, name: &str) -> Option<String> {
        text_filter(name)
    }

    /// The converter's `modify_tensors`: the GGUF name, and how the data is reordered.
    fn modify(&self, ctx: &Ctx<'_>, name: &str) -> Result<Modified> {
        Ok(Modified::name(ctx.tensor_map.map(name)?))
    }

    /// The keys of `set_gguf_parameters`.
    fn parameters(&self, ctx: &mut Ctx<'_>) -> Result<()>;

    /// The tokenizer keys of `set_vocab`.
    fn vocab(&self, ctx: &mut Ctx<'_>) -> Result<()>;

    /// The converter's `generate_extra_tensors`: f32 tensors made from the config (GGUF
    /// name, values), written before the checkpoint's; keys it writes on the way come
    /// right after `general.architecture`, as the converter prepares tensors first.
    fn extra_tensors(&self, _ctx: &mut Ctx<'_>) -> Result<Vec<(String, Vec<f32>)>> {
        Ok(Vec::new())
    }

    /// How the converter handles a MoE expert tensor (see [`Experts`]).
    fn experts(&self, _ctx: &Ctx<'_>, _name: &str) -> Result<Experts> {
        Ok(Experts::No)
    }

    /// Whether `--sentence-transformers-dense-modules` adds the folder's `Dense` modules.
    fn dense_modules(&self) -> bool {
        false
    }
}

/// `TextModel.filter_tensors` (and `ModelBase`'s): multimodal tensors dropped, a few names
/// normalised.
pub fn text_filter(name: &str) -> Option<String> {
    const PREFIXES: &[&str] = &[
        "mlp",
        "vit.",
        "vpm.",
        "siglip2.",
        "conformer.",
        "merger.",
        "resampler.",
        "sound_encoder.",
        "sound_projection.",
        "speech_embeddings.",
    ];
    const PARTS: &[&str] = &[
        "visual.",
        "vision.",
        "audio.",
        "talker.",
        "vision_",
        "audio_",
        "token2wav.",
        "code2wav.",
        "projector.",
        "pre_mm_projector_norm",
        "image_newline",
        "view_seperator",
        "patch_embed",
        "patch_embedding",
        "patch_merger.",
        "patch_merge_mlp.",
        "model.connector.",
    ];
    if PREFIXES.iter().any(|p| name.starts_with(p)) || PARTS.iter().any(|p| name.contains(p)) {
        return None;
    }
    let mut name = name.to_string();
    if name.ends_with("e_score_correction_bias") {
        name = name.replace("e_score_correction_bias", "e_score_correction.bias");
    }
    if name.contains("language_model.") {
        name = name.replace("language_model.", "");
    }
    Some(name)
}

/// Hugging Face architecture names and the converter class each is.
pub static REGISTRY: &[(&str, &dyn Arch)] = &[
    ("BertModel", &bert::Bert),
    ("BertForMaskedLM", &bert::Bert),
    ("CamembertModel", &bert::Bert),
    ("BertForSequenceClassification", &bert::Bert),
    ("LLaMAForCausalLM", &llama::Llama { bare_names: false }),
    ("LlamaForCausalLM", &llama::Llama { bare_names: false }),
    ("MistralForCausalLM", &llama::Llama { bare_names: false }),
    ("MixtralForCausalLM", &llama::Llama { bare_names: false }),
    ("LlamaModel", &llama::Llama { bare_names: true }),
    (
        "Qwen2ForCausalLM",
        &qwen::Qwen {
            v3: false,
            bare_names: false,
        },
    ),
    (
        "Qwen2Model",
        &qwen::Qwen {
            v3: false,
            bare_names: true,
        },
    ),
    (
        "Qwen3ForCausalLM",
        &qwen::Qwen {
            v3: true,
            bare_names: false,
        },
    ),
    (
        "Qwen3Model",
        &qwen::Qwen {
            v3: true,
            bare_names: true,
        },
    ),
    ("Gemma2ForCausalLM", &gemma::Gemma::Gemma2),
    ("Gemma3ForCausalLM", &gemma::Gemma::Gemma3),
    ("Gemma3TextModel", &gemma::Gemma::Embedding),
    ("Phi3ForCausalLM", &phi3::Phi3),
    ("Qwen3MoeForCausalLM", &qwen::Qwen3Moe),
];

/// The converter class of Hugging Face architecture `name`, or an error listing those
/// quantforge converts.
pub fn lookup(name: &str) -> Result<&'static dyn Arch> {
    REGISTRY
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, a)| *a)
        .ok_or_else(|| {
            let known: Vec<&str> = REGISTRY.iter().map(|(n, _)| *n).collect();
            Error::invalid(format!(
                "architecture {name} is not supported; supported: {}",
                known.join(", ")
            ))
        })
}

/// The converter's `rope_parameters`: `rope_parameters` or `rope_scaling` from the config,
/// with the global and local rope bases, the rope type, the partial rotary factor and the
/// original context length mirrored into it as `TextModel.__init__` does.
pub fn rope_parameters(c: &Config) -> Map<String, Json> {
    let mut rp = match c.get("rope_parameters").or_else(|| c.get("rope_scaling")) {
        Some(Json::Object(m)) => m.clone(),
        _ => Map::new(),
    };
    let theta = c
        .find(&[
            "global_rope_theta",
            "rope_global_theta",
            "rope_theta_global",
            "rope_theta",
            "rotary_emb_base",
        ])
        .map(|(_, v)| v.clone());
    let local = c
        .find(&[
            "local_rope_theta",
            "rope_local_theta",
            "rope_theta_local",
            "swa_rope_theta",
            "rope_local_base_freq",
        ])
        .map(|(_, v)| v.clone());
    let partial = c
        .find(&["partial_rotary_factor", "rope_pct", "rope_percent"])
        .map(|(_, v)| v.clone());
    let orig = c
        .find(&["original_max_position_embeddings"])
        .map(|(_, v)| v.clone());
    if !rp.contains_key("full_attention") && !rp.contains_key("sliding_attention") {
        if let Some(l) = local {
            rp.insert("sliding_attention".into(), json!({ "rope_theta": l }));
        }
        if !rp.contains_key("rope_theta")
            && let Some(t) = theta
        {
            rp.insert("rope_theta".into(), t);
        }
        if !rp.contains_key("rope_type")
            && let Some(t) = rp.get("type").filter(|t| !t.is_null()).cloned()
        {
            rp.insert("rope_type".into(), t);
        }
        if !rp.contains_key("partial_rotary_factor")
            && let Some(p) = partial
        {
            rp.insert("partial_rotary_factor".into(), p);
        }
        if !rp.contains_key("original_max_position_embeddings")
            && let Some(o) = orig
        {
            rp.insert("original_max_position_embeddings".into(), o);
        }
    }
    rp
}

/// `TextModel.set_gguf_parameters`: the keys every text model writes, from the config.
pub fn text_parameters(ctx: &mut Ctx<'_>) -> Result<()> {
    use super::{json_f32, json_u32};
    let c = ctx.config;
    ctx.put_arch("block_count", u32::try_from(ctx.block_count)?)?;
    let u32_keys: [(&str, &[&str]); 5] = [
        (
            "context_length",
            &[
                "max_position_embeddings",
                "n_ctx",
                "n_positions",
                "max_length",
                "max_sequence_length",
                "model_max_length",
            ],
        ),
        ("embedding_length", &["hidden_size", "n_embd", "dim"]),
        (
            "feed_forward_length",
            &[
                "prefix_dense_intermediate_size",
                "dense_intermediate_size",
                "intermediate_size",
                "n_inner",
                "hidden_dim",
            ],
        ),
        (
            "attention.head_count",
            &["num_attention_heads", "n_head", "n_heads"],
        ),
        (
            "attention.head_count_kv",
            &["num_key_value_heads", "n_kv_heads"],
        ),
    ];
    for (key, names) in u32_keys {
        if let Some((name, v)) = c.find(names) {
            ctx.put_arch(key, json_u32(name, v)?)?;
        }
    }
    if c.get("is_causal") == Some(&Json::Bool(false)) {
        ctx.put_arch("attention.causal", false)?;
    }
    let rp = rope_parameters(c);
    let params = match rp.get("full_attention") {
        Some(Json::Object(m)) => m.clone(),
        _ => rp.clone(),
    };
    if let Some(rope_type) = params.get("rope_type").filter(|t| !t.is_null()) {
        let rope_type = rope_type.as_str().unwrap_or_default();
        let factor = params.get("factor").filter(|f| !f.is_null());
        let f32_of = |k: &str| -> Result<Option<f32>> {
            params
                .get(k)
                .filter(|v| !v.is_null())
                .map(|v| json_f32(k, v))
                .transpose()
        };
        match (rope_type, factor) {
            ("linear", Some(f)) => {
                ctx.put_arch("rope.scaling.type", "linear")?;
                ctx.put_arch("rope.scaling.factor", json_f32("factor", f)?)?;
            }
            ("yarn", Some(f)) => {
                ctx.put_arch("rope.scaling.type", "yarn")?;
                ctx.put_arch("rope.scaling.factor", json_f32("factor", f)?)?;
                let orig = params
                    .get("original_max_position_embeddings")
                    .ok_or_else(|| Error::invalid("config.json: yarn rope scaling without original_max_position_embeddings"))?;
                ctx.put_arch(
                    "rope.scaling.original_context_length",
                    json_u32("original_max_position_embeddings", orig)?,
                )?;
                if let Some(v) = f32_of("extrapolation_factor")? {
                    ctx.put_arch("rope.scaling.yarn_ext_factor", v)?;
                }
                let attn = match f32_of("attention_factor")? {
                    Some(v) => Some(v),
                    None => f32_of("attn_factor")?,
                };
                if let Some(v) = attn {
                    ctx.put_arch("rope.scaling.yarn_attn_factor", v)?;
                }
                if let Some(v) = f32_of("beta_fast")? {
                    ctx.put_arch("rope.scaling.yarn_beta_fast", v)?;
                }
                if let Some(v) = f32_of("beta_slow")? {
                    ctx.put_arch("rope.scaling.yarn_beta_slow", v)?;
                }
            }
            ("su" | "longrope", _) => ctx.put_arch("rope.scaling.type", "longrope")?,
            _ => {}
        }
    }
    if let Some(Json::Array(sections)) = rp.get("mrope_section") {
        let mut v: Vec<i32> = sections
            .iter()
            .map(|s| s.as_i64().and_then(|n| i32::try_from(n).ok()).unwrap_or(0))
            .collect();
        v.resize(v.len().max(4), 0);
        v.truncate(4);
        ctx.put_arch("rope.dimension_sections", Value::Array(Array::I32(v)))?;
    }
    if let Some(t) = params.get("rope_theta").filter(|t| !t.is_null()) {
        ctx.put_arch("rope.freq_base", json_f32("rope_theta", t)?)?;
    }
    if let Some(t) = rp
        .get("sliding_attention")
        .and_then(|s| s.get("rope_theta"))
        .filter(|t| !t.is_null())
    {
        ctx.put_arch("rope.freq_base_swa", json_f32("rope_theta", t)?)?;
    }
    if let Some((name, v)) = c.find(&["rms_norm_eps", "norm_eps"]) {
        ctx.put_arch("attention.layer_norm_rms_epsilon", json_f32(name, v)?)?;
    }
    if let Some((name, v)) = c.find(&["layer_norm_eps", "layer_norm_epsilon", "norm_epsilon"]) {
        ctx.put_arch("attention.layer_norm_epsilon", json_f32(name, v)?)?;
    }
    if let Some((name, v)) = c.find(&["num_local_experts", "num_experts", "n_routed_experts"]) {
        ctx.put_arch("expert_count", json_u32(name, v)?)?;
    }
    if let Some((name, v)) = c.find(&[
        "num_experts_per_tok",
        "num_experts_per_token",
        "top_k_experts",
    ]) {
        ctx.put_arch("expert_used_count", json_u32(name, v)?)?;
    }
    if let Some(v) = c.get("n_group") {
        ctx.put_arch("expert_group_count", json_u32("n_group", v)?)?;
    }
    if let Some(v) = c.get("topk_group") {
        ctx.put_arch("expert_group_used_count", json_u32("topk_group", v)?)?;
    }
    if let Some((name, v)) = c.find(&[
        "score_function",
        "scoring_func",
        "score_func",
        "moe_router_activation",
        "moe_router_activation_func",
        "expert_selection_fn",
    ]) {
        let f = match v.as_str() {
            Some("softmax") => 1u32,
            Some("sigmoid") => 2,
            Some("sqrtsoftplus") => 4,
            _ => {
                return Err(Error::invalid(format!(
                    "config.json: unsupported expert gating function `{name}` = {v}"
                )));
            }
        };
        ctx.put_arch("expert_gating_func", f)?;
    }
    if let Some(v) = c.get("head_dim") {
        ctx.put_arch("attention.key_length", json_u32("head_dim", v)?)?;
        ctx.put_arch("attention.value_length", json_u32("head_dim", v)?)?;
    }
    ctx.put("general.file_type", ctx.outtype.file_type())?;
    Ok(())
}

/// `_try_set_pooling_type`: the pooling of sentence-transformers' `modules.json`.
pub fn pooling(ctx: &mut Ctx<'_>) -> Result<()> {
    let modules = ctx.dir.join("modules.json");
    let mut path = None;
    if modules.is_file() {
        let text = std::fs::read_to_string(&modules)
            .map_err(|e| Error::invalid(format!("{}: {e}", modules.display())))?;
        let list: Json = serde_json::from_str(&text)
            .map_err(|e| Error::invalid(format!("{}: not valid JSON: {e}", modules.display())))?;
        for m in list.as_array().into_iter().flatten() {
            if m.get("type")
                .and_then(Json::as_str)
                .is_some_and(|t| t.ends_with("Pooling"))
            {
                path = m.get("path").and_then(Json::as_str).map(str::to_string);
                break;
            }
        }
    }
    let mode = |m: &str| match m {
        "mean" => Some(1u32),
        "cls" => Some(2),
        "lasttoken" => Some(3),
        _ => None,
    };
    if let Some(p) = path {
        let file = ctx.dir.join(&p).join("config.json");
        let cfg = read_object(&file)?
            .ok_or_else(|| Error::invalid(format!("{}: missing", file.display())))?;
        let on = |k: &str| cfg.get(k).is_some_and(|v| v.as_bool() == Some(true));
        let ty = if on("pooling_mode_mean_tokens") {
            1
        } else if on("pooling_mode_cls_token") {
            2
        } else if on("pooling_mode_lasttoken") {
            3
        } else if let Some(t) = cfg
            .get("pooling_mode")
            .and_then(Json::as_str)
            .and_then(mode)
        {
            t
        } else {
            return Err(Error::invalid(format!(
                "{}: only mean, CLS and last-token pooling are supported",
                file.display()
            )));
        };
        ctx.put_arch("pooling_type", ty)?;
    }
    if let Some(cp) = ctx.config.get("classifier_pooling") {
        let t = cp
            .as_str()
            .and_then(|m| mode(m).filter(|_| m != "lasttoken"));
        let t = t.ok_or_else(|| Error::invalid(format!("unsupported classifier_pooling {cp}")))?;
        ctx.put_arch("classifier.pooling_type", t)?;
    }
    Ok(())
}
