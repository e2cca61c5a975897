//! A BPE tokenizer narrowed to the texts the converter encodes.
//!
//! Building a `tokenizers` BPE model resolves every merge against the vocabulary (280,000
//! merges for Llama 3: most of the time a vocabulary takes to read). The converter only
//! ever encodes a few texts with it: the pre-tokenizer check text, and each added token
//! that is not normalized (`get_vocab_base` encodes and decodes those). BPE applies a
//! merge `(a, b)` to a word only where `a` and `b` are neighbours in it, so the merged
//! symbol `ab` is a substring of the word: a merge whose `ab` is a substring of no word
//! of those texts is never applied to them. Dropping such merges keeps the others' order
//! (BPE compares ranks, never their values) and the whole vocabulary (so every id, the
//! added tokens' included, stays as it was), and the narrowed tokenizer encodes and
//! decodes those texts exactly as the whole one.
//!
//! The words are those the tokenizer's own added-token split, normalizer and
//! pre-tokenizer make of the texts, taken from a copy of the tokenizer without vocabulary
//! or merges. Models this reasoning does not cover (a sub-word prefix or word suffix,
//! which make symbols that are not substrings; dropout; anything not BPE) are built whole.

use super::super::tables::CHKTXT;
use serde_json::{Map, Value as Json};
use std::collections::HashSet;
use tokenizers::models::bpe::{BPE, Vocab};
use tokenizers::{
    AddedToken, ModelWrapper, OffsetReferential, OffsetType, PreTokenizer, Tokenizer,
};

/// A narrowed tokenizer and what was read on the way.
pub struct Narrowed {
    /// The tokenizer with only the merges the converter's texts can use.
    pub tokenizer: Tokenizer,
    /// The model's tokens by id (`None` when an id is beyond any dense numbering of
    /// them, and the tokenizer is asked instead).
    pub model_tokens: Option<Vec<Option<String>>>,
}

