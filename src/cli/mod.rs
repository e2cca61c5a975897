//! Command-line interface: one module per subcommand, parsed with clap.
//!
//! Exit codes: 0 on success, 2 for bad input or usage (with a one-line reason on
//! stderr), 1 for internal errors.

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use std::process::ExitCode;

mod codec;
mod convert;
mod dequantize;
mod describe;
mod diff;
mod file_kind;
mod inspect;
mod io;
mod quantize;
mod safetensors;
mod set_meta;
mod types;
mod verify;

/// quantforge: ggml block-format quantization, byte-identical to ggml.
#[derive(Parser, Debug)]
#[command(name = "quantforge", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Quantize or dequantize raw little-endian files with one codec.
    #[command(subcommand)]
    Codec(codec::CodecCommand),
    /// List every ggml type: code, name, block size, bytes, bits per weight, support.
    Types,
    /// Show a GGUF or safetensors file (or model folder): header, metadata, tensor table.
    Inspect(inspect::InspectArgs),
    /// Re-emit a GGUF byte-identically, merge or split a set, or convert GGUF <-> safetensors.
    Convert(convert::ConvertArgs),
    /// Write a copy of a GGUF with metadata values set or deleted.
    SetMeta(set_meta::SetMetaArgs),
    /// Quantize a GGUF model to a llama.cpp file type (Q4_K_M, Q8_0, ...) as llama-quantize does,
    /// or to several in one pass.
    Quantize(Box<quantize::QuantizeArgs>),
    /// Write every tensor of a GGUF or safetensors model widened to f32, f16 or bf16.
    Dequantize(dequantize::DequantizeArgs),
    /// Compare two models tensor by tensor: types, bytes, max abs error, RMSE.
    Diff(diff::DiffArgs),
    /// Check a quantized file, or every part of its split set, against the manifests
    /// `quantize` wrote beside them.
    Verify(verify::VerifyArgs),
}

/// Runs the command line of this process and returns its exit code.
pub fn main() -> ExitCode {
    let matches = Cli::command().get_matches();
    let mut cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    // The order of some repeatable options across each other matters.
    if let (Command::Quantize(args), Some(("quantize", m))) =
        (&mut cli.command, matches.subcommand())
    {
        args.order_rules(m);
    }
    // A panic is a bug, not bad input: its outputs are removed as the stack unwinds
    // (their temporary files drop), and the exit code says which it was.
    let result = std::panic::catch_unwind(move || run(cli.command));
    match result {
        Ok(Ok(())) => ExitCode::SUCCESS,
        Ok(Err(err)) => {
            eprintln!("quantforge: error: {err:#}");
            ExitCode::from(2)
        }
        Err(_) => {
            eprintln!(
                "quantforge: internal error (a bug in quantforge; the message above says where)"
            );
            ExitCode::from(1)
        }
    }
}

fn run(command: Command) -> anyhow::Result<()> {
    match command {
        Command::Codec(cmd) => codec::run(cmd),
        Command::Types => types::run(),
        Command::Inspect(args) => inspect::run(args),
        Command::Convert(args) => convert::run(args),
        Command::SetMeta(args) => set_meta::run(args),
        Command::Quantize(args) => quantize::run(*args),
        Command::Dequantize(args) => dequantize::run(args),
        Command::Diff(args) => diff::run(args),
        Command::Verify(args) => verify::run(args),
    }
}
