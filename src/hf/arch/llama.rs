//! `LlamaModel` (Llama, Mistral and their finetunes): Q and K rows permuted back to
//! ggml's rotary layout, the vocabulary from `tokenizer.json` (Llama 3 / SmolLM style
//! byte-level BPE).

use super::{Arch, ArchTable, ExpertStack, Experts, Modified, text_filter, text_parameters};
use crate::error::{Error, Result, bail};
use crate::hf::tokenizer::special::{SpecialVocab, read_object, read_tokenizer_meta};
use crate::hf::tokenizer::{HfTokenizer, load_beside};
use crate::hf::{Ctx, json_u32};
use quantforge_formats::gguf::{Array, StringArray, Value};
use serde_json::Value as Json;

/// The converter's `LlamaModel` class, for the Hugging Face architecture it was picked by.
pub struct Llama {
    /// `LlamaModel` checkpoints name their tensors without the `model.` prefix.
    pub bare_names: bool,
}

impl Arch for Llama {
    fn table(&self) -> &'static ArchTable {
        &crate::hf::tables::LLAMA
    }

    fn filter(&self, name: &str) -> Option<String> {
        text_filter(&name.replace("text_model.", ""))
    }

    fn modify(&self, ctx: &Ctx<'_>, name: &str) -> Result<Modified> {
        let count = |keys: &[&str]| -> Result<usize> {
            let (k, v) = ctx
                .config
                .find(keys)
                .ok_or_else(|| Error::invalid(format!("config.json: none of {keys:?}")))?;
            Ok(json_u32(k, v)? as usize)
        };
        let n_head = count(&["n_heads", "num_attention_heads"])?;
        let n_kv = count(&["n_kv_heads", "num_key_value_heads"])?;
        let name = if self.bare_names {
            format!("model.{name}")
        } else {
            name.to_string()
        };
        let permute = if name.ends_with("q_proj.weight") || name.ends_with("q_proj.bias") {
            Some(n_head)
        } else if name.ends_with("k_proj.weight") || name.ends_with("k_proj.bias") {
            Some(if n_kv != n_head { n_kv } else { n_head })
        } else {
            None
        };
        Ok(Modified {
            permute,
            ..Modified::name(ctx.tensor_map.map(&name)?)
        })
    }

    fn experts(&self, ctx: &Ctx<'_>, name: &str) -> Result<Experts> {
        if !name.contains("block_sparse_moe.experts") {
            return Ok(Experts::No);
        }
        let n = ctx.config.get("num_local_experts").ok_or_else(|| {
            Error::invalid(format!(
                "{}: expert tensor `{name}` but no `num_local_experts`",
                ctx.config.path().display()
            ))
        })?;
        Ok(Experts::Buffer(ExpertStack::mixtral(
            json_u32("num_local_experts", n)? as usize,
        )))
    }

    fn extra_tensors(&self, ctx: &mut Ctx<'_>) -> Result<Vec<(String, Vec<f32>)>> {
        let rp = super::rope_parameters(ctx.config);
        let params = match rp.get("full_attention") {
            Some(Json::Object(m)) => m.clone(),
            _ => rp,
        };
        let llama3 = params
            .get("rope_type")
            .and_then(Json::as_str)
            .is_some_and(|t| t.eq_ignore_ascii_case("llama3"));
        if !llama3 {
            return Ok(Vec::new());
        }
        let c = ctx.config;
        let dim = rope_dim(c)?;
        let num = |key: &str, default: f64| -> Result<f64> {
            match params.get(key) {
                None | Some(Json::Null) => Ok(default),
                Some(v) => v.as_f64().ok_or_else(|| {
                    Error::invalid(format!("config.json: rope `{key}` is {v}, not a number"))
                }),
            }
        };
        let factors = llama3_rope_factors(
            dim,
            num("rope_theta", 10000.0)?,
            num("factor", 8.0)?,
            num("low_freq_factor", 1.0)?,
            num("high_freq_factor", 4.0)?,
            num("original_max_position_embeddings", 8192.0)?,
        )
        .map_err(|e| Error::invalid(format!("{}: {e}", c.path().display())))?;
        Ok(vec![("rope_freqs.weight".into(), factors)])
    }

    fn parameters(&self, ctx: &mut Ctx<'_>) -> Result<()> {
        text_parameters(ctx)?;
        let c = ctx.config;
        let vocab = c
            .get("vocab_size")
            .ok_or_else(|| Error::invalid("config.json: no vocab_size"))?;
        let vocab = json_u32("vocab_size", vocab)?;
        let rope_dim = rope_dim(c)?;
        ctx.put_arch("vocab_size", vocab)?;
        ctx.put_arch("rope.dimension_count", rope_dim)?;
        Ok(())
    }

    fn vocab(&self, ctx: &mut Ctx<'_>) -> Result<()> {
        if let Some(cfg) = read_object(&ctx.dir.join("tokenizer_config.json"))?
            && let Some(Json::Bool(p)) = cfg.get("add_prefix_space")
        {
            ctx.put("tokenizer.ggml.add_space_prefix", *p)?;
        }
        if ctx.dir.join("tokenizer.model").is_file() {
            sentencepiece_vocab(ctx)?;
            return llama_special_cases(ctx);
        }
        let dir = ctx.dir;
        let (tok, special) = load_beside(dir, || {
            let meta = read_tokenizer_meta(dir)?;
            if let Some(tj) = &meta {
                let m = &tj.model;
                let is_bpe = m.kind.as_deref() == Some("BPE");
                let llama3 =
                    is_bpe && m.ignore_merges.unwrap_or(false) && !m.byte_fallback.unwrap_or(true);
                let hf_spm = is_bpe
                    && m.byte_fallback.unwrap_or(false)
                    && tj.decoder.get("type").and_then(Json::as_str) == Some("Sequence");
                if !llama3 && hf_spm {
                    bail!(
                        "{}: Llama 2 style byte-fallback vocabularies are not supported yet",
                        dir.join("tokenizer.json").display()
                    );
                }
            }
            SpecialVocab::load_with(dir, meta, true, None)
        });
        gpt2_vocab(ctx, tok?, special?)?;
        llama_special_cases(ctx)
    }
}

