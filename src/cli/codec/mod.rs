//! `quantforge codec quantize|dequantize`: one codec over raw little-endian files.

use super::io::{f32_bytes, read_f32_file, write_atomic};
use anyhow::{Context, Result, bail};
use clap::{Args, Subcommand};
use quantforge_kernels::{Codec, GgmlType, Isa};
use std::path::PathBuf;

mod bench;

#[derive(Subcommand, Debug)]
pub enum CodecCommand {
    /// Quantize a raw f32 file (rows of --row elements) into ggml blocks, as
    /// ggml_quantize_chunk does.
    Quantize(QuantizeArgs),
    /// Dequantize a file of ggml blocks into raw f32.
    Dequantize(DequantizeArgs),
    /// Measure codec throughput: every code path this CPU has, beside ggml's reference
    /// when built with `--features ggml`.
    Bench(bench::BenchArgs),
}

#[derive(Args, Debug)]
pub struct QuantizeArgs {
    /// Target type as ggml names it (q4_K, q8_0, iq4_xs, f16, ...), any case.
    #[arg(long = "type", short = 't')]
    ty: String,
    /// Elements per row (default: the whole file is one row).
    #[arg(long)]
    row: Option<usize>,
    /// Importance matrix: a raw f32 file with one weight per column of a row.
    #[arg(long)]
    imatrix: Option<PathBuf>,
    /// Code path: scalar, avx2, avx512 or neon (default: the fastest this CPU has).
    #[arg(long)]
    isa: Option<String>,
    /// Input: raw little-endian f32.
    input: PathBuf,
    /// Output: the blocks, nothing else.
    output: PathBuf,
}

#[derive(Args, Debug)]
pub struct DequantizeArgs {
    /// Source type as ggml names it.
    #[arg(long = "type", short = 't')]
    ty: String,
    /// Code path: scalar, avx2, avx512 or neon (default: the fastest this CPU has).
    #[arg(long)]
    isa: Option<String>,
    /// Input: whole blocks of the type.
    input: PathBuf,
    /// Output: raw little-endian f32.
    output: PathBuf,
}

pub fn run(cmd: CodecCommand) -> Result<()> {
    match cmd {
        CodecCommand::Quantize(a) => quantize(a),
        CodecCommand::Dequantize(a) => dequantize(a),
        CodecCommand::Bench(a) => bench::run(a),
    }
}

fn codec(ty: &str, isa: Option<&str>) -> Result<Codec> {
    let ty = GgmlType::from_name(ty)?;
    match isa {
        None => Ok(Codec::best(ty)),
        Some(name) => {
            let isa = Isa::from_name(name)
                .with_context(|| format!("unknown ISA '{name}' (scalar, avx2, avx512, neon)"))?;
            Codec::new(ty, isa).with_context(|| format!("this CPU cannot run {isa} code"))
        }
    }
}

fn quantize(a: QuantizeArgs) -> Result<()> {
    let codec = codec(&a.ty, a.isa.as_deref())?;
    let ty = codec.ty();
    if !quantforge_kernels::can_quantize(ty) {
        return Err(quantforge_kernels::Error::Unsupported { ty, op: "quantize" }.into());
    }
    let src = read_f32_file(&a.input)?;
    if src.is_empty() {
        bail!("{}: empty input", a.input.display());
    }
    let n_per_row = a.row.unwrap_or(src.len());
    if n_per_row == 0 || src.len() % n_per_row != 0 {
        bail!(
            "{}: {} values is not a whole number of rows of {n_per_row}",
            a.input.display(),
            src.len()
        );
    }
    let row_size = ty
        .row_size(n_per_row)
        .with_context(|| format!("rows of {n_per_row} cannot be quantized to {ty}"))?;
    let imatrix = a.imatrix.as_deref().map(read_f32_file).transpose()?;
    let mut dst = vec![0u8; src.len() / n_per_row * row_size];
    codec
        .quantize(&src, n_per_row, imatrix.as_deref(), &mut dst)
        .with_context(|| format!("{}: cannot quantize to {ty}", a.input.display()))?;
    write_atomic(&a.output, &dst)
}

fn dequantize(a: DequantizeArgs) -> Result<()> {
    let codec = codec(&a.ty, a.isa.as_deref())?;
    let ty = codec.ty();
    let src =
        std::fs::read(&a.input).with_context(|| format!("cannot read {}", a.input.display()))?;
    if src.len() % ty.type_size() != 0 {
        bail!(
            "{}: {} bytes is not a whole number of {ty} blocks ({} bytes each)",
            a.input.display(),
            src.len(),
            ty.type_size()
        );
    }
    let mut dst = vec![0f32; src.len() / ty.type_size() * ty.block_size()];
    codec
        .dequantize(&src, &mut dst)
        .with_context(|| format!("{}: cannot dequantize {ty}", a.input.display()))?;
    write_atomic(&a.output, &f32_bytes(&dst))
}
