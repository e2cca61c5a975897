//! `quantforge quantize IN OUT --type T [--threads N]`, or llama-quantize's positional form
//! `quantforge quantize [options] IN [OUT] TYPE [NTHREADS]`: requantizes a GGUF model with
//! the per-tensor decisions of llama.cpp's quantizer ([`quantforge::pipeline::plan`]) and
//! writes the result through [`quantforge::pipeline::run`]. What it prints while and after it
//! runs (progress bar or lines, summary table) is in `report`.

mod llama_log;
pub(super) mod manifest;
mod report;

use super::file_kind::{self, FileKind};
use anyhow::{Context, Result, bail};
use clap::Args;
use quantforge::hf::HfModel;
use quantforge::model::{Model, ModelSource};
use quantforge::pipeline::imatrix::{Imatrix, ImatrixFormat, WeightFilter};
use quantforge::pipeline::plan::{Options, Preset, TensorTypeRule, parse_leading_int, plan};
use quantforge::pipeline::run::{self, Durability, OutputLayout, RunOptions};
use quantforge_formats::gguf::{Metadata, SplitLimits, Value};
use quantforge_formats::safetensors::ModelFolder;
use quantforge_kernels::GgmlType;
use report::{ProgressMode, Reporter, print_outputs, print_plan};
use std::path::{Path, PathBuf};

#[derive(Args, Debug)]
#[command(after_help = "\
TYPE is a llama.cpp file type preset, in any case: Q4_K_M, Q4_K_S, Q5_K_M, Q5_K_S, Q6_K, \
Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K_S, Q3_K_M, Q3_K_L, TQ1_0, TQ2_0, F16, BF16, F32, \
COPY (and the other names llama-quantize lists, its aliases Q3_K, Q4_K, Q5_K, or its \
numbers). Each tensor gets the type llama.cpp's quantizer would give it; --dry-run prints \
that plan without writing anything.

