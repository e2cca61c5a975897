//! Sharded model files: the `*.safetensors.index.json` format and writing a tensor set
//! as shards no larger than a given size.
//!
//! The split follows `huggingface_hub.split_torch_state_dict_into_shards` (tensors in the
//! order given; a tensor that would push the current shard past the limit starts a new
//! one; a tensor larger than the limit gets a shard of its own), the names are
//! `{stem}-00001-of-0000N.safetensors`, and the index is written as transformers'
//! `save_pretrained` does: `json.dumps(index, indent=2, sort_keys=True) + "\n"`.

use super::header::StringMapSeed;
use super::{Error, MAX_HEADER_LEN, Order, Result, TensorView, writer};
use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, Visitor};
use serde_json::{Map, Value};
use std::fmt;
use std::io::Write;
use std::path::{Path, PathBuf};

/// The contents of a `*.safetensors.index.json`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ShardIndex {
    /// The `"metadata"` object (transformers puts `total_size` there).
    pub metadata: Map<String, Value>,
    /// Tensor name -> shard file name, in the order the file lists them.
    pub weight_map: Vec<(String, String)>,
}

impl ShardIndex {
    /// Parses an index. Rejects anything but an object with a `weight_map` of string
    /// values (no repeated names) and an optional `metadata` object; other members are
    /// ignored. The error is a reason for the caller to attach the path to.
    pub fn parse(json: &[u8]) -> std::result::Result<ShardIndex, String> {
        if json.len() as u64 > MAX_HEADER_LEN {
            return Err(format!(
                "{} bytes is larger than an index can be",
                json.len()
            ));
        }
        let mut de = serde_json::Deserializer::from_slice(json);
        let index = IndexSeed
            .deserialize(&mut de)
            .and_then(|i| de.end().map(|()| i))
            .map_err(|e| e.to_string())?;
        Ok(index)
    }

    /// The shard file names, each once, in order of first mention.
    pub fn shard_names(&self) -> Vec<&str> {
        let mut names: Vec<&str> = Vec::new();
        let mut seen = std::collections::HashSet::new();
        for (_, shard) in &self.weight_map {
            if seen.insert(shard.as_str()) {
                names.push(shard);
            }
        }
        names
    }

    /// `metadata.total_size`, when present and a non-negative integer.
    pub fn total_size(&self) -> Option<u64> {
        self.metadata.get("total_size").and_then(Value::as_u64)
    }

    /// The index as transformers writes it: two-space indentation, keys sorted,
    /// non-ASCII escaped as `\uXXXX`, a final newline.
    pub fn to_json(&self) -> String {
        let mut weight_map: Vec<&(String, String)> = self.weight_map.iter().collect();
        weight_map.sort_by(|a, b| a.0.cmp(&b.0));
        let mut top = Map::new();
        top.insert(
            "metadata".into(),
            sorted(&Value::Object(self.metadata.clone())),
        );
        top.insert(
            "weight_map".into(),
            Value::Object(
                weight_map
                    .into_iter()
                    .map(|(k, v)| (k.clone(), Value::String(v.clone())))
                    .collect(),
            ),
        );
        let pretty = serde_json::to_string_pretty(&Value::Object(top)).unwrap_or_default();
        let mut out = String::with_capacity(pretty.len() + 1);
        for c in pretty.chars() {
            if c.is_ascii() {
                out.push(c);
            } else {
                let mut units = [0u16; 2];
                for unit in c.encode_utf16(&mut units) {
                    out.push_str(&format!("\\u{unit:04x}"));
                }
            }
        }
        out.push('\n');
        out
    }
}

/// `value` with every object's keys sorted (Python's `sort_keys=True`).
fn sorted(value: &Value) -> Value {
    match value {
        Value::Object(map) => {
            let mut entries: Vec<_> = map.iter().collect();
            entries.sort_by(|a, b| a.0.cmp(b.0));
            Value::Object(
                entries
                    .into_iter()
                    .map(|(k, v)| (k.clone(), sorted(v)))
                    .collect(),
            )
        }
        Value::Array(items) => Value::Array(items.iter().map(sorted).collect()),
        other => other.clone(),
    }
}

struct IndexSeed;

impl<'de> DeserializeSeed<'de> for IndexSeed {
    type Value = ShardIndex;

