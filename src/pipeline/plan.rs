//! The per-tensor plan of a quantization: for each tensor of a model, the type llama.cpp's
//! quantizer would give it, and why.
//!
//! This is a port of the decision logic in llama.cpp's `src/llama-quant.cpp` (as vendored
//! by llama-cpp-sys-2 0.1.161): `llama_model_quantize_impl`'s ordering of tensors, its
//! counters, `llama_tensor_get_type` with the preset mixes, the shape fallbacks, and the
//! `general.file_type` it writes. It does no I/O: give it the model's hyperparameters
//! ([`ModelParams`], e.g. [`ModelParams::from_gguf`]), its tensor list ([`TensorSpec`]) and
//! the [`Options`] `llama-quantize` would get, and [`plan`] returns the [`Plan`].
//!
//! ```
//! use quantforge::pipeline::plan::{ModelParams, Options, Preset, TensorSpec, plan};
//! use quantforge::GgmlType;
//! let model = ModelParams::new("llama", 1, 8, 8);
//! let tensors = [
//!     TensorSpec::new("blk.0.attn_v.weight", [256, 256, 1, 1], GgmlType::F16),
//!     TensorSpec::new("blk.0.attn_norm.weight", [256, 1, 1, 1], GgmlType::F32),
//! ];
//! let p = plan(&model, &tensors, &Options::new(Preset::parse("Q4_K_M").unwrap())).unwrap();
//! // Output order is llama.cpp's: by layer, then by name.
//! assert_eq!(p.tensors[0].name, "blk.0.attn_norm.weight");
//! assert_eq!(p.tensors[0].target, GgmlType::F32); // norms stay
//! assert_eq!(p.tensors[1].target, GgmlType::Q6_K); // attn_v of the first layer: more bits
//! ```

mod error;
mod ftype;
mod mix;
mod model;
mod order;
mod prune;
mod rules;

pub use error::PlanError;
pub use ftype::{FILE_TYPE_GUESSED, FileType, Preset, parse_leading_int};
pub use model::ModelParams;
pub use rules::Category;

#[cfg(test)]
use order::layer_of;
use order::{guess_file_type, load_order};

use quantforge_kernels::GgmlType;
use regex::Regex;
use std::collections::HashSet;
use std::fmt;

/// `GGML_QNT_VERSION`, written to `general.quantization_version` by every quantization.
pub const QUANTIZATION_VERSION: u32 = 2;

/// One tensor of the source model.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorSpec {
    /// Its name.
    pub name: String,
    /// ggml dimensions, innermost first (`ne[0]` is the row length); unused ones are 1.
    pub ne: [u64; 4],
    /// Its type in the source.
    pub ty: GgmlType,
    /// Which file of a split set holds it (0 for a single file).
    pub split: u16,
    /// Its data offset within that file, which orders tensors under `--keep-split`.
    pub offset: u64,
}

impl TensorSpec {
    /// A tensor of a single-file model; the offset is taken as the list position.
    pub fn new(name: impl Into<String>, ne: [u64; 4], ty: GgmlType) -> TensorSpec {
        TensorSpec {
            name: name.into(),
            ne,
            ty,
            split: 0,
            offset: 0,
        }
    }
}

/// A `--tensor-type PATTERN=TYPE` rule: tensors whose name the regular expression matches
/// anywhere get `TYPE` instead of the mix's choice (the first matching rule wins).
#[derive(Clone, Debug)]
pub struct TensorTypeRule {
    /// The pattern as given (after lowercasing, as `llama-quantize` does).
    pub pattern: String,
    regex: Regex,
    /// The type it forces.
    pub ty: GgmlType,
}

impl TensorTypeRule {
    /// A rule from a pattern and a type. The pattern is used as given.
    pub fn new(pattern: &str, ty: GgmlType) -> Result<TensorTypeRule, PlanError> {
        let regex = Regex::new(pattern).map_err(|e| PlanError::BadPattern {
            pattern: pattern.to_string(),
            cause: Box::new(e),
        })?;
        Ok(TensorTypeRule {
            pattern: pattern.to_string(),
            regex,
            ty,
        })
    }

    /// Parses `llama-quantize`'s `--tensor-type` argument: `PATTERN=TYPE`, split at the
    /// first `=`, the pattern lowercased, the type a ggml type name in any case.
    pub fn parse(arg: &str) -> Result<TensorTypeRule, PlanError> {
        let malformed = || PlanError::MalformedTensorType(arg.to_string());
        let (pattern, ty) = arg.split_once('=').ok_or_else(malformed)?;
        if pattern.is_empty() || ty.is_empty() {
            return Err(malformed());
        }
        let ty = GgmlType::from_name(ty).map_err(|_| PlanError::UnknownType(ty.to_string()))?;
        TensorTypeRule::new(&pattern.to_ascii_lowercase(), ty)
    }

