//! `quantforge dequantize IN OUT [--type f32|f16|bf16] [--threads N]`: writes every
//! tensor of a GGUF or safetensors model widened to a float type, as GGUF or safetensors
//! by OUT's extension ([`quantforge::dequantize`]).

use super::file_kind;
use super::safetensors::is_safetensors_path;
use anyhow::{Context, Result, bail};
use clap::Args;
use quantforge::dequantize::{FloatType, dequantize_to_gguf, dequantize_to_safetensors};
use std::path::PathBuf;

#[derive(Args, Debug)]
#[command(after_help = "\
IN is a GGUF file (or the first part of a split set, NAME-00001-of-0000N.gguf), a \
.safetensors file, a .safetensors.index.json or a model folder. Every tensor is decoded \
to f32 exactly as ggml's dequantize_row_* does and written as --type; a tensor whose type \
cannot be decoded (integers, q8_1) stops the command before anything is written.

OUT ending in .gguf gets the source's metadata (split.* keys dropped; from safetensors, \
its __metadata__ as `quantforge convert` maps it) with general.file_type set to 0 (f32), \
1 (f16) or 32 (bf16). OUT ending in .safetensors gets the tensors under the same names \
and shapes, with the metadata `quantforge convert` would write. OUT is written to a \
temporary file beside it and renamed into place only when complete.")]
pub struct DequantizeArgs {
    /// Output type: f32, f16 or bf16.
    #[arg(long = "type", value_name = "TYPE", default_value = "f32", value_parser = parse_float_type)]
    ty: FloatType,
    /// Worker threads (default: one per CPU).
    #[arg(long, value_name = "N")]
    threads: Option<usize>,
    /// Input model: GGUF, safetensors file or model folder.
    input: PathBuf,
    /// Output file, OUT.gguf or OUT.safetensors.
    output: PathBuf,
}

fn parse_float_type(name: &str) -> Result<FloatType, String> {
    FloatType::from_name(name).ok_or_else(|| format!("'{name}' is not one of f32, f16, bf16"))
}

pub fn run(args: DequantizeArgs) -> Result<()> {
    let to_safetensors = is_safetensors_path(&args.output);
    if !to_safetensors && args.output.extension().is_none_or(|e| e != "gguf") {
        bail!(
            "{}: the output must end in .gguf or .safetensors",
            args.output.display()
        );
    }
    let model = file_kind::open_model(&args.input)?;
    let threads = args.threads.unwrap_or(0);
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .with_context(|| format!("cannot start {threads} threads"))?;
    let written = pool
        .install(|| {
            if to_safetensors {
                dequantize_to_safetensors(&model, &args.output, args.ty)
            } else {
                dequantize_to_gguf(&model, &args.output, args.ty)
            }
        })
        .with_context(|| format!("dequantizing {}", args.input.display()))?;
    println!(
        "{}: {} tensors as {}, {} bytes",
        args.output.display(),
        written.tensors,
        args.ty.ggml(),
        super::io::file_size(&args.output)?
    );
    Ok(())
}
