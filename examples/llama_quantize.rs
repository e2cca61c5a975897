//! Runs llama.cpp's own quantizer (`llama_model_quantize`, linked through the `ggml`
//! feature) with llama-quantize's positional arguments, for side-by-side timing:
//!
//! ```text
//! cargo run --release --features ggml --example llama-quantize -- \
//!     [--allow-requantize] [--imatrix FILE] IN OUT TYPE [NTHREADS]
//! ```
//!
//! With `--imatrix` the file (GGUF or legacy `.dat`) is read as llama-quantize reads it
//! and handed over with the `quantize.imatrix.*` keys, as llama-quantize does. Prints the
//! wall time in seconds on standard error.

use quantforge::pipeline::imatrix::Imatrix;
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
    let imatrix = match args.iter().position(|a| a == "--imatrix") {
        Some(i) if i + 1 < args.len() => {
            let file = PathBuf::from(args.remove(i + 1));
            args.remove(i);
            Some(file)
        }
        Some(_) => {
            eprintln!("--imatrix needs a file");
            return ExitCode::from(2);
        }
        None => None,
    };
    if !(3..=4).contains(&args.len()) {
        eprintln!(
            "usage: llama-quantize [--allow-requantize] [--imatrix FILE] IN OUT TYPE [NTHREADS]"
        );
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
    if let Some(file) = imatrix {
        let m = match Imatrix::load(&file) {
            Ok(m) => m,
            Err(e) => {
                eprintln!("{}: {e}", file.display());
                return ExitCode::from(2);
            }
        };
        (q.imatrix, q.kv_overrides) = m.llama_inputs(file.as_os_str().as_encoded_bytes());
    }
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
