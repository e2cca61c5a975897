//! The `general.*` keys the converter derives from a folder (gguf-py's `metadata.py`): the
//! README's YAML front matter (read as PyYAML's `safe_load` reads it), `config.json`'s
//! `_name_or_path`, the folder's own name, `generation_config.json`'s sampling keys, a
//! `--metadata` override file and `--model-name`, in that order of precedence reversed.

use super::tokenizer::special::read_object;
use crate::error::{Error, Result};
use quantforge_formats::gguf::{Array, Metadata, StringArray, Value};
use regex::Regex;
use serde_json::{Map, Value as Json};
use std::path::Path;
use std::sync::LazyLock;

/// The converter's `Metadata` dataclass: every field it may write.
#[derive(Clone, Debug, Default)]
pub struct GeneralMeta {
    sampling: Vec<(&'static str, Json)>,
    name: Option<Json>,
    author: Option<Json>,
    version: Option<Json>,
    organization: Option<Json>,
    finetune: Option<Json>,
    basename: Option<Json>,
    description: Option<Json>,
    quantized_by: Option<Json>,
    size_label: Option<Json>,
    url: Option<Json>,
    doi: Option<Json>,
    uuid: Option<Json>,
    repo_url: Option<Json>,
    source_url: Option<Json>,
    source_doi: Option<Json>,
    source_uuid: Option<Json>,
    source_repo_url: Option<Json>,
    license: Option<Json>,
    license_name: Option<Json>,
    license_link: Option<Json>,
    base_models: Option<Vec<Map<String, Json>>>,
    tags: Option<Vec<Json>>,
    languages: Option<Vec<Json>>,
    datasets: Option<Vec<Map<String, Json>>>,
}

/// Sampling keys: (generation_config.json key, override key, GGUF wire kind).
const SAMPLING: &[(&str, &str, Wire)] = &[
    ("sequence", "general.sampling.sequence", Wire::Str),
    ("top_k", "general.sampling.top_k", Wire::I32),
    ("top_p", "general.sampling.top_p", Wire::F32),
    ("min_p", "general.sampling.min_p", Wire::F32),
    (
        "xtc_probability",
        "general.sampling.xtc_probability",
        Wire::F32,
    ),
    ("xtc_threshold", "general.sampling.xtc_threshold", Wire::F32),
    ("temperature", "general.sampling.temp", Wire::F32),
    (
        "penalty_last_n",
        "general.sampling.penalty_last_n",
        Wire::I32,
    ),
    (
        "penalty_repeat",
        "general.sampling.penalty_repeat",
        Wire::F32,
    ),
    ("mirostat", "general.sampling.mirostat", Wire::I32),
    ("mirostat_tau", "general.sampling.mirostat_tau", Wire::F32),
    ("mirostat_eta", "general.sampling.mirostat_eta", Wire::F32),
];

#[derive(Clone, Copy, Debug)]
enum Wire {
    Str,
    I32,
    F32,
}

impl GeneralMeta {
    /// `Metadata.load`: everything the folder says, then the override file, then
    /// `model_name`; `general.name` falls back to the folder's name and the size label to
    /// the parameter count, as `prepare_metadata` does.
    pub fn load(
        dir: &Path,
        override_file: Option<&Path>,
        model_name: Option<&str>,
        params: &ParamCount,
    ) -> Result<GeneralMeta> {
        let card = load_model_card(dir)?;
        let hf = read_object(&dir.join("config.json"))?.unwrap_or_default();
        let gen_config = read_object(&dir.join("generation_config.json"))
            .ok()
            .flatten()
            .unwrap_or_default();
        let mut m = GeneralMeta::default();
        m.apply_heuristics(&card, &hf, dir, params.total as i64);

        let mut sampling: Vec<(&'static str, Option<Json>)> =
            SAMPLING.iter().map(|(_, key, _)| (*key, None)).collect();
        for (i, (k, _, _)) in SAMPLING.iter().enumerate() {
            let v = if *k == "penalty_repeat" {
                gen_config
                    .get("penalty_repeat")
                    .or_else(|| gen_config.get("repetition_penalty"))
            } else {
                gen_config.get(*k)
            };
            if let Some(v) = v {
                sampling[i].1 = Some(v.clone());
            }
        }

        if let Some(path) = override_file.filter(|p| p.is_file()) {
            let o = read_object(path)?.unwrap_or_default();
            for (key, slot) in sampling.iter_mut() {
                if let Some(v) = o.get(*key) {
                    *slot = Some(v.clone());
                }
            }
            let fields: [(&str, &mut Option<Json>); 21] = [
                ("general.name", &mut m.name),
                ("general.author", &mut m.author),
                ("general.version", &mut m.version),
                ("general.organization", &mut m.organization),
                ("general.finetune", &mut m.finetune),
                ("general.basename", &mut m.basename),
                ("general.description", &mut m.description),
                ("general.quantized_by", &mut m.quantized_by),
                ("general.size_label", &mut m.size_label),
                ("general.license.name", &mut m.license_name),
                ("general.license.link", &mut m.license_link),
                ("general.url", &mut m.url),
                ("general.doi", &mut m.doi),
                ("general.uuid", &mut m.uuid),
                ("general.repo_url", &mut m.repo_url),
                ("general.source.url", &mut m.source_url),
                ("general.source.doi", &mut m.source_doi),
                ("general.source.uuid", &mut m.source_uuid),
                ("general.source.repo_url", &mut m.source_repo_url),
                ("general.license", &mut Option::None),
                ("", &mut Option::None),
            ];
            for (key, slot) in fields {
                if let Some(v) = o.get(key).filter(|_| !key.is_empty()) {
                    *slot = Some(v.clone());
                }
            }
            if let Some(v) = o.get("general.base_models") {
                m.base_models = Some(objects(v));
            }
            if let Some(v) = o.get("general.datasets") {
                m.datasets = Some(objects(v));
            }
            if let Some(v) = o.get("general.tags") {
                m.tags = Some(list(v));
            }
            if let Some(v) = o.get("general.languages") {
                m.languages = Some(list(v));
            }
        }
        m.sampling = sampling
            .into_iter()
            .filter_map(|(k, v)| v.filter(|v| !v.is_null()).map(|v| (k, v)))
            .collect();
        if let Some(name) = model_name {
            m.name = Some(Json::String(name.to_string()));
        }
        if m.name.as_ref().is_none_or(Json::is_null) {
            m.name = Some(Json::String(folder_name(dir)));
        }
        if m.size_label.as_ref().is_none_or(Json::is_null) && params.total > 0 {
            m.size_label = Some(Json::String(params.size_label()));
        }
        Ok(m)
    }

    /// `apply_metadata_heuristic`: model card, then `_name_or_path`, then the folder name,
    /// each filling only what is still unset.
    fn apply_heuristics(
        &mut self,
        card: &Map<String, Json>,
        hf: &Map<String, Json>,
        dir: &Path,
        total_params: i64,
    ) {
        let use_card = |slot: &mut Option<Json>, key: &str| {
            if slot.as_ref().is_none_or(Json::is_null)
                && let Some(v) = card.get(key)
            {
                *slot = Some(v.clone());
            }
        };
        for prefix in ["", "model_"] {
            use_card(&mut self.name, &format!("{prefix}name"));
            use_card(&mut self.author, &format!("{prefix}author"));
            use_card(&mut self.version, &format!("{prefix}version"));
            use_card(&mut self.organization, &format!("{prefix}organization"));
            use_card(&mut self.description, &format!("{prefix}description"));
            use_card(&mut self.finetune, &format!("{prefix}finetune"));
            use_card(&mut self.basename, &format!("{prefix}basename"));
            use_card(&mut self.size_label, &format!("{prefix}size_label"));
            use_card(&mut self.source_url, &format!("{prefix}url"));
            use_card(&mut self.source_doi, &format!("{prefix}doi"));
            use_card(&mut self.source_uuid, &format!("{prefix}uuid"));
            use_card(&mut self.source_repo_url, &format!("{prefix}repo_url"));
        }
        use_card(&mut self.name, "model_name");
        use_card(&mut self.author, "model_creator");
        use_card(&mut self.basename, "model_type");

        let references = |slot: &mut Option<Vec<Map<String, Json>>>, keys: [&str; 3]| {
            // The first key present gives the value (even a null one), as `dict.get`
            // with defaults does.
            let Some(value) = keys.iter().find_map(|k| card.get(*k)) else {
                return;
            };
            let out = slot.get_or_insert_with(Vec::new);
            for id in list(value) {
                out.push(reference(&id, total_params));
            }
        };
        references(
            &mut self.base_models,
            ["base_model", "base_models", "base_model_sources"],
        );
        references(
            &mut self.datasets,
            ["datasets", "dataset", "dataset_sources"],
        );
        use_card(&mut self.license, "license");
        use_card(&mut self.license_name, "license_name");
        use_card(&mut self.license_link, "license_link");
        for key in ["tags", "pipeline_tag"] {
            append_card_list(&mut self.tags, card.get(key));
        }
        for key in ["languages", "language"] {
            append_card_list(&mut self.languages, card.get(key));
        }

        let mut from_id = |id: &str| {
            let c = model_id_components(Some(id), total_params);
            if self.name.is_none()
                && let Some(n) = &c.full_name
            {
                self.name = Some(Json::String(id_to_title(n)));
            }
            if self.organization.is_none()
                && let Some(o) = &c.org
            {
                self.organization = Some(Json::String(id_to_title(o)));
            }
            for (slot, v) in [
                (&mut self.basename, &c.basename),
                (&mut self.finetune, &c.finetune),
                (&mut self.version, &c.version),
                (&mut self.size_label, &c.size_label),
            ] {
                if slot.is_none()
                    && let Some(v) = v
                {
                    *slot = Some(Json::String(v.clone()));
                }
            }
        };
        if let Some(Json::String(id)) = hf.get("_name_or_path")
            && id.matches('/').count() <= 1
        {
            from_id(id);
        }
        from_id(&folder_name(dir));
    }
}

/// The folder's name as given (not resolved), as Python's `Path.name`: empty for `.`.
fn folder_name(dir: &Path) -> String {
    dir.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| {
            if dir.ends_with("..") {
                "..".to_string()
            } else {
                String::new()
            }
        })
}

impl GeneralMeta {
    /// The converter's default file name (without `.gguf`) for output type `ftype`.
    pub fn file_stem(&self, ftype: &str) -> String {
        let s = |v: &Option<Json>| v.as_ref().map(py_str);
        let name = match (s(&self.basename), s(&self.name)) {
            (Some(b), _) => b.trim().replace([' ', '/'], "-"),
            (None, Some(n)) => n.trim().replace([' ', '/'], "-"),
            _ => "ggml-model".to_string(),
        };
        let mut out = name;
        if let Some(l) = s(&self.size_label) {
            out += &format!("-{l}");
        }
        if let Some(f) = s(&self.finetune) {
            out += &format!("-{}", f.trim().replace(' ', "-"));
        }
        if let Some(v) = s(&self.version) {
            out += &format!("-{}", v.trim().replace(' ', "-"));
        }
        out += &format!("-{}", ftype.trim().replace(' ', "-").to_uppercase());
        out
    }