The output is written to a temporary file next to OUT and renamed to OUT only when \
complete; unless --no-sync, its bytes are on disk before the rename (written back as the \
run goes, fsynced at the end) and the rename is on disk after it.")]
pub struct QuantizeArgs {
    /// Target type (or give it as the third positional argument).
    #[arg(long = "type", value_name = "TYPE")]
    ty: Option<String>,
    /// Worker threads (default: one per CPU).
    #[arg(long, value_name = "N")]
    threads: Option<usize>,
    /// Allow requantizing tensors that are already quantized.
    #[arg(long)]
    allow_requantize: bool,
    /// Leave output.weight un(re)quantized.
    #[arg(long)]
    leave_output_tensor: bool,
    /// Quantize every tensor to the preset's default type, without its mix.
    #[arg(long)]
    pure: bool,
    /// ggml type of output.weight.
    #[arg(long, value_name = "GGML_TYPE", value_parser = parse_ggml_type)]
    output_tensor_type: Option<GgmlType>,
    /// ggml type of the token embeddings.
    #[arg(long, value_name = "GGML_TYPE", value_parser = parse_ggml_type)]
    token_embedding_type: Option<GgmlType>,
    /// PATTERN=GGML_TYPE: tensors whose name matches the regular expression get that type
    /// (repeatable; the first match wins).
    #[arg(long, value_name = "PATTERN=TYPE")]
    tensor_type: Vec<String>,
    /// A file of --tensor-type rules, PATTERN=TYPE separated by spaces or newlines, as
    /// llama-quantize reads it (repeatable; rules keep their order among --tensor-type).
    #[arg(long, value_name = "FILE")]
    tensor_type_file: Vec<PathBuf>,
    /// --tensor-type and --tensor-type-file in command-line order (set from the parsed
    /// matches; when empty, the rules come first and the files after them).
    #[arg(skip)]
    rule_order: Vec<RuleArg>,
    /// Refuse, listing the tensors, when a tensor's type does not fit its rows and
    /// llama.cpp's quantizer would take a fallback type instead.
    #[arg(long)]
    no_fallback: bool,
    /// Leave out the layers in LIST (comma-separated numbers), renumbering those after them
    /// and setting the new block count, as llama-quantize --prune-layers does.
    #[arg(long, value_name = "LIST", value_parser = parse_prune_layers, allow_hyphen_values = true)]
    prune_layers: Option<PruneLayers>,
    /// KEY=TYPE:VALUE metadata to set in the output, TYPE one of int, float, bool, str
    /// (repeatable; as llama-quantize, int is written as u32 of its absolute value).
    #[arg(long, value_name = "KEY=TYPE:VALUE")]
    override_kv: Vec<String>,
    /// Importance matrix from llama-imatrix (GGUF or the legacy .dat format) to weight the
    /// quantizers; some types (IQ2_*, IQ1_*, Q2_K_S) require one.
    #[arg(long, value_name = "FILE")]
    imatrix: Option<PathBuf>,
    /// Use the imatrix only for tensors whose name contains NAME (repeatable).
    #[arg(long, value_name = "NAME")]
    include_weights: Vec<String>,
    /// Use the imatrix for every tensor except those whose name contains NAME
    /// (repeatable; not together with --include-weights).
    #[arg(long, value_name = "NAME")]
    exclude_weights: Vec<String>,
    /// One output file per input file (IN a split set): OUT-00001-of-0000N.gguf, ... (a
    /// trailing .gguf on OUT is dropped), laid out as llama-quantize --keep-split does.
    #[arg(long, conflicts_with_all = ["split_max_size", "split_max_tensors"])]
    keep_split: bool,
    /// Cut the output into a split set of at most SIZE bytes of tensor data per part, as
    /// gguf-split does: a number with an optional unit K, M, G, T (powers of 1000) or
    /// KiB, MiB, GiB, TiB, e.g. 2G. Parts are named as with --keep-split.
    #[arg(long, value_name = "SIZE", value_parser = super::convert::parse_size)]
    split_max_size: Option<u64>,
    /// Cut the output into a split set of at most N tensors per part.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    split_max_tensors: Option<u64>,
    /// Of a split set (--keep-split, --split-max-size, --split-max-tensors), write only
    /// part K (from 1): the same file as part K of the whole run, reading and converting
    /// only its tensors. N runs with K = 1..N (a job array, one machine each) make the set.
    #[arg(long, value_name = "K", value_parser = clap::value_parser!(u64).range(1..))]
    only_part: Option<u64>,
    /// Make a split set part by part, each part committed with its manifest as soon as it
    /// is done, keeping the parts an earlier run finished: those whose files verify
    /// against their manifests and whose headers, preset and input are this run's. Rerun
    /// after an interruption to make only what is missing.
    #[arg(long, conflicts_with_all = ["only_part", "report"])]
    resume: bool,
    /// An earlier output of this model (a file, or any part of a split set, with its
    /// manifests): every converted tensor it holds made from the same source data into the
    /// same type with the same importance values is copied instead of quantized again.
    /// The result is the file a fresh run writes.
    #[arg(long, value_name = "OLD")]
    reuse: Option<PathBuf>,
    /// Print the per-tensor plan and sizes; write nothing.
    #[arg(long)]
    dry_run: bool,
    /// PRESET=FILE: also write the model quantized with PRESET to FILE (repeatable). All
    /// outputs are made in one pass over the source: each tensor is read and widened
    /// once and quantized for every output; each file is the one a run of its own writes.
    #[arg(long = "out", value_name = "PRESET=FILE", conflicts_with = "types")]
    outs: Vec<String>,
    /// PRESET,PRESET,...: write one output per preset into --out-dir, named
    /// `<stem>-<PRESET>.gguf` after the input's file or folder name, in one pass.
    #[arg(long, value_name = "LIST", value_delimiter = ',', requires = "out_dir")]
    types: Vec<String>,
    /// The folder --types writes to.
    #[arg(long, value_name = "DIR", requires = "types")]
    out_dir: Option<PathBuf>,
    /// Measure every converted tensor against the values it was quantized from while it
    /// is quantized (RMSE, largest absolute error, cosine similarity: what `quantforge
    /// diff` reports for the source and the output) and write them to FILE as JSON; the
    /// summary lists the worst tensors.
    #[arg(long, value_name = "FILE")]
    report: Option<PathBuf>,
    /// Rename the finished output into place without waiting for the disk (no fsync).
    /// A crash of quantforge still never leaves a partial file under OUT, but after a power
    /// cut or a crash of the system OUT may hold data that never reached the disk: for
    /// outputs that are regenerated anyway (caches, benchmarks).
    #[arg(long)]
    no_sync: bool,
    /// No progress (neither the bar shown on a terminal nor the per-tensor lines written
    /// otherwise), only warnings, errors and the summary.
    #[arg(long, short)]
    quiet: bool,
    /// What the run prints: quantforge's progress and summary, or `llama`: the text
    /// llama-quantize prints for the same run (the loader's metadata dump, a line per
    /// tensor, the sizes), for scripts that parse it. Only its version and timing lines
    /// differ. One output at a time.
    #[arg(long, value_enum, default_value_t = LogFormat::Quantforge, value_name = "FORMAT")]
    log_format: LogFormat,
    /// Input model: a GGUF file (or the first part of a split set), or a safetensors file
    /// or model folder that holds a GGUF model's tensors and metadata (as `quantforge
    /// convert` writes it).
    input: PathBuf,
    /// Output GGUF file. Left out (llama-quantize's `IN TYPE [NTHREADS]`, or `IN --type
    /// T`), it is `ggml-model-TYPE.gguf` in IN's folder, as llama-quantize names it.
    #[arg(value_name = "OUT")]
    output: Option<PathBuf>,
    /// Target type, llama-quantize's positional form.
    #[arg(value_name = "TYPE")]
    positional_type: Option<String>,
    /// Threads, llama-quantize's positional form.
    #[arg(value_name = "NTHREADS")]
    positional_threads: Option<usize>,
}

