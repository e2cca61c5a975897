//! gguf-py's `SpecialVocab`: merges, special token ids, `add_*_token` flags, the chat
//! template and the normalizer flags, read from `tokenizer.json`, `tokenizer_config.json`,
//! `chat_template.jinja`/`.json` and `config.json` with the converter's precedence, and
//! written in its order.

use crate::error::{Error, Result};
use quantforge_formats::gguf::{Array, Metadata, StringArray, Value};
use serde_json::{Map, Value as Json};
use std::path::Path;

/// What `SpecialVocab` found.
#[derive(Debug, Default)]
pub struct SpecialVocab {
    merges: Vec<String>,
    load_merges: bool,
    ids: Vec<(String, u32)>,
    add: Vec<(String, bool)>,
    chat_template: Option<Json>,
    lowercase: Option<bool>,
    strip_accents: Option<bool>,
    types: Vec<String>,
    n_vocab: Option<usize>,
}

/// A JSON object file, `None` when absent; an error names a malformed one.
pub fn read_object(path: &Path) -> Result<Option<Map<String, Json>>> {
    if !path.is_file() {
        return Ok(None);
    }
    let text = std::fs::read_to_string(path)
        .map_err(|e| Error::invalid(format!("{}: {e}", path.display())))?;
    match serde_json::from_str(&text) {
        Ok(Json::Object(m)) => Ok(Some(m)),
        Ok(_) => Err(Error::invalid(format!(
            "{}: not a JSON object",
            path.display()
        ))),
        Err(e) => Err(Error::invalid(format!(
            "{}: not valid JSON: {e}",
            path.display()
        ))),
    }
}

/// The parts of a `tokenizer.json` the converter reads besides the vocabulary, parsed
/// without building the vocabulary (a Llama 3 file holds 128k entries and 280k merges).
#[derive(Debug, Default, serde::Deserialize)]
pub struct TokenizerMeta {
    /// `added_tokens`.
    #[serde(default)]
    pub added_tokens: Vec<Json>,
    /// `normalizer`.
    #[serde(default)]
    pub normalizer: Json,
    /// `pre_tokenizer`.
    #[serde(default)]
    pub pre_tokenizer: Json,
    /// `post_processor`.
    #[serde(default)]
    pub post_processor: Json,
    /// `decoder`.
    #[serde(default)]
    pub decoder: Json,
    /// `model`, without its vocabulary.
    #[serde(default)]
    pub model: ModelMeta,
}

/// `tokenizer.json`'s `model`, without its vocabulary.
#[derive(Debug, Default, serde::Deserialize)]
pub struct ModelMeta {
    /// `type` (`BPE`, `WordPiece`, `Unigram`).
    #[serde(rename = "type", default)]
    pub kind: Option<String>,
    /// `ignore_merges`.
    #[serde(default)]
    pub ignore_merges: Option<bool>,
    /// `byte_fallback`.
    #[serde(default)]
    pub byte_fallback: Option<bool>,
    /// `merges`.
    #[serde(default)]
    pub merges: Option<Vec<Json>>,
}

/// `DIR/tokenizer.json` read as [`TokenizerMeta`], `None` when absent; an error names a
/// malformed one.
pub fn read_tokenizer_meta(dir: &Path) -> Result<Option<TokenizerMeta>> {
    let path = dir.join("tokenizer.json");
    if !path.is_file() {
        return Ok(None);
    }
    let text =
        std::fs::read(&path).map_err(|e| Error::invalid(format!("{}: {e}", path.display())))?;
    serde_json::from_slice(&text)
        .map(Some)
        .map_err(|e| Error::invalid(format!("{}: not a tokenizer.json: {e}", path.display())))
}

fn special_id(v: &Json) -> Option<&str> {
    v.get("SpecialToken")?.get("id")?.as_str()
}

fn truthy(s: &Option<String>) -> bool {
    s.as_deref().is_some_and(|s| !s.is_empty())
}

impl SpecialVocab {
    /// Reads the folder's tokenizer files as `SpecialVocab(path, load_merges, n_vocab)`.
    pub fn load(dir: &Path, load_merges: bool, n_vocab: Option<usize>) -> Result<SpecialVocab> {
        let meta = read_tokenizer_meta(dir)?;
        SpecialVocab::load_with(dir, meta, load_merges, n_vocab)
    }