/// What `LlamaModel.set_vocab` adds for CodeLlama's and Granite's vocabulary sizes.
fn llama_special_cases(ctx: &mut Ctx<'_>) -> Result<()> {
    let vocab_size = ctx.config.get("vocab_size").and_then(Json::as_u64);
    if vocab_size == Some(32016) {
        bail!("CodeLlama infill tokens are not supported yet");
    }
    if vocab_size == Some(49152) {
        ctx.put("tokenizer.ggml.add_bos_token", false)?;
    }
    Ok(())
}

/// A SentencePiece vocabulary being read: token texts, scores and types by id.
pub(crate) struct SpmVocab {
    /// Token texts.
    pub tokens: Vec<String>,
    /// Scores.
    pub scores: Vec<f32>,
    /// llama.cpp token types.
    pub types: Vec<i32>,
}

impl SpmVocab {
    /// What both SentencePiece readings of the converter start with: `vocab_size` slots
    /// (`[PADi]`, score -10000, unused), the pieces of `tokenizer.model` over them (those
    /// past `vocab_size` ignored), then `added_tokens.json`'s tokens as user-defined.
    pub(crate) fn base(
        dir: &std::path::Path,
        pieces: &[crate::hf::tokenizer::spm::Piece],
        vocab_size: usize,
    ) -> Result<SpmVocab> {
        use crate::hf::tokenizer::spm::PieceType;
        use crate::hf::tokenizer::token_type;
        let mut v = SpmVocab {
            tokens: (0..vocab_size).map(|i| format!("[PAD{i}]")).collect(),
            scores: vec![-10000.0f32; vocab_size],
            types: vec![token_type::UNUSED; vocab_size],
        };
        for (id, p) in pieces.iter().enumerate().take(vocab_size) {
            v.tokens[id] = p.text.clone();
            v.scores[id] = p.score;
            v.types[id] = match p.kind {
                PieceType::Unknown => 2,
                PieceType::Control => token_type::CONTROL,
                PieceType::Unused => token_type::UNUSED,
                PieceType::Byte => 6,
                PieceType::Normal | PieceType::UserDefined => token_type::NORMAL,
            };
        }
        if let Some(added) = read_object(&dir.join("added_tokens.json"))? {
            for (key, id) in added {
                let Some(id) = id.as_u64().and_then(|i| usize::try_from(i).ok()) else {
                    continue;
                };
                if id < vocab_size {
                    v.tokens[id] = key;
                    v.scores[id] = -1000.0;
                    v.types[id] = token_type::USER_DEFINED;
                }
            }
        }
        Ok(v)
    }