/// One `--tensor-type` rule or `--tensor-type-file` file.
#[derive(Clone, Debug)]
enum RuleArg {
    /// `--tensor-type PATTERN=TYPE`.
    Inline(String),
    /// `--tensor-type-file FILE`.
    File(PathBuf),
}

impl QuantizeArgs {
    /// Puts the `--tensor-type` and `--tensor-type-file` arguments in the order they were
    /// given (llama-quantize adds both to one list as it reads its arguments).
    pub(super) fn order_rules(&mut self, m: &clap::ArgMatches) {
        let indices =
            |id: &str| -> Vec<usize> { m.indices_of(id).map(|i| i.collect()).unwrap_or_default() };
        let mut order: Vec<(usize, RuleArg)> = indices("tensor_type")
            .into_iter()
            .zip(&self.tensor_type)
            .map(|(i, a)| (i, RuleArg::Inline(a.clone())))
            .chain(
                indices("tensor_type_file")
                    .into_iter()
                    .zip(&self.tensor_type_file)
                    .map(|(i, f)| (i, RuleArg::File(f.clone()))),
            )
            .collect();
        order.sort_by_key(|(i, _)| *i);
        self.rule_order = order.into_iter().map(|(_, a)| a).collect();
    }

    /// The `--tensor-type` rules, those of the files included, in order.
    fn tensor_type_rules(&self) -> Result<Vec<TensorTypeRule>> {
        let order = if self.rule_order.is_empty() {
            self.tensor_type
                .iter()
                .map(|a| RuleArg::Inline(a.clone()))
                .chain(
                    self.tensor_type_file
                        .iter()
                        .map(|f| RuleArg::File(f.clone())),
                )
                .collect()
        } else {
            self.rule_order.clone()
        };
        let mut rules = Vec::new();
        for arg in order {
            match arg {
                RuleArg::Inline(a) => rules.push(TensorTypeRule::parse(&a)?),
                RuleArg::File(path) => {
                    let text = std::fs::read_to_string(&path).with_context(|| {
                        format!("--tensor-type-file {}: cannot read", path.display())
                    })?;
                    for word in text.split_whitespace() {
                        rules.push(
                            TensorTypeRule::parse(word)
                                .with_context(|| format!("{}", path.display()))?,
                        );
                    }
                }
            }
        }
        Ok(rules)
    }

    /// Reads llama-quantize's `IN TYPE [NTHREADS]` (no OUT) the way it does: without
    /// `--type`, a second argument that names a type is the type (and a third is the thread
    /// count); the output then takes llama-quantize's default name. Afterwards `output`
    /// is set.
    fn resolve_positionals(&mut self) -> Result<()> {
        if self.many() {
            if self.output.is_some() || self.positional_type.is_some() || self.ty.is_some() {
                bail!(
                    "give the outputs either as --out PRESET=FILE / --types with --out-dir, \
                     or as OUT and TYPE, not both"
                );
            }
            if let Some(n) = self.positional_threads {
                bail!("unexpected argument {n}");
            }
            return Ok(());
        }
        let second_is_type = self.ty.is_none()
            && self
                .output
                .as_ref()
                .and_then(|o| o.to_str())
                .is_some_and(|o| Preset::parse(o).is_some());
        if second_is_type {
            if let Some(extra) = self.positional_threads {
                bail!("unexpected argument {extra} after IN TYPE NTHREADS");
            }
            let ty = self.output.take().map(|o| o.to_string_lossy().into_owned());
            if let Some(n) = self.positional_type.take() {
                let n = n
                    .parse()
                    .map_err(|_| anyhow::anyhow!("NTHREADS must be a number, not {n:?}"))?;
                self.positional_threads = Some(n);
            }
            self.positional_type = ty;
        }
        if self.output.is_none() {
            let preset = target_preset(self)?;
            // llama-quantize: the input's folder (as written, up to its last separator),
            // then ggml-model-NAME.gguf with the type's name from its table.
            let folder = match self.input.parent() {
                Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
                _ => PathBuf::new(),
            };
            self.output = Some(folder.join(format!("ggml-model-{}.gguf", preset.name)));
        }
        Ok(())
    }

