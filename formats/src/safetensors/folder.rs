//! Model folders as Hugging Face tools save them: a single `model.safetensors`, or the
//! shards a `model.safetensors.index.json` names, and the same under diffusers' name
//! `diffusion_pytorch_model`, optionally with a variant (`model.fp16.safetensors`,
//! `model.safetensors.index.fp16.json`, as transformers' and diffusers' `_add_variant`
//! spell them). The tensors of all shards are opened (mmap) as one set, after checking
//! the index and the shards agree exactly; `config.json` is exposed as JSON.

use super::{Error, MAX_HEADER_LEN, Result, SafeTensors, ShardIndex, TensorView};
use serde_json::Value;
use std::collections::HashMap;
use std::path::{Component, Path, PathBuf};

/// The weight-file stems transformers and diffusers use, in the order they are tried.
const STEMS: [&str; 2] = ["model", "diffusion_pytorch_model"];

/// A model's tensors, from one file or several shards, opened as one set.
#[derive(Debug)]
pub struct ModelFolder {
    dir: PathBuf,
    index: Option<ShardIndex>,
    /// (file name relative to `dir`, contents), shards sorted by name.
    shards: Vec<(String, SafeTensors<'static>)>,
    /// Tensor name -> shard position.
    location: HashMap<String, usize>,
    config: Option<Value>,
}

impl ModelFolder {
    /// Opens `path`: a folder (see the module docs for the names tried), a
    /// `.safetensors` file, or a `.safetensors.index.json`.
    pub fn open(path: impl AsRef<Path>) -> Result<ModelFolder> {
        Self::open_variant(path, None)
    }

    /// As [`ModelFolder::open`], looking in a folder for the files of `variant`
    /// (`"fp16"`: `model.fp16.safetensors`, `model.safetensors.index.fp16.json`).
    pub fn open_variant(path: impl AsRef<Path>, variant: Option<&str>) -> Result<ModelFolder> {
        let path = path.as_ref();
        if path.is_dir() {
            let (file, is_index) = find_weights(path, variant)?;
            return Self::open_file(path, &file, is_index);
        }
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        let dir = match path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        Self::open_file(dir, path, name.ends_with(".json"))
    }

    fn open_file(dir: &Path, file: &Path, is_index: bool) -> Result<ModelFolder> {
        let config = read_config(dir)?;
        if !is_index {
            let name = file
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            let tensors = SafeTensors::mmap(file)?;
            let location = tensors.names().map(|n| (n.to_owned(), 0)).collect();
            return Ok(ModelFolder {
                dir: dir.to_path_buf(),
                index: None,
                shards: vec![(name, tensors)],
                location,
                config,
            });
        }
        let index = read_index(file)?;
        let mut shard_names: Vec<&str> = index.shard_names();
        shard_names.sort_unstable();
        let mut shards = Vec::with_capacity(shard_names.len());
        for &shard in &shard_names {
            let shard_path = shard_path(dir, file, shard)?;
            if !shard_path.is_file() {
                let name = index
                    .weight_map
                    .iter()
                    .find(|(_, s)| s == shard)
                    .map(|(n, _)| n.clone())
                    .unwrap_or_default();
                return Err(Error::MissingShard {
                    shard: shard.to_owned(),
                    name,
                }
                .in_file(file));
            }
            shards.push((shard.to_owned(), SafeTensors::mmap(&shard_path)?));
        }
        let position: HashMap<&str, usize> = shard_names
            .iter()
            .enumerate()
            .map(|(i, &s)| (s, i))
            .collect();
        let mut location = HashMap::with_capacity(index.weight_map.len());
        for (name, shard) in &index.weight_map {
            let i = position.get(shard.as_str()).copied().unwrap_or_default();
            if shards[i].1.header().tensor(name).is_none() {
                return Err(Error::NotInShard {
                    name: name.clone(),
                    shard: shard.clone(),
                }
                .in_file(file));
            }
            location.insert(name.clone(), i);
        }
        for (i, (shard, tensors)) in shards.iter().enumerate() {
            for name in tensors.names() {
                match location.get(name) {
                    None => {
                        return Err(Error::Unindexed {
                            name: name.to_owned(),
                            shard: shard.clone(),
                        }
                        .in_file(file));
                    }
                    Some(&j) if j != i => {
                        return Err(Error::DuplicateAcrossShards {
                            name: name.to_owned(),
                            first: shards[j].0.clone(),
                            second: shard.clone(),
                        }
                        .in_file(file));
                    }
                    Some(_) => {}
                }
            }
        }
        drop(shard_names);
        Ok(ModelFolder {
            dir: dir.to_path_buf(),
            index: Some(index),
            shards,
            location,
            config,
        })
    }

    /// The folder the weights are in.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The shard index, for a sharded model.
    pub fn index(&self) -> Option<&ShardIndex> {
        self.index.as_ref()
    }

    /// The files (names relative to [`ModelFolder::dir`]) and their contents.
    pub fn shards(&self) -> impl Iterator<Item = (&str, &SafeTensors<'static>)> {
        self.shards.iter().map(|(n, t)| (n.as_str(), t))
    }