    /// [`SpecialVocab::load`] with `tokenizer.json` already read (`None`: there is none).
    pub fn load_with(
        dir: &Path,
        meta: Option<TokenizerMeta>,
        load_merges: bool,
        n_vocab: Option<usize>,
    ) -> Result<SpecialVocab> {
        let mut sv = SpecialVocab {
            load_merges,
            n_vocab,
            types: ["bos", "eos", "unk", "sep", "pad", "cls", "mask"]
                .map(String::from)
                .to_vec(),
            ..SpecialVocab::default()
        };
        sv.read_tokenizer_json(dir, meta)?;
        sv.read_config_json(dir)?;
        if sv.load_merges && sv.merges.is_empty() {
            sv.merges_txt(dir)?;
        }
        Ok(sv)
    }

    fn set_id(&mut self, typ: &str, id: Option<&Json>) -> Result<()> {
        let Some(id) = id else { return Ok(()) };
        let id = match id {
            Json::Bool(b) => i64::from(*b),
            Json::Number(n) => match n.as_i64() {
                Some(i) => i,
                None => return Ok(()),
            },
            _ => return Ok(()),
        };
        if id < 0 {
            return Err(Error::invalid(format!(
                "invalid value for special token type {typ}: {id}"
            )));
        }
        if self.n_vocab.is_none_or(|n| (id as u64) < n as u64) {
            if self.ids.iter().any(|(t, _)| t == typ) {
                return Ok(());
            }
            self.ids.push((typ.to_string(), id as u32));
        }
        Ok(())
    }

    fn set_add(&mut self, typ: &str, value: bool, overwrite: bool) {
        match self.add.iter_mut().find(|(t, _)| t == typ) {
            Some((_, v)) if overwrite => *v = value,
            Some(_) => {}
            None => self.add.push((typ.to_string(), value)),
        }
    }

    fn parse_normalizer(&mut self, n: &Json) {
        match n.get("type").and_then(Json::as_str) {
            Some("Lowercase") => self.lowercase = Some(true),
            Some("StripAccents") => self.strip_accents = Some(true),
            Some("BertNormalizer") => {
                if let Some(v) = n.get("lowercase") {
                    self.lowercase = v.as_bool();
                }
                if let Some(v) = n.get("strip_accents") {
                    self.strip_accents = v.as_bool();
                }
            }
            Some("Sequence") => {
                if let Some(Json::Array(list)) = n.get("normalizers") {
                    for m in list {
                        self.parse_normalizer(m);
                    }
                }
            }
            _ => {}
        }
    }