    /// Whether the outputs are given by `--out` or `--types`.
    fn many(&self) -> bool {
        !self.outs.is_empty() || !self.types.is_empty()
    }

    /// Every output: its preset and file (before a split layout makes it a prefix), in the
    /// order given. Once [`QuantizeArgs::resolve_positionals`] has run.
    fn targets(&self) -> Result<Vec<(Preset, PathBuf)>> {
        let mut targets = Vec::new();
        for out in &self.outs {
            let (name, file) = out
                .split_once('=')
                .filter(|(n, f)| !n.is_empty() && !f.is_empty())
                .with_context(|| format!("--out {out:?}: expected PRESET=FILE"))?;
            targets.push((parse_preset(name)?, PathBuf::from(file)))
        }
        if let Some(dir) = &self.out_dir {
            let stem = output_stem(&self.input);
            for name in &self.types {
                let preset = parse_preset(name)?;
                targets.push((preset, dir.join(format!("{stem}-{}.gguf", preset.name))));
            }
        }
        if targets.is_empty() {
            let preset = target_preset(self)?;
            let output = self.output.clone().expect("resolved");
            targets.push((preset, output));
        }
        for (i, (_, a)) in targets.iter().enumerate() {
            if targets[..i].iter().any(|(_, b)| b == a) {
                bail!("two outputs go to {}", a.display());
            }
            if same_file(&self.input, a) {
                bail!("input and output are the same file: {}", a.display());
            }
        }
        Ok(targets)
    }
}

/// The stem `--types` names outputs after: the input's file name without `.gguf` or
/// `.safetensors` and without a split suffix (`-00001-of-00003`), or a folder's name.
fn output_stem(input: &Path) -> String {
    let named = |p: &Path| p.file_name().map(|n| n.to_string_lossy().into_owned());
    let name = named(input)
        .or_else(|| input.canonicalize().ok().and_then(|p| named(&p)))
        .unwrap_or_else(|| "model".to_string());
    let name = if input.is_dir() {
        name.as_str()
    } else {
        name.strip_suffix(".gguf")
            .or_else(|| name.strip_suffix(".safetensors"))
            .unwrap_or(&name)
    };
    // A split set's part number: -NNNNN-of-NNNNN.
    let b = name.as_bytes();
    let split = b.len() >= 15
        && b[b.len() - 15] == b'-'
        && b[b.len() - 14..b.len() - 9].iter().all(u8::is_ascii_digit)
        && &b[b.len() - 9..b.len() - 5] == b"-of-"
        && b[b.len() - 5..].iter().all(u8::is_ascii_digit);
    let name = if split {
        &name[..name.len() - 15]
    } else {
        name
    };
    name.to_string()
}

/// The layers of `--prune-layers`, sorted and without duplicates.
#[derive(Clone, Debug)]
struct PruneLayers(Vec<u32>);

/// llama-quantize's `parse_layer_prune`: the list split at every comma, each part read as
/// `std::stoi` reads it (leading white space, a sign, digits, anything after them
/// ignored); a part that is no number, is negative or beyond a C `int` is refused.
fn parse_prune_layers(s: &str) -> std::result::Result<PruneLayers, String> {
    let mut layers = s
        .split(',')
        .map(|part| match parse_leading_int(part) {
            Some(v) if v >= 0 => Ok(v as u32),
            _ => Err(format!("invalid layer id '{part}'")),
        })
        .collect::<std::result::Result<Vec<u32>, String>>()?;
    layers.sort_unstable();
    layers.dedup();
    Ok(PruneLayers(layers))
}

fn parse_ggml_type(s: &str) -> std::result::Result<GgmlType, String> {
    GgmlType::from_name(s).map_err(|e| e.to_string())
}

/// `--log-format`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum LogFormat {
    /// quantforge's progress and summary.
    Quantforge,
    /// What llama-quantize prints.
    Llama,
}

