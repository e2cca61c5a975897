//! Hand-built files of both formats with values worked out from llama-quantize's rules;
//! the comparison of whole quantizations with llama.cpp is in
//! `ggml-ref/tests/llama_quantize_imatrix.rs`.

use super::files::{gguf_builder, legacy_bytes};
use super::*;

mod gguf;
mod legacy;
mod use_in_plan;

use crate::pipeline::plan::Reason;
use quantforge_formats::gguf::{Array, GgufBuilder};

fn legacy(bytes: Vec<u8>) -> Imatrix {
    Imatrix::from_bytes(bytes).expect("a valid legacy imatrix")
}

fn gguf(b: GgufBuilder<'_>) -> Result<Imatrix, ImatrixError> {
    Imatrix::from_bytes(b.to_bytes().expect("encode"))
}

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}