    /// Whether the rule applies to a tensor name.
    pub fn matches(&self, name: &str) -> bool {
        self.regex.is_match(name)
    }
}

/// The options of a quantization that bear on the plan, named after `llama-quantize`'s
/// (`llama_model_quantize_params`).
#[derive(Clone, Debug)]
pub struct Options {
    /// The target file type.
    pub ftype: FileType,
    /// `COPY`: copy every tensor unchanged.
    pub only_copy: bool,
    /// `--pure`: no mix, every quantizable tensor gets the default type.
    pub pure: bool,
    /// `false` with `--leave-output-tensor`: `output.weight` is kept as it is.
    pub quantize_output_tensor: bool,
    /// `--output-tensor-type`.
    pub output_tensor_type: Option<GgmlType>,
    /// `--token-embedding-type`.
    pub token_embedding_type: Option<GgmlType>,
    /// `--tensor-type` rules, in the order given.
    pub tensor_types: Vec<TensorTypeRule>,
    /// An importance matrix is given (`--imatrix`); some mixes depend on it.
    pub has_imatrix: bool,
    /// `--allow-requantize`.
    pub allow_requantize: bool,
    /// `--keep-split`: one output file per input file, tensors in file order.
    pub keep_split: bool,
    /// `--prune-layers`: the layers left out of the output, those after them renumbered
    /// (llama-quantize passes them sorted, without duplicates). The layer-dependent mix
    /// rules still count the source's layers, as llama.cpp's do.
    pub prune_layers: Vec<u32>,
}

impl Options {
    /// The defaults of `llama-quantize` for a preset.
    pub fn new(preset: Preset) -> Options {
        Options {
            ftype: preset.ftype,
            only_copy: preset.copy,
            pure: false,
            quantize_output_tensor: true,
            output_tensor_type: None,
            token_embedding_type: None,
            tensor_types: Vec::new(),
            has_imatrix: false,
            allow_requantize: false,
            keep_split: false,
            prune_layers: Vec::new(),
        }
    }
}

/// Why a tensor gets its target type.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reason {
    /// llama.cpp never quantizes this tensor (1-D, a norm, a router, `COPY`, ...).
    Kept(&'static str),
    /// `--token-embedding-type`.
    TokenEmbeddingType,
    /// `--output-tensor-type`.
    OutputTensorType,
    /// A `--tensor-type` rule (its pattern).
    TensorType(String),
    /// The file type's default type (no mix rule changed it).
    Default,
    /// `--pure`: the default type, mix rules off.
    Pure,
    /// A rule of the preset mix for this category of tensor changed the type.
    Mix(Category),
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reason::Kept(why) => write!(f, "kept ({why})"),
            Reason::TokenEmbeddingType => f.write_str("--token-embedding-type"),
            Reason::OutputTensorType => f.write_str("--output-tensor-type"),
            Reason::TensorType(pattern) => write!(f, "--tensor-type {pattern}"),
            Reason::Default => f.write_str("default"),
            Reason::Pure => f.write_str("--pure"),
            Reason::Mix(category) => write!(f, "mix rule ({category:?})"),
        }
    }
}

/// A demotion because the rows are not whole blocks of the type first chosen.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fallback {
    /// The type chosen before the fallback.
    pub wanted: GgmlType,
    /// The row length that did not fit it.
    pub ncols: u64,
}

/// The decision for one tensor.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorPlan {
    /// Its position in the tensor list given to [`plan`].
    pub input_index: usize,
    /// Its name in the output.
    pub name: String,
    /// Its name in the source (and in the importance matrix); other than `name` only
    /// when `--prune-layers` renumbered its layer.
    pub source_name: String,
    /// Its ggml dimensions.
    pub ne: [u64; 4],
    /// Its type in the source.
    pub source: GgmlType,
    /// Its type in the output; equal to `source` means the bytes are copied.
    pub target: GgmlType,
    /// Why.
    pub reason: Reason,
    /// The fallback taken, if any.
    pub fallback: Option<Fallback>,
    /// Whether llama.cpp lets this tensor be quantized at all.
    pub quantizable: bool,
    /// Whether making `target` needs an importance matrix.
    pub requires_imatrix: bool,
    /// The output file it goes to (0 unless `--keep-split`).
    pub split: u16,
}

impl TensorPlan {
    /// Whether the data changes type (otherwise it is copied byte for byte).
    pub fn converts(&self) -> bool {
        self.source != self.target
    }