    fn read_tokenizer_json(&mut self, dir: &Path, tokenizer: Option<TokenizerMeta>) -> Result<()> {
        if let Some(t) = &tokenizer {
            if self.load_merges
                && let Some(merges) = &t.model.merges
                && let Some(first) = merges.first()
            {
                if first.is_string() {
                    self.merges = merges
                        .iter()
                        .map(|m| m.as_str().unwrap_or_default().to_string())
                        .collect();
                } else if first
                    .as_array()
                    .is_some_and(|p| p.len() == 2 && p[0].is_string())
                {
                    let enc = |s: &str| -> String {
                        s.chars()
                            .map(|c| if c == ' ' { '\u{120}' } else { c })
                            .collect()
                    };
                    self.merges = merges
                        .iter()
                        .map(|p| {
                            let p = p.as_array().map(Vec::as_slice).unwrap_or(&[]);
                            p.iter()
                                .map(|s| enc(s.as_str().unwrap_or_default()))
                                .collect::<Vec<_>>()
                                .join(" ")
                        })
                        .collect();
                } else {
                    return Err(Error::invalid(format!(
                        "{}: unknown tokenizer merges format",
                        dir.join("tokenizer.json").display()
                    )));
                }
            }
            if !t.normalizer.is_null() {
                self.parse_normalizer(&t.normalizer);
            }
        }
        let added: Vec<Json> = tokenizer
            .as_ref()
            .map(|t| t.added_tokens.clone())
            .unwrap_or_default();
        let mut config = read_object(&dir.join("tokenizer_config.json"))?;
        if let Some(t) = &tokenizer {
            let get = |c: &Option<Map<String, Json>>, k: &str| -> Option<String> {
                c.as_ref()
                    .and_then(|c| c.get(k))
                    .and_then(|v| v.as_str().map(str::to_string))
            };
            let has_config = config.as_ref().is_some_and(|c| !c.is_empty());
            let mut bos = get(&config, "bos_token");
            let mut cls = get(&config, "cls_token");
            let mut eos = get(&config, "eos_token");
            let mut sep = get(&config, "sep_token");
            let set = |c: &mut Option<Map<String, Json>>, k: &str, v: &str| {
                if let Some(c) = c {
                    c.insert(k.to_string(), Json::String(v.to_string()));
                }
            };
            if !truthy(&bos) && truthy(&cls) && has_config {
                bos = cls.clone();
                set(&mut config, "bos_token", bos.as_deref().unwrap_or_default());
            }
            if !truthy(&eos) && truthy(&sep) && has_config {
                eos = sep.clone();
                set(&mut config, "eos_token", eos.as_deref().unwrap_or_default());
            }
            if let Some(pp) = Some(&t.post_processor).filter(|p| !p.is_null()) {
                let processors: Vec<Json> = match pp.get("processors").and_then(Json::as_array) {
                    Some(list) => list.clone(),
                    None => vec![pp.clone()],
                };
                for p in processors {
                    match p.get("type").and_then(Json::as_str) {
                        Some("ByteLevel") => {
                            self.set_add("bos", false, false);
                            self.set_add("eos", false, false);
                        }
                        Some("RobertaProcessing") => {
                            self.set_add("bos", true, true);
                            self.set_add("eos", true, true);
                            self.set_add("sep", true, true);
                            if !truthy(&cls) && has_config {
                                cls = p
                                    .get("cls")
                                    .and_then(|c| c.get(0))
                                    .and_then(Json::as_str)
                                    .map(str::to_string)
                                    .or(bos.clone());
                                set(&mut config, "cls_token", cls.as_deref().unwrap_or_default());
                            }
                            if !truthy(&sep) && has_config {
                                sep = p
                                    .get("sep")
                                    .and_then(|c| c.get(0))
                                    .and_then(Json::as_str)
                                    .map(str::to_string)
                                    .or(eos.clone());
                                set(&mut config, "sep_token", sep.as_deref().unwrap_or_default());
                            }
                        }
                        Some("TemplateProcessing") => {
                            let single = p
                                .get("single")
                                .and_then(Json::as_array)
                                .cloned()
                                .unwrap_or_default();
                            let pair = p
                                .get("pair")
                                .and_then(Json::as_array)
                                .cloned()
                                .unwrap_or_default();
                            let mut first: Option<String> = None;
                            let mut last: Option<String> = None;
                            if single.len() > 1 {
                                first = special_id(&single[0])
                                    .map(str::to_string)
                                    .filter(|s| !s.is_empty());
                                if let Some(f) = &first {
                                    if !has_config {
                                        bos = Some(f.clone());
                                    } else if Some(f) != bos.as_ref() && Some(f) != cls.as_ref() {
                                        if !truthy(&bos) {
                                            bos = Some(f.clone());
                                            set(&mut config, "bos_token", f);
                                        }
                                        if !truthy(&cls) {
                                            cls = Some(f.clone());
                                            set(&mut config, "cls_token", f);
                                        }
                                    }
                                    let v = Some(f) == bos.as_ref() || Some(f) == cls.as_ref();
                                    self.set_add("bos", v, true);
                                }
                                last = special_id(&single[single.len() - 1])
                                    .map(str::to_string)
                                    .filter(|s| !s.is_empty());
                                if let Some(l) = &last {
                                    if !has_config {
                                        eos = Some(l.clone());
                                    } else if Some(l) != eos.as_ref() {
                                        let old = eos.clone().unwrap_or_default();
                                        if !self.types.iter().any(|t| t == "eot") {
                                            self.types.push("eot".into());
                                            set(&mut config, "eot_token", &old);
                                        } else if !self.types.iter().any(|t| t == "eom") {
                                            self.types.push("eom".into());
                                            set(&mut config, "eom_token", &old);
                                        }
                                        eos = Some(l.clone());
                                        set(&mut config, "eos_token", l);
                                    }
                                    let v = Some(l) == eos.as_ref();
                                    self.set_add("eos", v, true);
                                }
                            }
                            if !pair.is_empty() {
                                let start = usize::from(
                                    first.is_some() && special_id(&pair[0]) == first.as_deref(),
                                );
                                let stop = pair.len()
                                    - usize::from(
                                        last.is_some()
                                            && special_id(&pair[pair.len() - 1]) == last.as_deref(),
                                    );
                                let mid: &[Json] = if start <= stop {
                                    &pair[start..stop]
                                } else {
                                    &[]
                                };
                                if !mid.is_empty() {
                                    let seq = |v: &Json| {
                                        v.get("Sequence")
                                            .and_then(|s| s.get("id"))
                                            .and_then(Json::as_str)
                                            .map(str::to_string)
                                    };
                                    let a = seq(&mid[0]);
                                    let b = seq(&mid[mid.len() - 1]);
                                    if a.as_deref() == Some("A")
                                        && b.as_deref() == Some("B")
                                        && mid.len() > 2
                                    {
                                        let inner = &mid[1..mid.len() - 1];
                                        let mut add_sep = false;
                                        let is_sep = |e: &str| {
                                            Some(e) == sep.as_deref() || Some(e) == eos.as_deref()
                                        };
                                        if let Some(e) =
                                            special_id(&inner[0]).filter(|s| !s.is_empty())
                                            && is_sep(e)
                                            && last.is_none()
                                        {
                                            add_sep = true;
                                        }
                                        if inner.len() == 2
                                            && let Some(e) =
                                                special_id(&inner[1]).filter(|s| !s.is_empty())
                                            && is_sep(e)
                                        {
                                            add_sep = true;
                                        }
                                        self.set_add("sep", add_sep, true);
                                        if add_sep && !truthy(&sep) && has_config {
                                            set(
                                                &mut config,
                                                "sep_token",
                                                eos.as_deref().unwrap_or_default(),
                                            );
                                        }
                                    }
                                }
                            }
                        }
                        _ => {}
                    }
                }
            }
        }
        let Some(config) = config.filter(|c| !c.is_empty()) else {
            return Ok(());
        };
        let jinja = dir.join("chat_template.jinja");
        let json = dir.join("chat_template.json");
        let alt: Option<Json> = if jinja.is_file() {
            let text = std::fs::read_to_string(&jinja)
                .map_err(|e| Error::invalid(format!("{}: {e}", jinja.display())))?;
            let mut extra: Vec<_> = std::fs::read_dir(dir.join("additional_chat_templates"))
                .map(|d| {
                    d.filter_map(|e| e.ok().map(|e| e.path()))
                        .filter(|p| p.extension().is_some_and(|e| e == "jinja"))
                        .collect()
                })
                .unwrap_or_default();
            if extra.is_empty() {
                Some(Json::String(text))
            } else {
                extra.sort();
                let mut list = vec![serde_json::json!({"name": "default", "template": text})];
                for p in extra {
                    let t = std::fs::read_to_string(&p)
                        .map_err(|e| Error::invalid(format!("{}: {e}", p.display())))?;
                    let stem = p.file_stem().map(|s| s.to_string_lossy().into_owned());
                    list.push(serde_json::json!({"name": stem, "template": t}));
                }
                Some(Json::Array(list))
            }
        } else if json.is_file() {
            read_object(&json)?.and_then(|m| m.get("chat_template").cloned())
        } else {
            None
        };
        let template = match config.get("chat_template") {
            Some(v) => Some(v.clone()),
            None => alt,
        };
        match template {
            Some(Json::Null) | None => self.chat_template = None,
            Some(t @ (Json::String(_) | Json::Array(_))) => self.chat_template = Some(t),
            Some(_) => {}
        }
        for typ in self.types.clone() {
            if let Some(Json::Bool(v)) = config.get(&format!("add_{typ}_token")) {
                self.set_add(&typ, *v, false);
            }
            let content = match config.get(&format!("{typ}_token")) {
                Some(Json::String(s)) => s.clone(),
                Some(Json::Object(o)) => match o.get("content") {
                    Some(Json::String(s)) => s.clone(),
                    _ => continue,
                },
                _ => continue,
            };
            let id = added
                .iter()
                .find(|a| a.get("content").and_then(Json::as_str) == Some(content.as_str()))
                .and_then(|a| a.get("id"))
                .cloned();
            self.set_id(&typ, id.as_ref())?;
        }
        Ok(())
    }

