//! `BertModel` (sentence-transformers folders among them): a WordPiece vocabulary in the
//! converter's "phantom space" form, mean/CLS pooling from `modules.json`, no causal mask.

use super::{Arch, ArchTable, Modified, text_filter, text_parameters};
use crate::error::{Error, Result};
use crate::hf::tokenizer::pre;
use crate::hf::tokenizer::special::{SpecialVocab, read_tokenizer_meta};
use crate::hf::tokenizer::{HfTokenizer, load_beside, token_type};
use crate::hf::{Ctx, json_u32};
use quantforge_formats::gguf::{Array, StringArray, Value};
use serde_json::Value as Json;

/// The converter's `BertModel` class.
pub struct Bert;

impl Arch for Bert {
    fn table(&self) -> &'static ArchTable {
        &crate::hf::tables::BERT
    }

    fn filter(&self, name: &str) -> Option<String> {
        let mut name = name.strip_prefix("bert.").unwrap_or(name).to_string();
        if let Some(stem) = name.strip_suffix(".gamma") {
            name = format!("{stem}.weight");
        }
        if let Some(stem) = name.strip_suffix(".beta") {
            name = format!("{stem}.bias");
        }
        if matches!(
            name.as_str(),
            "embeddings.position_ids" | "pooler.dense.weight" | "pooler.dense.bias"
        ) || name.starts_with("cls.predictions")
            || name.starts_with("cls.seq_relationship")
        {
            return None;
        }
        text_filter(&name)
    }

    fn modify(&self, ctx: &Ctx<'_>, name: &str) -> Result<Modified> {
        let name = match (labels(ctx).is_some(), name) {
            (true, "classifier.weight") => "classifier.out_proj.weight",
            (true, "classifier.bias") => "classifier.out_proj.bias",
            _ => name,
        };
        Ok(Modified::name(ctx.tensor_map.map(name)?))
    }

    fn parameters(&self, ctx: &mut Ctx<'_>) -> Result<()> {
        text_parameters(ctx)?;
        ctx.put_arch("attention.causal", false)?;
        super::pooling(ctx)?;
        if let Some(labels) = labels(ctx) {
            let mut a = StringArray::new();
            for l in labels {
                a.push(l);
            }
            ctx.put_arch("classifier.output_labels", Value::Array(Array::String(a)))?;
        }
        Ok(())
    }

    fn vocab(&self, ctx: &mut Ctx<'_>) -> Result<()> {
        let dir = ctx.dir;
        let configured = match ctx.config.get("vocab_size") {
            Some(v) => Some(json_u32("vocab_size", v)? as usize),
            None => None,
        };
        let (tok, special) = load_beside(dir, || SpecialVocab::load(dir, false, configured));
        let tok = tok?;
        let vocab_size = configured.unwrap_or_else(|| tok.vocab_len());
        let (tokens, types) = tok.vocab_base(vocab_size)?;
        let pre = pre_name(ctx, &tok)?;
        let type_count = match ctx.config.get("type_vocab_size") {
            Some(v) => json_u32("type_vocab_size", v)?,
            None => 1,
        };
        ctx.put("tokenizer.ggml.token_type_count", type_count)?;
        let mut list = StringArray::with_capacity(tokens.len(), 0);
        for (t, &ty) in tokens.iter().zip(&types) {
            if ty == token_type::CONTROL {
                list.push(t);
            } else if let Some(rest) = t.strip_prefix("##") {
                list.push(rest);
            } else {
                list.push(format!("\u{2581}{t}"));
            }
        }
        ctx.put("tokenizer.ggml.model", "bert")?;
        ctx.put("tokenizer.ggml.pre", pre)?;
        ctx.put("tokenizer.ggml.tokens", Value::Array(Array::String(list)))?;
        ctx.put("tokenizer.ggml.token_type", Value::Array(Array::I32(types)))?;
        let special = match (special?, configured) {
            (sv, Some(_)) => sv,
            // Without a configured size the special ids are checked against the
            // vocabulary's own, known only now.
            (_, None) => SpecialVocab::load(dir, false, Some(tokens.len()))?,
        };
        special.write(&mut ctx.metadata)
    }
}

/// The pre-tokenizer name: `--vocab-pre`, else the converter's hash table.
pub(crate) fn pre_name(ctx: &mut Ctx<'_>, tok: &HfTokenizer) -> Result<String> {
    if let Some(p) = &ctx.vocab_pre {
        return Ok(p.clone());
    }
    let (hash, name) = tok.pre_by_hash()?;
    if let Some(name) = name {
        return Ok(name.to_string());
    }
    // The converter refuses here; a pre-tokenizer configured as a known one is that one.
    let path = ctx.dir.join("tokenizer.json");
    let meta = read_tokenizer_meta(ctx.dir)?.unwrap_or_default();
    if let Some(name) = pre::by_config(&meta.normalizer, &meta.pre_tokenizer) {
        ctx.warnings.push(format!(
            "{}: the BPE pre-tokenizer's check-text hash {hash} is not in the converter's \
             table (it would refuse this folder); its normalizer and pre-tokenizer are \
             configured as {name}'s, so tokenizer.ggml.pre is {name} (--vocab-pre overrides)",
            path.display()
        ));
        return Ok(name.to_string());
    }
    Err(Error::invalid(format!(
        "{}: the BPE pre-tokenizer (check-text hash {hash}) is neither in the converter's \
         table nor configured as a known one (nearest: {}); name it with --vocab-pre",
        path.display(),
        pre::nearest(&meta.pre_tokenizer).join(", ")
    )))
}

/// Classifier labels (`id2label` unless it is the two placeholder labels `transformers`
/// adds), sorted by id.
fn labels(ctx: &Ctx<'_>) -> Option<Vec<String>> {
    let Some(Json::Object(map)) = ctx.config.get("id2label") else {
        return None;
    };
    if map.is_empty() {
        return None;
    }
    if map.len() == 2 && map.get("0").and_then(Json::as_str) == Some("LABEL_0") {
        return None;
    }
    let mut items: Vec<(i64, String)> = map
        .iter()
        .map(|(k, v)| {
            (
                k.parse().unwrap_or(i64::MAX),
                v.as_str().map_or_else(|| v.to_string(), str::to_string),
            )
        })
        .collect();
    items.sort();
    Some(items.into_iter().map(|(_, v)| v).collect())
}
