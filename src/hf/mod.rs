//! Hugging Face model folders (`config.json`, tokenizer files, `*.safetensors`) read as the
//! GGUF llama.cpp's converter (`convert_hf_to_gguf.py` with its `conversion/` package and
//! gguf-py 0.19.0) writes for them: the same keys in the same order with the same wire
//! types, the same tensors with the same names, order, shapes, types and bytes.
//!
//! The converter's Python is the specification here, as ggml's C is for the codecs:
//! - [`config`]: `config.json` with the defaults of the `transformers` config class the
//!   converter loads it through;
//! - [`card`]: the `general.*` keys derived from the README's front matter, `config.json`'s
//!   `_name_or_path` and the folder's name (gguf-py's `metadata.py`);
//! - [`tokenizer`]: the vocabulary keys (tokens, types, the BPE pre-tokenizer found by the
//!   hash of its check text's ids, special tokens and flags);
//! - [`arch`]: one module per converter class, picked by `architectures[0]`;
//! - this module: the tensor list and the type each gets (the converter's
//!   `prepare_tensors`), and the order the keys are written in (`prepare_metadata`).
//!
//! A [`Conversion`] lists what the GGUF holds; [`write`] writes it. Tensors are read from
//! the mapped safetensors files one at a time, so memory does not grow with the model.

pub mod arch;
pub mod card;
pub mod config;
pub mod fp8;
pub(crate) mod sleef;
mod source;
#[rustfmt::skip]
mod tables;
pub mod tokenizer;
mod write;

pub use source::HfModel;
pub use write::{Written, part_paths, split_parts, write, write_split};

use crate::error::{Context, Error, Result, bail, ensure};
use arch::{Arch, Experts, TensorMap};
use config::Config;
use fp8::{Fp8, Scale};
use quantforge_formats::gguf::{Metadata, Value};
use quantforge_formats::safetensors::{Dtype, ModelFolder, SafeTensors, TensorView};
use quantforge_kernels::GgmlType;
use std::borrow::Cow;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// FP8 weights' scales by the weight's name in its file.
type Scales = HashMap<String, Arc<Scale>>;

/// `--outtype`: the type of the tensors the converter does not keep in f32.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OutType {
    /// `f32`.
    F32,
    /// `f16` (the converter's default is `f16`).
    F16,
    /// `bf16`.
    Bf16,
    /// `q8_0`.
    Q8_0,
    /// `tq1_0`.
    Tq1_0,
    /// `tq2_0`.
    Tq2_0,
    /// `auto`: bf16 or f16 as the first such 2-D tensor of the source is, else f16.
    Auto,
}

impl OutType {
    /// Parses the converter's `--outtype` names.
    pub fn parse(text: &str) -> Result<OutType> {
        Ok(match text {
            "f32" => OutType::F32,
            "f16" => OutType::F16,
            "bf16" => OutType::Bf16,
            "q8_0" => OutType::Q8_0,
            "tq1_0" => OutType::Tq1_0,
            "tq2_0" => OutType::Tq2_0,
            "auto" => OutType::Auto,
            _ => bail!("unknown --outtype {text} (f32, f16, bf16, q8_0, tq1_0, tq2_0, auto)"),
        })
    }

    /// The ggml type of tensors that are not kept in f32.
    fn ggml(self) -> GgmlType {
        match self {
            OutType::F32 => GgmlType::F32,
            OutType::F16 | OutType::Auto => GgmlType::F16,
            OutType::Bf16 => GgmlType::BF16,
            OutType::Q8_0 => GgmlType::Q8_0,
            OutType::Tq1_0 => GgmlType::TQ1_0,
            OutType::Tq2_0 => GgmlType::TQ2_0,
        }
    }

    /// `general.file_type` (llama.cpp's `LLAMA_FTYPE_*`).
    pub fn file_type(self) -> u32 {
        match self {
            OutType::F32 => 0,
            OutType::F16 | OutType::Auto => 1,
            OutType::Q8_0 => 7,
            OutType::Bf16 => 32,
            OutType::Tq1_0 => 36,
            OutType::Tq2_0 => 37,
        }
    }

    /// The name the converter puts in file names (`F16`, `Q8_0`).
    pub fn name(self) -> &'static str {
        match self {
            OutType::F32 => "F32",
            OutType::F16 | OutType::Auto => "F16",
            OutType::Bf16 => "BF16",
            OutType::Q8_0 => "Q8_0",
            OutType::Tq1_0 => "TQ1_0",
            OutType::Tq2_0 => "TQ2_0",
        }
    }
}

