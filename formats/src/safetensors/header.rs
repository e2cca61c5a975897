//! The JSON header: parsing it without trusting it, and the validation rules of the
//! Hugging Face crate (`Metadata::validate` and `SafeTensors::read_metadata` in upstream
//! `tensor.rs`), with errors that name the tensor.
//!
//! Upstream's rules: the header is at most 100 MB of UTF-8 JSON, an object whose
//! `__metadata__` member (optional, may be null) maps strings to strings and whose other
//! members are `{"dtype", "shape", "data_offsets"}` entries (unknown fields are ignored);
//! sorted by `data_offsets`, the tensors tile the data buffer with no gap or overlap, each
//! spanning exactly dtype x shape bytes (checked arithmetic; sub-byte dtypes must end on a
//! byte boundary); the buffer ends exactly where the last tensor does. Stricter than
//! upstream: a repeated tensor name or metadata key is an error (upstream keeps the last).

use super::{Dtype, Error, MAX_HEADER_LEN, Result};
use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, Visitor};
use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::fmt;
use std::ops::Range;

/// One tensor's entry: name, dtype, shape and its byte range in the data buffer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorInfo {
    name: String,
    dtype: Dtype,
    shape: Vec<usize>,
    offsets: Range<usize>,
}

impl TensorInfo {
    pub(crate) fn new(
        name: String,
        dtype: Dtype,
        shape: Vec<usize>,
        offsets: Range<usize>,
    ) -> Self {
        TensorInfo {
            name,
            dtype,
            shape,
            offsets,
        }
    }

    /// The tensor's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its element type.
    pub fn dtype(&self) -> Dtype {
        self.dtype
    }

    /// Its shape, outermost axis first (row-major, as the file stores it).
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// Its byte range within the data buffer (after the header).
    pub fn data_offsets(&self) -> Range<usize> {
        self.offsets.clone()
    }

    /// Its size in bytes.
    pub fn byte_len(&self) -> usize {
        self.offsets.len()
    }

    /// Its element count (validated not to overflow).
    pub fn elements(&self) -> usize {
        self.shape.iter().product()
    }
}

/// A parsed and validated header.
#[derive(Clone, Debug)]
pub struct Header {
    metadata: Option<Vec<(String, String)>>,
    /// In data-offset order (ties in header order).
    tensors: Vec<TensorInfo>,
    index: HashMap<String, usize>,
    data_len: usize,
}

impl Header {
    /// Parses and validates header JSON (the bytes after the 8-byte length, padding
    /// included). Checks everything except the data buffer's length, which
    /// [`Header::data_len`] gives for the caller to compare.
    pub fn parse(json: &[u8]) -> Result<Header> {
        if json.len() as u64 > MAX_HEADER_LEN {
            return Err(Error::HeaderTooLarge {
                len: json.len() as u64,
            });
        }
        let text = std::str::from_utf8(json).map_err(|e| Error::HeaderUtf8 {
            offset: e.valid_up_to(),
        })?;
        let fault = RefCell::new(None);
        let mut de = serde_json::Deserializer::from_str(text);
        let parsed = HeaderSeed { fault: &fault }
            .deserialize(&mut de)
            .and_then(|raw| de.end().map(|()| raw));
        let raw = match parsed {
            Ok(raw) => raw,
            Err(e) => {
                return Err(fault.into_inner().unwrap_or(Error::HeaderJson {
                    message: e.to_string(),
                }));
            }
        };
        Header::validate(raw.metadata, raw.tensors)
    }

    /// Sorts `tensors` by offset and checks they tile the buffer as upstream requires;
    /// names must already be unique.
    fn validate(
        metadata: Option<Vec<(String, String)>>,
        mut tensors: Vec<TensorInfo>,
    ) -> Result<Header> {
        tensors.sort_by_key(|t| (t.offsets.start, t.offsets.end));
        let mut start = 0usize;
        for t in &tensors {
            if t.offsets.start != start || t.offsets.end < t.offsets.start {
                return Err(Error::BadOffsets {
                    name: t.name.clone(),
                    offsets: t.offsets.clone(),
                    expected_start: start,
                });
            }
            start = t.offsets.end;
            let expected = checked_byte_len(&t.name, t.dtype, &t.shape)?;
            if expected != t.offsets.len() {
                return Err(Error::SizeMismatch {
                    name: t.name.clone(),
                    dtype: t.dtype,
                    shape: t.shape.clone(),
                    expected,
                    declared: t.offsets.len(),
                });
            }
        }
        let index = tensors
            .iter()
            .enumerate()
            .map(|(i, t)| (t.name.clone(), i))
            .collect();
        Ok(Header {
            metadata,
            tensors,
            index,
            data_len: start,
        })
    }