    /// `set_gguf_meta_model`: the keys, in the converter's order.
    pub fn write(&self, md: &mut Metadata) -> Result<()> {
        for (key, v) in &self.sampling {
            let wire = SAMPLING
                .iter()
                .find(|(_, k, _)| k == key)
                .map_or(Wire::Str, |s| s.2);
            let value =
                match wire {
                    Wire::Str => Value::from(py_str(v)),
                    Wire::I32 => {
                        Value::I32(v.as_i64().and_then(|n| i32::try_from(n).ok()).ok_or_else(
                            || Error::invalid(format!("{key}: {v} is not a 32-bit integer")),
                        )?)
                    }
                    Wire::F32 => Value::F32(
                        v.as_f64()
                            .ok_or_else(|| Error::invalid(format!("{key}: {v} is not a number")))?
                            as f32,
                    ),
                };
            md.set(*key, value)?;
        }
        let mut put = |key: &str, v: &Option<Json>| -> Result<()> {
            if let Some(v) = v.as_ref().filter(|v| !v.is_null()) {
                md.set(key, py_str(v))?;
            }
            Ok(())
        };
        put("general.name", &self.name)?;
        put("general.author", &self.author)?;
        put("general.version", &self.version)?;
        put("general.organization", &self.organization)?;
        put("general.finetune", &self.finetune)?;
        put("general.basename", &self.basename)?;
        put("general.description", &self.description)?;
        put("general.quantized_by", &self.quantized_by)?;
        put("general.size_label", &self.size_label)?;
        let license = self.license.as_ref().map(|l| match l {
            Json::Array(items) => {
                Json::String(items.iter().map(py_str).collect::<Vec<_>>().join(","))
            }
            other => other.clone(),
        });
        put("general.license", &license)?;
        put("general.license.name", &self.license_name)?;
        put("general.license.link", &self.license_link)?;
        put("general.url", &self.url)?;
        put("general.doi", &self.doi)?;
        put("general.uuid", &self.uuid)?;
        put("general.repo_url", &self.repo_url)?;
        put("general.source.url", &self.source_url)?;
        put("general.source.doi", &self.source_doi)?;
        put("general.source.uuid", &self.source_uuid)?;
        put("general.source.repo_url", &self.source_repo_url)?;
        const FIELDS: [&str; 9] = [
            "name",
            "author",
            "version",
            "organization",
            "description",
            "url",
            "doi",
            "uuid",
            "repo_url",
        ];
        for (list, prefix) in [
            (&self.base_models, "general.base_model"),
            (&self.datasets, "general.dataset"),
        ] {
            if let Some(list) = list {
                md.set(
                    format!("{prefix}.count"),
                    Value::U32(u32::try_from(list.len())?),
                )?;
                for (i, entry) in list.iter().enumerate() {
                    for f in FIELDS {
                        if let Some(v) = entry.get(f) {
                            md.set(format!("{prefix}.{i}.{f}"), py_str(v))?;
                        }
                    }
                }
            }
        }
        for (key, list) in [
            ("general.tags", &self.tags),
            ("general.languages", &self.languages),
        ] {
            if let Some(list) = list {
                let mut a = StringArray::new();
                for v in list {
                    a.push(py_str(v));
                }
                md.set(key, Value::Array(Array::String(a)))?;
            }
        }
        Ok(())
    }
}

/// A list field of the card: a string is one entry, a list its entries.
fn append_card_list(slot: &mut Option<Vec<Json>>, value: Option<&Json>) {
    let Some(value) = value.filter(|v| !v.is_null()) else {
        return;
    };
    let cur = slot.get_or_insert_with(Vec::new);
    match value {
        Json::String(_) => cur.push(value.clone()),
        Json::Array(items) => cur.extend(items.iter().cloned()),
        _ => {}
    }
}

/// A value as a list: a string is one entry, a list its entries, anything else none.
fn list(v: &Json) -> Vec<Json> {
    match v {
        Json::String(_) => vec![v.clone()],
        Json::Array(items) => items.clone(),
        _ => Vec::new(),
    }
}

/// The objects of a list (an override file's base models or datasets).
fn objects(v: &Json) -> Vec<Map<String, Json>> {
    list(v)
        .into_iter()
        .filter_map(|v| match v {
            Json::Object(m) => Some(m),
            _ => None,
        })
        .collect()
}

/// A base model or dataset entry of the card: a URL, a Hugging Face id or an object.
fn reference(id: &Json, total_params: i64) -> Map<String, Json> {
    static HF_URL: LazyLock<Regex> =
        LazyLock::new(|| Regex::new(r"^https?://huggingface.co/([^/]+/[^/]+)$").unwrap());
    let mut out = Map::new();
    match id {
        Json::String(id) => {
            if id.starts_with("http://") || id.starts_with("https://") || id.starts_with("ssh://") {
                out.insert("repo_url".into(), Json::String(id.clone()));
                if id.contains("huggingface.co")
                    && let Some(m) = HF_URL.captures(id)
                {
                    let c = model_id_components(Some(&m[1]), total_params);
                    if let Some(n) = &c.full_name {
                        out.insert("name".into(), Json::String(id_to_title(n)));
                    }
                    if let Some(o) = &c.org {
                        out.insert("organization".into(), Json::String(id_to_title(o)));
                    }
                    if let Some(v) = &c.version {
                        out.insert("version".into(), Json::String(v.clone()));
                    }
                }
            } else {
                let c = model_id_components(Some(id), total_params);
                if let Some(n) = &c.full_name {
                    out.insert("name".into(), Json::String(id_to_title(n)));
                }
                if let Some(o) = &c.org {
                    out.insert("organization".into(), Json::String(id_to_title(o)));
                }
                if let Some(v) = &c.version {
                    out.insert("version".into(), Json::String(v.clone()));
                }
                if let (Some(o), Some(n)) = (&c.org, &c.full_name) {
                    out.insert(
                        "repo_url".into(),
                        Json::String(format!("https://huggingface.co/{o}/{n}")),
                    );
                }
            }
        }
        Json::Object(m) => out = m.clone(),
        _ => {}
    }
    out
}

/// Python's `str()` of a scalar from JSON or YAML.
fn py_str(v: &Json) -> String {
    match v {
        Json::String(s) => s.clone(),
        Json::Bool(true) => "True".into(),
        Json::Bool(false) => "False".into(),
        Json::Null => "None".into(),
        Json::Number(n) => match (n.as_i64(), n.as_u64(), n.as_f64()) {
            (Some(i), _, _) => i.to_string(),
            (_, Some(u), _) => u.to_string(),
            (_, _, Some(f)) => py_float(f),
            _ => n.to_string(),
        },
        other => other.to_string(),
    }
}

/// Python's `repr` of a float (shortest round-trip digits, `.0` on integers).
fn py_float(f: f64) -> String {
    if f.is_nan() {
        return "nan".into();
    }
    if f.is_infinite() {
        return if f > 0.0 { "inf" } else { "-inf" }.into();
    }
    let s = format!("{f:?}");
    if s.contains('e') {
        return s;
    }
    s
}

/// `README.md`'s YAML front matter as `load_model_card` reads it (`{}` when there is
/// none, or when it is not a mapping).
pub fn load_model_card(dir: &Path) -> Result<Map<String, Json>> {
    let path = dir.join("README.md");
    if !path.is_file() {
        return Ok(Map::new());
    }
    let bytes =
        std::fs::read(&path).map_err(|e| Error::invalid(format!("{}: {e}", path.display())))?;
    let content = String::from_utf8(bytes)
        .map_err(|e| Error::invalid(format!("{}: not UTF-8: {e}", path.display())))?;
    let content = content.replace("\r\n", "\n").replace('\r', "\n");
    let lines = py_splitlines(&content);
    if lines.first() != Some(&"---") {
        return Ok(Map::new());
    }
    let mut yaml_lines = Vec::new();
    for line in &lines[1..] {
        if *line == "---" {
            break;
        }
        yaml_lines.push(*line);
    }
    let mut yaml = yaml_lines.join("\n") + "\n";
    yaml = yaml.replace("- no\n", "- \"no\"\n").replace('\t', "  ");
    match pyyaml::load(&yaml) {
        Ok(Json::Object(m)) => Ok(m),
        Ok(_) => Ok(Map::new()),
        Err(e) => Err(Error::invalid(format!(
            "{}: front matter is not valid YAML: {e}",
            path.display()
        ))),
    }
}

/// Python's `str.splitlines()` (after universal newlines made every break `\n`).
fn py_splitlines(s: &str) -> Vec<&str> {
    let breaks = |c: char| {
        matches!(
            c,
            '\n' | '\x0b' | '\x0c' | '\x1c' | '\x1d' | '\x1e' | '\u{85}' | '\u{2028}' | '\u{2029}'
        )
    };
    let mut out: Vec<&str> = s.split(breaks).collect();
    if out.last() == Some(&"") {
        out.pop();
    }
    out
}

/// The parts of a model id (`org/Name-7B-Instruct-v0.2`), as `get_model_id_components`.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct IdParts {
    /// The name after the org.
    pub full_name: Option<String>,
    /// The org.
    pub org: Option<String>,
    /// The base name.
    pub basename: Option<String>,
    /// Finetune parts.
    pub finetune: Option<String>,
    /// Version parts.
    pub version: Option<String>,
    /// Size label.
    pub size_label: Option<String>,
}

