//! Writes `golden/tiny-llama-f16.gguf`, the small llama-architecture f16 model the README's
//! first command quantizes: `cargo run --example gen-tiny-llama [OUT]`.
//! `tests/tiny_llama_current.rs` fails when the committed file differs from what this
//! writes.
//!
//! With shape options it writes a larger model of the same kind for benchmarks, and with
//! `--imatrix FILE` a GGUF importance matrix for it (pseudo-random sums and counts, as
//! llama-imatrix lays them out):
//!
//! ```text
//! cargo run --release --example gen-tiny-llama -- llama-156m.gguf --layers 8 --embd 1024 \
//!     --ff 2816 --heads 16 --kv-heads 4 --vocab 32000 --imatrix llama-156m.imatrix.gguf
//! ```

#[path = "../src/pipeline/imatrix/files.rs"]
mod imatrix_files;
#[path = "tiny_llama.rs"]
mod tiny_llama;

use std::path::PathBuf;
use std::process::ExitCode;
use tiny_llama::TinyLlama;

const USAGE: &str = "usage: gen-tiny-llama [OUT] [--layers N] [--embd N] [--ff N] [--heads N] \
[--kv-heads N] [--vocab N] [--experts N] [--seed N] [--imatrix FILE]";

/// The model and where its files go, from the command line.
fn parse(args: &[String]) -> Result<(TinyLlama, PathBuf, Option<PathBuf>), String> {
    let mut model = TinyLlama::COMMITTED;
    let mut out = None;
    let mut imatrix = None;
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        if !arg.starts_with("--") {
            if out.replace(PathBuf::from(arg)).is_some() {
                return Err(format!("unexpected argument {arg}"));
            }
            continue;
        }
        let value = it.next().ok_or_else(|| format!("{arg} needs a value"))?;
        if arg == "--imatrix" {
            imatrix = Some(PathBuf::from(value));
            continue;
        }
        let n: u64 = value
            .parse()
            .map_err(|_| format!("{arg}: not a number: {value}"))?;
        let small = || u32::try_from(n).map_err(|_| format!("{arg}: too large: {n}"));
        match arg.as_str() {
            "--layers" => model.n_layer = small()?,
            "--embd" => model.n_embd = n,
            "--ff" => model.n_ff = n,
            "--heads" => model.n_head = small()?,
            "--kv-heads" => model.n_head_kv = small()?,
            "--vocab" => model.n_vocab = n,
            "--experts" => model.n_expert = small()?,
            "--seed" => model.seed = n,
            _ => return Err(format!("unknown option {arg}")),
        }
    }
    if model.n_head == 0
        || model.n_head_kv == 0
        || !model.n_embd.is_multiple_of(u64::from(model.n_head))
    {
        return Err("--embd must be a multiple of --heads, both non-zero".into());
    }
    let out = out.unwrap_or_else(|| {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("golden/tiny-llama-f16.gguf")
    });
    Ok((model, out, imatrix))
}

/// Writes [`TinyLlama::imatrix_entries`] as a GGUF importance matrix.
fn write_imatrix(model: &TinyLlama, path: &std::path::Path) -> Result<(), String> {
    let owned = model.imatrix_entries();
    let entries: Vec<_> = owned
        .iter()
        .map(|(n, s, c)| (n.as_str(), s.as_slice(), c.as_slice()))
        .collect();
    imatrix_files::gguf_builder(&entries, &["gen-tiny-llama"], 100, 512)
        .and_then(|b| b.write(path))
        .map_err(|e| format!("{}: {e}", path.display()))
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (model, out, imatrix) = match parse(&args) {
        Ok(v) => v,
        Err(e) => {
            eprintln!("gen-tiny-llama: {e}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    if let Err(e) = model.write(&out) {
        eprintln!("gen-tiny-llama: {}: {e}", out.display());
        return ExitCode::FAILURE;
    }
    println!("wrote {}", out.display());
    if let Some(path) = imatrix {
        if let Err(e) = write_imatrix(&model, &path) {
            eprintln!("gen-tiny-llama: {e}");
            return ExitCode::FAILURE;
        }
        println!("wrote {}", path.display());
    }
    ExitCode::SUCCESS
}
