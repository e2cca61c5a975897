//! Descriptions of safetensors files and model folders for `quantforge inspect`: the
//! files (size, header length, tensor count), the shard index, `__metadata__`,
//! `config.json` and the tensor table, as text or as JSON.

use quantforge_formats::safetensors::{ModelFolder, SafeTensors};
use serde_json::{Value as Json, json};
use std::fmt::Write as _;

/// Characters of a metadata or config value shown when not `full`.
const SHOWN_CHARS: usize = 120;

/// A text description: one line per file, then metadata, config and the tensor table.
/// Long values are abbreviated unless `full`.
pub fn safetensors_text(model: &ModelFolder, full: bool) -> String {
    let mut s = String::new();
    for (name, file) in model.shards() {
        let _ = writeln!(
            s,
            "{}: safetensors, {} bytes, header {} bytes, {} tensors, {} bytes of data",
            model.dir().join(name).display(),
            file.as_bytes().len(),
            file.header_bytes().len(),
            file.len(),
            file.data().len()
        );
    }
    if let Some(index) = model.index() {
        let _ = writeln!(
            s,
            "index: {} tensors in {} shards, total_size {}",
            index.weight_map.len(),
            index.shard_names().len(),
            index
                .total_size()
                .map_or_else(|| "absent".to_owned(), |n| n.to_string())
        );
    }
    match model.metadata() {
        None => s.push_str("\n__metadata__: none\n"),
        Some(meta) => {
            let _ = writeln!(s, "\n__metadata__ ({} keys):", meta.len());
            let width = meta.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
            for (key, value) in meta {
                let _ = writeln!(
                    s,
                    "  {key:width$}  {}",
                    abbreviated(&format!("{value:?}"), full)
                );
            }
        }
    }
    if let Some(Json::Object(config)) = model.config() {
        let _ = writeln!(s, "\nconfig.json ({} keys):", config.len());
        let width = config.keys().map(String::len).max().unwrap_or(0);
        for (key, value) in config {
            let _ = writeln!(
                s,
                "  {key:width$}  {}",
                abbreviated(&value.to_string(), full)
            );
        }
    }
    let total: u64 = model.tensors().map(|t| t.data().len() as u64).sum();
    let _ = writeln!(s, "\ntensors ({}, {total} bytes of data):", model.len());
    let sharded = model.shards().count() > 1;
    let width = model
        .tensors()
        .map(|t| t.name().len())
        .max()
        .unwrap_or(4)
        .max(4);
    let _ = writeln!(
        s,
        "  {:>5}  {:width$}  {:11}  {:20}  {:>12}  {:>12}{}",
        "#",
        "name",
        "dtype",
        "shape",
        "bytes",
        "offset",
        if sharded { "  shard" } else { "" }
    );
    let mut i = 0;
    for (shard, file) in model.shards() {
        for info in file.header().tensors() {
            let _ = writeln!(
                s,
                "  {i:>5}  {:width$}  {:11}  {:20}  {:>12}  {:>12}{}",
                info.name(),
                info.dtype().name(),
                format!("{:?}", info.shape()),
                info.byte_len(),
                info.data_offsets().start,
                if sharded {
                    format!("  {shard}")
                } else {
                    String::new()
                }
            );
            i += 1;
        }
    }
    s
}

/// A JSON description with the same content as [`safetensors_text`].
pub fn safetensors_json(model: &ModelFolder, full: bool) -> Json {
    let files: Vec<Json> = model
        .shards()
        .map(|(name, file)| file_json(&model.dir().join(name).display().to_string(), file))
        .collect();
    let index = model.index().map(|index| {
        json!({
            "n_tensors": index.weight_map.len(),
            "shards": index.shard_names(),
            "metadata": index.metadata,
        })
    });
    let metadata = model.metadata().map(|meta| {
        let entries = meta.iter().map(|(k, v)| {
            let v = if full {
                v.clone()
            } else {
                v.chars().take(SHOWN_CHARS).collect()
            };
            (k.clone(), Json::String(v))
        });
        Json::Object(entries.collect())
    });
    let mut tensors = Vec::with_capacity(model.len());
    for (shard, file) in model.shards() {
        for info in file.header().tensors() {
            let offsets = info.data_offsets();
            tensors.push(json!({
                "name": info.name(),
                "dtype": info.dtype().name(),
                "shape": info.shape(),
                "bytes": info.byte_len(),
                "data_offsets": [offsets.start, offsets.end],
                "shard": shard,
            }));
        }
    }
    json!({
        "format": "safetensors",
        "files": files,
        "index": index,
        "metadata": metadata,
        "config": model.config(),
        "tensors": tensors,
    })
}

fn file_json(path: &str, file: &SafeTensors<'_>) -> Json {
    json!({
        "path": path,
        "file_size": file.as_bytes().len(),
        "header_len": file.header_bytes().len(),
        "n_tensors": file.len(),
        "data_len": file.data().len(),
    })
}

fn abbreviated(text: &str, full: bool) -> String {
    let count = text.chars().count();
    if full || count <= SHOWN_CHARS {
        return text.to_owned();
    }
    let head: String = text.chars().take(SHOWN_CHARS).collect();
    format!("{head}... ({count} chars)")
}