/// `Metadata.get_model_id_components`.
pub fn model_id_components(model_id: Option<&str>, total_params: i64) -> IdParts {
    static VERSION: LazyLock<Regex> =
        LazyLock::new(|| Regex::new(r"(?i)^(?:v|iter)?\d+(?:[.]\d+)*$").unwrap());
    static TYPE: LazyLock<Regex> =
        LazyLock::new(|| Regex::new(r"(?i)^(?:i?q\d(?:_\w)*|b?fp?(?:16|32))$").unwrap());
    static SIZE: LazyLock<Regex> = LazyLock::new(|| {
        Regex::new(
            r"(?i)^(?:(?:[A]|\d+[x])?\d+(?:[._]\d+)?[KMBT][\d]?|small|mini|medium|large|x?xl)$",
        )
        .unwrap()
    });
    static FINETUNE: LazyLock<Regex> =
        LazyLock::new(|| Regex::new(r"(?i)^(?:chat|instruct|vision|lora)$").unwrap());

    let Some(model_id) = model_id else {
        return IdParts::default();
    };
    if model_id.contains(' ') {
        return IdParts {
            full_name: Some(model_id.to_string()),
            ..IdParts::default()
        };
    }
    let (mut org, full) = match model_id.split_once('/') {
        Some((o, n)) => (Some(o.to_string()), n.to_string()),
        None => (None, model_id.to_string()),
    };
    if org.as_deref().is_some_and(|o| o.starts_with('.')) {
        org = None;
    }
    let mut parts: Vec<String> = full
        .split('-')
        .filter(|p| !p.is_empty())
        .map(str::to_string)
        .collect();
    let mut types: Vec<Vec<&'static str>> = vec![Vec::new(); parts.len()];
    let add = |t: &mut Vec<&'static str>, x: &'static str| {
        if !t.contains(&x) {
            t.push(x);
        }
    };
    for i in 0..parts.len() {
        let part = parts[i].clone();
        if VERSION.is_match(&part) {
            add(&mut types[i], "version");
        } else if TYPE.is_match(&part) {
            add(&mut types[i], "type");
            parts[i] = part.to_uppercase();
        } else if i > 0 && SIZE.is_match(&part) {
            let mut p: Vec<char> = part.replace('_', ".").chars().collect();
            if p.last().is_some_and(|c| is_decimal(*c)) {
                let n = p.len();
                let last = p[n - 1];
                let second = p[n - 2];
                p.truncate(n - 2);
                p.push('.');
                p.push(last);
                p.push(second);
            }
            let n = p.len();
            if n > 1 && is_decimal(p[n - 2]) && matches!(p[n - 1], 'k' | 'm' | 'b' | 't') {
                p[n - 1] = p[n - 1].to_ascii_uppercase();
            }
            if total_params != 0 {
                let n = p.len();
                let head: String = p[..n - 1].iter().collect();
                if let (Ok(x), Some(scale)) = (py_float_parse(&head), " KMBT".find(p[n - 1])) {
                    let label = x * 1000f64.powi(scale as i32);
                    let small_lora =
                        total_params < 0 && label < ((-total_params).div_euclid(8)) as f64;
                    let far = total_params > 0
                        && (label - total_params as f64).abs()
                            > (7 * total_params).div_euclid(8) as f64;
                    if small_lora || far {
                        add(&mut types[i], "finetune");
                        let c = p[n - 1].to_lowercase().next().unwrap_or(p[n - 1]);
                        p[n - 1] = c;
                    }
                }
            }
            if types[i].is_empty() {
                add(&mut types[i], "size_label");
            }
            parts[i] = p.into_iter().collect();
        } else if i > 0 && FINETUNE.is_match(&part) {
            if total_params < 0 && part.to_lowercase() == "lora" {
                add(&mut types[i], "type");
            } else {
                add(&mut types[i], "finetune");
            }
        }
    }
    let numeric_size = parts
        .iter()
        .zip(&types)
        .any(|(n, t)| t.contains(&"size_label") && n.chars().any(is_decimal));
    if numeric_size {
        for (n, t) in parts.iter().zip(types.iter_mut()) {
            if t.contains(&"size_label") && n.chars().all(char::is_alphabetic) {
                t.retain(|x| *x != "size_label");
            }
        }
    }
    let mut at_start = true;
    for (part, t) in parts.iter().zip(types.iter_mut()) {
        let first_alpha = part.chars().next().is_some_and(char::is_alphabetic);
        if at_start && ((t.is_empty() && first_alpha) || t.contains(&"version")) {
            add(t, "basename");
        } else {
            at_start = false;
            if t.is_empty() {
                add(t, "finetune");
            }
        }
    }
    for t in types.iter_mut().rev() {
        if t.contains(&"basename") && t.len() > 1 {
            t.retain(|x| *x != "basename");
        } else {
            break;
        }
    }
    let join = |want: &str, skip: Option<&str>| -> Option<String> {
        let mut seen: Vec<&str> = Vec::new();
        for (n, t) in parts.iter().zip(&types) {
            if t.contains(&want)
                && !skip.is_some_and(|s| t.contains(&s))
                && !(want == "size_label" && seen.contains(&n.as_str()))
            {
                seen.push(n);
            }
        }
        (!seen.is_empty()).then(|| seen.join("-"))
    };
    let mut basename = join("basename", None);
    let size_label = join("size_label", None);
    let finetune = join("finetune", None);
    let version = join("version", Some("basename"));
    if size_label.is_none() && finetune.is_none() && version.is_none() {
        basename = None;
    }
    IdParts {
        full_name: Some(full),
        org,
        basename,
        finetune,
        version,
        size_label,
    }
}

