//! The tokenizer keys: the vocabulary read from `tokenizer.json` through the Hugging Face
//! `tokenizers` crate (the Rust code Python's `tokenizers` runs, so the BPE pre-tokenizer
//! hash is computed by the same encoder), and the special tokens and flags gguf-py's
//! `SpecialVocab` derives from the tokenizer files ([`special`]).

mod narrow;
pub mod pre;
pub mod special;
pub mod spm;

use super::tables::{CHKTXT, PRE_HASHES};
use crate::error::{Error, Result};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::path::Path;
use tokenizers::{Model, Tokenizer};

/// `gguf.TokenType`.
pub mod token_type {
    /// A normal token.
    pub const NORMAL: i32 = 1;
    /// A token absent from the vocabulary (`[PAD<i>]`).
    pub const UNUSED: i32 = 5;
    /// A control (special) token.
    pub const CONTROL: i32 = 3;
    /// A user-defined added token.
    pub const USER_DEFINED: i32 = 4;
}

/// A `tokenizer.json` loaded as `AutoTokenizer` uses it for the converter: truncation and
/// padding off (as `encode` sets them).
pub struct HfTokenizer {
    tok: Tokenizer,
    clean_up_spaces: bool,
    /// The model's tokens by id, read from the file beside the tokenizer built from it
    /// (listing them through the tokenizer clones each one out of a hash map), when the
    /// ids are dense enough to index.
    model_tokens: Option<Vec<Option<String>>>,
}

impl HfTokenizer {
    /// Loads `DIR/tokenizer.json`; an error names the file.
    pub fn load(dir: &Path) -> Result<HfTokenizer> {
        let path = dir.join("tokenizer.json");
        if !path.is_file() {
            return Err(Error::invalid(format!(
                "{}: missing (quantforge reads the fast tokenizer's tokenizer.json)",
                path.display()
            )));
        }
        let text = std::fs::read_to_string(&path)
            .map_err(|e| Error::invalid(format!("{}: {e}", path.display())))?;
        let (mut tok, model_tokens) = match narrow::narrowed(&text) {
            Some(n) => (n.tokenizer, n.model_tokens),
            None => (
                text.parse::<Tokenizer>()
                    .map_err(|e| Error::invalid(format!("{}: {e}", path.display())))?,
                None,
            ),
        };
        tok.with_truncation(None)
            .map_err(|e| Error::invalid(format!("{}: {e}", path.display())))?;
        tok.with_padding(None);
        let config = special::read_object(&dir.join("tokenizer_config.json"))?;
        let clean_up_spaces = config
            .as_ref()
            .and_then(|c| c.get("clean_up_tokenization_spaces"))
            .and_then(|v| v.as_bool())
            .unwrap_or(false);
        Ok(HfTokenizer {
            tok,
            clean_up_spaces,
            model_tokens,
        })
    }

    /// Token ids of `text` with the special tokens the post-processor adds.
    pub fn encode(&self, text: &str, add_special: bool) -> Result<Vec<u32>> {
        let enc = self
            .tok
            .encode(text, add_special)
            .map_err(|e| Error::invalid(format!("tokenizer: {e}")))?;
        Ok(enc.get_ids().to_vec())
    }

    /// `tokenizer.decode(ids)` as `transformers` does it (special tokens kept, the
    /// tokenization spaces cleaned up when the config asks).
    pub fn decode(&self, ids: &[u32]) -> Result<String> {
        let text = self
            .tok
            .decode(ids, false)
            .map_err(|e| Error::invalid(format!("tokenizer: {e}")))?;
        Ok(if self.clean_up_spaces {
            clean_up_tokenization(&text)
        } else {
            text
        })
    }