    /// Writes the keys (model `llama`, pre-tokenizer `default`) and the folder's
    /// `SpecialVocab` without merges.
    pub(crate) fn write(self, ctx: &mut Ctx<'_>) -> Result<()> {
        let n = self.tokens.len();
        let mut list = StringArray::with_capacity(n, 0);
        for t in &self.tokens {
            list.push(t);
        }
        ctx.put("tokenizer.ggml.model", "llama")?;
        ctx.put("tokenizer.ggml.pre", "default")?;
        ctx.put("tokenizer.ggml.tokens", Value::Array(Array::String(list)))?;
        ctx.put(
            "tokenizer.ggml.scores",
            Value::Array(Array::F32(self.scores)),
        )?;
        ctx.put(
            "tokenizer.ggml.token_type",
            Value::Array(Array::I32(self.types)),
        )?;
        SpecialVocab::load(ctx.dir, false, Some(n))?.write(&mut ctx.metadata)
    }
}

/// `_set_vocab_sentencepiece`: the pieces of `tokenizer.model`, then `added_tokens.json`
/// and `tokenizer_config.json`'s `added_tokens_decoder` over them, padded to the
/// configured vocabulary size.
pub(crate) fn sentencepiece_vocab(ctx: &mut Ctx<'_>) -> Result<()> {
    use crate::hf::tokenizer::spm::read_pieces;
    use crate::hf::tokenizer::{looks_special, token_type};
    let dir = ctx.dir;
    let pieces = read_pieces(&dir.join("tokenizer.model"))?;
    let configured = ctx
        .config
        .find(&["vocab_size_per_layer_input", "vocab_size"])
        .and_then(|(_, v)| v.as_u64())
        .filter(|&n| n > 0);
    let vocab_size = match configured {
        Some(n) => usize::try_from(n)?,
        None => pieces.len(),
    };
    let mut v = SpmVocab::base(dir, &pieces, vocab_size)?;
    if let Some(cfg) = read_object(&dir.join("tokenizer_config.json"))?
        && let Some(Json::Object(decoder)) = cfg.get("added_tokens_decoder")
    {
        for (id, data) in decoder {
            let Ok(id) = id.parse::<usize>() else {
                continue;
            };
            let Some(content) = data.get("content").and_then(Json::as_str) else {
                continue;
            };
            if id >= vocab_size {
                continue;
            }
            let special = data.get("special").and_then(Json::as_bool).unwrap_or(false);
            let token = if special || looks_special(content) {
                v.types[id] = token_type::CONTROL;
                content.to_string()
            } else {
                v.types[id] = token_type::USER_DEFINED;
                content.replace('\u{2581}', " ")
            };
            v.scores[id] = -1000.0;
            v.tokens[id] = token;
        }
    }
    v.write(ctx)
}

