//! BPE pre-tokenizers known by their configuration: when the converter's hash of the check
//! text's ids is not in its table (a new model with a known pre-tokenizer, a vocabulary
//! edited by a finetune), the pre-tokenizer is named by matching `tokenizer.json`'s
//! `normalizer` and `pre_tokenizer` against these, each one whose hash the converter
//! knows for a tokenizer built with it (the test fixtures of `golden/hf_fixtures.rs` are
//! built from this table and converted by the converter itself).

use serde_json::{Value as Json, json};

/// Llama 3's split.
pub const LLAMA3_SPLIT: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// Qwen2's split (single digits).
pub const QWEN2_SPLIT: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// A known pre-tokenizer: its name in llama.cpp and the `tokenizer.json` parts that
/// define it.
pub struct KnownPre {
    /// `tokenizer.ggml.pre`.
    pub name: &'static str,
    /// `normalizer`.
    pub normalizer: Json,
    /// `pre_tokenizer`.
    pub pre_tokenizer: Json,
}

/// Byte-level pre-tokenizer step of the given flags.
pub fn byte_level(trim_offsets: bool, use_regex: bool) -> Json {
    json!({"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": trim_offsets, "use_regex": use_regex})
}

/// A regex split followed by a byte-level step without its own regex.
fn split_then_bytes(regex: &str, trim_offsets: bool) -> Json {
    json!({"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": regex}, "behavior": "Isolated", "invert": false},
        byte_level(trim_offsets, false)
    ]})
}

/// Every pre-tokenizer known by configuration.
pub fn known() -> Vec<KnownPre> {
    vec![
        KnownPre {
            name: "llama-bpe",
            normalizer: Json::Null,
            pre_tokenizer: split_then_bytes(LLAMA3_SPLIT, true),
        },
        KnownPre {
            name: "qwen2",
            normalizer: json!({"type": "NFC"}),
            pre_tokenizer: split_then_bytes(QWEN2_SPLIT, false),
        },
        KnownPre {
            name: "gpt-2",
            normalizer: Json::Null,
            pre_tokenizer: byte_level(true, true),
        },
    ]
}

/// The name of the known pre-tokenizer configured exactly as `normalizer` and `pre`.
pub fn by_config(normalizer: &Json, pre: &Json) -> Option<&'static str> {
    known()
        .into_iter()
        .find(|k| &k.normalizer == normalizer && &k.pre_tokenizer == pre)
        .map(|k| k.name)
}

/// Known pre-tokenizers nearest to `pre`: those with the same step types, else all.
pub fn nearest(pre: &Json) -> Vec<&'static str> {
    let steps = |p: &Json| -> Vec<String> {
        match p.get("pretokenizers").and_then(Json::as_array) {
            Some(list) => list
                .iter()
                .map(|s| s.get("type").map(|t| t.to_string()).unwrap_or_default())
                .collect(),
            None => vec![p.get("type").map(|t| t.to_string()).unwrap_or_default()],
        }
    };
    let want = steps(pre);
    let all = known();
    let same: Vec<&'static str> = all
        .iter()
        .filter(|k| steps(&k.pre_tokenizer) == want)
        .map(|k| k.name)
        .collect();
    if same.is_empty() {
        all.iter().map(|k| k.name).collect()
    } else {
        same
    }
}
