//! The ordered key-value metadata of a GGUF file.
//!
//! Order is part of the file, so it is kept: [`Metadata::set`] replaces a value where its
//! key already stands and appends a new key at the end. (ggml's `gguf_set_val_*` removes
//! and re-appends instead; the in-place rule is what lets `set-meta` change one value
//! and leave every other byte where it was.)

use super::error::{GgufError, Result};
use super::value::{Array, GgufString, Value, for_each_number};
use std::collections::HashMap;

/// Ordered, typed key-value pairs with unique keys.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Metadata {
    entries: Vec<(String, Value)>,
    index: HashMap<String, usize>,
}

impl Metadata {
    /// No keys.
    pub fn new() -> Metadata {
        Metadata::default()
    }

    /// Number of keys.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether there are no keys.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Keys and values, in file order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = (&str, &Value)> {
        self.entries.iter().map(|(k, v)| (k.as_str(), v))
    }

    /// Keys, in file order.
    pub fn keys(&self) -> impl ExactSizeIterator<Item = &str> {
        self.entries.iter().map(|(k, _)| k.as_str())
    }

    /// The value of `key`, if present.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.index.get(key).map(|&i| &self.entries[i].1)
    }

    /// Whether `key` is present.
    pub fn contains_key(&self, key: &str) -> bool {
        self.index.contains_key(key)
    }

    /// Position of `key` in file order.
    pub fn position(&self, key: &str) -> Option<usize> {
        self.index.get(key).copied()
    }

    /// Sets `key` to `value`: in place if the key exists (its position is kept, its type
    /// may change), appended otherwise. Returns the old value.
    ///
    /// Keys must be non-empty; an empty key is refused with [`GgufError::InvalidName`].
    pub fn set(
        &mut self,
        key: impl Into<String>,
        value: impl Into<Value>,
    ) -> Result<Option<Value>> {
        let key = key.into();
        let value = value.into();
        if key.is_empty() {
            return Err(GgufError::InvalidName {
                what: "metadata key".to_string(),
                offset: 0,
                problem: "empty",
            });
        }
        if let Some(&i) = self.index.get(&key) {
            return Ok(Some(std::mem::replace(&mut self.entries[i].1, value)));
        }
        self.index.insert(key.clone(), self.entries.len());
        self.entries.push((key, value));
        Ok(None)
    }

    /// Appends a key that must be new (the reader's rule: duplicates are errors).
    pub(crate) fn push_new(&mut self, key: String, value: Value) -> Result<()> {
        if self.index.contains_key(&key) {
            return Err(GgufError::DuplicateKey { key });
        }
        self.index.insert(key.clone(), self.entries.len());
        self.entries.push((key, value));
        Ok(())
    }

    /// Removes `key`, keeping the order of the others. Returns its value.
    pub fn remove(&mut self, key: &str) -> Option<Value> {
        let i = self.index.remove(key)?;
        let (_, value) = self.entries.remove(i);
        for j in self.index.values_mut() {
            if *j > i {
                *j -= 1;
            }
        }
        Some(value)
    }

    /// Copies `key` with its exact value from `other` (in place if present here).
    pub fn copy_from(&mut self, other: &Metadata, key: &str) -> Result<()> {
        let value = other.get(key).ok_or_else(|| GgufError::KeyNotFound {
            key: key.to_string(),
        })?;
        self.set(key, value.clone()).map(drop)
    }

    /// Copies every key of `other`, in its order, with [`Metadata::set`]'s rules.
    pub fn copy_all_from(&mut self, other: &Metadata) {
        for (key, value) in &other.entries {
            // Keys in a `Metadata` are never empty, so `set` cannot fail.
            let _ = self.set(key.clone(), value.clone());
        }
    }

    /// The value of `key`, or [`GgufError::KeyNotFound`].
    pub fn require(&self, key: &str) -> Result<&Value> {
        self.get(key).ok_or_else(|| GgufError::KeyNotFound {
            key: key.to_string(),
        })
    }

    /// The string value of `key` as text; an error if missing, not a string, or not UTF-8.
    pub fn get_str(&self, key: &str) -> Result<&str> {
        let value = self.require(key)?;
        let s = value
            .as_gguf_string()
            .ok_or_else(|| GgufError::wrong_type(key, "str", value))?;
        s.as_str()
            .ok_or_else(|| GgufError::wrong_type(key, "UTF-8 str", value))
    }

    /// The string value of `key` with its exact bytes.
    pub fn get_string(&self, key: &str) -> Result<&GgufString> {
        let value = self.require(key)?;
        value
            .as_gguf_string()
            .ok_or_else(|| GgufError::wrong_type(key, "str", value))
    }

    /// The bool value of `key`.
    pub fn get_bool(&self, key: &str) -> Result<bool> {
        let value = self.require(key)?;
        value
            .as_bool()
            .ok_or_else(|| GgufError::wrong_type(key, "bool", value))
    }

    /// The array value of `key`.
    pub fn get_array(&self, key: &str) -> Result<&Array> {
        let value = self.require(key)?;
        value
            .as_array()
            .ok_or_else(|| GgufError::wrong_type(key, "arr", value))
    }

    /// The value of `key` as a `u64`, whatever integer type holds it, if it fits (for keys
    /// whose writers disagree on the width, like `split.count`).
    pub fn get_uint(&self, key: &str) -> Result<u64> {
        let value = self.require(key)?;
        value
            .as_u64_lossless()
            .ok_or_else(|| GgufError::wrong_type(key, "non-negative integer", value))
    }
}

macro_rules! typed_getters {
    ($($variant:ident $ty:ident $as:ident $get:ident),*) => {
        impl Metadata {
            $(
                #[doc = concat!("The `", stringify!($ty), "` value of `key`; an error if ")]
                #[doc = "missing or of another type."]
                pub fn $get(&self, key: &str) -> Result<$ty> {
                    let value = self.require(key)?;
                    value
                        .$as()
                        .ok_or_else(|| GgufError::wrong_type(key, stringify!($ty), value))
                }
            )*
        }
    };
}
for_each_number!(typed_getters);
