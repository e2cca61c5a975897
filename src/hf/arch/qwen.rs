//! `Qwen2Model` and `Qwen3Model`: llama-like blocks without the rotary permutation, a
//! byte-level BPE vocabulary, sentence-transformers pooling when the folder has one.

use super::{Arch, ArchTable, ExpertStack, Experts, Modified, pooling, text_parameters};
use crate::error::{Error, Result, bail};
use crate::hf::Ctx;
use crate::hf::json_u32;
use serde_json::Value as Json;

/// The converter's `Qwen2Model` (`v3: false`) and `Qwen3Model` classes.
pub struct Qwen {
    /// Qwen3 (its own architecture name and tables).
    pub v3: bool,
    /// `Qwen2Model`/`Qwen3Model` checkpoints name their tensors without `model.`.
    pub bare_names: bool,
}

impl Arch for Qwen {
    fn table(&self) -> &'static ArchTable {
        if self.v3 {
            &crate::hf::tables::QWEN3
        } else {
            &crate::hf::tables::QWEN2
        }
    }

    fn modify(&self, ctx: &Ctx<'_>, name: &str) -> Result<Modified> {
        let name = if self.bare_names {
            format!("model.{name}")
        } else {
            name.to_string()
        };
        Ok(Modified::name(ctx.tensor_map.map(&name)?))
    }

    fn parameters(&self, ctx: &mut Ctx<'_>) -> Result<()> {
        if self.v3 && is_reranker(ctx)? {
            bail!(
                "{}: Qwen3 reranker models are not supported yet",
                ctx.dir.display()
            );
        }
        text_parameters(ctx)?;
        pooling(ctx)
    }

    fn vocab(&self, ctx: &mut Ctx<'_>) -> Result<()> {
        if ctx.dir.join("tokenizer.model").is_file() {
            return super::llama::sentencepiece_vocab(ctx);
        }
        super::llama::load_gpt2_vocab(ctx)
    }
}

/// `Qwen3Model._is_qwen3_reranker`: the README's title, the names, or a classification
/// head say so.
fn is_reranker(ctx: &Ctx<'_>) -> Result<bool> {
    let readme = std::fs::read(ctx.dir.join("README.md"))
        .map(|b| String::from_utf8_lossy(&b).to_lowercase())
        .unwrap_or_default();
    if readme.contains("# qwen3-reranker") || readme.contains("# qwen3-vl-reranker") {
        return Ok(true);
    }
    let arch = ctx.config.architecture().unwrap_or_default();
    let hints = [
        ctx.dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default(),
        ctx.config
            .get("_name_or_path")
            .and_then(Json::as_str)
            .unwrap_or_default()
            .to_string(),
        ctx.config
            .get("model_type")
            .and_then(Json::as_str)
            .unwrap_or_default()
            .to_string(),
        arch.clone(),
    ];
    if hints
        .iter()
        .map(|h| h.to_lowercase())
        .any(|h| h.contains("qwen3-reranker") || h.contains("qwen3-vl-reranker"))
    {
        return Ok(true);
    }
    Ok(arch.to_lowercase().contains("sequenceclassification"))
}

/// The converter's `Qwen3MoeModel` (a `Qwen2MoeModel`): the common keys and the expert
/// widths, a byte-level BPE vocabulary, each block's experts stacked into 3-D tensors.
pub struct Qwen3Moe;

impl Arch for Qwen3Moe {
    fn table(&self) -> &'static ArchTable {
        &crate::hf::tables::QWEN3MOE
    }

    fn experts(&self, ctx: &Ctx<'_>, name: &str) -> Result<Experts> {
        let stem = name.strip_suffix(".weight").unwrap_or(name);
        if stem.ends_with("mlp.experts.down_proj") {
            return Ok(Experts::Down);
        }
        if stem.ends_with("mlp.experts.gate_up_proj") {
            return Ok(Experts::GateUp);
        }
        if !name.contains("experts") {
            return Ok(Experts::No);
        }
        let (key, n) = ctx
            .config
            .find(&["num_local_experts", "num_experts"])
            .ok_or_else(|| {
                Error::invalid(format!(
                    "{}: expert tensor `{name}` but no `num_experts`",
                    ctx.config.path().display()
                ))
            })?;
        Ok(Experts::Buffer(ExpertStack::qwen(
            json_u32(key, n)? as usize
        )))
    }

    fn parameters(&self, ctx: &mut Ctx<'_>) -> Result<()> {
        text_parameters(ctx)?;
        if let Some(v) = ctx.config.get("moe_intermediate_size") {
            let v = json_u32("moe_intermediate_size", v)?;
            ctx.put_arch("expert_feed_forward_length", v)?;
        }
        if let Some(v) = ctx.config.get("shared_expert_intermediate_size") {
            let v = json_u32("shared_expert_intermediate_size", v)?;
            ctx.put_arch("expert_shared_feed_forward_length", v)?;
        }
        Ok(())
    }

    fn vocab(&self, ctx: &mut Ctx<'_>) -> Result<()> {
        super::llama::load_gpt2_vocab(ctx)
    }
}
