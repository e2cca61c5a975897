//! `quantforge convert IN OUT [--split-max-size SIZE] [--split-max-tensors N]`: re-emits a
//! GGUF file byte-identically, merges a split set (IN is its first part), or splits a
//! model into `OUT-00001-of-0000N.gguf` parts as llama.cpp's gguf-split does. With
//! safetensors on either side, see [`super::safetensors::convert`]. With a Hugging Face
//! model folder as IN, the GGUF llama.cpp's `convert_hf_to_gguf.py` writes (see
//! [`quantforge::hf`]).

use super::file_kind::{self, FileKind};
use anyhow::{Context, Result, bail};
use clap::Args;
use quantforge_formats::gguf::{GgufModel, SplitLimits};
use std::path::{Path, PathBuf};

#[derive(Args, Debug)]
#[command(after_help = "\
Without split options the output is one file: an exact re-emit of a single GGUF (same \
bytes, same sha256), or the merge of a split set when IN is its first part \
(NAME-00001-of-0000N.gguf; the split.* keys are dropped, so split-then-merge gives back \
the original bytes).

With --split-max-size and/or --split-max-tensors the output is a split set named \
OUT-00001-of-0000N.gguf, ... (a trailing .gguf on OUT is dropped first), loadable by \
llama.cpp: the first part holds all metadata, every part has split.no, split.count and \
split.tensors.count. Every output file is written to a temporary file and renamed into \
place only when complete.

Between containers (tensor bytes unchanged): a safetensors file or model folder to a GGUF \
OUT, a GGUF to OUT.safetensors, and back again to the same bytes; a safetensors input to \
OUT.safetensors gives one canonical file (shards merged).

A Hugging Face model folder (a directory with config.json, tokenizer files and \
*.safetensors) as IN is converted as llama.cpp's convert_hf_to_gguf.py converts it, to \
the same bytes: --outtype sets the type of the tensors it does not keep in f32. OUT may \
be left out (the file goes into the folder under the converter's default name), be a \
directory (the default name inside it) or hold {ftype} / {FTYPE} / {outtype} / \
{OUTTYPE} for the output type's name.")]
pub struct ConvertArgs {
    /// Most bytes of tensor data per part: a number with an optional unit K, M, G, T
    /// (powers of 1000, as gguf-split) or KiB, MiB, GiB, TiB (powers of 1024), e.g. 2G.
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    split_max_size: Option<u64>,
    /// Most tensors per part.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    split_max_tensors: Option<u64>,
    /// Hugging Face folders: type of the tensors not kept in f32 (f32, f16, bf16, q8_0,
    /// tq1_0, tq2_0, or auto: bf16 or f16 as the source is).
    #[arg(long, value_name = "TYPE", default_value = "f16")]
    outtype: String,
    /// Hugging Face folders: write the vocabulary and keys only, no tensors.
    #[arg(long)]
    vocab_only: bool,
    /// Hugging Face folders: general.name.
    #[arg(long, value_name = "NAME")]
    model_name: Option<String>,
    /// Hugging Face folders: a JSON file of general.* keys overriding what the folder says.
    #[arg(long, value_name = "FILE")]
    metadata: Option<PathBuf>,
    /// Hugging Face folders: the BPE pre-tokenizer name (tokenizer.ggml.pre), whatever
    /// its check-text hash says.
    #[arg(long, value_name = "NAME")]
    vocab_pre: Option<String>,
    /// Hugging Face folders: EmbeddingGemma's sentence-transformers Dense modules
    /// (2_Dense/, 3_Dense/) as tensors dense_2.weight and dense_3.weight.
    #[arg(long)]
    sentence_transformers_dense_modules: bool,
    /// Hugging Face folders: print the tensors and types that would be written, write
    /// nothing.
    #[arg(long)]
    dry_run: bool,
    /// Hugging Face folders: a first part with the keys and no tensor, the tensors in
    /// the parts after it (as the converter's option of that name).
    #[arg(long)]
    no_tensor_first_split: bool,
    /// Input GGUF file, the first part of a split set, a safetensors file or folder, or a
    /// Hugging Face model folder.
    input: PathBuf,
    /// Output file (or, when splitting, the prefix of the parts); for a Hugging Face
    /// folder it may be left out.
    output: Option<PathBuf>,
}

pub fn run(args: ConvertArgs) -> Result<()> {
    if quantforge::hf::is_hf_folder(&args.input) {
        return convert_hf(&args);
    }
    let Some(output) = args.output.clone() else {
        bail!("OUT is required unless IN is a Hugging Face model folder");
    };
    if args.no_tensor_first_split {
        bail!("--no-tensor-first-split applies to Hugging Face folders");
    }
    let kind = file_kind::detect(&args.input)?;
    let to_safetensors = super::safetensors::is_safetensors_path(&output);
    if kind == FileKind::Gguf && !to_safetensors {
        return convert_gguf(&args, &output);
    }
    if args.split_max_size.is_some() || args.split_max_tensors.is_some() {
        bail!("--split-max-size and --split-max-tensors apply to GGUF-to-GGUF conversion");
    }
    super::safetensors::convert(&args.input, &output, kind)
}

