//! quantforge: quantize model weights into ggml's block formats, byte-identical to ggml,
//! and read and write the containers that hold them.
//!
//! This crate is the facade over [`kernels`] (the codecs) and [`formats`] (GGUF and
//! safetensors). The `quantforge` command's interface is the binary's own, not part of
//! this library.

#![warn(missing_docs)]

pub mod convert;
pub mod dequantize;
pub mod diff;
pub mod error;
pub mod hf;
pub mod model;
pub mod pipeline;
pub mod slab;

pub use quantforge_formats as formats;
pub use quantforge_kernels as kernels;
pub use quantforge_kernels::{Codec, GgmlType, Isa, dequantize, quantize};
