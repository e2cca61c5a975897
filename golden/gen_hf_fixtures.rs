//! Writes the Hugging Face test folders of `golden/hf_fixtures.rs`:
//! `cargo run --example gen-hf-fixtures -- VOCAB_DIR OUT_DIR`, VOCAB_DIR holding llama.cpp's
//! `ggml-vocab-*.gguf` files; with `--bench LAYERS` instead, one Llama-3.2-shaped folder
//! `OUT_DIR/Llama-Bench-LAYERSL` for benchmarks.

#[path = "hf_fixtures.rs"]
mod hf_fixtures;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() == 5 && args[3] == "--bench" {
        let layers: usize = args[4].parse().expect("LAYERS is a number");
        let dir = std::path::Path::new(&args[2]).join(format!("Llama-Bench-{layers}L"));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        hf_fixtures::llama_bench(args[1].as_ref(), &dir, layers);
        println!("{}", dir.display());
        return;
    }
    if args.len() != 3 {
        eprintln!("usage: gen-hf-fixtures VOCAB_DIR OUT_DIR [--bench LAYERS]");
        std::process::exit(2);
    }
    hf_fixtures::write_all(args[1].as_ref(), args[2].as_ref());
    for (name, _) in hf_fixtures::FIXTURES {
        println!("{name}");
    }
}