    /// The BPE pre-tokenizer name: the sha256 of the check text's ids looked up in the
    /// converter's table (the last equal entry wins, as there); `None` when unknown.
    pub fn pre_by_hash(&self) -> Result<(String, Option<&'static str>)> {
        let ids = self.encode(CHKTXT, true)?;
        let repr = format!(
            "[{}]",
            ids.iter()
                .map(u32::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        );
        let hash = hex(&Sha256::digest(repr.as_bytes()));
        let name = PRE_HASHES
            .iter()
            .rev()
            .find(|(h, _)| *h == hash)
            .map(|(_, n)| *n);
        Ok((hash, name))
    }

    /// Tokens in the vocabulary, added ones included (`len(tokenizer.vocab)`: the model's
    /// tokens and the added ones it does not have, counted without cloning the vocabulary
    /// as `get_vocab_size` does).
    pub fn vocab_len(&self) -> usize {
        let model = self.tok.get_model();
        let added = self
            .tok
            .get_added_vocabulary()
            .get_vocab()
            .keys()
            .filter(|t| model.token_to_id(t).is_none())
            .count();
        model.get_vocab_size() + added
    }

    /// Frees the tokenizer on a thread of its own: its hundreds of thousands of strings
    /// take tens of milliseconds to free, which the caller need not wait for.
    pub fn drop_aside(self) {
        std::thread::spawn(move || drop(self));
    }

    /// `id_to_token`: the added token with that id, else the model's.
    fn id_to_token(&self, id: u32) -> Option<String> {
        if let Some(t) = self.tok.get_added_vocabulary().simple_id_to_token(id) {
            return Some(t);
        }
        match &self.model_tokens {
            Some(list) => list.get(id as usize).cloned().flatten(),
            None => self.tok.get_model().id_to_token(id),
        }
    }

    /// `get_vocab_base`: tokens and types for ids `0..vocab_size` (ids missing from the
    /// vocabulary become `[PAD<id>]`, unused).
    pub fn vocab_base(&self, vocab_size: usize) -> Result<(Vec<String>, Vec<i32>)> {
        let max = self.vocab_len();
        if max > vocab_size
            && let Some(id) =
                (vocab_size as u32..max as u32).find(|&i| self.id_to_token(i).is_some())
        {
            return Err(Error::invalid(format!(
                "tokenizer has id {id}, beyond vocab_size {vocab_size} of config.json"
            )));
        }
        let added = self.tok.get_added_vocabulary().get_added_tokens_decoder();
        let added_by_content: HashMap<&str, u32> = {
            let mut ids: Vec<_> = added.iter().collect();
            ids.sort_by_key(|(id, _)| **id);
            ids.into_iter()
                .map(|(id, t)| (t.content.as_str(), *id))
                .collect()
        };
        let mut tokens = Vec::with_capacity(vocab_size);
        let mut types = Vec::with_capacity(vocab_size);
        for i in 0..vocab_size as u32 {
            let Some(mut token) = self.id_to_token(i) else {
                tokens.push(format!("[PAD{i}]"));
                types.push(token_type::UNUSED);
                continue;
            };
            if added_by_content.contains_key(token.as_str()) {
                let info = added.get(&i);
                if info.is_some_and(|t| !t.normalized) {
                    let ids = self.encode(&token, false)?;
                    token = self.decode(&ids)?;
                }
                if info.is_some_and(|t| t.special) || looks_special(&token) {
                    types.push(token_type::CONTROL);
                } else {
                    token = token.replace('\u{2581}', " ");
                    types.push(token_type::USER_DEFINED);
                }
            } else {
                types.push(token_type::NORMAL);
            }
            tokens.push(token);
        }
        Ok((tokens, types))
    }
}

/// Loads `DIR/tokenizer.json` as an [`HfTokenizer`] on another thread while `work` runs
/// on this one (building the tokenizer is the slowest step of reading a vocabulary).
pub fn load_beside<T>(
    dir: &Path,
    work: impl FnOnce() -> Result<T>,
) -> (Result<HfTokenizer>, Result<T>) {
    std::thread::scope(|s| {
        let loading = s.spawn(|| HfTokenizer::load(dir));
        let done = work();
        let tok = loading
            .join()
            .unwrap_or_else(|_| Err(Error::invalid("the tokenizer loader panicked")));
        (tok, done)
    })
}

/// `does_token_look_special`.
pub fn looks_special(t: &str) -> bool {
    matches!(t, "<pad>" | "<mask>" | "<2mass>" | "[@BOS@]")
        || (t.starts_with("<|") && t.ends_with("|>"))
        || (t.starts_with("<\u{ff5c}") && t.ends_with("\u{ff5c}>"))
        || (t.starts_with("<unused") && t.ends_with('>'))
}

/// `transformers`' `clean_up_tokenization`.
fn clean_up_tokenization(s: &str) -> String {
    s.replace(" .", ".")
        .replace(" ?", "?")
        .replace(" !", "!")
        .replace(" ,", ",")
        .replace(" ' ", "'")
        .replace(" n't", "n't")
        .replace(" 'm", "'m")
        .replace(" 's", "'s")
        .replace(" 've", "'ve")
        .replace(" 're", "'re")
}

/// Lowercase hex.
fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