/// What a conversion is asked for besides the folder (the converter's options).
#[derive(Clone, Debug)]
pub struct ConvertOptions {
    /// `--outtype`.
    pub outtype: OutType,
    /// `--model-name`: `general.name`.
    pub model_name: Option<String>,
    /// `--metadata FILE`: a JSON object of `general.*` overrides.
    pub metadata: Option<PathBuf>,
    /// `--vocab-only`: the keys and no tensors.
    pub vocab_only: bool,
    /// `--vocab-pre NAME`: the BPE pre-tokenizer, whatever the hash says.
    pub vocab_pre: Option<String>,
    /// `--sentence-transformers-dense-modules`: the projections of a sentence-transformers
    /// folder's `Dense` modules (EmbeddingGemma) as tensors of the GGUF.
    pub dense_modules: bool,
}

impl Default for ConvertOptions {
    fn default() -> ConvertOptions {
        ConvertOptions {
            outtype: OutType::F16,
            model_name: None,
            metadata: None,
            vocab_only: false,
            vocab_pre: None,
            dense_modules: false,
        }
    }
}

/// Whether `path` is a Hugging Face model folder: a directory with a `config.json` that
/// names its architecture, or with tokenizer files beside it. (A folder of safetensors
/// shards with a bare `config.json` is a container to convert as it is.)
pub fn is_hf_folder(path: &Path) -> bool {
    if !path.is_dir() || !path.join("config.json").is_file() {
        return false;
    }
    let tokenizer = ["tokenizer.json", "tokenizer.model", "tokenizer_config.json"]
        .iter()
        .any(|f| path.join(f).is_file());
    tokenizer
        || std::fs::read(path.join("config.json"))
            .ok()
            .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
            .is_some_and(|c| c.get("architectures").is_some())
}

/// An open Hugging Face folder: its config, its architecture and its mapped weights.
pub struct HfFolder {
    dir: PathBuf,
    config: Config,
    arch_name: String,
    arch: &'static dyn Arch,
    weights: ModelFolder,
    dense: std::sync::OnceLock<Vec<DenseModule>>,
}

/// A sentence-transformers `Dense` module of the folder (`2_Dense/`).
struct DenseModule {
    /// The GGUF prefix of its tensors (`dense_2`, `dense_3`).
    prefix: String,
    /// Its input and output widths, when its `config.json` gives both.
    dims: Option<(u32, u32)>,
    /// Its weights.
    weights: ModelFolder,
}

/// One tensor of the output: its GGUF name, dimensions (ggml order), type and bytes.
pub struct OutTensor<'a> {
    /// The GGUF name.
    pub name: String,
    /// Dimensions, `ne[0]` the row length.
    pub ne: Vec<u64>,
    /// The type written.
    pub ty: GgmlType,
    /// The Hugging Face tensor it is made from (for messages).
    pub source_name: String,
    /// The element type of the data.
    pub dtype: Dtype,
    /// The bytes, rows in the source's order: one part, or several of equal size stacked
    /// along a new outermost axis (a MoE block's experts).
    pub parts: Vec<Part<'a>>,
    /// Llama's rotary Q/K permutation of a weight's rows with this many heads: the
    /// outermost axis read as `(heads, 2, n / heads / 2)` with its last two axes swapped.
    pub permute: Option<usize>,
}

/// Bytes of an output tensor: borrowed from a mapped file, or made while the conversion
/// was planned (a permuted bias, a shifted norm, a generated tensor: small ones).
pub struct Part<'a> {
    /// The bytes.
    pub bytes: Cow<'a, [u8]>,
    /// The mapped file `bytes` are borrowed from.
    pub file: Option<&'a SafeTensors<'static>>,
    /// For borrowed bytes: the source tensor's name in its file and the bytes of its data
    /// they are.
    pub origin: Option<(String, std::ops::Range<usize>)>,
    /// An FP8 weight's scale, and the row of the weight (outer axes flattened) the bytes
    /// begin at.
    pub scale: Option<(Arc<Scale>, usize)>,
}

