//! Hugging Face's safetensors: a validating reader (bytes, file, mmap, stream frames),
//! tensor views with row and sub-block slicing and f32 decoding, a writer byte-identical
//! to the `safetensors` crate (in memory, or streamed with positional writes), sharded
//! output with an index, and model folders (single files, sharded sets, diffusers names).
//!
//! The rules are upstream's (`safetensors/src/tensor.rs`, main branch, 0.8): see
//! [`header`] for the validation and [`writer`] for the exact bytes written.
//!
//! ```
//! use quantforge_formats::safetensors::{Dtype, Order, SafeTensors, TensorView, serialize};
//!
//! let data: Vec<u8> = [1.0f32, 2.0].iter().flat_map(|v| v.to_le_bytes()).collect();
//! let w = TensorView::new("w", Dtype::F32, vec![2], &data)?;
//! let bytes = serialize([w], None, Order::Canonical)?;
//! let file = SafeTensors::from_bytes(&bytes)?;
//! assert_eq!(file.tensor("w")?.to_f32()?, [1.0, 2.0]);
//! # Ok::<(), quantforge_formats::safetensors::Error>(())
//! ```

mod decode;
mod dtype;
mod error;
pub mod f8;
mod folder;
pub mod header;
mod reader;
mod shards;
mod view;
pub mod writer;

pub use decode::{can_decode_f32, decode_f32_into};
pub use dtype::Dtype;
pub use error::{Error, Result};
pub use folder::ModelFolder;
pub use header::{Header, TensorInfo};
pub use reader::SafeTensors;
pub use shards::{ShardIndex, write_sharded};
pub use view::{Chunks, Slice, TensorView};
pub use writer::{FileWriter, Layout, Order, TensorSpec, TensorWriter, serialize, write_file};

/// The largest header upstream accepts: 100,000,000 bytes.
pub const MAX_HEADER_LEN: u64 = 100_000_000;
