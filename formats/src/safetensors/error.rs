//! The one error type of the safetensors module. Every variant that concerns a tensor
//! names it; file-level errors are wrapped in [`Error::File`] with the path.
//!
//! Messages are self-contained (they include the underlying cause), so no variant
//! exposes a `source()` chain that would repeat it.

use super::Dtype;
use std::ops::Range;
use std::path::PathBuf;

/// Result alias of the safetensors module.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything reading, slicing, decoding or writing safetensors can reject.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An operating-system I/O error, with what was being done.
    #[error("{what}: {cause}")]
    Io {
        /// What was being attempted ("cannot read model.safetensors").
        what: String,
        /// The I/O error.
        cause: std::io::Error,
    },
    /// An error found in a particular file.
    #[error("{}: {error}", path.display())]
    File {
        /// The file.
        path: PathBuf,
        /// What was wrong with it.
        error: Box<Error>,
    },
    /// Fewer than the 8 bytes of the header length.
    #[error("{len} bytes is too short for a safetensors file (the header length alone is 8)")]
    TooShort {
        /// Bytes available.
        len: u64,
    },
    /// The header length exceeds Hugging Face's 100 MB limit.
    #[error("header length {len} exceeds the limit of {max} bytes", max = super::MAX_HEADER_LEN)]
    HeaderTooLarge {
        /// The declared (or, when writing, computed) header length.
        len: u64,
    },
    /// The header length points past the end of the input.
    #[error(
        "header length {len} runs past the end of the input ({available} bytes follow the length)"
    )]
    HeaderPastEnd {
        /// The declared header length.
        len: u64,
        /// Bytes after the 8-byte length.
        available: u64,
    },
    /// The header is not UTF-8.
    #[error("header is not valid UTF-8 (first invalid byte at header offset {offset})")]
    HeaderUtf8 {
        /// Offset of the first invalid byte within the header.
        offset: usize,
    },
    /// The header is not JSON of the expected shape (an object of tensor entries).
    #[error("header is not valid safetensors JSON: {message}")]
    HeaderJson {
        /// serde_json's description, with line and column.
        message: String,
    },
    /// A tensor entry that is not `{"dtype": .., "shape": [..], "data_offsets": [b, e]}`
    /// with a known dtype and non-negative integers.
    #[error("tensor `{name}`: invalid entry: {reason}")]
    InvalidTensorEntry {
        /// The tensor.
        name: String,
        /// What was wrong, from the JSON parser.
        reason: String,
    },
    /// `__metadata__` that is not an object of string values (or null).
    #[error("__metadata__: {reason}")]
    InvalidMetadata {
        /// What was wrong, naming the key where there is one.
        reason: String,
    },
    /// Two tensors with the same name (in a header, or given to a writer).
    #[error("tensor `{name}` is declared twice")]
    DuplicateTensor {
        /// The repeated name.
        name: String,
    },
    /// The header has two `__metadata__` objects.
    #[error("the header has two __metadata__ objects")]
    DuplicateMetadataSection,
    /// The same key twice in `__metadata__`.
    #[error("__metadata__ key `{key}` appears twice")]
    DuplicateMetadataKey {
        /// The repeated key.
        key: String,
    },
    /// The element count or byte size of a tensor overflows.
    #[error("tensor `{name}`: {dtype} shape {shape:?} overflows the address space")]
    ShapeOverflow {
        /// The tensor.
        name: String,
        /// Its dtype.
        dtype: Dtype,
        /// Its shape.
        shape: Vec<usize>,
    },
    /// A sub-byte tensor (F4, F6) whose size is not a whole number of bytes.
    #[error("tensor `{name}`: {elements} elements of {dtype} do not end on a byte boundary")]
    SubByteMisaligned {
        /// The tensor.
        name: String,
        /// Its dtype.
        dtype: Dtype,
        /// Its element count.
        elements: usize,
    },
    /// `data_offsets` that do not span dtype x shape bytes.
    #[error(
        "tensor `{name}`: {dtype} shape {shape:?} needs {expected} bytes, its data_offsets span {declared}"
    )]
    SizeMismatch {
        /// The tensor.
        name: String,
        /// Its dtype.
        dtype: Dtype,
        /// Its shape.
        shape: Vec<usize>,
        /// Bytes dtype x shape needs.
        expected: usize,
        /// Bytes `data_offsets` span.
        declared: usize,
    },
    /// `data_offsets` that leave a gap, overlap the previous tensor, or end before they
    /// begin. Tensors sorted by offset must tile the data buffer exactly.
    #[error("tensor `{name}`: data_offsets [{}, {}] {}", offsets.start, offsets.end,
            describe_offsets(offsets, *expected_start))]
    BadOffsets {
        /// The tensor.
        name: String,
        /// Its declared `data_offsets`.
        offsets: Range<usize>,
        /// Where the previous tensor (in offset order) ends.
        expected_start: usize,
    },
    /// The input ends before the data the header declares.
    #[error("tensor `{name}` is truncated: the data buffer is {missing} bytes short")]
    Truncated {
        /// The first tensor whose bytes are not all present.
        name: String,
        /// Bytes missing at the end of the data buffer.
        missing: u64,
    },
    /// Bytes after the end of the last tensor.
    #[error("{count} trailing bytes after the data the header declares ({data_len} bytes)")]
    TrailingBytes {
        /// How many bytes are left over.
        count: u64,
        /// The data length the header declares.
        data_len: usize,
    },
    /// A name that is not in the file or folder.
    #[error("tensor `{name}` not found")]
    TensorNotFound {
        /// The name looked up.
        name: String,
    },
    /// A slice that does not fit the tensor's shape.
    #[error("tensor `{name}`: cannot take {ranges:?} of shape {shape:?}")]
    SliceOutOfRange {
        /// The tensor.
        name: String,
        /// The ranges asked for, one per leading axis.
        ranges: Vec<Range<usize>>,
        /// The tensor's shape.
        shape: Vec<usize>,
    },
    /// A slice of a sub-byte tensor that does not start and end on byte boundaries.
    #[error("tensor `{name}`: slice {ranges:?} of {dtype} does not fall on byte boundaries")]
    SliceMisaligned {
        /// The tensor.
        name: String,
        /// Its dtype.
        dtype: Dtype,
        /// The ranges asked for.
        ranges: Vec<Range<usize>>,
    },
    /// Decoding to f32 is defined only for F32, F16, BF16 and the F8 types.
    #[error("tensor `{name}`: cannot decode {dtype} to f32 (only F32, F16, BF16 and F8 types)")]
    CannotDecode {
        /// The tensor.
        name: String,
        /// Its dtype.
        dtype: Dtype,
    },
    /// A kernels-crate converter rejected the data.
    #[error("tensor `{name}`: {cause}")]
    Kernels {
        /// The tensor.
        name: String,
        /// The converter's error.
        cause: quantforge_kernels::Error,
    },
    /// An output buffer of the wrong length.
    #[error("tensor `{name}`: output holds {actual} values, the tensor has {expected}")]
    OutputLength {
        /// The tensor.
        name: String,
        /// Elements the tensor has.
        expected: usize,
        /// Elements the output holds.
        actual: usize,
    },
    /// Tensor data given to a writer that is not dtype x shape bytes long.
    #[error(
        "tensor `{name}`: {actual} bytes of data given, {dtype} shape {shape:?} needs {expected}"
    )]
    WrongDataLength {
        /// The tensor.
        name: String,
        /// Its dtype.
        dtype: Dtype,
        /// Its shape.
        shape: Vec<usize>,
        /// Bytes needed.
        expected: usize,
        /// Bytes given.
        actual: usize,
    },
    /// A tensor named `__metadata__`, which the format reserves.
    #[error("a tensor cannot be named __metadata__ (the format reserves it)")]
    ReservedName,
    /// A positional write outside the tensor it names.
    #[error("tensor `{name}`: write of {len} bytes at offset {offset} exceeds its {size} bytes")]
    WriteOutOfBounds {
        /// The tensor.
        name: String,
        /// Offset within the tensor.
        offset: usize,
        /// Bytes written.
        len: usize,
        /// The tensor's size.
        size: usize,
    },
    /// A streamed file finished before every byte of a tensor was written.
    #[error("tensor `{name}`: {missing} of its {size} bytes were never written")]
    Unwritten {
        /// The tensor.
        name: String,
        /// Bytes not covered by any write.
        missing: usize,
        /// The tensor's size.
        size: usize,
    },
    /// A maximum shard size of zero.
    #[error("the maximum shard size must be at least one byte")]
    ZeroShardSize,
    /// A folder with no model file this module knows.
    #[error("{}: no {looked_for} found", dir.display())]
    NoModel {
        /// The folder.
        dir: PathBuf,
        /// The names tried.
        looked_for: String,
    },
    /// An invalid `*.safetensors.index.json`.
    #[error("{}: {reason}", path.display())]
    InvalidIndex {
        /// The index file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// A shard named by the index that does not exist.
    #[error("shard {shard} (holding tensor `{name}` per the index) is missing")]
    MissingShard {
        /// The shard's file name.
        shard: String,
        /// A tensor the index places in it.
        name: String,
    },
    /// A tensor the index places in a shard that does not hold it.
    #[error("tensor `{name}`: the index places it in {shard}, which does not hold it")]
    NotInShard {
        /// The tensor.
        name: String,
        /// The shard.
        shard: String,
    },
    /// A tensor in a shard that the index does not list there.
    #[error("tensor `{name}` in shard {shard} is not listed for that shard by the index")]
    Unindexed {
        /// The tensor.
        name: String,
        /// The shard.
        shard: String,
    },
    /// The same tensor in two shards.
    #[error("tensor `{name}` is in both {first} and {second}")]
    DuplicateAcrossShards {
        /// The tensor.
        name: String,
        /// The first shard holding it.
        first: String,
        /// The second.
        second: String,
    },
    /// A `config.json` that is not JSON.
    #[error("{}: {reason}", path.display())]
    InvalidConfig {
        /// The file.
        path: PathBuf,
        /// serde_json's description.
        reason: String,
    },
}

impl Error {
    /// Wraps `self` with the file it concerns (unless it already names one).
    pub fn in_file(self, path: impl Into<PathBuf>) -> Error {
        match self {
            e @ (Error::File { .. }
            | Error::NoModel { .. }
            | Error::InvalidIndex { .. }
            | Error::InvalidConfig { .. }) => e,
            e => Error::File {
                path: path.into(),
                error: Box::new(e),
            },
        }
    }

    /// An [`Error::Io`] describing `what` failed.
    pub(crate) fn io(what: impl Into<String>, cause: std::io::Error) -> Error {
        Error::Io {
            what: what.into(),
            cause,
        }
    }
}

fn describe_offsets(offsets: &Range<usize>, expected_start: usize) -> String {
    if offsets.end < offsets.start {
        "end before they begin".to_owned()
    } else if offsets.start > expected_start {
        format!(
            "leave a gap of {} bytes after the previous tensor (which ends at {expected_start})",
            offsets.start - expected_start
        )
    } else {
        format!(
            "overlap the previous tensor (which ends at {expected_start}) by {} bytes",
            expected_start - offsets.start
        )
    }
}
