//! GGUF, llama.cpp's model container (versions 2 and 3), read and written byte-exactly.
//!
//! The rules are those of ggml's `ggml/src/gguf.cpp` (llama-cpp-sys-2 0.1.161, ggml
//! 0.26.0) and llama.cpp's split tooling; gguf-py (PyPI `gguf`) writes the same bytes.
//!
//! - [`GgufFile`] opens one file by mmap or into memory and validates its header before
//!   trusting any of it: every count and length is checked against the bytes that are
//!   there, tensor extents against the file size and `row_size`, offsets against the
//!   layout ggml computes. Tensor data is handed out as zero-copy [`TensorView`]s.
//! - [`Metadata`] keeps each [`Value`] with its exact wire type, so writing a header that
//!   was read gives back the same bytes ([`GgufHeader::encode`]).
//! - [`GgufWriter`] streams a file (header, then each tensor's data in order, every
//!   tensor padded) into an [`AtomicFile`] that replaces its target only when complete;
//!   [`GgufBuilder`] assembles a header with tensors given up front or streamed later.
//! - [`GgufModel`] opens a split set (`NAME-00001-of-00003.gguf`, ...) as one model,
//!   merges it ([`GgufModel::write_merged`]) or splits a model ([`GgufModel::write_split`]).
//!
//! ```no_run
//! use quantforge_formats::gguf::{GgufModel, GgufFile};
//! # fn main() -> Result<(), quantforge_formats::gguf::GgufError> {
//! let file = GgufFile::open("model.gguf")?;
//! println!("{}", file.metadata().get_str("general.architecture")?);
//! let view = file.tensor("token_embd.weight")?;
//! println!("{} {:?} {} bytes", view.ty(), view.shape(), view.data().len());
//! // Re-emit byte-identically (or merge, if it is the first part of a split set):
//! GgufModel::open("model.gguf")?.write_merged("copy.gguf")?;
//! # Ok(()) }
//! ```

mod error;
mod header;
mod metadata;
mod reader;
mod split;
mod tensor;
mod value;
mod wire;
mod writer;

pub use error::{GgufError, Result};
pub use header::{
    DEFAULT_ALIGNMENT, GGUF_MAGIC, GGUF_VERSION, GgufHeader, KEY_ALIGNMENT, Layout, MAX_ALIGNMENT,
    parse_allocation_bound,
};
pub use metadata::Metadata;
pub use reader::GgufFile;
pub use split::{
    GgufModel, KEY_SPLIT_COUNT, KEY_SPLIT_NO, KEY_SPLIT_TENSORS_COUNT, SplitLimits, plan_split,
    split_path, split_prefix,
};
pub use tensor::{MAX_DIMS, TensorInfo, TensorView};
pub use value::{Array, GgufString, StringArray, Value, ValueType, c_str};
pub use wire::MAX_ARRAY_DEPTH;
pub use writer::{AtomicFile, GgufBuilder, GgufWriter};