fn convert_gguf(args: &ConvertArgs, output: &Path) -> Result<()> {
    let model = GgufModel::open(&args.input)?;
    if args.split_max_size.is_none() && args.split_max_tensors.is_none() {
        model.write_merged(output)?;
        let size = std::fs::metadata(output)
            .with_context(|| format!("cannot stat {}", output.display()))?
            .len();
        println!(
            "{}: {} tensors, {size} bytes",
            output.display(),
            model.n_tensors()
        );
        return Ok(());
    }
    let limits = SplitLimits {
        max_tensors: args
            .split_max_tensors
            .map(|n| usize::try_from(n).unwrap_or(usize::MAX)),
        max_bytes: args.split_max_size,
    };
    let prefix = split_prefix(output);
    for path in model.write_split(&prefix, limits)? {
        let size = std::fs::metadata(&path)
            .with_context(|| format!("cannot stat {}", path.display()))?
            .len();
        println!("{}: {size} bytes", path.display());
    }
    Ok(())
}

/// A Hugging Face folder converted as llama.cpp's converter converts it.
fn convert_hf(args: &ConvertArgs) -> Result<()> {
    use quantforge::hf::{ConvertOptions, HfFolder, OutType};
    let folder = HfFolder::open(&args.input)?;
    let opts = ConvertOptions {
        outtype: OutType::parse(&args.outtype)?,
        model_name: args.model_name.clone(),
        metadata: args.metadata.clone(),
        vocab_only: args.vocab_only,
        vocab_pre: args.vocab_pre.clone(),
        dense_modules: args.sentence_transformers_dense_modules,
    };
    let conv = folder.conversion(&opts)?;
    for w in &conv.warnings {
        eprintln!("quantforge: warning: {w}");
    }
    let ftype = conv.outtype.name();
    let path = match &args.output {
        None => args.input.join(format!("{}.gguf", conv.default_stem)),
        Some(p) if p.is_dir() => p.join(format!("{}.gguf", conv.default_stem)),
        Some(p) => fill_template(p, ftype),
    };
    if args.dry_run {
        for t in &conv.tensors {
            println!("{:<40} {:<6} {:?}", t.name, t.ty.name(), t.ne);
        }
        println!(
            "{}: {} keys, {} tensors (dry run, nothing written)",
            path.display(),
            conv.metadata.len(),
            conv.tensors.len()
        );
        return Ok(());
    }
    if args.no_tensor_first_split && args.vocab_only {
        bail!("--no-tensor-first-split with --vocab-only is not supported");
    }
    for w in quantforge::hf::write_split(
        &conv,
        &path,
        args.split_max_tensors,
        args.split_max_size,
        args.no_tensor_first_split,
    )? {
        println!(
            "{}: {} tensors, {} bytes",
            w.path.display(),
            w.tensors,
            w.bytes
        );
    }
    Ok(())
}

/// The converter's `fill_templated_filename`: `{ftype}`/`{outtype}` lowercase,
/// `{FTYPE}`/`{OUTTYPE}` uppercase, in the file name only.
fn fill_template(path: &Path, ftype: &str) -> PathBuf {
    let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
        return path.to_path_buf();
    };
    let lower = ftype.to_lowercase();
    let upper = ftype.to_uppercase();
    let name = name
        .replace("{ftype}", &lower)
        .replace("{outtype}", &lower)
        .replace("{FTYPE}", &upper)
        .replace("{OUTTYPE}", &upper)
        .replace("{}", &lower);
    path.with_file_name(name)
}

/// OUT without a trailing `.gguf`: `out/model.gguf` -> `out/model`.
pub(super) fn split_prefix(output: &Path) -> PathBuf {
    match output.to_str().and_then(|s| s.strip_suffix(".gguf")) {
        Some(stem) if !stem.is_empty() && !stem.ends_with('/') => PathBuf::from(stem),
        _ => output.to_path_buf(),
    }
}

/// `2G` -> 2_000_000_000, `512MiB` -> 536_870_912, `1000` -> 1000.
pub(super) fn parse_size(text: &str) -> Result<u64> {
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (digits, unit) = text.split_at(split);
    let number: u64 = digits
        .parse()
        .with_context(|| format!("'{text}' is not a size like 2G, 500M or 1000000"))?;
    let scale: u64 = match unit {
        "" | "B" => 1,
        "K" | "KB" => 1_000,
        "M" | "MB" => 1_000_000,
        "G" | "GB" => 1_000_000_000,
        "T" | "TB" => 1_000_000_000_000,
        "KiB" => 1 << 10,
        "MiB" => 1 << 20,
        "GiB" => 1 << 30,
        "TiB" => 1 << 40,
        _ => bail!("unknown size unit '{unit}' in '{text}' (K, M, G, T, KiB, MiB, GiB, TiB)"),
    };
    let bytes = number
        .checked_mul(scale)
        .with_context(|| format!("size '{text}' overflows 64 bits"))?;
    if bytes == 0 {
        bail!("size must be positive");
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_like_gguf_split_plus_binary_units() {
        assert_eq!(parse_size("2G").unwrap(), 2_000_000_000);
        assert_eq!(parse_size("500M").unwrap(), 500_000_000);
        assert_eq!(parse_size("1000").unwrap(), 1000);
        assert_eq!(parse_size("3MiB").unwrap(), 3 << 20);
        for bad in ["", "G", "0", "1.5G", "2X", "-1M", "99999999999T"] {
            assert!(parse_size(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn split_prefix_drops_the_extension() {
        assert_eq!(split_prefix(Path::new("a/m.gguf")), Path::new("a/m"));
        assert_eq!(split_prefix(Path::new("m")), Path::new("m"));
        assert_eq!(split_prefix(Path::new(".gguf")), Path::new(".gguf"));
    }
}
