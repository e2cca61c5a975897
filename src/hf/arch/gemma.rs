//! `Gemma2Model`, `Gemma3Model` and `EmbeddingGemma` (Hugging Face `Gemma3TextModel`,
//! written as `gemma-embedding`): norms stored as `w - 1` get their 1 back, Gemma 3's
//! embedding rows past the vocabulary are dropped, and the vocabulary is SentencePiece
//! (`tokenizer.model`) or, for Gemma 3 without one, byte-level BPE.

use super::{Arch, ArchTable, Modified, pooling, text_filter, text_parameters};
use crate::error::{Error, Result, bail};
use crate::hf::tokenizer::special::read_object;
use crate::hf::{Ctx, json_f32, json_u32};
use serde::de::{Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::Value as Json;

/// Which of the converter's Gemma classes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Gemma {
    /// `Gemma2Model` (`Gemma2ForCausalLM`).
    Gemma2,
    /// `Gemma3Model` (`Gemma3ForCausalLM`).
    Gemma3,
    /// `EmbeddingGemma` (`Gemma3TextModel`).
    Embedding,
}

impl Arch for Gemma {
    fn table(&self) -> &'static ArchTable {
        match self {
            Gemma::Gemma2 => &crate::hf::tables::GEMMA2,
            Gemma::Gemma3 => &crate::hf::tables::GEMMA3,
            Gemma::Embedding => &crate::hf::tables::GEMMA_EMBEDDING,
        }
    }

    fn filter(&self, name: &str) -> Option<String> {
        // Gemma 2 drops an `lm_head` (AutoAWQ checkpoints carry one; the embedding is tied).
        if *self == Gemma::Gemma2 && name == "lm_head.weight" {
            return None;
        }
        text_filter(name)
    }

    fn modify(&self, ctx: &Ctx<'_>, name: &str) -> Result<Modified> {
        let mut m = Modified::name(ctx.tensor_map.map(name)?);
        if *self != Gemma::Gemma2 && name.contains("embed_tokens.weight") {
            m.rows = Some(real_vocab(ctx)?);
        }
        // The checkpoints store RMS norm weights as `w - 1` (the model computes
        // `x * (1 + w)`); llama.cpp multiplies by the weight itself.
        if name.ends_with("norm.weight") {
            m.shift = Some(1.0);
        }
        Ok(m)
    }

    fn parameters(&self, ctx: &mut Ctx<'_>) -> Result<()> {
        match self {
            Gemma::Gemma2 => gemma2_parameters(ctx),
            Gemma::Gemma3 => gemma3_parameters(ctx),
            Gemma::Embedding => {
                gemma3_parameters(ctx)?;
                // The config class changes `sliding_window` for bidirectional attention;
                // the converter writes the file's own value.
                let raw = read_object(&ctx.dir.join("config.json"))?.unwrap_or_default();
                let sw = raw
                    .get("sliding_window")
                    .filter(|v| !v.is_null())
                    .ok_or_else(|| {
                        Error::invalid(format!(
                            "{}: no `sliding_window`, which this model needs",
                            ctx.config.path().display()
                        ))
                    })?;
                ctx.put_arch("attention.sliding_window", json_u32("sliding_window", sw)?)?;
                for (dense, (fin, fout)) in ctx.dense_dims.clone() {
                    ctx.put_arch(&format!("{dense}_feat_in"), fin)?;
                    ctx.put_arch(&format!("{dense}_feat_out"), fout)?;
                }
                pooling(ctx)
            }
        }
    }

    fn dense_modules(&self) -> bool {
        *self == Gemma::Embedding
    }

    fn vocab(&self, ctx: &mut Ctx<'_>) -> Result<()> {
        if *self != Gemma::Gemma2 && !ctx.dir.join("tokenizer.model").is_file() {
            return super::llama::load_gpt2_vocab(ctx);
        }
        super::llama::sentencepiece_vocab(ctx)?;
        ctx.put("tokenizer.ggml.add_space_prefix", false)
    }
}

/// A required config key (the converter's `hparams[key]`).
fn need<'c>(ctx: &'c Ctx<'_>, key: &str) -> Result<&'c Json> {
    ctx.config
        .get(key)
        .ok_or_else(|| Error::invalid(format!("{}: no `{key}`", ctx.config.path().display())))
}

/// A required config key as a `u32`.
fn need_u32(ctx: &Ctx<'_>, key: &str) -> Result<u32> {
    json_u32(key, need(ctx, key)?)
}

/// A required config key as an `f32`.
fn need_f32(ctx: &Ctx<'_>, key: &str) -> Result<f32> {
    json_f32(key, need(ctx, key)?)
}

/// `Gemma2Model.set_gguf_parameters`, which writes its own keys rather than the common
/// ones.
fn gemma2_parameters(ctx: &mut Ctx<'_>) -> Result<()> {
    ctx.put_arch("context_length", need_u32(ctx, "max_position_embeddings")?)?;
    ctx.put_arch("embedding_length", need_u32(ctx, "hidden_size")?)?;
    ctx.put_arch("block_count", u32::try_from(ctx.block_count)?)?;
    ctx.put_arch("feed_forward_length", need_u32(ctx, "intermediate_size")?)?;
    let heads = need_u32(ctx, "num_attention_heads")?;
    ctx.put_arch("attention.head_count", heads)?;
    let kv = match ctx.config.get("num_key_value_heads") {
        Some(v) => json_u32("num_key_value_heads", v)?,
        None => heads,
    };
    ctx.put_arch("attention.head_count_kv", kv)?;
    ctx.put_arch(
        "attention.layer_norm_rms_epsilon",
        need_f32(ctx, "rms_norm_eps")?,
    )?;
    let head_dim = need_u32(ctx, "head_dim")?;
    ctx.put_arch("attention.key_length", head_dim)?;
    ctx.put_arch("attention.value_length", head_dim)?;
    ctx.put("general.file_type", ctx.outtype.file_type())?;
    ctx.put_arch(
        "attn_logit_softcapping",
        need_f32(ctx, "attn_logit_softcapping")?,
    )?;
    ctx.put_arch(
        "final_logit_softcapping",
        need_f32(ctx, "final_logit_softcapping")?,
    )?;
    ctx.put_arch("attention.sliding_window", need_u32(ctx, "sliding_window")?)
}