impl<'a> Part<'a> {
    /// Bytes `range` of source tensor `view`'s data.
    fn mapped(
        view: &TensorView<'a>,
        range: std::ops::Range<usize>,
        file: &'a SafeTensors<'static>,
        scales: &Scales,
    ) -> Part<'a> {
        let scale = scales.get(view.name()).map(|s| {
            let row_len = view.shape().last().copied().unwrap_or(1).max(1);
            let row_bytes = view.dtype().bytes_of(row_len).unwrap_or(1).max(1);
            (s.clone(), range.start / row_bytes)
        });
        Part {
            bytes: Cow::Borrowed(&view.data()[range.clone()]),
            file: Some(file),
            origin: Some((view.name().to_string(), range)),
            scale,
        }
    }

    /// Bytes made in memory.
    fn made(bytes: Vec<u8>) -> Part<'a> {
        Part {
            bytes: Cow::Owned(bytes),
            file: None,
            origin: None,
            scale: None,
        }
    }
}

impl OutTensor<'_> {
    /// The source index, along the outermost axis, of output index `r` (the identity
    /// unless the tensor is permuted; `n` is that axis's length).
    pub fn source_index(&self, r: usize, n: usize) -> usize {
        permuted_index(self.permute, r, n)
    }
}

/// Where row `r` of `n` comes from under Llama's rotary permutation with `heads` heads.
fn permuted_index(heads: Option<usize>, r: usize, n: usize) -> usize {
    match heads {
        None => r,
        Some(heads) => crate::model::interleaved_row(n / heads, r),
    }
}

/// `x + shift` as the converter computes it on a tensor of `dtype`: bf16 is widened to
/// f32 before the architecture sees it, so its sum is an f32; an f16 tensor stays f16
/// (torch adds in f32 and rounds the sum to f16); f32 adds in f32. Returns the result's
/// dtype and bytes.
fn shifted(name: &str, dtype: Dtype, data: &[u8], shift: f32) -> Result<(Dtype, Vec<u8>)> {
    let n = data.len() / dtype.bytes_of(1).unwrap_or(1).max(1);
    let mut x = vec![0f32; n];
    quantforge_formats::safetensors::decode_f32_into(name, dtype, data, &mut x)?;
    for v in &mut x {
        *v += shift;
    }
    Ok(match dtype {
        Dtype::F16 => (
            Dtype::F16,
            x.iter()
                .flat_map(|&v| half::f16::from_f32(v).to_le_bytes())
                .collect(),
        ),
        _ => (Dtype::F32, bytemuck::cast_slice(&x).to_vec()),
    })
}

/// Everything the output GGUF holds.
pub struct Conversion<'a> {
    /// The keys, in the converter's order.
    pub metadata: Metadata,
    /// The tensors, in the converter's order (none with `--vocab-only`).
    pub tensors: Vec<OutTensor<'a>>,
    /// The file type the run resolved (`auto` made concrete).
    pub outtype: OutType,
    /// The converter's default file name stem (`all-MiniLM-L6-23M-v2-F16`), used when no
    /// output path is given or the path is a directory.
    pub default_stem: String,
    /// What the user should know about choices made where the converter would refuse.
    pub warnings: Vec<String>,
}

/// What an architecture module works with while it writes its keys.
pub struct Ctx<'a> {
    /// The folder.
    pub dir: &'a Path,
    /// `config.json` with the config class's defaults.
    pub config: &'a Config,
    /// The keys written so far.
    pub metadata: Metadata,
    /// The tensor names of this architecture and block count.
    pub tensor_map: TensorMap,
    /// `general.architecture`.
    pub arch: &'static str,
    /// The block count.
    pub block_count: u64,
    /// The resolved output type.
    pub outtype: OutType,
    /// `--vocab-pre`.
    pub vocab_pre: Option<String>,
    /// Warnings for the user (a pre-tokenizer named by its configuration).
    pub warnings: Vec<String>,
    /// The sentence-transformers `Dense` modules written (`dense_2`) and their input and
    /// output widths, in `modules.json` order.
    pub dense_dims: Vec<(String, (u32, u32))>,
}

impl Ctx<'_> {
    /// Appends a key (the converter never writes one twice; a second write replaces the
    /// value in place as its writer does).
    pub fn put(&mut self, key: impl Into<String>, value: impl Into<Value>) -> Result<()> {
        self.metadata.set(key.into(), value.into())?;
        Ok(())
    }

    /// Appends `<arch>.<key>`.
    pub fn put_arch(&mut self, key: &str, value: impl Into<Value>) -> Result<()> {
        let key = format!("{}.{key}", self.arch);
        self.put(key, value)
    }
}