    /// `__metadata__` in header order; `None` when absent or null.
    pub fn metadata(&self) -> Option<&[(String, String)]> {
        self.metadata.as_deref()
    }

    /// The tensors in data-offset (file) order.
    pub fn tensors(&self) -> &[TensorInfo] {
        &self.tensors
    }

    /// The entry of tensor `name`.
    pub fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        self.index.get(name).and_then(|&i| self.tensors.get(i))
    }

    /// Length of the data buffer the header declares (the end of the last tensor).
    pub fn data_len(&self) -> usize {
        self.data_len
    }

    /// The first tensor (in file order) whose bytes end past `available` bytes of data.
    pub(crate) fn first_incomplete(&self, available: usize) -> Option<&TensorInfo> {
        self.tensors.iter().find(|t| t.offsets.end > available)
    }
}

/// Bytes of a `dtype` tensor of `shape`, with upstream's overflow and sub-byte checks.
pub(crate) fn checked_byte_len(name: &str, dtype: Dtype, shape: &[usize]) -> Result<usize> {
    let overflow = || Error::ShapeOverflow {
        name: name.to_owned(),
        dtype,
        shape: shape.to_vec(),
    };
    let elements = shape
        .iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(d))
        .ok_or_else(overflow)?;
    let bits = dtype.bits_of(elements).ok_or_else(overflow)?;
    if !bits.is_multiple_of(8) {
        return Err(Error::SubByteMisaligned {
            name: name.to_owned(),
            dtype,
            elements,
        });
    }
    Ok(bits / 8)
}

/// What the JSON walk collects before validation.
struct RawHeader {
    metadata: Option<Vec<(String, String)>>,
    tensors: Vec<TensorInfo>,
}

/// Walks the top-level object. Errors that concern a tensor or key are parked in
/// `fault` (serde only carries strings), then returned in place of serde's error.
struct HeaderSeed<'f> {
    fault: &'f RefCell<Option<Error>>,
}

impl HeaderSeed<'_> {
    fn fail<E: de::Error>(&self, error: Error) -> E {
        let message = error.to_string();
        *self.fault.borrow_mut() = Some(error);
        E::custom(message)
    }
}

impl<'de> DeserializeSeed<'de> for HeaderSeed<'_> {
    type Value = RawHeader;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<RawHeader, D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for HeaderSeed<'_> {
    type Value = RawHeader;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an object of tensor entries")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RawHeader, A::Error> {
        let mut metadata = None;
        let mut seen_metadata = false;
        let mut tensors = Vec::new();
        let mut names = HashSet::new();
        while let Some(name) = map.next_key::<String>()? {
            if name == "__metadata__" {
                if seen_metadata {
                    return Err(self.fail(Error::DuplicateMetadataSection));
                }
                seen_metadata = true;
                metadata = map.next_value_seed(StringMapSeed {
                    fault: Some(self.fault),
                    what: "__metadata__",
                })?;
                continue;
            }
            if !names.insert(name.clone()) {
                return Err(self.fail(Error::DuplicateTensor { name }));
            }
            let entry: RawEntry = map.next_value().map_err(|err: A::Error| {
                self.fail(Error::InvalidTensorEntry {
                    name: name.clone(),
                    reason: err.to_string(),
                })
            })?;
            let (begin, end) = entry.data_offsets;
            tensors.push(TensorInfo::new(name, entry.dtype, entry.shape, begin..end));
        }
        Ok(RawHeader { metadata, tensors })
    }
}

/// A tensor entry as written. Unknown fields are ignored, as upstream's serde derive does.
#[derive(serde::Deserialize)]
struct RawEntry {
    dtype: Dtype,
    shape: Vec<usize>,
    data_offsets: (usize, usize),
}

/// Reads an object of string values (or null) into an ordered list, rejecting repeated
/// keys. Used for `__metadata__` (errors parked in `fault` as [`Error::InvalidMetadata`]
/// or [`Error::DuplicateMetadataKey`]) and for an index's `weight_map` (plain messages).
pub(crate) struct StringMapSeed<'f> {
    pub(crate) fault: Option<&'f RefCell<Option<Error>>>,
    /// What the object is, for messages.
    pub(crate) what: &'static str,
}