    /// `config.json` from the folder, when there is one.
    pub fn config(&self) -> Option<&Value> {
        self.config.as_ref()
    }

    /// `__metadata__` of the first shard (transformers writes the same in every shard).
    pub fn metadata(&self) -> Option<&[(String, String)]> {
        self.shards.first().and_then(|(_, t)| t.metadata())
    }

    /// Number of tensors across all shards.
    pub fn len(&self) -> usize {
        self.location.len()
    }

    /// Whether there are no tensors.
    pub fn is_empty(&self) -> bool {
        self.location.is_empty()
    }

    /// Every tensor: shard by shard (in name order), each in file order.
    pub fn tensors(&self) -> impl Iterator<Item = TensorView<'_>> {
        self.shards.iter().flat_map(|(_, t)| t.tensors())
    }

    /// The tensor called `name`, from whichever shard holds it.
    pub fn tensor(&self, name: &str) -> Result<TensorView<'_>> {
        let i = self
            .location
            .get(name)
            .ok_or_else(|| Error::TensorNotFound {
                name: name.to_owned(),
            })?;
        self.shards[*i].1.tensor(name)
    }

    /// The file name of the shard holding `name`.
    pub fn shard_of(&self, name: &str) -> Option<&str> {
        self.location.get(name).map(|&i| self.shards[i].0.as_str())
    }

    /// The mapped file holding tensor `name`.
    pub fn file_of(&self, name: &str) -> Option<&SafeTensors<'static>> {
        self.location.get(name).map(|&i| &self.shards[i].1)
    }
}

/// transformers' `_add_variant`: the variant goes before the last extension.
fn with_variant(name: &str, variant: Option<&str>) -> String {
    match (variant, name.rsplit_once('.')) {
        (Some(v), Some((head, ext))) => format!("{head}.{v}.{ext}"),
        _ => name.to_owned(),
    }
}

/// The weights file of a folder: a single file first (as transformers prefers), then
/// an index, for each stem in turn. Returns the path and whether it is an index.
fn find_weights(dir: &Path, variant: Option<&str>) -> Result<(PathBuf, bool)> {
    let mut tried = Vec::new();
    for stem in STEMS {
        for (name, is_index) in [
            (format!("{stem}.safetensors"), false),
            (format!("{stem}.safetensors.index.json"), true),
        ] {
            let name = with_variant(&name, variant);
            let path = dir.join(&name);
            if path.is_file() {
                return Ok((path, is_index));
            }
            tried.push(name);
        }
    }
    Err(Error::NoModel {
        dir: dir.to_path_buf(),
        looked_for: tried.join(", "),
    })
}

/// A shard's path: relative to the index's folder, no absolute paths or `..`.
fn shard_path(dir: &Path, index: &Path, shard: &str) -> Result<PathBuf> {
    let rel = Path::new(shard);
    let plain = !shard.is_empty()
        && rel
            .components()
            .all(|c| matches!(c, Component::Normal(_) | Component::CurDir));
    if !plain {
        return Err(Error::InvalidIndex {
            path: index.to_path_buf(),
            reason: format!("shard name `{shard}` is not a relative path inside the folder"),
        });
    }
    Ok(dir.join(rel))
}

/// Reads a small JSON file whole, refusing anything over the header limit.
fn read_small(path: &Path) -> Result<Vec<u8>> {
    let size = std::fs::metadata(path)
        .map_err(|e| Error::io("cannot stat", e).in_file(path))?
        .len();
    if size > MAX_HEADER_LEN {
        return Err(Error::io(
            format!("{size} bytes is more than a JSON side file may have"),
            std::io::ErrorKind::InvalidData.into(),
        )
        .in_file(path));
    }
    std::fs::read(path).map_err(|e| Error::io("cannot read", e).in_file(path))
}

fn read_index(path: &Path) -> Result<ShardIndex> {
    let bytes = read_small(path)?;
    ShardIndex::parse(&bytes).map_err(|reason| Error::InvalidIndex {
        path: path.to_path_buf(),
        reason,
    })
}

fn read_config(dir: &Path) -> Result<Option<Value>> {
    let path = dir.join("config.json");
    if !path.is_file() {
        return Ok(None);
    }
    let bytes = read_small(&path)?;
    serde_json::from_slice(&bytes)
        .map(Some)
        .map_err(|e| Error::InvalidConfig {
            path,
            reason: e.to_string(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn variants_and_shard_paths() {
        assert_eq!(
            with_variant("model.safetensors", Some("fp16")),
            "model.fp16.safetensors"
        );
        assert_eq!(
            with_variant("model.safetensors.index.json", Some("fp16")),
            "model.safetensors.index.fp16.json"
        );
        assert_eq!(with_variant("model.safetensors", None), "model.safetensors");
        let ok = shard_path(Path::new("d"), Path::new("i"), "sub/x.safetensors").unwrap();
        assert_eq!(ok, Path::new("d/sub/x.safetensors"));
        for bad in ["../x", "/etc/passwd", "", "a/../../b"] {
            assert!(
                shard_path(Path::new("d"), Path::new("i"), bad).is_err(),
                "{bad}"
            );
        }
    }
}
