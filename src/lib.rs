//! quantforge: quantize model weights into ggml's block formats, byte-identical to ggml,
//! and read and write the containers that hold them.
//!
//! This crate is the facade over [`kernels`] (the codecs) and [`formats`] (GGUF and
//! safetensors), plus the command-line interface in [`cli`].

#![warn(missing_docs)]

pub mod cli;
pub mod convert;
pub mod dequantize;
pub mod describe;
pub mod diff;
pub mod io;
pub mod model;
pub mod pipeline;

pub use quantforge_formats as formats;
pub use quantforge_kernels as kernels;
pub use quantforge_kernels::{Codec, GgmlType, Isa, dequantize, quantize};