/// `_set_vocab_gpt2`: a byte-level BPE vocabulary with its merges (`special`: the
/// folder's `SpecialVocab` with merges).
pub(crate) fn gpt2_vocab(ctx: &mut Ctx<'_>, tok: HfTokenizer, special: SpecialVocab) -> Result<()> {
    let vocab_size = match ctx.config.get("vocab_size") {
        Some(v) => json_u32("vocab_size", v)? as usize,
        None => tok.vocab_len(),
    };
    let (tokens, types) = tok.vocab_base(vocab_size)?;
    let pre = super::bert::pre_name(ctx, &tok)?;
    tok.drop_aside();
    let mut list = StringArray::with_capacity(tokens.len(), 0);
    for t in &tokens {
        list.push(t);
    }
    ctx.put("tokenizer.ggml.model", "gpt2")?;
    ctx.put("tokenizer.ggml.pre", pre)?;
    ctx.put("tokenizer.ggml.tokens", Value::Array(Array::String(list)))?;
    ctx.put("tokenizer.ggml.token_type", Value::Array(Array::I32(types)))?;
    special.write(&mut ctx.metadata)
}

/// Loads the tokenizer beside the folder's `SpecialVocab` (with merges) and writes the
/// byte-level BPE keys.
pub(crate) fn load_gpt2_vocab(ctx: &mut Ctx<'_>) -> Result<()> {
    let dir = ctx.dir;
    let (tok, special) = load_beside(dir, || SpecialVocab::load(dir, true, None));
    gpt2_vocab(ctx, tok?, special?)
}

/// `LlamaModel.generate_extra_tensors` for llama3 rope scaling: one factor per rotary
/// pair, computed in f32 as torch computes it. The frequencies `1 / base ** (2i / dim)`
/// come from torch's vectorised `pow`, which is SLEEF's `powf` for every element of a
/// whole block of 32 (AVX-512) or 16 (AVX2) and libm's `powf` for the rest; for `dim / 2`
/// a multiple of 32 both builds take SLEEF everywhere, and any other head size would
/// make the converter's own output depend on the CPU it ran on, so it is refused.
/// Python floats meet the f32 tensors as f32 scalars (torch's wrapped numbers).
fn llama3_rope_factors(
    dim: u32,
    base: f64,
    factor: f64,
    low_freq_factor: f64,
    high_freq_factor: f64,
    old_context_len: f64,
) -> std::result::Result<Vec<f32>, String> {
    let n = dim.div_ceil(2) as usize;
    if dim == 0 || !n.is_multiple_of(32) {
        return Err(format!(
            "llama3 rope scaling with a head size of {dim}: the converter's rope_freqs \
             values then depend on the CPU it runs on (supported: head sizes that are \
             multiples of 64)"
        ));
    }
    let low_wavelen = (old_context_len / low_freq_factor) as f32;
    let high_wavelen = (old_context_len / high_freq_factor) as f32;
    let two_pi = (2.0 * std::f64::consts::PI) as f32;
    let (old, low, span, factor32) = (
        old_context_len as f32,
        low_freq_factor as f32,
        (high_freq_factor - low_freq_factor) as f32,
        factor as f32,
    );
    Ok((0..n)
        .map(|i| {
            let x = (2 * i) as f32 / dim as f32;
            let freq = 1.0f32 / crate::hf::sleef::pow_f32(base as f32, x);
            let wavelen = two_pi / freq;
            if wavelen < high_wavelen {
                1.0
            } else if wavelen > low_wavelen {
                factor32
            } else {
                let smooth = (old / wavelen - low) / span;
                1.0 / ((1.0 - smooth) / factor32 + smooth)
            }
        })
        .collect())
}

/// The rotary width: `head_dim`, else `hidden_size / num_attention_heads`.
fn rope_dim(c: &crate::hf::config::Config) -> Result<u32> {
    match c.get("head_dim") {
        Some(v) => json_u32("head_dim", v),
        None => {
            let h = json_u32("hidden_size", c.get("hidden_size").unwrap_or(&Json::Null))?;
            let n = json_u32(
                "num_attention_heads",
                c.get("num_attention_heads").unwrap_or(&Json::Null),
            )?;
            if n == 0 {
                bail!("config.json: num_attention_heads is 0");
            }
            Ok(h / n)
        }
    }
}