/// What a quantization reads: a GGUF or safetensors model, or a Hugging Face folder.
enum Source {
    /// A GGUF (or split set), or a safetensors file or folder holding a GGUF model.
    Model(Model),
    /// A Hugging Face folder, read as the converter's GGUF of it.
    Hf(Box<HfModel>),
}

impl Source {
    /// The first file's GGUF version and the number of files, as llama.cpp's loader
    /// reports them (a safetensors or Hugging Face source is one GGUF v3 to it).
    fn gguf_files(&self) -> (u32, usize) {
        match self {
            Source::Model(Model::Gguf(g)) => (
                g.parts().first().map_or(3, |p| p.header().version()),
                g.parts().len(),
            ),
            _ => (3, 1),
        }
    }
}

impl ModelSource for Source {
    fn gguf_metadata(&self) -> quantforge::error::Result<std::borrow::Cow<'_, Metadata>> {
        match self {
            Source::Model(m) => m.gguf_metadata(),
            Source::Hf(m) => m.gguf_metadata(),
        }
    }

    fn tensors(&self) -> quantforge::error::Result<Vec<quantforge::model::Tensor<'_>>> {
        match self {
            Source::Model(m) => ModelSource::tensors(m),
            Source::Hf(m) => m.tensors(),
        }
    }
}