    /// Number of elements.
    pub fn n_elements(&self) -> u64 {
        self.ne.iter().product()
    }

    /// Bytes of the tensor in `ty`, if its rows are whole blocks of it.
    pub fn bytes_as(&self, ty: GgmlType) -> Option<u64> {
        let row = ty.row_size(usize::try_from(self.ne[0]).ok()?).ok()? as u64;
        row.checked_mul(self.ne[1..].iter().product())
    }
}

/// The plan of a whole quantization.
#[derive(Clone, Debug)]
pub struct Plan {
    /// Every tensor, in output order (llama.cpp's: by layer, then by name; file order
    /// under `--keep-split`).
    pub tensors: Vec<TensorPlan>,
    /// The value written to `general.file_type` (for `COPY`, the source's, or a guess
    /// with bit 1024 set when the source has none).
    pub file_type: u32,
    /// The value written to `general.quantization_version`.
    pub quantization_version: u32,
    /// How many tensors took a fallback.
    pub n_fallback: usize,
    /// With `--prune-layers`: the `{arch}.block_count` key and the layers kept, set after
    /// every other key as llama.cpp sets it.
    pub block_count: Option<(String, u32)>,
    has_imatrix: bool,
    allow_requantize: bool,
}

impl Plan {
    /// Checks what llama.cpp checks before and while writing: an importance matrix where
    /// a target needs one, and `--allow-requantize` where a quantized tensor changes type.
    /// The first offending tensor in output order is named.
    pub fn check_runnable(&self) -> Result<(), PlanError> {
        if !self.has_imatrix
            && let Some(t) = self
                .tensors
                .iter()
                .find(|t| t.quantizable && t.requires_imatrix)
        {
            return Err(PlanError::ImatrixRequired {
                tensor: t.name.clone(),
                ty: t.target,
            });
        }
        if !self.allow_requantize
            && let Some(t) = self
                .tensors
                .iter()
                .find(|t| t.converts() && t.source.is_quantized())
        {
            return Err(PlanError::RequantizeDisabled {
                tensor: t.name.clone(),
                from: t.source,
            });
        }
        Ok(())
    }
}

/// Decides every tensor's target type as `llama_model_quantize` would for this model,
/// tensor list and options. Errors where llama.cpp would refuse the whole run (an invalid
/// target file type, a shape no fallback fits, an expert tensor without a layer); what
/// llama.cpp only discovers while writing is left to [`Plan::check_runnable`].
pub fn plan(
    model: &ModelParams,
    tensors: &[TensorSpec],
    options: &Options,
) -> Result<Plan, PlanError> {
    let default_type = options
        .ftype
        .default_type()
        .ok_or(PlanError::InvalidFileType(options.ftype))?;
    if let Some(dup) = first_repeat(tensors.iter().map(|t| t.name.as_str())) {
        return Err(PlanError::DuplicateTensor(dup.to_string()));
    }

    let mut by_load: Vec<usize> = (0..tensors.len()).collect();
    by_load.sort_by(|&a, &b| load_order(&tensors[a], &tensors[b]));
    let mut order = by_load.clone();
    if options.keep_split {
        order.sort_by_key(|&i| (tensors[i].split, tensors[i].offset));
    }

    // Pruned layers drop out of everything below; the kept tensors carry their new names
    // (llama.cpp renames before counting and deciding).
    let mut block_count = None;
    let renamed: Vec<TensorSpec>;
    let kept: &[TensorSpec] = if options.prune_layers.is_empty() {
        tensors
    } else {
        let pruned = prune::prune(tensors, &by_load, &options.prune_layers)?;
        block_count = Some((format!("{}.block_count", model.arch), pruned.block_count));
        renamed = tensors
            .iter()
            .zip(&pruned.names)
            .map(|(t, name)| TensorSpec {
                name: name.clone().unwrap_or_default(),
                ..t.clone()
            })
            .collect();
        order.retain(|&i| pruned.names[i].is_some());
        if let Some(dup) = first_repeat(order.iter().map(|&i| renamed[i].name.as_str())) {
            return Err(PlanError::DuplicateTensor(dup.to_string()));
        }
        &renamed
    };

    let file_type = if options.only_copy {
        model.file_type.unwrap_or_else(|| {
            let loaded: Vec<&TensorSpec> = by_load.iter().map(|&i| &tensors[i]).collect();
            guess_file_type(&loaded)
        })
    } else {
        options.ftype.code()
    };

    let mut counters = mix::Counters {
        n_attention_wv: order
            .iter()
            .filter(|&&i| Category::of(&kept[i].name).is_attn_v())
            .count() as i64,
        tied_embeddings: !order.iter().any(|&i| kept[i].name == "output.weight"),
        ..mix::Counters::default()
    };
    let cx = mix::MixContext {
        model,
        ftype: options.ftype,
        output_tensor_type: options.output_tensor_type,
        token_embedding_type: options.token_embedding_type,
        has_imatrix: options.has_imatrix,
    };

    let mut planned = Vec::with_capacity(tensors.len());
    let mut n_fallback = 0;
    for &index in &order {
        let t = &kept[index];
        let mut entry = TensorPlan {
            input_index: index,
            name: t.name.clone(),
            source_name: tensors[index].name.clone(),
            ne: t.ne,
            source: t.ty,
            target: t.ty,
            reason: Reason::Default,
            fallback: None,
            quantizable: false,
            requires_imatrix: false,
            split: if options.keep_split { t.split } else { 0 },
        };
        if let Some(why) = rules::keep_reason(
            &t.name,
            &t.ne,
            &model.arch,
            options.only_copy,
            options.quantize_output_tensor,
        ) {
            entry.reason = Reason::Kept(why);
        } else {
            entry.quantizable = true;
            let TypeChoice {
                target,
                reason,
                fallback,
            } = tensor_type(&cx, &mut counters, t, options, default_type)?;
            if fallback.is_some() {
                n_fallback += 1;
            }
            if target != t.ty && !t.ne[0].is_multiple_of(target.block_size() as u64) {
                return Err(PlanError::RowNotWholeBlocks {
                    tensor: t.name.clone(),
                    ty: target,
                    ncols: t.ne[0],
                    block: target.block_size(),
                });
            }
            entry.target = target;
            entry.reason = reason;
            entry.fallback = fallback;
            entry.requires_imatrix = rules::requires_imatrix(&t.name, target, options.ftype);
        }
        planned.push(entry);
    }

    Ok(Plan {
        tensors: planned,
        file_type,
        quantization_version: QUANTIZATION_VERSION,
        n_fallback,
        block_count,
        has_imatrix: options.has_imatrix,
        allow_requantize: options.allow_requantize,
    })
}

