//! Writes `golden/tiny-llama-f16.gguf`, the small llama-architecture f16 model the README's
//! first command quantizes: `cargo run --example gen-tiny-llama [OUT]`.
//! `tests/tiny_llama_current.rs` fails when the committed file differs from what this
//! writes.

#[path = "tiny_llama.rs"]
mod tiny_llama;

use std::path::PathBuf;
use std::process::ExitCode;

fn main() -> ExitCode {
    let out = std::env::args_os().nth(1).map_or_else(
        || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("golden/tiny-llama-f16.gguf"),
        PathBuf::from,
    );
    match tiny_llama::TinyLlama::COMMITTED.write(&out) {
        Ok(()) => {
            println!("wrote {}", out.display());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("gen-tiny-llama: {e}");
            ExitCode::FAILURE
        }
    }
}