pub fn run(mut args: QuantizeArgs) -> Result<()> {
    let started = std::time::Instant::now();
    args.resolve_positionals()?;
    let targets = args.targets()?;
    let llama = args.log_format == LogFormat::Llama;
    if llama && targets.len() > 1 {
        bail!("--log-format llama prints what one llama-quantize run prints; give one preset");
    }
    if llama && (args.only_part.is_some() || args.resume) {
        // llama-quantize always writes every part; there is no log of one part to print.
        bail!(
            "--log-format llama prints a whole llama-quantize run; it cannot go with --only-part or --resume"
        );
    }
    let threads = match (args.threads, args.positional_threads) {
        (Some(a), Some(b)) if a != b => bail!("--threads {a} and NTHREADS {b} disagree"),
        (a, b) => a.or(b).unwrap_or(0),
    };
    let mut options = Options::new(targets[0].0);
    options.allow_requantize = args.allow_requantize;
    options.quantize_output_tensor = !args.leave_output_tensor;
    options.pure = args.pure;
    options.output_tensor_type = args.output_tensor_type;
    options.token_embedding_type = args.token_embedding_type;
    options.keep_split = args.keep_split;
    options.prune_layers = args.prune_layers.take().map(|p| p.0).unwrap_or_default();
    options.tensor_types = args.tensor_type_rules()?;
    let mut kv_overrides = args
        .override_kv
        .iter()
        .map(|a| parse_kv_override(a))
        .collect::<Result<Vec<_>>>()?;
    let filter = WeightFilter::new(args.include_weights.clone(), args.exclude_weights.clone())?;
    let imatrix = match &args.imatrix {
        Some(path) => load_imatrix(path, &filter, args.quiet, llama)?,
        None => {
            if !matches!(filter, WeightFilter::All) {
                eprintln!(
                    "quantforge: warning: --include-weights/--exclude-weights do nothing without --imatrix"
                );
            }
            None
        }
    };
    if let (Some(m), Some(path)) = (&imatrix, &args.imatrix) {
        // llama-quantize adds these after the user's overrides.
        kv_overrides.extend(m.metadata(path.as_os_str().as_encoded_bytes()));
        m.check_finite()?;
    }
    options.has_imatrix = imatrix.is_some();

    // A safetensors input is read as the GGUF it holds (a GGUF that went through
    // safetensors gets its exact metadata back), straight from its files; its keys and
    // tensor list are checked in the order a conversion to GGUF checks them.
    let reading = || format!("reading {}", args.input.display());
    // A Hugging Face folder is read as the GGUF llama.cpp's converter makes of it with the
    // checkpoint's own float type, so the output is that of converter + quantizer.
    let model = if quantforge::hf::is_hf_folder(&args.input) {
        let m = HfModel::open(&args.input)?;
        for w in m.warnings() {
            eprintln!("quantforge: warning: {w}");
        }
        Source::Hf(Box::new(m))
    } else {
        Source::Model(match file_kind::detect(&args.input)? {
            FileKind::Safetensors => ModelFolder::open(&args.input)
                .map_err(quantforge::error::Error::from)
                .and_then(Model::from_folder)
                .with_context(reading)?,
            FileKind::Gguf => Model::open_gguf(&args.input)?,
        })
    };
    let metadata = model.gguf_metadata().with_context(reading)?;
    let specs = run::tensor_specs(&model).with_context(reading)?;
    if metadata.get("general.architecture").is_none() {
        bail!(
            "{}: no general.architecture: llama.cpp's quantizer needs a model converted to \
             GGUF with its architecture metadata (convert_hf_to_gguf.py, or a safetensors \
             file quantforge made from such a GGUF)",
            args.input.display()
        );
    }
    let model_params = quantforge::pipeline::plan::ModelParams::from_gguf(&metadata)
        .with_context(|| format!("{}", args.input.display()))?;
    let mut plans = Vec::with_capacity(targets.len());
    for (preset, _) in &targets {
        options.ftype = preset.ftype;
        options.only_copy = preset.copy;
        plans.push(plan(&model_params, &specs, &options)?);
    }
    let labels: Vec<&str> = if targets.len() > 1 {
        targets.iter().map(|(p, _)| p.name).collect()
    } else {
        Vec::new()
    };
    if args.no_fallback {
        for (plan, (preset, _)) in plans.iter().zip(&targets) {
            refuse_fallbacks(plan, preset.name)?;
        }
    }

    let layout = if args.keep_split {
        OutputLayout::KeepSplit
    } else if args.split_max_size.is_some() || args.split_max_tensors.is_some() {
        OutputLayout::Split(SplitLimits {
            max_tensors: args
                .split_max_tensors
                .map(|n| usize::try_from(n).unwrap_or(usize::MAX)),
            max_bytes: args.split_max_size,
        })
    } else {
        OutputLayout::Single
    };
    if (args.only_part.is_some() || args.resume) && layout == OutputLayout::Single {
        bail!(
            "--{} needs a split set: --keep-split, --split-max-size or --split-max-tensors",
            if args.resume { "resume" } else { "only-part" }
        );
    }
    if args.reuse.is_some() && targets.len() > 1 {
        bail!("--reuse makes one output; give one preset");
    }
    if args.resume && targets.len() > 1 {
        bail!("--resume makes one output at a time; give one preset");
    }
    let outputs: Vec<PathBuf> = targets
        .iter()
        .map(|(_, path)| match layout {
            OutputLayout::Single => path.clone(),
            _ => super::convert::split_prefix(path),
        })
        .collect();
    if llama {
        let (version, files) = model.gguf_files();
        let source = llama_log::Source {
            path: &args.input,
            version,
            files,
            metadata: &metadata,
            tensors: &specs,
        };
        let mut text = llama_log::opening(
            &args.input,
            (!args.dry_run).then_some(outputs[0].as_path()),
            targets[0].0.name,
            threads,
        )
        .into_bytes();
        text.extend(llama_log::loader_dump(&source));
        if let Some(m) = &imatrix {
            text.extend(llama_log::imatrix_in_use(m.len()).bytes());
        }
        text.extend(llama_log::plan_warnings(&plans[0], targets[0].0.ftype.default_type()).bytes());
        llama_log::to_stderr(&text);
    }
    if args.dry_run && llama {
        let mut log = llama_log::TensorLog::new(&specs, true, options.has_imatrix);
        let mut text = String::new();
        for t in &plans[0].tensors {
            let bytes_in = t.bytes_as(t.source).unwrap_or(0);
            let bytes_out = t.bytes_as(t.target).unwrap_or(0);
            text += &log.tensor(t, bytes_in, bytes_out, None);
        }
        text += &log.footer(&plans[0]);
        llama_log::to_stderr(text.as_bytes());
        let ms = started.elapsed().as_secs_f64() * 1e3;
        print!("{}", llama_log::closing(ms, ms));
        return Ok(());
    }
    if args.dry_run {
        let mut sizes = Vec::with_capacity(plans.len());
        for (k, (plan, output)) in plans.iter().zip(&outputs).enumerate() {
            if let Some(label) = labels.get(k) {
                println!("{label} -> {}", output.display());
            }
            let files = run::planned_files(&metadata, plan, &kv_overrides, output, layout)?;
            print_plan(plan, &files);
            sizes.push(files);
        }
        if !labels.is_empty() {
            print_outputs(&plans, &labels, &sizes);
        }
        return Ok(());
    }
    for plan in &plans {
        plan.check_runnable()?;
    }
    let mut run_options = RunOptions {
        threads,
        kv_overrides,
        imatrix,
        layout,
        quality: args.report.is_some(),
        reuse: match &args.reuse {
            Some(old) => manifest::old_output(old)?.map(std::sync::Arc::new),
            None => None,
        },
        only_part: args
            .only_part
            .map(|k| usize::try_from(k).unwrap_or(usize::MAX)),
        durability: if args.no_sync {
            Durability::Unsynced
        } else {
            Durability::Synced
        },
    };
    let job = Job {
        args: &args,
        model: &model,
        specs: &specs,
        plans: &plans,
        outputs: &outputs,
        targets: &targets,
        labels: &labels,
        has_imatrix: options.has_imatrix,
    };
    if args.resume {
        let planned = run::planned_files(
            &metadata,
            &plans[0],
            &run_options.kv_overrides,
            &outputs[0],
            layout,
        )?;
        let facts = job.facts(0);
        for (k, part) in planned.iter().enumerate() {
            match manifest::finished(&facts, &plans[0], part) {
                Ok(()) => println!("kept {}: verified", part.path.display()),
                Err(why) => {
                    if part.path.exists() {
                        println!("remaking {}: {why:#}", part.path.display());
                    }
                    run_options.only_part = Some(k + 1);
                    job.run(&run_options)?;
                }
            }
        }
        return Ok(());
    }
    let quantizing = std::time::Instant::now();
    let summaries = job.run(&run_options)?;
    if llama {
        print!(
            "{}",
            llama_log::closing(
                quantizing.elapsed().as_secs_f64() * 1e3,
                started.elapsed().as_secs_f64() * 1e3
            )
        );
    }
    if let Some(path) = &args.report {
        let doc = report::quality_json(&args.input, &plans, &targets, &summaries);
        let text = serde_json::to_string_pretty(&doc)? + "\n";
        super::io::write_atomic(path, text.as_bytes())
            .with_context(|| format!("--report {}", path.display()))?;
    }
    Ok(())
}