impl HfFolder {
    /// Opens a folder: reads `config.json`, finds the architecture, maps the weights.
    pub fn open(dir: &Path) -> Result<HfFolder> {
        let config = Config::load(dir)?;
        let arch_name = config.architecture()?;
        let arch = arch::lookup(&arch_name)
            .with_context(|| format!("{}", dir.join("config.json").display()))?;
        let weights = ModelFolder::open(dir)?;
        let config = config.with_defaults(&arch_name);
        Ok(HfFolder {
            dir: dir.to_path_buf(),
            config,
            arch_name,
            arch,
            weights,
            dense: std::sync::OnceLock::new(),
        })
    }

    /// The folder's sentence-transformers `Dense` modules with weights, as
    /// `EmbeddingGemma.__init__` finds them: the `modules.json` entries whose type ends in
    /// `Dense` and whose folder has a `model.safetensors`.
    fn dense_modules(&self) -> Result<&[DenseModule]> {
        if let Some(d) = self.dense.get() {
            return Ok(d);
        }
        let mut found = Vec::new();
        let list_path = self.dir.join("modules.json");
        if list_path.is_file() {
            let text = std::fs::read_to_string(&list_path)
                .map_err(|e| Error::invalid(format!("{}: {e}", list_path.display())))?;
            let list: serde_json::Value = serde_json::from_str(&text).map_err(|e| {
                Error::invalid(format!("{}: not valid JSON: {e}", list_path.display()))
            })?;
            for m in list.as_array().into_iter().flatten() {
                let ty = m.get("type").and_then(|t| t.as_str()).unwrap_or_default();
                let Some(path) = m.get("path").and_then(|p| p.as_str()) else {
                    continue;
                };
                let dir = self.dir.join(path);
                if !ty.ends_with("Dense") || !dir.join("model.safetensors").is_file() {
                    continue;
                }
                let prefix = if path == "2_Dense" {
                    "dense_2"
                } else {
                    "dense_3"
                };
                let cfg = tokenizer::special::read_object(&dir.join("config.json"))?;
                let dim = |k: &str| -> Result<Option<u32>> {
                    match cfg.as_ref().and_then(|c| c.get(k)) {
                        None | Some(serde_json::Value::Null) => Ok(None),
                        Some(v) => json_u32(k, v)
                            .with_context(|| format!("{}", dir.join("config.json").display()))
                            .map(Some),
                    }
                };
                let dims = match (dim("in_features")?, dim("out_features")?) {
                    (Some(i), Some(o)) => Some((i, o)),
                    _ => None,
                };
                found.push(DenseModule {
                    prefix: prefix.to_string(),
                    dims,
                    weights: ModelFolder::open(&dir)?,
                });
            }
        }
        Ok(self.dense.get_or_init(|| found))
    }

    /// The Hugging Face architecture name (`BertModel`).
    pub fn architecture(&self) -> &str {
        &self.arch_name
    }