    fn deserialize<D: de::Deserializer<'de>>(
        self,
        deserializer: D,
    ) -> Result<ShardIndex, D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for IndexSeed {
    type Value = ShardIndex;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an object with a weight_map")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<ShardIndex, A::Error> {
        let mut metadata = None;
        let mut weight_map = None;
        while let Some(key) = map.next_key::<String>()? {
            match key.as_str() {
                "weight_map" if weight_map.is_none() => {
                    let seed = StringMapSeed {
                        fault: None,
                        what: "weight_map",
                    };
                    weight_map = Some(map.next_value_seed(seed)?.unwrap_or_default());
                }
                "metadata" if metadata.is_none() => {
                    metadata = Some(match map.next_value::<Value>()? {
                        Value::Object(m) => m,
                        Value::Null => Map::new(),
                        _ => return Err(de::Error::custom("metadata is not an object")),
                    });
                }
                "weight_map" | "metadata" => {
                    return Err(de::Error::custom(format!("{key} appears twice")));
                }
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        let weight_map = weight_map.ok_or_else(|| de::Error::missing_field("weight_map"))?;
        Ok(ShardIndex {
            metadata: metadata.unwrap_or_default(),
            weight_map,
        })
    }
}

/// Writes `tensors` under `dir` as `{stem}.safetensors`, or, when they exceed
/// `max_shard_bytes` of tensor data, as `{stem}-0000i-of-0000N.safetensors` shards plus
/// `{stem}.safetensors.index.json`. Each shard is a canonical file carrying `metadata`;
/// each is replaced atomically, the index last. Returns the paths written.
pub fn write_sharded<'a>(
    dir: impl AsRef<Path>,
    stem: &str,
    tensors: impl IntoIterator<Item = TensorView<'a>>,
    metadata: Option<&[(String, String)]>,
    max_shard_bytes: u64,
) -> Result<Vec<PathBuf>> {
    if max_shard_bytes == 0 {
        return Err(Error::ZeroShardSize);
    }
    let dir = dir.as_ref();
    let mut shards: Vec<Vec<TensorView<'a>>> = Vec::new();
    let mut current: Vec<TensorView<'a>> = Vec::new();
    let mut current_size = 0u64;
    let mut total = 0u64;
    for view in tensors {
        let size = view.data().len() as u64;
        total += size;
        if size > max_shard_bytes {
            shards.push(vec![view]);
            continue;
        }
        if current_size + size > max_shard_bytes {
            shards.push(std::mem::take(&mut current));
            current_size = 0;
        }
        current.push(view);
        current_size += size;
    }
    if !current.is_empty() || shards.is_empty() {
        shards.push(current);
    }
    if shards.len() == 1 {
        let path = dir.join(format!("{stem}.safetensors"));
        let only = shards.pop().unwrap_or_default();
        writer::write_file(&path, only, metadata, Order::Canonical)?;
        return Ok(vec![path]);
    }
    let count = shards.len();
    let mut written = Vec::with_capacity(count + 1);
    let mut index = ShardIndex::default();
    index
        .metadata
        .insert("total_size".into(), Value::from(total));
    for (i, shard) in shards.into_iter().enumerate() {
        let name = format!("{stem}-{:05}-of-{count:05}.safetensors", i + 1);
        index
            .weight_map
            .extend(shard.iter().map(|v| (v.name().to_owned(), name.clone())));
        let path = dir.join(&name);
        writer::write_file(&path, shard, metadata, Order::Canonical)?;
        written.push(path);
    }
    let path = dir.join(format!("{stem}.safetensors.index.json"));
    let file = writer::temp_file_beside(&path)?;
    file.as_file()
        .write_all(index.to_json().as_bytes())
        .map_err(|e| Error::io("cannot write", e).in_file(&path))?;
    writer::persist(file, &path)?;
    written.push(path);
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn index_round_trip_and_format() {
        let json = br#"{"metadata":{"total_size":12},"weight_map":{"b":"m-2.safetensors","a\u00e9":"m-1.safetensors"},"extra":[1]}"#;
        let index = ShardIndex::parse(json).unwrap();
        assert_eq!(index.total_size(), Some(12));
        assert_eq!(index.shard_names(), ["m-2.safetensors", "m-1.safetensors"]);
        assert_eq!(
            index.to_json(),
            "{\n  \"metadata\": {\n    \"total_size\": 12\n  },\n  \"weight_map\": {\n    \"a\\u00e9\": \"m-1.safetensors\",\n    \"b\": \"m-2.safetensors\"\n  }\n}\n"
        );
        assert_eq!(
            ShardIndex::parse(index.to_json().as_bytes())
                .unwrap()
                .weight_map
                .len(),
            2
        );
        for bad in [
            &br#"{"weight_map":{"a":"x","a":"y"}}"#[..],
            br#"{"metadata":{}}"#,
            br#"{"weight_map":{"a":1}}"#,
            b"[]",
        ] {
            assert!(
                ShardIndex::parse(bad).is_err(),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
    }
}