impl StringMapSeed<'_> {
    fn fail<E: de::Error>(&self, error: Error) -> E {
        let message = match &error {
            Error::InvalidMetadata { reason } if self.fault.is_none() => {
                format!("{}: {reason}", self.what)
            }
            Error::DuplicateMetadataKey { key } if self.fault.is_none() => {
                format!("{}: key `{key}` appears twice", self.what)
            }
            e => e.to_string(),
        };
        if let Some(fault) = self.fault {
            *fault.borrow_mut() = Some(error);
        }
        E::custom(message)
    }
}

impl<'de> DeserializeSeed<'de> for StringMapSeed<'_> {
    type Value = Option<Vec<(String, String)>>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_option(self)
    }
}

impl<'de> Visitor<'de> for StringMapSeed<'_> {
    type Value = Option<Vec<(String, String)>>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "{} as an object of string values", self.what)
    }

    fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_map(self)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut entries = Vec::new();
        let mut keys = HashSet::new();
        while let Some(key) = map.next_key::<String>()? {
            if !keys.insert(key.clone()) {
                return Err(self.fail(Error::DuplicateMetadataKey { key }));
            }
            let value: String = map.next_value().map_err(|e: A::Error| {
                self.fail(Error::InvalidMetadata {
                    reason: format!("value of `{key}`: {e}"),
                })
            })?;
            entries.push((key, value));
        }
        Ok(Some(entries))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(json: &str) -> Result<Header> {
        Header::parse(json.as_bytes())
    }

    #[test]
    fn sorts_by_offset_and_validates() {
        let h = parse(
            r#"{"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]},
                "__metadata__":{"format":"pt","x":"y"},
                "a":{"dtype":"U8","shape":[4],"data_offsets":[0,4],"extra":1}}   "#,
        )
        .unwrap();
        let names: Vec<_> = h.tensors().iter().map(|t| t.name()).collect();
        assert_eq!(names, ["a", "b"]);
        assert_eq!(h.data_len(), 12);
        assert_eq!(h.metadata().unwrap().len(), 2);
        assert_eq!(h.tensor("b").unwrap().data_offsets(), 4..12);
    }

    #[test]
    fn errors_name_the_tensor() {
        let cases = [
            (
                r#"{"t":{"dtype":"F99","shape":[],"data_offsets":[0,4]}}"#,
                "tensor `t`",
            ),
            (
                r#"{"t":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}}"#,
                "tensor `t`",
            ),
            (
                r#"{"t":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}}"#,
                "needs 8 bytes",
            ),
            (
                r#"{"t":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}"#,
                "gap of 4",
            ),
            (
                r#"{"t":{"dtype":"F4","shape":[3],"data_offsets":[0,1]}}"#,
                "byte boundary",
            ),
            (
                r#"{"t":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,4]}}"#,
                "overflows",
            ),
            (
                r#"{"t":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"t":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}}"#,
                "declared twice",
            ),
            (r#"{"__metadata__":{"k":1}}"#, "`k`"),
            (r#"{"__metadata__":{"k":"a","k":"b"}}"#, "`k` appears twice"),
            (
                r#"{"__metadata__":null,"__metadata__":null}"#,
                "two __metadata__",
            ),
            (r#"[]"#, "an object"),
            (r#"{} x"#, "trailing"),
        ];
        for (json, needle) in cases {
            let err = parse(json).unwrap_err().to_string();
            assert!(err.contains(needle), "{json}: {err}");
        }
        let overlap = r#"{"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},
                          "b":{"dtype":"U8","shape":[2],"data_offsets":[1,3]}}"#;
        let err = parse(overlap).unwrap_err().to_string();
        assert!(
            err.contains("tensor `b`") && err.contains("overlap"),
            "{err}"
        );
        let err = Header::parse(b"{\"a\xff\":1}").unwrap_err().to_string();
        assert!(err.contains("UTF-8"), "{err}");
    }

    #[test]
    fn null_metadata_and_empty_tensors() {
        let h =
            parse(r#" {"__metadata__":null,"z":{"dtype":"F32","shape":[0],"data_offsets":[0,0]}}"#)
                .unwrap();
        assert!(h.metadata().is_none());
        assert_eq!(h.data_len(), 0);
    }
}