/// `Gemma3Model.set_gguf_parameters`: the common keys, then a few rewritten in place with
/// Gemma 3's defaults.
fn gemma3_parameters(ctx: &mut Ctx<'_>) -> Result<()> {
    text_parameters(ctx)?;
    let c = ctx.config;
    let u32_or = |key: &str, default: u32| -> Result<u32> {
        c.get(key).map_or(Ok(default), |v| json_u32(key, v))
    };
    let ctx_len = u32_or("max_position_embeddings", 131_072)?;
    let heads = u32_or("num_attention_heads", 8)?;
    let eps = c
        .get("rms_norm_eps")
        .map_or(Ok(1e-6), |v| json_f32("rms_norm_eps", v))?;
    let head_dim = u32_or("head_dim", 256)?;
    let rp = super::rope_parameters(c);
    let params = match rp.get("full_attention") {
        Some(Json::Object(m)) => m.clone(),
        _ => rp.clone(),
    };
    let theta = params
        .get("rope_theta")
        .filter(|v| !v.is_null())
        .map_or(Ok(1_000_000.0), |v| json_f32("rope_theta", v))?;
    if c.get("attn_logit_softcapping").is_some() {
        bail!(
            "{}: Gemma 3 has no attention logit softcapping, but `attn_logit_softcapping` is set",
            c.path().display()
        );
    }
    ctx.put_arch("context_length", ctx_len)?;
    ctx.put_arch("attention.head_count", heads)?;
    ctx.put_arch("attention.layer_norm_rms_epsilon", eps)?;
    ctx.put_arch("attention.key_length", head_dim)?;
    ctx.put_arch("attention.value_length", head_dim)?;
    ctx.put_arch("rope.freq_base", theta)?;
    // Python truthiness: a softcap of 0 is no softcap.
    if let Some(v) = c.get("final_logit_softcapping")
        && v.as_f64().is_some_and(|x| x != 0.0)
    {
        ctx.put_arch(
            "final_logit_softcapping",
            json_f32("final_logit_softcapping", v)?,
        )?;
    }
    if c.get("sliding_window_pattern").and_then(Json::as_i64) != Some(1) {
        let sw = c.get("sliding_window").ok_or_else(|| {
            Error::invalid(format!("{}: no `sliding_window`", c.path().display()))
        })?;
        ctx.put_arch("attention.sliding_window", json_u32("sliding_window", sw)?)?;
    }
    let kv = u32_or("num_key_value_heads", 4)?;
    ctx.put_arch("attention.head_count_kv", kv)
}

/// The rows of Gemma 3's token embedding the converter keeps: the SentencePiece
/// vocabulary's size (the configured `vocab_size`, else the model's piece count), or
/// `tokenizer.json`'s vocabulary and added tokens.
fn real_vocab(ctx: &Ctx<'_>) -> Result<usize> {
    let spm = ctx.dir.join("tokenizer.model");
    if spm.is_file() {
        let configured = ctx
            .config
            .find(&["vocab_size_per_layer_input", "vocab_size"])
            .and_then(|(_, v)| v.as_u64())
            .filter(|&n| n > 0);
        return match configured {
            Some(n) => Ok(usize::try_from(n)?),
            None => Ok(crate::hf::tokenizer::spm::read_pieces(&spm)?.len()),
        };
    }
    let path = ctx.dir.join("tokenizer.json");
    let file = std::fs::File::open(&path)
        .map_err(|e| Error::invalid(format!("{}: {e}", path.display())))?;
    #[derive(serde::Deserialize)]
    struct Model {
        vocab: Count,
    }
    #[derive(serde::Deserialize)]
    struct TokenizerJson {
        model: Model,
        added_tokens: Count,
    }
    let tj: TokenizerJson = serde_json::from_reader(std::io::BufReader::new(file))
        .map_err(|e| Error::invalid(format!("{}: {e}", path.display())))?;
    Ok(tj.model.vocab.0 + tj.added_tokens.0)
}

/// The number of entries of a JSON object or array, read without keeping them.
struct Count(usize);

impl<'de> serde::Deserialize<'de> for Count {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Count, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Count;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("an object or an array")
            }
            fn visit_map<A: MapAccess<'de>>(
                self,
                mut m: A,
            ) -> std::result::Result<Count, A::Error> {
                let mut n = 0;
                while m.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {
                    n += 1;
                }
                Ok(Count(n))
            }
            fn visit_seq<A: SeqAccess<'de>>(
                self,
                mut s: A,
            ) -> std::result::Result<Count, A::Error> {
                let mut n = 0;
                while s.next_element::<IgnoredAny>()?.is_some() {
                    n += 1;
                }
                Ok(Count(n))
            }
        }
        d.deserialize_any(V)
    }
}