/// Python's `float()` of a size label's number part.
fn py_float_parse(s: &str) -> std::result::Result<f64, ()> {
    let t = s.trim();
    if t.is_empty() || t.contains(|c: char| !(c.is_ascii_digit() || c == '.')) {
        return Err(());
    }
    t.parse::<f64>().map_err(|_| ())
}

/// Python's `str.isdecimal()` for one character.
fn is_decimal(c: char) -> bool {
    c.is_ascii_digit() || (!c.is_ascii() && c.is_numeric())
}

/// Whether Python considers `c` cased.
fn is_cased(c: char) -> bool {
    c.is_lowercase() || c.is_uppercase()
}

/// Python's `str.title()`.
fn py_title(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut prev_cased = false;
    for c in s.chars() {
        if prev_cased {
            out.extend(c.to_lowercase());
        } else {
            out.extend(c.to_uppercase());
        }
        prev_cased = is_cased(c);
    }
    out
}

/// Python's `str.islower()`.
fn py_islower(s: &str) -> bool {
    let mut any = false;
    for c in s.chars() {
        if c.is_uppercase() {
            return false;
        }
        if c.is_lowercase() {
            any = true;
        }
    }
    any
}

/// `Metadata.id_to_title`: words title-cased unless they are acronyms or versions.
pub fn id_to_title(s: &str) -> String {
    static VER: LazyLock<Regex> =
        LazyLock::new(|| Regex::new(r"^(?:v\d+(?:\.\d+)*|\d.*)").unwrap());
    s.trim()
        .replace('-', " ")
        .split_whitespace()
        .map(|w| {
            if py_islower(w) && !VER.is_match(w) {
                py_title(w)
            } else {
                w.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// The parameter counts gguf-py's `get_total_parameter_count` takes from the tensors it
/// writes: stacked expert tensors (`_exps.` in the name, three axes or more) count one
/// expert's share towards the expert parameters, everything else is shared.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ParamCount {
    /// Every tensor's elements.
    pub total: u64,
    /// Elements of the tensors that are not stacked experts.
    pub shared: u64,
    /// One expert's elements of each stacked expert tensor, summed.
    pub expert: u64,
    /// Experts per stacked tensor, averaged (rounded down) over them; 0 without experts.
    pub expert_count: u64,
}

impl ParamCount {
    /// Counts tensors given by name and ggml dimensions (`ne[0]` the row length).
    pub fn of<'a>(tensors: impl IntoIterator<Item = (&'a str, &'a [u64])>) -> ParamCount {
        let mut c = ParamCount::default();
        let (mut expert_sum, mut expert_tensors) = (0u64, 0u64);
        for (name, ne) in tensors {
            let size: u64 = ne.iter().product();
            // gguf-py reads the count from the numpy shape: axis -2 for a bias, -3 else.
            let axis = if name.contains(".bias") { 1 } else { 2 };
            match ne.get(axis) {
                Some(&n) if name.contains("_exps.") && ne.len() >= 3 && n > 0 => {
                    c.expert += size / n;
                    expert_sum += n;
                    expert_tensors += 1;
                }
                _ => c.shared += size,
            }
            c.total += size;
        }
        c.expert_count = expert_sum.checked_div(expert_tensors).unwrap_or(0);
        c
    }

    /// gguf-py's `size_label`: `<experts>x<shared + expert>` for a model with experts.
    pub fn size_label(&self) -> String {
        if self.expert_count > 0 {
            format!(
                "{}x{}",
                self.expert_count,
                size_label(self.shared + self.expert)
            )
        } else {
            size_label(self.total)
        }
    }
}

/// gguf-py's `size_label` for a model without experts
/// (`model_weight_count_rounded_notation` with two significant digits at least).
pub fn size_label(total: u64) -> String {
    let n = total as f64;
    let (scaled, suffix) = if n > 1e12 {
        (n * 1e-12, "T")
    } else if n > 1e9 {
        (n * 1e-9, "B")
    } else if n > 1e6 {
        (n * 1e-6, "M")
    } else {
        (n * 1e-3, "K")
    };
    let rounded = py_round(scaled);
    let digits = rounded.to_string().trim_start_matches('0').len();
    let fix = 2usize.saturating_sub(digits);
    format!("{scaled:.fix$}{suffix}")
}

/// Python's `round(x)` to an integer (halves to even).
fn py_round(x: f64) -> u64 {
    let r = x.round_ties_even();
    r as u64
}

/// A small YAML loader that resolves plain scalars as PyYAML's `SafeLoader` does (YAML
/// 1.1: `yes`/`no`/`on`/`off` are booleans, `1.0` a float, `010` octal), which is how the
/// converter reads a model card.
mod pyyaml {
    use serde_json::{Map, Number, Value as Json};
    use yaml_rust2::parser::{Event, MarkedEventReceiver, Parser};
    use yaml_rust2::scanner::{Marker, TScalarStyle};

    /// Parses the first document.
    pub fn load(text: &str) -> Result<Json, String> {
        let mut b = Builder::default();
        let mut p = Parser::new_from_str(text);
        p.load(&mut b, false).map_err(|e| e.to_string())?;
        if let Some(e) = b.error {
            return Err(e);
        }
        Ok(b.root.unwrap_or(Json::Null))
    }

    enum Frame {
        Seq(Vec<Json>),
        Map(Map<String, Json>, Option<String>),
    }

    #[derive(Default)]
    struct Builder {
        stack: Vec<Frame>,
        root: Option<Json>,
        anchors: Vec<(usize, Json)>,
        pending_anchor: Vec<usize>,
        error: Option<String>,
    }

    impl Builder {
        fn push_value(&mut self, v: Json, anchor: usize) {
            if anchor > 0 {
                self.anchors.push((anchor, v.clone()));
            }
            match self.stack.last_mut() {
                None => {
                    if self.root.is_none() {
                        self.root = Some(v);
                    }
                }
                Some(Frame::Seq(items)) => items.push(v),
                Some(Frame::Map(m, key)) => match key.take() {
                    None => *key = Some(key_str(&v)),
                    Some(k) => {
                        m.insert(k, v);
                    }
                },
            }
        }
    }

    fn key_str(v: &Json) -> String {
        match v {
            Json::String(s) => s.clone(),
            other => super::py_str(other),
        }
    }

    impl MarkedEventReceiver for Builder {
        fn on_event(&mut self, ev: Event, _mark: Marker) {
            match ev {
                Event::Scalar(value, style, anchor, tag) => {
                    let v = if style == TScalarStyle::Plain && tag.is_none() {
                        resolve(&value)
                    } else {
                        Json::String(value)
                    };
                    self.push_value(v, anchor);
                }
                Event::SequenceStart(anchor, _) => {
                    self.pending_anchor.push(anchor);
                    self.stack.push(Frame::Seq(Vec::new()));
                }
                Event::MappingStart(anchor, _) => {
                    self.pending_anchor.push(anchor);
                    self.stack.push(Frame::Map(Map::new(), None));
                }
                Event::SequenceEnd | Event::MappingEnd => {
                    let anchor = self.pending_anchor.pop().unwrap_or(0);
                    let v = match self.stack.pop() {
                        Some(Frame::Seq(items)) => Json::Array(items),
                        Some(Frame::Map(m, _)) => Json::Object(m),
                        None => return,
                    };
                    self.push_value(v, anchor);
                }
                Event::Alias(id) => match self.anchors.iter().rev().find(|(a, _)| *a == id) {
                    Some((_, v)) => {
                        let v = v.clone();
                        self.push_value(v, 0);
                    }
                    None => self.error = Some(format!("unknown alias {id}")),
                },
                _ => {}
            }
        }
    }

    /// PyYAML's implicit resolvers for a plain scalar.
    fn resolve(s: &str) -> Json {
        match s {
            "yes" | "Yes" | "YES" | "true" | "True" | "TRUE" | "on" | "On" | "ON" => {
                return Json::Bool(true);
            }
            "no" | "No" | "NO" | "false" | "False" | "FALSE" | "off" | "Off" | "OFF" => {
                return Json::Bool(false);
            }
            "" | "~" | "null" | "Null" | "NULL" => return Json::Null,
            _ => {}
        }
        if let Some(i) = int(s) {
            return Json::Number(i.into());
        }
        if let Some(f) = float(s)
            && let Some(n) = Number::from_f64(f)
        {
            return Json::Number(n);
        }
        Json::String(s.to_string())
    }

    fn int(s: &str) -> Option<i64> {
        let (neg, body) = match s.as_bytes().first()? {
            b'-' => (true, &s[1..]),
            b'+' => (false, &s[1..]),
            _ => (false, s),
        };
        if body.is_empty() {
            return None;
        }
        let clean: String = body.chars().filter(|c| *c != '_').collect();
        let v = if let Some(b) = body.strip_prefix("0b") {
            if b.is_empty() || !b.chars().all(|c| c == '0' || c == '1' || c == '_') {
                return None;
            }
            i64::from_str_radix(&clean[2..], 2).ok()?
        } else if let Some(h) = body.strip_prefix("0x") {
            if h.is_empty() || !h.chars().all(|c| c.is_ascii_hexdigit() || c == '_') {
                return None;
            }
            i64::from_str_radix(&clean[2..], 16).ok()?
        } else if body.len() > 1 && body.starts_with('0') {
            if !body.chars().all(|c| ('0'..='7').contains(&c) || c == '_') {
                return None;
            }
            i64::from_str_radix(&clean, 8).ok()?
        } else {
            if !body.starts_with(|c: char| c.is_ascii_digit())
                || !body.chars().all(|c| c.is_ascii_digit() || c == '_')
            {
                return None;
            }
            clean.parse().ok()?
        };
        Some(if neg { -v } else { v })
    }

    fn float(s: &str) -> Option<f64> {
        let body = s.strip_prefix(['-', '+']).unwrap_or(s);
        let neg = s.starts_with('-');
        match body {
            ".inf" | ".Inf" | ".INF" => {
                return Some(if neg {
                    f64::NEG_INFINITY
                } else {
                    f64::INFINITY
                });
            }
            ".nan" | ".NaN" | ".NAN" if body.len() == s.len() => return Some(f64::NAN),
            _ => {}
        }
        // [0-9][0-9_]*\.[0-9_]*([eE][-+][0-9]+)?  or  \.[0-9_]+([eE][-+][0-9]+)?
        let (mant, exp) = match body.find(['e', 'E']) {
            Some(i) => (&body[..i], Some(&body[i + 1..])),
            None => (body, None),
        };
        let (int_part, frac) = mant.split_once('.')?;
        let digits = |t: &str| t.chars().all(|c| c.is_ascii_digit() || c == '_');
        if !digits(int_part) || !digits(frac) {
            return None;
        }
        if int_part.is_empty() {
            if frac.is_empty() || body.len() != s.len() {
                return None;
            }
        } else if !int_part.starts_with(|c: char| c.is_ascii_digit()) {
            return None;
        }
        if let Some(e) = exp {
            let rest = e.strip_prefix(['-', '+'])?;
            if rest.is_empty() || !rest.chars().all(|c| c.is_ascii_digit()) {
                return None;
            }
        }
        let clean: String = s.chars().filter(|c| *c != '_').collect();
        let clean = if clean.ends_with('.') || clean.contains(".e") || clean.contains(".E") {
            clean.replacen('.', ".0", 1)
        } else {
            clean
        };
        clean.parse().ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn model_ids_split_as_the_converter_splits_them() {
        let c = model_id_components(Some("all-MiniLM-L6-v2"), 22_713_216);
        assert_eq!(c.basename.as_deref(), Some("all-MiniLM-L6"));
        assert_eq!(c.version.as_deref(), Some("v2"));
        let c = model_id_components(Some("nreimers/MiniLM-L6-H384-uncased"), 22_713_216);
        assert_eq!(c.org.as_deref(), Some("nreimers"));
        assert_eq!(c.basename, None);
        let c = model_id_components(Some("Mistral-7B-Instruct-v0.2"), 7_241_732_096);
        assert_eq!(c.basename.as_deref(), Some("Mistral"));
        assert_eq!(c.size_label.as_deref(), Some("7B"));
        assert_eq!(c.finetune.as_deref(), Some("Instruct"));
        assert_eq!(c.version.as_deref(), Some("v0.2"));
    }

    #[test]
    fn titles_follow_python() {
        assert_eq!(id_to_title("s2orc"), "S2Orc");
        assert_eq!(id_to_title("stackexchange_xml"), "Stackexchange_Xml");
        assert_eq!(
            id_to_title("MiniLM-L6-H384-uncased"),
            "MiniLM L6 H384 Uncased"
        );
        assert_eq!(id_to_title("flickr30k-captions"), "Flickr30K Captions");
        assert_eq!(id_to_title("v2-model"), "v2 Model");
    }

    #[test]
    fn size_labels_round_as_gguf_py() {
        assert_eq!(size_label(22_713_216), "23M");
        assert_eq!(size_label(268_098_176), "268M");
        assert_eq!(size_label(1_500_000), "1.5M");
        assert_eq!(size_label(7_241_732_096), "7.2B");
        assert_eq!(size_label(999), "1.0K");
    }

    #[test]
    fn experts_count_once_in_the_size_label() {
        // Mixtral-8x7B's shapes, one block: 8 experts of 14336 x 4096 three times.
        let gate = [4096u64, 14336, 8];
        let down = [14336u64, 4096, 8];
        let attn = [4096u64, 4096];
        let bias = [14336u64, 8];
        let c = ParamCount::of([
            ("blk.0.ffn_gate_exps.weight", &gate[..]),
            ("blk.0.ffn_down_exps.weight", &down[..]),
            ("blk.0.ffn_up_exps.weight", &gate[..]),
            ("blk.0.attn_q.weight", &attn[..]),
            ("blk.0.ffn_up_exps.bias", &bias[..]),
        ]);
        assert_eq!(c.total, 3 * 4096 * 14336 * 8 + 4096 * 4096 + 14336 * 8);
        // A bias of two axes is shared, as gguf-py counts it.
        assert_eq!(c.expert, 3 * 4096 * 14336);
        assert_eq!(c.shared, 4096 * 4096 + 14336 * 8);
        assert_eq!(c.expert_count, 8);
        assert_eq!(c.size_label(), "8x193M");
        let dense = ParamCount::of([("blk.0.attn_q.weight", &attn[..])]);
        assert_eq!(
            (dense.expert_count, dense.size_label()),
            (0, "17M".to_string())
        );
    }

    #[test]
    fn yaml_scalars_resolve_as_pyyaml() {
        let v =
            pyyaml::load("a: yes\nb: '1.0'\nc: 1.0\nd: 010\ne: [x, no]\nf: 1e3\ng: ~\n").unwrap();
        assert_eq!(v["a"], Json::Bool(true));
        assert_eq!(v["b"], Json::String("1.0".into()));
        assert_eq!(v["c"].as_f64(), Some(1.0));
        assert_eq!(v["d"].as_i64(), Some(8));
        assert_eq!(v["e"][1], Json::Bool(false));
        assert_eq!(v["f"], Json::String("1e3".into()));
        assert_eq!(v["g"], Json::Null);
    }
}
