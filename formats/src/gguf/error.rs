//! The one error type of the GGUF module. Every variant carries the context a user needs
//! to find the problem: the key or tensor, the byte offset, how many bytes were missing.
//! Messages are one line and complete: wrapped errors are part of the message rather
//! than a `source()`, so printing the chain does not repeat them.

use super::value::Value;
use quantforge_kernels::GgmlType;
use std::path::PathBuf;

/// Result alias for the GGUF module.
pub type Result<T, E = GgufError> = std::result::Result<T, E>;

/// Everything that can go wrong reading, validating or writing GGUF.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GgufError {
    /// An error in a named file; `error` says what.
    #[error("{}: {error}", path.display())]
    InFile {
        /// The file.
        path: PathBuf,
        /// What went wrong in it (part of the message, so not also a `source()`).
        error: Box<GgufError>,
    },
    /// An operating-system error.
    #[error("{what}: {cause}")]
    Io {
        /// What was being done ("cannot open", "cannot write the temporary file").
        what: String,
        /// The underlying error (part of the message).
        cause: std::io::Error,
    },
    /// The first four bytes are not `GGUF`.
    #[error("not a GGUF file: magic is {found:02x?}, expected \"GGUF\"")]
    BadMagic {
        /// The bytes found (fewer than four if the file is that short).
        found: Vec<u8>,
    },
    /// A version this reader does not support (v1, or newer than v3).
    #[error("GGUF version {version} is not supported (only 2 and 3)")]
    UnsupportedVersion {
        /// The version in the header.
        version: u32,
    },
    /// The header ends before an item it declares.
    #[error(
        "truncated header: {what} needs {needed} bytes at offset {offset}, only {available} remain"
    )]
    Truncated {
        /// The item being read ("tensor count", "value of key 'general.name'").
        what: String,
        /// Its offset in the file.
        offset: u64,
        /// Bytes it needs.
        needed: u64,
        /// Bytes the file has from `offset` on.
        available: u64,
    },
    /// A count (keys, tensors, array elements) that the rest of the file cannot hold.
    #[error(
        "{what} is {count}, but the {available} bytes left at offset {offset} hold at most {max}"
    )]
    CountTooLarge {
        /// Which count.
        what: String,
        /// The count in the file.
        count: u64,
        /// Offset of the first element.
        offset: u64,
        /// Bytes the file has from `offset` on.
        available: u64,
        /// The largest count those bytes could hold.
        max: u64,
    },
    /// A value type code outside 0..=12.
    #[error("{what} has invalid value type {code} (offset {offset})")]
    InvalidValueType {
        /// Where ("key 'x'", "element type of key 'x'").
        what: String,
        /// The code found.
        code: u32,
        /// Offset of the code.
        offset: u64,
    },
    /// Arrays of arrays nested deeper than [`super::MAX_ARRAY_DEPTH`].
    #[error("key '{key}': arrays nested deeper than {max} levels (offset {offset})")]
    NestingTooDeep {
        /// The key.
        key: String,
        /// The limit.
        max: usize,
        /// Offset of the array that went too deep.
        offset: u64,
    },
    /// A bool byte other than 0 or 1 (the GGUF specification calls these invalid).
    #[error("key '{key}': bool byte {byte} at offset {offset} is neither 0 nor 1")]
    InvalidBool {
        /// The key.
        key: String,
        /// The byte.
        byte: u8,
        /// Its offset.
        offset: u64,
    },
    /// A key or tensor name that is empty or not UTF-8.
    #[error("{what} at offset {offset} is {problem}")]
    InvalidName {
        /// "key 3", "name of tensor 7".
        what: String,
        /// Offset of the string.
        offset: u64,
        /// "empty" or "not valid UTF-8".
        problem: &'static str,
    },
    /// A key given twice.
    #[error("duplicate key '{key}'")]
    DuplicateKey {
        /// The key.
        key: String,
    },
    /// A tensor name given twice (within a file or across a split set).
    #[error("duplicate tensor name '{name}'")]
    DuplicateTensor {
        /// The name.
        name: String,
    },
    /// `general.alignment` of the wrong type or value.
    #[error("general.alignment {found} is invalid: {reason}")]
    BadAlignment {
        /// The value found, with its type.
        found: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A tensor whose dimensions are invalid (more than 4, negative, overflowing).
    #[error("tensor '{name}': {reason}")]
    BadTensorShape {
        /// The tensor.
        name: String,
        /// What is wrong.
        reason: String,
    },
    /// A tensor type code that ggml does not define (or removed).
    #[error("tensor '{name}': {cause}")]
    BadTensorType {
        /// The tensor.
        name: String,
        /// Why the code was rejected (part of the message).
        cause: quantforge_kernels::Error,
    },
    /// A tensor offset that is not where the layout puts it.
    #[error(
        "tensor '{name}': data offset {offset} differs from {expected}, the offset that the \
         tensors before it and alignment {alignment} imply"
    )]
    BadTensorOffset {
        /// The tensor.
        name: String,
        /// Offset in the file (relative to the data section).
        offset: u64,
        /// Offset the layout implies.
        expected: u64,
        /// The alignment in force.
        alignment: u64,
    },
    /// A tensor whose data runs past the end of the file.
    #[error(
        "tensor '{name}' is truncated: its {size} bytes at offset {offset} end {missing} bytes \
         past the end of the file ({file_size} bytes)"
    )]
    TensorTruncated {
        /// The tensor.
        name: String,
        /// Absolute offset of its data.
        offset: u64,
        /// Its size in bytes.
        size: u64,
        /// Bytes missing.
        missing: u64,
        /// The file size.
        file_size: u64,
    },
    /// A key that is not there.
    #[error("key '{key}' not found")]
    KeyNotFound {
        /// The key.
        key: String,
    },
    /// A key whose value has another type than the one asked for.
    #[error("key '{key}' is {found}, not {expected}")]
    WrongType {
        /// The key.
        key: String,
        /// The type asked for.
        expected: String,
        /// The type it has.
        found: String,
    },
    /// A tensor that is not there.
    #[error("tensor '{name}' not found")]
    TensorNotFound {
        /// The name.
        name: String,
    },
    /// Data given for a tensor whose length differs from what its type and shape say.
    #[error("tensor '{name}': {got} bytes of data given, its {ty} shape needs {expected}")]
    DataSize {
        /// The tensor.
        name: String,
        /// Its type.
        ty: GgmlType,
        /// Bytes its shape needs.
        expected: u64,
        /// Bytes given.
        got: u64,
    },
    /// Tensor data written out of declaration order, too much of it, or not at all.
    #[error("stream writer: {0}")]
    Stream(String),
    /// A split set whose parts do not fit together.
    #[error("split set: {0}")]
    Split(String),
    /// A value that cannot be written (e.g. an empty array inside an array is fine, but a
    /// string longer than the format allows is not).
    #[error("cannot write {what}: {reason}")]
    Unwritable {
        /// The item.
        what: String,
        /// Why.
        reason: String,
    },
}

impl GgufError {
    /// Wraps `self` with the file it happened in (once: an error that already names a
    /// file is returned as is).
    pub fn in_file(self, path: impl Into<PathBuf>) -> GgufError {
        match self {
            GgufError::InFile { .. } => self,
            error => GgufError::InFile {
                path: path.into(),
                error: Box::new(error),
            },
        }
    }

    /// The error without the file it happened in.
    pub fn kind(&self) -> &GgufError {
        match self {
            GgufError::InFile { error, .. } => error.kind(),
            other => other,
        }
    }

    pub(crate) fn io(what: impl Into<String>, cause: std::io::Error) -> GgufError {
        GgufError::Io {
            what: what.into(),
            cause,
        }
    }

    pub(crate) fn wrong_type(key: &str, expected: &str, found: &Value) -> GgufError {
        GgufError::WrongType {
            key: key.to_string(),
            expected: expected.to_string(),
            found: found.type_name(),
        }
    }
}