    fn read_config_json(&mut self, dir: &Path) -> Result<()> {
        let Some(config) = read_object(&dir.join("config.json"))? else {
            return Ok(());
        };
        for typ in self.types.clone() {
            let key = format!("{typ}_token_id");
            let mut id = config.get(&key).filter(|v| !v.is_null());
            if id.is_none()
                && let Some(text) = config.get("text_config")
            {
                id = text.get(&key).filter(|v| !v.is_null());
            }
            let id = id.cloned();
            self.set_id(&typ, id.as_ref())?;
        }
        Ok(())
    }

    fn merges_txt(&mut self, dir: &Path) -> Result<()> {
        let path = dir.join("merges.txt");
        if !path.is_file() {
            return Ok(());
        }
        let text = std::fs::read_to_string(&path)
            .map_err(|e| Error::invalid(format!("{}: {e}", path.display())))?;
        let mut lines = text.lines().peekable();
        if lines.peek().is_some_and(|l| l.trim().starts_with('#')) {
            lines.next();
        }
        self.merges = lines
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .filter_map(|l| {
                let parts: Vec<&str> = l.split_whitespace().collect();
                (parts.len() == 2).then(|| format!("{} {}", parts[0], parts[1]))
            })
            .collect();
        Ok(())
    }

    /// `add_to_gguf`: the keys, in the converter's order (types without a GGUF key are
    /// skipped, as there).
    pub fn write(&self, md: &mut Metadata) -> Result<()> {
        if !self.merges.is_empty() {
            let mut a = StringArray::new();
            for m in &self.merges {
                a.push(m);
            }
            md.set("tokenizer.ggml.merges", Value::Array(Array::String(a)))?;
        }
        for (typ, id) in &self.ids {
            let key = match typ.as_str() {
                "bos" => "bos_token_id",
                "eos" => "eos_token_id",
                "unk" => "unknown_token_id",
                "sep" => "seperator_token_id",
                "pad" => "padding_token_id",
                "mask" => "mask_token_id",
                "eot" => "eot_token_id",
                "eom" => "eom_token_id",
                _ => continue,
            };
            md.set(format!("tokenizer.ggml.{key}"), Value::U32(*id))?;
        }
        for (typ, v) in &self.add {
            let key = match typ.as_str() {
                "bos" => "add_bos_token",
                "eos" => "add_eos_token",
                "sep" => "add_sep_token",
                _ => continue,
            };
            md.set(format!("tokenizer.ggml.{key}"), Value::Bool(*v))?;
        }
        match &self.chat_template {
            Some(Json::String(t)) => {
                md.set("tokenizer.chat_template", t.as_str())?;
            }
            Some(Json::Array(list)) => {
                // Names keep letters and digits only; the default goes last, as its key
                // is written after the named ones.
                let mut names = StringArray::new();
                let mut seen = Vec::new();
                let mut default = None;
                for entry in list {
                    let name: String = entry
                        .get("name")
                        .and_then(Json::as_str)
                        .unwrap_or_default()
                        .chars()
                        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
                        .collect();
                    let Some(template) = entry.get("template").and_then(Json::as_str) else {
                        continue;
                    };
                    if name.is_empty() {
                        continue;
                    }
                    if name == "default" {
                        default = Some(template);
                    } else {
                        md.set(format!("tokenizer.chat_template.{name}"), template)?;
                        if !seen.contains(&name) {
                            names.push(&name);
                            seen.push(name);
                        }
                    }
                }
                if !names.is_empty() {
                    md.set(
                        "tokenizer.chat_templates",
                        Value::Array(Array::String(names)),
                    )?;
                }
                if let Some(t) = default {
                    md.set("tokenizer.chat_template", t)?;
                }
            }
            _ => {}
        }
        if let Some(v) = self.lowercase {
            md.set("tokenizer.ggml.normalizer.lowercase", Value::Bool(v))?;
        }
        if let Some(v) = self.strip_accents {
            md.set("tokenizer.ggml.normalizer.strip_accents", Value::Bool(v))?;
        }
        Ok(())
    }
}
