//! quantforge-formats: readers and writers for the containers model weights live in.
//!
//! - [`gguf`]: llama.cpp's GGUF (v2, v3), single files and split sets.
//! - [`safetensors`]: Hugging Face's safetensors, single files and sharded model folders.

#![warn(missing_docs)]

pub mod gguf;
pub mod output;
mod pages;
pub mod safetensors;
