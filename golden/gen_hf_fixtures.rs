//! Writes the Hugging Face test folders of `golden/hf_fixtures.rs`:
//! `cargo run --example gen-hf-fixtures -- VOCAB_DIR OUT_DIR`, VOCAB_DIR holding llama.cpp's
//! `ggml-vocab-*.gguf` files.

#[path = "hf_fixtures.rs"]
mod hf_fixtures;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() != 3 {
        eprintln!("usage: gen-hf-fixtures VOCAB_DIR OUT_DIR");
        std::process::exit(2);
    }
    hf_fixtures::write_all(args[1].as_ref(), args[2].as_ref());
    for (name, _) in hf_fixtures::FIXTURES {
        println!("{name}");
    }
}