/// The tokenizer of `text` (a `tokenizer.json`) narrowed to the converter's texts, or
/// `None` where it must be built whole (the crate then also reports any error in the
/// file).
pub fn narrowed(text: &str) -> Option<Narrowed> {
    let Json::Object(mut root) = serde_json::from_str::<Json>(text).ok()? else {
        return None;
    };
    let Some(Json::Object(mut model)) = root.remove("model") else {
        return None;
    };
    let unset = |key: &str| match model.get(key) {
        None | Some(Json::Null) => true,
        Some(Json::String(s)) => s.is_empty(),
        Some(_) => false,
    };
    if model.get("type").and_then(Json::as_str) != Some("BPE")
        || !unset("dropout")
        || !unset("continuing_subword_prefix")
        || !unset("end_of_word_suffix")
    {
        return None;
    }
    let Some(Json::Object(vocab)) = model.remove("vocab") else {
        return None;
    };
    let Some(Json::Array(merges)) = model.remove("merges") else {
        return None;
    };

    // Everything but the model, as the crate reads it, from the file without vocabulary
    // or merges; its added tokens' ids are wrong (they are counted from an empty
    // vocabulary), but where they split a text is not.
    let mut bare = root.clone();
    let mut bare_model = model.clone();
    bare_model.insert("vocab".into(), Json::Object(Map::new()));
    bare_model.insert("merges".into(), Json::Array(Vec::new()));
    bare.insert("model".into(), Json::Object(bare_model));
    let skeleton: Tokenizer = serde_json::to_string(&bare).ok()?.parse().ok()?;
    let pieces_of = words(&skeleton, &root)?;
    let mut pieces: HashSet<&str> = HashSet::new();
    for w in &pieces_of {
        let bounds: Vec<usize> = w.char_indices().map(|(i, _)| i).chain([w.len()]).collect();
        for (k, &a) in bounds.iter().enumerate() {
            for &b in &bounds[k + 1..] {
                pieces.insert(&w[a..b]);
            }
        }
    }

    // The merges whose symbol is a piece, in their order (`convert_merges_to_hashmap`
    // for the "a b" form: `#version` lines skipped, others split at their one space).
    let mut kept: Vec<(String, String)> = Vec::new();
    let mut ab = String::new();
    for m in &merges {
        let (a, b) = match m {
            Json::String(s) if s.starts_with("#version") => continue,
            Json::String(s) => {
                let mut parts = s.split(' ');
                match (parts.next(), parts.next(), parts.next()) {
                    (Some(a), Some(b), None) => (a, b),
                    _ => return None,
                }
            }
            Json::Array(pair) => match pair.as_slice() {
                [Json::String(a), Json::String(b)] => (a.as_str(), b.as_str()),
                _ => return None,
            },
            _ => return None,
        };
        if !pieces.contains(a) || !pieces.contains(b) {
            continue;
        }
        ab.clear();
        ab.push_str(a);
        ab.push_str(b);
        if pieces.contains(ab.as_str()) {
            kept.push((a.to_string(), b.to_string()));
        }
    }
    drop(pieces);

    // The model as the crate's BPE deserializer builds it, and the tokenizer around it
    // as its tokenizer deserializer does: parts, then the added tokens in file order.
    let flag = |key: &str| match model.get(key) {
        None | Some(Json::Null) => Some(None),
        Some(Json::Bool(b)) => Some(Some(*b)),
        Some(_) => None,
    };
    let mut builder = BPE::builder();
    match model.get("unk_token") {
        None | Some(Json::Null) => {}
        Some(Json::String(u)) => builder = builder.unk_token(u.clone()),
        Some(_) => return None,
    }
    if let Some(f) = flag("fuse_unk")? {
        builder = builder.fuse_unk(f);
    }
    if let Some(f) = flag("byte_fallback")? {
        builder = builder.byte_fallback(f);
    }
    if let Some(f) = flag("ignore_merges")? {
        builder = builder.ignore_merges(f);
    }
    let mut map = Vocab::with_capacity(vocab.len());
    for (token, id) in &vocab {
        map.insert(token.clone(), u32::try_from(id.as_u64()?).ok()?);
    }
    let bpe = builder.vocab_and_merges(map, kept).build().ok()?;
    let mut tokenizer = Tokenizer::new(ModelWrapper::BPE(bpe));
    tokenizer.with_normalizer(skeleton.get_normalizer().cloned());
    tokenizer.with_pre_tokenizer(skeleton.get_pre_tokenizer().cloned());
    tokenizer.with_post_processor(skeleton.get_post_processor().cloned());
    tokenizer.with_decoder(skeleton.get_decoder().cloned());
    let added: Vec<AddedToken> = match root.get("added_tokens") {
        None | Some(Json::Null) => Vec::new(),
        Some(list) => serde_json::from_value(list.clone()).ok()?,
    };
    tokenizer.add_tokens(&added);
    Some(Narrowed {
        tokenizer,
        model_tokens: by_id(vocab),
    })
}

/// The words the model is given for the converter's texts: the check text and each
/// added token that is not normalized, split by the added tokens, normalized and
/// pre-tokenized as `skeleton` does.
fn words(skeleton: &Tokenizer, root: &Map<String, Json>) -> Option<Vec<String>> {
    let mut texts = vec![CHKTXT.to_string()];
    if let Some(Json::Array(added)) = root.get("added_tokens") {
        for t in added {
            if t.get("normalized") == Some(&Json::Bool(false))
                && let Some(content) = t.get("content").and_then(Json::as_str)
            {
                texts.push(content.to_string());
            }
        }
    }
    let mut words = Vec::new();
    for t in &texts {
        let mut pts = skeleton
            .get_added_vocabulary()
            .extract_and_normalize(skeleton.get_normalizer(), t);
        if let Some(p) = skeleton.get_pre_tokenizer() {
            p.pre_tokenize(&mut pts).ok()?;
        }
        for (word, _, tokens) in pts.get_splits(OffsetReferential::Original, OffsetType::Byte) {
            if tokens.is_none() {
                words.push(word.to_string());
            }
        }
    }
    Some(words)
}

/// The vocabulary's tokens by id, or `None` when an id is not below twice their count
/// (a table that large would not be justified by the file).
fn by_id(vocab: Map<String, Json>) -> Option<Vec<Option<String>>> {
    let limit = vocab.len().saturating_mul(2);
    let mut list: Vec<Option<String>> = Vec::new();
    list.resize(vocab.len(), None);
    for (token, id) in vocab {
        let id = usize::try_from(id.as_u64()?).ok()?;
        if id >= limit {
            return None;
        }
        if id >= list.len() {
            list.resize(id + 1, None);
        }
        list[id] = Some(token);
    }
    Some(list)
}