/// A run's parts that stay the same when it is made part by part.
struct Job<'a, M: ModelSource> {
    args: &'a QuantizeArgs,
    model: &'a M,
    specs: &'a [quantforge::pipeline::plan::TensorSpec],
    plans: &'a [quantforge::pipeline::plan::Plan],
    outputs: &'a [PathBuf],
    targets: &'a [(Preset, PathBuf)],
    labels: &'a [&'a str],
    has_imatrix: bool,
}

impl<M: ModelSource + Sync> Job<'_, M> {
    /// What output `k`'s manifests say of the run.
    fn facts(&self, k: usize) -> manifest::RunFacts<'_> {
        manifest::RunFacts {
            input: &self.args.input,
            preset: self.targets[k].0,
            imatrix: self.args.imatrix.as_deref(),
        }
    }

    /// Runs the quantization with `options`, shows its progress and summary and writes
    /// the manifests of what it wrote.
    fn run(&self, options: &RunOptions) -> Result<Vec<run::Summary>> {
        let run_targets: Vec<run::Target<'_>> = self
            .plans
            .iter()
            .zip(self.outputs)
            .map(|(plan, output)| run::Target { plan, output })
            .collect();
        let llama = self.args.log_format == LogFormat::Llama;
        let mode = if llama {
            ProgressMode::Quiet
        } else {
            ProgressMode::choose(self.args.quiet)
        };
        let mut reporter = Reporter::new(self.plans, self.labels, mode);
        let mut log = llama.then(|| llama_log::TensorLog::new(self.specs, false, self.has_imatrix));
        let summaries = run::run_many(self.model, &run_targets, options, |p| {
            reporter.tensor_done(p);
            if let Some(log) = &mut log {
                let plan = &self.plans[p.output];
                let line = log.finished(plan, p.index, p.bytes_in, p.bytes_out, p.imatrix);
                llama_log::to_stderr(line.as_bytes());
            }
        })
        .with_context(|| format!("quantizing {}", self.args.input.display()))?;
        match &log {
            Some(log) => llama_log::to_stderr(log.footer(&self.plans[0]).as_bytes()),
            None => reporter.finish(&summaries, self.has_imatrix),
        }
        for (k, (plan, summary)) in self.plans.iter().zip(&summaries).enumerate() {
            manifest::write(&self.facts(k), plan, summary)?;
        }
        Ok(summaries)
    }
}