    /// The folder.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The source tensors as the converter indexes them: shard by shard in name order,
    /// each shard's tensors in name order, after the architecture's filter.
    fn sources(&self) -> Result<Vec<Source<'_>>> {
        let mut shards: Vec<_> = self.weights.shards().collect();
        shards.sort_by(|a, b| a.0.cmp(b.0));
        let mut out = Vec::new();
        let mut seen: HashMap<String, &str> = HashMap::new();
        for (shard, file) in shards {
            let mut views: Vec<TensorView<'_>> = file.tensors().collect();
            views.sort_by(|a, b| a.name().cmp(b.name()));
            for v in views {
                if let Some(first) = seen.insert(v.name().to_string(), shard) {
                    bail!(
                        "{}: tensor `{}` is in both {first} and {shard}",
                        self.dir.display(),
                        v.name()
                    );
                }
                if let Some(name) = self.arch.filter(v.name()) {
                    out.push((name, v, file));
                }
            }
        }
        Ok(out)
    }

    /// The conversion: keys and tensors, as the converter would write them.
    pub fn conversion(&self, opts: &ConvertOptions) -> Result<Conversion<'_>> {
        let mut sources = self.sources()?;
        let mut dense_dims = Vec::new();
        if opts.dense_modules && self.arch.dense_modules() {
            // The converter's `generate_extra_tensors`: each module's weights (not its
            // bias), renamed `linear` -> `dense_2`, before the model's own tensors.
            let mut extra = Vec::new();
            for m in self.dense_modules()? {
                for (_, file) in m.weights.shards() {
                    for v in file.tensors() {
                        if v.name().ends_with(".weight") {
                            extra.push((v.name().replace("linear", &m.prefix), v, file));
                        }
                    }
                }
                if let Some(d) = m.dims {
                    dense_dims.push((m.prefix.clone(), d));
                }
            }
            extra.append(&mut sources);
            sources = extra;
        }
        let outtype = match opts.outtype {
            OutType::Auto => guess_outtype(&sources),
            t => t,
        };
        let scales = self.fp8_scales(&mut sources)?;
        let table = self.arch.table();
        let block_count = self.config.block_count()?;
        let mut ctx = Ctx {
            dir: &self.dir,
            config: &self.config,
            metadata: Metadata::new(),
            tensor_map: TensorMap::new(table, usize::try_from(block_count)?),
            arch: table.name,
            block_count,
            outtype,
            vocab_pre: opts.vocab_pre.clone(),
            warnings: Vec::new(),
            dense_dims,
        };
        ctx.put("general.architecture", table.name)?;

        let mut tensors = Vec::new();
        let extra = if opts.vocab_only {
            Vec::new()
        } else {
            self.arch.extra_tensors(&mut ctx)?
        };
        for (name, values) in extra {
            let modified = self.arch.modify(&ctx, &name)?;
            let shape = [values.len()];
            tensors.push(OutTensor {
                ty: tensor_type(&ctx, &modified.name, &shape, outtype),
                name: modified.name,
                ne: vec![values.len() as u64],
                source_name: name,
                dtype: Dtype::F32,
                parts: vec![Part::made(bytemuck::cast_slice(&values).to_vec())],
                permute: None,
            });
        }
        let mut experts: HashMap<usize, HashMap<String, (TensorView<'_>, &SafeTensors<'static>)>> =
            HashMap::new();
        for (mut name, view, file) in sources {
            if [
                ".attention.masked_bias",
                ".attention.bias",
                ".rotary_emb.inv_freq",
            ]
            .iter()
            .any(|s| name.ends_with(s))
            {
                continue;
            }
            match self.arch.experts(&ctx, &name)? {
                Experts::No => {}
                Experts::Down => {
                    if !name.ends_with(".weight") {
                        name.push_str(".weight");
                    }
                }
                Experts::GateUp => {
                    for t in self.split_gate_up(&ctx, &name, &view, file, outtype, &scales)? {
                        tensors.push(t);
                    }
                    continue;
                }
                Experts::Buffer(stack) => {
                    let bid = block_of(&name).with_context(|| {
                        format!(
                            "{}: expert tensor `{name}` has no block number",
                            self.dir.display()
                        )
                    })?;
                    let block = experts.entry(bid).or_default();
                    // LlamaModel buffers bare-named checkpoints' experts with `model.`.
                    let key = if stack.source.starts_with("model.") && !name.starts_with("model.") {
                        format!("model.{name}")
                    } else {
                        name
                    };
                    block.insert(key, (view, file));
                    if block.len() >= stack.n * 3 {
                        let mut block = experts.remove(&bid).unwrap_or_default();
                        for w in stack.projections {
                            let mut runs = Vec::with_capacity(stack.n);
                            for x in 0..stack.n {
                                let ename = stack.source_name(bid, x, w);
                                runs.push(block.remove(&ename).with_context(|| {
                                    format!(
                                        "{}: expert tensor `{ename}` is missing",
                                        self.dir.display()
                                    )
                                })?);
                            }
                            let merged = stack.merged_name(bid, w);
                            tensors.push(self.stacked(&ctx, &merged, runs, outtype, &scales)?);
                        }
                        if !block.is_empty() {
                            experts.insert(bid, block);
                        }
                    }
                    continue;
                }
            }
            let modified = self
                .arch
                .modify(&ctx, &name)
                .with_context(|| format!("{}", self.dir.display()))?;
            let new_name = modified.name;
            ensure!(
                can_decode(view.dtype()),
                "{}: tensor `{}` has dtype {}, which quantforge cannot convert",
                self.dir.display(),
                view.name(),
                view.dtype()
            );
            let mut shape = view.shape().to_vec();
            let mut data: Cow<'_, [u8]> = Cow::Borrowed(view.data());
            let mut dtype = view.dtype();
            if let Some(keep) = modified.rows
                && let Some(rows) = shape.first_mut()
                && keep < *rows
            {
                let row_bytes = data.len() / *rows;
                data = Cow::Borrowed(&view.data()[..keep * row_bytes]);
                *rows = keep;
            }
            let kept = data.len();
            let mut permute = modified.permute;
            if let Some(heads) = permute {
                let n = shape.first().copied().unwrap_or(0);
                ensure!(
                    heads > 0 && n % (2 * heads) == 0,
                    "{}: tensor `{}` has {n} rows, which {heads} heads cannot split in halves",
                    self.dir.display(),
                    view.name()
                );
                if shape.len() == 1 {
                    // A permuted bias is small: permuted here, element by element.
                    let elem = data.len() / n.max(1);
                    let mut v = Vec::with_capacity(data.len());
                    for r in 0..n {
                        let s = permuted_index(permute, r, n);
                        v.extend_from_slice(&data[s * elem..(s + 1) * elem]);
                    }
                    data = Cow::Owned(v);
                    permute = None;
                }
            }
            if let Some(shift) = modified.shift {
                let (d, bytes) = shifted(view.name(), dtype, &data, shift)?;
                dtype = d;
                data = Cow::Owned(bytes);
            }
            let ty = tensor_type(&ctx, &new_name, &shape, outtype);
            let ne: Vec<u64> = shape.iter().rev().map(|&d| d as u64).collect();
            let part = match data {
                Cow::Borrowed(_) => Part::mapped(&view, 0..kept, file, &scales),
                Cow::Owned(v) => Part::made(v),
            };
            tensors.push(OutTensor {
                name: new_name,
                ne,
                ty,
                source_name: view.name().to_string(),
                dtype,
                parts: vec![part],
                permute,
            });
        }
        let mut left: Vec<&String> = experts.values().flat_map(|b| b.keys()).collect();
        left.sort();
        if let Some(first) = left.first() {
            bail!(
                "{}: {} expert tensors do not make whole blocks of experts, `{first}` among them",
                self.dir.display(),
                left.len()
            );
        }
        self.check_shapes(&tensors)?;
        let mut names = HashMap::new();
        for t in &tensors {
            if names.insert(t.name.as_str(), ()).is_some() {
                bail!("{}: two tensors map to `{}`", self.dir.display(), t.name);
            }
        }

        // `--vocab-only` prepares no tensors, so the converter counts no parameters.
        if opts.vocab_only {
            tensors.clear();
        }
        let params = card::ParamCount::of(tensors.iter().map(|t| (t.name.as_str(), &t.ne[..])));
        let card = card::GeneralMeta::load(
            &self.dir,
            opts.metadata.as_deref(),
            opts.model_name.as_deref(),
            &params,
        )?;
        let default_stem = card.file_stem(outtype.name());
        ctx.put("general.type", "model")?;
        card.write(&mut ctx.metadata)?;
        self.arch.parameters(&mut ctx)?;
        ctx.put(
            "general.quantization_version",
            crate::pipeline::plan::QUANTIZATION_VERSION,
        )?;
        self.arch.vocab(&mut ctx)?;
        Ok(Conversion {
            metadata: ctx.metadata,
            tensors,
            outtype,
            default_stem,
            warnings: ctx.warnings,
        })
    }
}

