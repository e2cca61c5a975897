//! `Phi3MiniModel` (`Phi3ForCausalLM`): fused QKV and gate/up weights kept as they are,
//! LongRoPE's per-dimension factors written as two generated f32 tensors, and a
//! SentencePiece vocabulary read with Phi-3's own rules (or byte-level BPE for Phi-4's
//! `GPT2Tokenizer`).

use super::{Arch, ArchTable};
use crate::error::{Error, Result, bail};
use crate::hf::tokenizer::special::read_object;
use crate::hf::{Ctx, json_f32, json_u32};
use serde_json::{Map, Value as Json};

/// The converter's `Phi3MiniModel` class.
pub struct Phi3;

/// A required count from the first of `keys` present.
fn count(ctx: &Ctx<'_>, keys: &[&str]) -> Result<u32> {
    let (k, v) = ctx.config.find(keys).ok_or_else(|| {
        Error::invalid(format!("{}: none of {keys:?}", ctx.config.path().display()))
    })?;
    json_u32(k, v)
}

/// What the rope keys and factors are computed from.
struct Rope {
    n_embd: u32,
    n_head: u32,
    max_pos: u32,
    orig_max_pos: u32,
    /// `rope_parameters` as the converter mirrors it.
    params: Map<String, Json>,
}

impl Rope {
    fn read(ctx: &Ctx<'_>) -> Result<Rope> {
        let params = super::rope_parameters(ctx.config);
        let orig = params
            .get("original_max_position_embeddings")
            .filter(|v| !v.is_null())
            .ok_or_else(|| {
                Error::invalid(format!(
                    "{}: no `original_max_position_embeddings`",
                    ctx.config.path().display()
                ))
            })?;
        Ok(Rope {
            n_embd: count(ctx, &["hidden_size", "n_embd"])?,
            n_head: count(ctx, &["num_attention_heads", "n_head"])?,
            max_pos: count(ctx, &["n_positions", "max_position_embeddings"])?,
            orig_max_pos: json_u32("original_max_position_embeddings", orig)?,
            params,
        })
    }

    /// `int(partial_rotary_factor * n_embd) // n_head`.
    fn dims(&self) -> Result<u32> {
        let pct = match self.params.get("partial_rotary_factor") {
            Some(v) if !v.is_null() => v.as_f64().ok_or_else(|| {
                Error::invalid(format!("config.json: `partial_rotary_factor` is {v}"))
            })?,
            _ => 1.0,
        };
        if self.n_head == 0 {
            bail!("config.json: num_attention_heads is 0");
        }
        Ok(((pct * f64::from(self.n_embd)) as u64 / u64::from(self.n_head)) as u32)
    }
}

/// A rope factor list as the f32 values `torch.tensor(..., dtype=torch.float32)` makes.
fn factors(key: &str, v: &Json) -> Result<Vec<f32>> {
    let list = v
        .as_array()
        .ok_or_else(|| Error::invalid(format!("config.json: rope `{key}` is not a list")))?;
    list.iter().map(|x| json_f32(key, x)).collect()
}