/// Loads `--imatrix`, keeps the entries `filter` keeps and says what it holds; `None` when
/// no entry is left, which llama-quantize treats as no importance matrix at all.
fn load_imatrix(
    path: &std::path::Path,
    filter: &WeightFilter,
    quiet: bool,
    llama: bool,
) -> Result<Option<Imatrix>> {
    let mut m = Imatrix::load(path)?;
    let loaded = m.len();
    m.retain(filter);
    if llama {
        print!("{}", llama_log::imatrix_loaded(&m, loaded, path));
    }
    for name in m.skipped() {
        eprintln!(
            "quantforge: warning: imatrix entry {} has no counts; skipped",
            String::from_utf8_lossy(name)
        );
    }
    if !quiet && !llama {
        let format = match m.format() {
            ImatrixFormat::Gguf => "GGUF",
            ImatrixFormat::Legacy => "legacy",
        };
        let datasets: Vec<_> = m
            .datasets()
            .iter()
            .map(|d| String::from_utf8_lossy(d))
            .collect();
        let kept = if m.len() == loaded {
            String::new()
        } else {
            format!(" ({} kept by --include/--exclude-weights)", m.len())
        };
        println!(
            "imatrix: {loaded} entries{kept} from {} ({format} format), computed on {} chunks{}",
            path.display(),
            m.chunk_count(),
            if datasets.is_empty() {
                String::new()
            } else {
                format!(" of {}", datasets.join(", "))
            }
        );
    }
    if m.is_empty() {
        eprintln!("quantforge: warning: no imatrix entries to use; quantizing without them");
        return Ok(None);
    }
    Ok(Some(m))
}

fn target_preset(args: &QuantizeArgs) -> Result<Preset> {
    let name = match (&args.ty, &args.positional_type) {
        (Some(a), Some(b)) if !a.eq_ignore_ascii_case(b) => {
            bail!("--type {a} and TYPE {b} disagree")
        }
        (Some(a), _) | (None, Some(a)) => a,
        (None, None) => bail!("no target type: give --type TYPE (e.g. --type Q4_K_M)"),
    };
    parse_preset(name)
}

/// A preset by any of llama-quantize's names for it.
fn parse_preset(name: &str) -> Result<Preset> {
    Preset::parse(name).with_context(|| {
        format!(
            "unknown type {name:?}; presets: {}",
            Preset::ALL
                .iter()
                .map(|p| p.name)
                .collect::<Vec<_>>()
                .join(", ")
        )
    })
}

/// llama.cpp's `--override-kv KEY=TYPE:VALUE` with TYPE int, float, bool or str, as the
/// quantizer writes it: int as u32 of the absolute value, float as f32.
fn parse_kv_override(arg: &str) -> Result<(String, Value)> {
    let bad = || format!("malformed --override-kv {arg:?}: expected KEY=TYPE:VALUE");
    let (key, rest) = arg.split_once('=').with_context(bad)?;
    let (ty, value) = rest.split_once(':').with_context(bad)?;
    if key.is_empty() || key.len() > 127 {
        bail!("--override-kv {arg:?}: the key must have 1 to 127 bytes");
    }
    let value = match ty {
        "int" => {
            let v: i64 = value.parse().with_context(bad)?;
            Value::U32(v.unsigned_abs() as u32)
        }
        "float" => Value::F32(value.parse::<f64>().with_context(bad)? as f32),
        "bool" => match value {
            "true" => Value::Bool(true),
            "false" => Value::Bool(false),
            _ => bail!("--override-kv {arg:?}: a bool is true or false"),
        },
        "str" if value.len() <= 127 => Value::from(value),
        "str" => bail!("--override-kv {arg:?}: strings are limited to 127 bytes"),
        _ => bail!("--override-kv {arg:?}: TYPE is int, float, bool or str"),
    };
    Ok((key.to_string(), value))
}

/// `--no-fallback`: an error listing the tensors of `plan` (for `preset`) that take a
/// fallback type, if any do.
fn refuse_fallbacks(plan: &quantforge::pipeline::plan::Plan, preset: &str) -> Result<()> {
    let fallen: Vec<String> = plan
        .tensors
        .iter()
        .filter_map(|t| {
            let f = t.fallback?;
            Some(format!(
                "{} ({} does not fit rows of {}; {} instead)",
                t.name, f.wanted, f.ncols, t.target
            ))
        })
        .collect();
    if fallen.is_empty() {
        return Ok(());
    }
    const LISTED: usize = 8;
    let more = fallen.len().saturating_sub(LISTED);
    bail!(
        "--no-fallback: {} tensor(s) of {preset} would take a fallback type: {}{}",
        fallen.len(),
        fallen[..fallen.len().min(LISTED)].join(", "),
        if more > 0 {
            format!(" and {more} more")
        } else {
            String::new()
        }
    )
}

fn same_file(a: &std::path::Path, b: &std::path::Path) -> bool {
    match (std::fs::canonicalize(a), std::fs::canonicalize(b)) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    }
}