impl HfFolder {
    /// One block's experts of one projection stacked into a 3-D tensor (`torch.stack`:
    /// each expert's bytes in turn), named `merged` before mapping.
    fn stacked<'a>(
        &'a self,
        ctx: &Ctx<'_>,
        merged: &str,
        runs: Vec<(TensorView<'a>, &'a SafeTensors<'static>)>,
        outtype: OutType,
        scales: &Scales,
    ) -> Result<OutTensor<'a>> {
        let (first, _) = &runs[0];
        for (v, _) in &runs {
            ensure!(
                v.shape() == first.shape() && v.dtype() == first.dtype(),
                "{}: expert tensor `{}` is {} {:?}, `{}` is {} {:?}: they cannot be stacked",
                self.dir.display(),
                first.name(),
                first.dtype(),
                first.shape(),
                v.name(),
                v.dtype(),
                v.shape()
            );
            ensure!(
                can_decode(v.dtype()),
                "{}: tensor `{}` has dtype {}, which quantforge cannot convert",
                self.dir.display(),
                v.name(),
                v.dtype()
            );
        }
        let mut shape = vec![runs.len()];
        shape.extend_from_slice(first.shape());
        let name = self.arch.modify(ctx, merged)?.name;
        Ok(OutTensor {
            ty: tensor_type(ctx, &name, &shape, outtype),
            ne: shape.iter().rev().map(|&d| d as u64).collect(),
            name,
            source_name: first.name().to_string(),
            dtype: first.dtype(),
            parts: runs
                .iter()
                .map(|(v, f)| Part::mapped(v, 0..v.data().len(), f, scales))
                .collect(),
            permute: None,
        })
    }

    /// Stacked fused gate and up projections (experts, 2 x rows, width) split in halves
    /// along the rows: each expert's first half the gate, the second the up projection.
    fn split_gate_up<'a>(
        &'a self,
        ctx: &Ctx<'_>,
        name: &str,
        view: &TensorView<'a>,
        file: &'a SafeTensors<'static>,
        outtype: OutType,
        scales: &Scales,
    ) -> Result<Vec<OutTensor<'a>>> {
        let shape = view.shape();
        ensure!(
            shape.len() >= 3 && shape[shape.len() - 2] % 2 == 0 && can_decode(view.dtype()),
            "{}: tensor `{name}` is {} {shape:?}, not stacked gate and up projections",
            self.dir.display(),
            view.dtype()
        );
        let rows = shape[shape.len() - 2];
        let experts: usize = shape[..shape.len() - 2].iter().product();
        let row_bytes = view.data().len() / (experts * rows).max(1);
        let half = rows / 2 * row_bytes;
        let base = name.strip_suffix(".weight").unwrap_or(name);
        let base = base.strip_suffix(".gate_up_proj").unwrap_or(base);
        let mut out_shape = shape.to_vec();
        out_shape[shape.len() - 2] = rows / 2;
        let mut out = Vec::with_capacity(2);
        for (k, w) in ["gate_proj", "up_proj"].iter().enumerate() {
            let name = self.arch.modify(ctx, &format!("{base}.{w}.weight"))?.name;
            let parts = (0..experts)
                .map(|e| {
                    let at = e * 2 * half + k * half;
                    Part::mapped(view, at..at + half, file, scales)
                })
                .collect();
            out.push(OutTensor {
                ty: tensor_type(ctx, &name, &out_shape, outtype),
                ne: out_shape.iter().rev().map(|&d| d as u64).collect(),
                name,
                source_name: view.name().to_string(),
                dtype: view.dtype(),
                parts,
                permute: None,
            });
        }
        Ok(out)
    }

    /// An FP8 checkpoint's scales (`dequant_model`): each `<weight>_scale_inv` taken out
    /// of `sources` and kept for its weight, the unused activation scales dropped.
    /// Nothing for a checkpoint without `quantization_config`; an error for another
    /// quantization method or a scale without its weight.
    fn fp8_scales(&self, sources: &mut Vec<Source<'_>>) -> Result<Scales> {
        let mut scales = Scales::new();
        let config = self.dir.join("config.json");
        let Some(fp8) = Fp8::from_config(self.config.get("quantization_config"))
            .with_context(|| format!("{}", self.dir.display()))?
        else {
            return Ok(scales);
        };
        let views: HashMap<&str, &TensorView<'_>> =
            sources.iter().map(|(_, v, _)| (v.name(), v)).collect();
        for (_, v, _) in sources.iter() {
            let Some(weight) = Fp8::scaled_weight(v.name()) else {
                continue;
            };
            let w = views.get(weight).with_context(|| {
                format!(
                    "{}: scale `{}` has no weight `{weight}` ({} says the checkpoint is fp8)",
                    self.dir.display(),
                    v.name(),
                    config.display()
                )
            })?;
            let scale = Scale::new(w, v, fp8.block.as_deref())
                .with_context(|| format!("{}", self.dir.display()))?;
            scales.insert(weight.to_string(), Arc::new(scale));
        }
        sources.retain(|(name, v, _)| Fp8::scaled_weight(v.name()).is_none() && !Fp8::unused(name));
        Ok(scales)
    }

    /// Refuses tensors whose shapes contradict `config.json` (a config from another
    /// model): the token embedding's width must be the hidden size.
    fn check_shapes(&self, tensors: &[OutTensor<'_>]) -> Result<()> {
        let Some(embd) = tensors.iter().find(|t| t.name == "token_embd.weight") else {
            return Ok(());
        };
        if let Some((key, v)) = self.config.find(&["hidden_size", "n_embd", "dim"])
            && v.as_u64() != embd.ne.first().copied()
        {
            bail!(
                "{}: tensor token_embd.weight (`{}`) is {} wide, but `{key}` in config.json is {v}",
                self.dir.display(),
                embd.source_name,
                embd.ne.first().copied().unwrap_or(0)
            );
        }
        Ok(())
    }
}

