//! Runs llama.cpp's own quantizer (`llama_model_quantize`, linked through the `ggml`
//! feature) with llama-quantize's positional arguments, for side-by-side timing:
//!
//! ```text
//! cargo run --release --features ggml --example llama-quantize -- \
//!     [--allow-requantize] IN OUT TYPE [NTHREADS]
//! ```
//!
//! Prints the wall time in seconds on standard error.

use quantforge::pipeline::plan::Preset;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

fn main() -> ExitCode {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let allow_requantize = if let Some(i) = args.iter().position(|a| a == "--allow-requantize") {
        args.remove(i);
        true
    } else {
        false
    };
    if !(3..=4).contains(&args.len()) {
        eprintln!("usage: llama-quantize [--allow-requantize] IN OUT TYPE [NTHREADS]");
        return ExitCode::from(2);
    }
    let Some(preset) = Preset::parse(&args[2]) else {
        eprintln!("unknown type {}", args[2]);
        return ExitCode::from(2);
    };
    let nthread = match args.get(3).map(|s| s.parse::<i32>()) {
        None => 0,
        Some(Ok(n)) => n,
        Some(Err(e)) => {
            eprintln!("bad thread count {}: {e}", args[3]);
            return ExitCode::from(2);
        }
    };
    let mut q = ggml_ref::llama::Quantize::new(preset.ftype.code());
    q.nthread = nthread;
    q.allow_requantize = allow_requantize;
    q.only_copy = preset.copy;
    let start = Instant::now();
    match ggml_ref::llama::quantize(&PathBuf::from(&args[0]), &PathBuf::from(&args[1]), &q) {
        Ok(_) => {
            eprintln!("llama.cpp: {:.3} s", start.elapsed().as_secs_f64());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{e}");
            ExitCode::from(1)
        }
    }
}