impl Arch for Phi3 {
    fn table(&self) -> &'static ArchTable {
        &crate::hf::tables::PHI3
    }

    fn extra_tensors(&self, ctx: &mut Ctx<'_>) -> Result<Vec<(String, Vec<f32>)>> {
        let rope = Rope::read(ctx)?;
        let rope_dims = rope.dims()?;
        let p = &rope.params;
        let long = p.get("long_factor").filter(|v| match v {
            Json::Null | Json::Bool(false) => false,
            Json::Array(a) => !a.is_empty(),
            _ => true,
        });
        let Some(long) = long else {
            return Ok(Vec::new());
        };
        let scale = f64::from(rope.max_pos) / f64::from(rope.orig_max_pos);
        let kind = p
            .get("rope_type")
            .and_then(Json::as_str)
            .unwrap_or_default()
            .to_lowercase();
        let attn_factor = match kind.as_str() {
            "" => bail!("config.json: rope scaling has no type"),
            "su" | "longrope" if scale > 1.0 => {
                (1.0 + scale.ln() / f64::from(rope.orig_max_pos).ln()).sqrt()
            }
            "yarn" if scale > 1.0 => 0.1 * scale.ln() + 1.0,
            "su" | "longrope" | "yarn" => 1.0,
            other => bail!("config.json: rope scaling type {other} is not supported"),
        };
        ctx.put_arch("rope.scaling.attn_factor", attn_factor as f32)?;
        let short = p
            .get("short_factor")
            .filter(|v| !v.is_null())
            .ok_or_else(|| Error::invalid("config.json: rope scaling without short_factor"))?;
        let (long, short) = (
            factors("long_factor", long)?,
            factors("short_factor", short)?,
        );
        if long.len() != short.len() || long.len() as f64 != f64::from(rope_dims) / 2.0 {
            bail!(
                "config.json: the rope long and short factors must be {} long, not {} and {}",
                f64::from(rope_dims) / 2.0,
                long.len(),
                short.len()
            );
        }
        Ok(vec![
            ("rope_factors_long.weight".into(), long),
            ("rope_factors_short.weight".into(), short),
        ])
    }

    fn parameters(&self, ctx: &mut Ctx<'_>) -> Result<()> {
        let rope = Rope::read(ctx)?;
        let n_kv = count(ctx, &["num_key_value_heads", "n_head_kv"])?;
        let eps = ctx
            .config
            .find(&["rms_norm_eps"])
            .ok_or_else(|| Error::invalid("config.json: no `rms_norm_eps`"))?;
        let eps = json_f32("rms_norm_eps", eps.1)?;
        let ff = count(ctx, &["intermediate_size"])?;
        let params = match rope.params.get("full_attention") {
            Some(Json::Object(m)) => m,
            _ => &rope.params,
        };
        let theta = params
            .get("rope_theta")
            .filter(|v| !v.is_null())
            .ok_or_else(|| Error::invalid("config.json: no `rope_theta`"))?;
        let theta = json_f32("rope_theta", theta)?;
        ctx.put_arch("context_length", rope.max_pos)?;
        ctx.put_arch("rope.scaling.original_context_length", rope.orig_max_pos)?;
        ctx.put_arch("embedding_length", rope.n_embd)?;
        ctx.put_arch("feed_forward_length", ff)?;
        ctx.put_arch("block_count", u32::try_from(ctx.block_count)?)?;
        ctx.put_arch("attention.head_count", rope.n_head)?;
        ctx.put_arch("attention.head_count_kv", n_kv)?;
        ctx.put_arch("attention.layer_norm_rms_epsilon", eps)?;
        ctx.put_arch("rope.dimension_count", rope.dims()?)?;
        ctx.put_arch("rope.freq_base", theta)?;
        ctx.put("general.file_type", ctx.outtype.file_type())?;
        // Zero tells Phi-4 (no sliding window) from the Phi-3 models.
        let sw = match ctx.config.get("sliding_window") {
            Some(v) => json_u32("sliding_window", v)?,
            None => 0,
        };
        ctx.put_arch("attention.sliding_window", sw)
    }

    fn vocab(&self, ctx: &mut Ctx<'_>) -> Result<()> {
        // Phi-4 names a GPT-2 tokenizer; everything else is SentencePiece.
        if let Some(cfg) = read_object(&ctx.dir.join("tokenizer_config.json"))?
            && cfg.get("tokenizer_class").and_then(Json::as_str) == Some("GPT2Tokenizer")
        {
            return super::llama::load_gpt2_vocab(ctx);
        }
        phi3_sentencepiece(ctx)
    }
}

/// `Phi3MiniModel.set_vocab`'s SentencePiece reading: the pieces, then `added_tokens.json`,
/// `tokenizer_config.json`'s `added_tokens_decoder` and `tokenizer.json`'s `added_tokens`
/// over them (user-defined, or control when marked special), padded to `vocab_size`.
fn phi3_sentencepiece(ctx: &mut Ctx<'_>) -> Result<()> {
    use crate::hf::tokenizer::spm::read_pieces;
    use crate::hf::tokenizer::token_type;
    let dir = ctx.dir;
    let model = dir.join("tokenizer.model");
    if !model.is_file() {
        bail!("{}: missing", model.display());
    }
    let pieces = read_pieces(&model)?;
    let vocab_size = match ctx.config.get("vocab_size") {
        Some(v) => json_u32("vocab_size", v)? as usize,
        None => pieces.len(),
    };
    if pieces.len() > vocab_size {
        bail!(
            "{}: {} pieces, more than the configured vocab_size {vocab_size}",
            model.display(),
            pieces.len()
        );
    }
    let mut v = super::llama::SpmVocab::base(dir, &pieces, vocab_size)?;
    let mut added = |file: &str, id: usize, data: &Json| -> Result<()> {
        let content = data.get("content").and_then(Json::as_str).ok_or_else(|| {
            Error::invalid(format!(
                "{}: added token {id} has no content",
                dir.join(file).display()
            ))
        })?;
        if id >= vocab_size {
            bail!(
                "{}: added token {id} is past the vocabulary ({vocab_size})",
                dir.join(file).display()
            );
        }
        v.tokens[id] = content.to_string();
        v.scores[id] = -1000.0;
        let special = data.get("special").and_then(Json::as_bool).unwrap_or(false);
        v.types[id] = if special {
            token_type::CONTROL
        } else {
            token_type::USER_DEFINED
        };
        Ok(())
    };
    if let Some(cfg) = read_object(&dir.join("tokenizer_config.json"))?
        && let Some(Json::Object(decoder)) = cfg.get("added_tokens_decoder")
    {
        for (id, data) in decoder {
            let id = id.parse::<usize>().map_err(|_| {
                Error::invalid(format!(
                    "{}: added token id `{id}` is not a number",
                    dir.join("tokenizer_config.json").display()
                ))
            })?;
            added("tokenizer_config.json", id, data)?;
        }
    }
    if let Some(tj) = read_object(&dir.join("tokenizer.json"))?
        && let Some(Json::Array(list)) = tj.get("added_tokens")
    {
        for data in list {
            let id = data
                .get("id")
                .and_then(Json::as_u64)
                .and_then(|i| usize::try_from(i).ok())
                .ok_or_else(|| {
                    Error::invalid(format!(
                        "{}: an added token without an id",
                        dir.join("tokenizer.json").display()
                    ))
                })?;
            added("tokenizer.json", id, data)?;
        }
    }
    v.write(ctx)
}