/// The block number of a tensor name: its first all-digit part, as the converter finds it.
fn block_of(name: &str) -> Option<usize> {
    name.split('.')
        .find(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|p| p.parse().ok())
}

/// A source tensor: the name it goes on with after the architecture's filter, its view,
/// its file.
type Source<'a> = (String, TensorView<'a>, &'a SafeTensors<'static>);

/// Whether the converter can read dtype `d` (it widens everything it reads to f32).
fn can_decode(d: Dtype) -> bool {
    matches!(d, Dtype::F32 | Dtype::F16 | Dtype::BF16) || fp8::is_fp8(d)
}

/// `--outtype auto`: the first 2-D-or-more tensor stored as bf16 or f16 decides; f16 if none.
fn guess_outtype(sources: &[Source<'_>]) -> OutType {
    for (_, v, _) in sources {
        if v.shape().len() < 2 {
            continue;
        }
        match v.dtype() {
            Dtype::BF16 => return OutType::Bf16,
            Dtype::F16 => return OutType::F16,
            _ => {}
        }
    }
    OutType::F16
}

/// Kinds the converter always keeps in f32 (matched as `<name>.weight`).
const F32_KINDS: &[&str] = &[
    "FFN_GATE_INP",
    "FFN_GATE_INP_SHEXP",
    "POS_EMBD",
    "TOKEN_TYPES",
    "SSM_CONV1D",
    "SHORTCONV_CONV",
    "TIME_MIX_FIRST",
    "TIME_MIX_W1",
    "TIME_MIX_W2",
    "TIME_MIX_DECAY_W1",
    "TIME_MIX_DECAY_W2",
    "TIME_MIX_LERP_FUSED",
    "POSNET_NORM1",
    "POSNET_NORM2",
    "V_ENC_EMBD_POS",
    "A_ENC_EMBD_POS",
    "ALTUP_CORRECT_COEF",
    "ALTUP_PREDICT_COEF",
    "SSM_CONV1D_Q",
    "SSM_CONV1D_K",
    "SSM_CONV1D_V",
    "INDEXER_PROJ",
];

/// Kinds a ternary output keeps in f16.
const F16_UNDER_TERNARY: &[&str] = &[
    "TOKEN_EMBD",
    "PER_LAYER_TOKEN_EMBD",
    "OUTPUT",
    "ALTUP_ROUTER",
    "LAUREL_L",
    "LAUREL_R",
];

/// The type the converter's `prepare_tensors` gives tensor `name` of `shape`: f32 for
/// 1-D tensors, norms, non-weights and the kinds in [`F32_KINDS`]; else the output type,
/// f16 where that type's blocks do not divide the rows (the converter's fallback).
fn tensor_type(ctx: &Ctx<'_>, name: &str, shape: &[usize], outtype: OutType) -> GgmlType {
    let kind = ctx.tensor_map.kind_of_weight(name);
    if shape.len() <= 1 || name.ends_with("_norm.weight") {
        return GgmlType::F32;
    }
    let suffix_ok = [".weight", ".lora_a", ".lora_b"]
        .iter()
        .any(|s| name.len() >= 7 && &name[name.len() - 7..] == *s);
    if kind.is_some_and(|k| F32_KINDS.contains(&k)) || !suffix_ok {
        return GgmlType::F32;
    }
    if matches!(outtype, OutType::Tq1_0 | OutType::Tq2_0)
        && kind.is_some_and(|k| F16_UNDER_TERNARY.contains(&k))
    {
        return GgmlType::F16;
    }
    let ty = outtype.ggml();
    let row = shape.last().copied().unwrap_or(1);
    if row % ty.block_size() != 0 {
        return GgmlType::F16;
    }
    ty
}

/// A JSON number as a `u32` key value, or an error naming the key.
pub(crate) fn json_u32(key: &str, v: &serde_json::Value) -> Result<u32> {
    v.as_u64()
        .and_then(|n| u32::try_from(n).ok())
        .ok_or_else(|| Error::invalid(format!("config.json: `{key}` is {v}, not a 32-bit count")))
}

/// A JSON number as an `f32` key value, or an error naming the key.
pub(crate) fn json_f32(key: &str, v: &serde_json::Value) -> Result<f32> {
    v.as_f64()
        .map(|x| x as f32)
        .ok_or_else(|| Error::invalid(format!("config.json: `{key}` is {v}, not a number")))
}