/// The first name that appeared before.
fn first_repeat<'a>(mut names: impl Iterator<Item = &'a str>) -> Option<&'a str> {
    let mut seen = HashSet::new();
    names.find(|&n| !seen.insert(n))
}

/// The type of one quantizable tensor (`llama_tensor_get_type`): the explicit options
/// first, then a `--tensor-type` rule or the mix, then the shape fallback.
fn tensor_type(
    cx: &mix::MixContext<'_>,
    counters: &mut mix::Counters,
    t: &TensorSpec,
    options: &Options,
    default_type: GgmlType,
) -> Result<TypeChoice, PlanError> {
    let choice = |target, reason| TypeChoice {
        target,
        reason,
        fallback: None,
    };
    let category = Category::of(&t.name);
    let rule_for = |name: &str| options.tensor_types.iter().find(|r| r.matches(name));
    if let Some(ty) = options.token_embedding_type
        && category == Category::TokenEmbd
    {
        // per_layer_token_embd follows --token-embedding-type unless a --tensor-type
        // rule names it.
        if t.name != "per_layer_token_embd.weight" || rule_for(&t.name).is_none() {
            return Ok(choice(ty, Reason::TokenEmbeddingType));
        }
    }
    if let Some(ty) = options.output_tensor_type
        && category == Category::Output
    {
        return Ok(choice(ty, Reason::OutputTensorType));
    }
    if !default_type.is_quantized() {
        return Ok(choice(default_type, Reason::Default));
    }
    let (wanted, reason) = if let Some(rule) = rule_for(&t.name) {
        (rule.ty, Reason::TensorType(rule.pattern.clone()))
    } else if options.pure {
        (default_type, Reason::Pure)
    } else {
        let ty = mix::mix_type(cx, counters, &t.name, &t.ne, category, default_type)?;
        let reason = if ty == default_type {
            Reason::Default
        } else {
            Reason::Mix(category)
        };
        (ty, reason)
    };
    let fallback = rules::fallback(&t.name, t.ne[0], wanted)?;
    Ok(match fallback {
        Some(ty) => TypeChoice {
            target: ty,
            reason,
            fallback: Some(Fallback {
                wanted,
                ncols: t.ne[0],
            }),
        },
        None => choice(wanted, reason),
    })
}

/// The type [`tensor_type`] chose for a tensor, why, and the fallback that changed it.
struct TypeChoice {
    target: GgmlType,
    reason: Reason,
    fallback: Option<Fallback>,
}

#[cfg(test)]
mod tests;
