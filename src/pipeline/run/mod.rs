//! Carrying out a [`Plan`] on a model (a GGUF, or a safetensors model read as the GGUF it
//! holds, through [`ModelSource`]): the output header as llama.cpp's quantizer
//! builds it (`llama_model_quantize_impl`), then every tensor copied or converted and
//! written in place into a file that takes OUT's name only when complete.
//!
//! Every output file is created first with its whole size reserved (a disk without room
//! fails before any work) and each tensor's place in it known from the header. The
//! tensors are cut into pieces (rows of a converted tensor, bytes of a copied one, at most
//! a slab each: see [`crate::slab`]) and the pieces grouped into batches of about a slab,
//! which cross tensor boundaries, so that small tensors share one parallel pass. A
//! batch's rows are widened to f32 and quantized on all threads of a rayon pool, in tasks
//! of whole rows, straight into an output slab laid out as the file is (tensor padding
//! included); each row is quantized by itself, so the bytes are the same whatever the
//! thread count. A thread of its own writes each filled slab at its offset (whole blocks
//! by direct I/O, from the slab itself: see [`quantforge_formats::output::PlacedFile`])
//! while the workers fill the next ones, two batches at a time (so that a worker done
//! with one batch's tasks takes the other's instead of waiting for the last task).
//!
//! Since any part of a file can be written at any time, batches are converted in an
//! order that mixes the cheap ones with much output (an embedding converted to q8_0) with
//! the costly ones with little (k-quants): the output keeps pace with the work, and a disk
//! slower than the cheap conversions drains them while the costly ones run, instead of
//! stalling every thread. Memory stays around four output slabs and a few hundred KiB per
//! thread: the source is mapped, the next batches' pages are asked for ahead of use, and
//! each batch's pages are released once it is converted.
//!
//! With an importance matrix, each converted tensor is weighted by its entry (see
//! [`super::imatrix`]); every entry is looked up and checked before the output is created,
//! so a missing or misfit entry leaves no file behind.
//!
//! The stages, one file each: `header` (the output files' headers and metadata),
//! `schedule` (pieces, batches and the order they are converted in), `convert` (a batch
//! widened and quantized into its slab, experts apart), `write` (the writing thread and
//! the slabs it returns) and `progress` (the summary and the reports).

mod convert;
pub mod digest;
mod header;
mod progress;
mod quality;
pub mod reuse;
mod schedule;
mod write;

pub use header::{
    OutputPart, PlannedFile, output_header, output_metadata, output_parts, planned_files,
};
pub use progress::{Progress, TensorQuality};

use super::imatrix::{Imatrix, ImatrixError, ImatrixUse};
use super::plan::{Plan, TensorSpec};
use crate::model::{ModelSource, Tensor};
use convert::check_convertible;
use progress::Tracker;
use quantforge_formats::gguf::{GgufError, SplitLimits, Value};
pub use quantforge_formats::output::Durability;
use quantforge_kernels::GgmlType;
use std::path::{Path, PathBuf};
use std::time::Instant;
use write::{Job, Outputs};

/// Why a run failed.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// Reading the input or writing the output.
    #[error(transparent)]
    Gguf(#[from] GgufError),
    /// The plan names a tensor the model does not have (a plan made for another model).
    #[error("the plan does not fit this model: {0}")]
    PlanMismatch(String),
    /// A source type quantforge cannot widen to f32.
    #[error("tensor {tensor}: cannot convert from type {ty}")]
    CannotDecode {
        /// The tensor.
        tensor: String,
        /// Its source type.
        ty: GgmlType,
    },
    /// A target type quantforge cannot quantize to.
    #[error("tensor {tensor}: quantizing to {ty} is not supported")]
    CannotEncode {
        /// The tensor.
        tensor: String,
        /// Its target type.
        ty: GgmlType,
    },
    /// A NaN or infinity in a tensor that is converted.
    #[error(
        "tensor {tensor}: non-finite value {value} at element {index} (row {row}, column {column})"
    )]
    NonFinite {
        /// The tensor.
        tensor: String,
        /// The value.
        value: f32,
        /// Its element index in the tensor.
        index: u64,
        /// Its row.
        row: u64,
        /// Its column.
        column: u64,
    },
    /// Any other codec error while converting a tensor.
    #[error("tensor {tensor}: {cause}")]
    Codec {
        /// The tensor.
        tensor: String,
        /// What the codec said.
        cause: quantforge_kernels::Error,
    },
    /// The importance matrix cannot be used for this plan.
    #[error(transparent)]
    Imatrix(#[from] ImatrixError),
    /// Creating, writing or committing an output file.
    #[error("{what} {}: {cause}", path.display())]
    Output {
        /// What failed ("cannot write").
        what: &'static str,
        /// The output file (its final name).
        path: PathBuf,
        /// Why.
        cause: std::io::Error,
    },
    /// Reading the model (a safetensors model's keys, a tensor's pages).
    #[error(transparent)]
    Model(#[from] crate::error::Error),
    /// `--only-part` names a part the split set does not have.
    #[error("--only-part {part}: the output is a set of {parts} part(s)")]
    NoSuchPart {
        /// The part asked for (from 1).
        part: usize,
        /// Parts in the set.
        parts: usize,
    },
    /// The thread pool could not be built.
    #[error("cannot start {threads} threads: {cause}")]
    Threads {
        /// The count asked for.
        threads: usize,
        /// Why not.
        cause: rayon::ThreadPoolBuildError,
    },
}

/// Options of a run that are not part of the plan.
#[derive(Clone, Debug, Default)]
pub struct RunOptions {
    /// Worker threads; 0 for one per CPU.
    pub threads: usize,
    /// Metadata set after llama.cpp's own keys (`--override-kv`, then the
    /// `quantize.imatrix.*` keys of [`Imatrix::metadata`]), in order.
    pub kv_overrides: Vec<(String, Value)>,
    /// The importance matrix (`--imatrix`), already filtered; the plan must have been made
    /// with `has_imatrix` set to whether this is given and not empty.
    pub imatrix: Option<Imatrix>,
    /// How the output is laid out in files.
    pub layout: OutputLayout,
    /// Whether the finished files are fsynced before they take their names
    /// ([`Durability::Synced`], the default) or only renamed (`--no-sync`).
    pub durability: Durability,
    /// Measure every converted tensor's error against its source values as it is
    /// quantized (`--report`): [`Summary::quality`].
    pub quality: bool,
    /// `--only-part K`: of a split layout, write only part K (from 1), the same bytes as
    /// that part of the whole set; its tensors are the only ones read and converted.
    pub only_part: Option<usize>,
    /// `--reuse OLD`: copy the converted tensors an earlier run made the same way (one
    /// output only).
    pub reuse: Option<std::sync::Arc<reuse::Reuse>>,
}

/// The files a run writes. With anything but [`OutputLayout::Single`] the output path
/// given to [`run`] is the prefix of parts named `PREFIX-00001-of-0000N.gguf`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum OutputLayout {
    /// One file.
    #[default]
    Single,
    /// `--keep-split`: one file per input file, as llama.cpp's quantizer writes them: the
    /// first holds the metadata, the others only their tensors, and when there are
    /// several each gets `split.no`, `split.count` and `split.tensors.count`, in that
    /// order. The plan must have been made with `keep_split` set.
    KeepSplit,
    /// `--split-max-size` / `--split-max-tensors`: a split set cut by size or count, as
    /// gguf-split writes it.
    Split(SplitLimits),
}

/// What a run did.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Summary {
    /// Tensors written.
    pub tensors: usize,
    /// Tensors whose type changed.
    pub converted: usize,
    /// Converted tensors weighted by an importance matrix entry.
    pub imatrix_used: usize,
    /// Source tensor bytes.
    pub bytes_in: u64,
    /// Output tensor bytes (without header and padding).
    pub bytes_out: u64,
    /// Output file size (all files together).
    pub file_size: u64,
    /// The files written, in order.
    pub files: Vec<PathBuf>,
    /// Wall time in seconds.
    pub seconds: f64,
    /// With [`RunOptions::quality`], each converted tensor's error, in the order the
    /// tensors were finished.
    pub quality: Vec<TensorQuality>,
    /// Each file's header, as [`Summary::files`] lists them.
    pub headers: Vec<FileHeader>,
    /// Every tensor written, in plan order: where it is and its digests.
    pub records: Vec<TensorRecord>,
    /// Every file of the output's set, written or not (with [`RunOptions::only_part`],
    /// [`Summary::files`] is one of them).
    pub set: Vec<PathBuf>,
    /// The index in [`Summary::set`] of the first file written.
    pub first_part: usize,
    /// Tensors copied from an earlier run's output (`--reuse`).
    pub reused: usize,
}

/// A written file's header: what `quantforge verify` checks it by.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FileHeader {
    /// Its bytes (the tensor data starts there).
    pub data_offset: u64,
    /// Their [`digest::bytes_digest`].
    pub digest: u64,
}

/// A tensor written by a run, for its manifest.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorRecord {
    /// Its name.
    pub name: String,
    /// Its type in the output.
    pub ty: GgmlType,
    /// Its type in the source.
    pub source_type: GgmlType,
    /// Its shape (ggml order).
    pub ne: [u64; 4],
    /// The file it is in (an index into [`Summary::files`]).
    pub file: usize,
    /// Its data's offset in that file.
    pub offset: u64,
    /// Its data's bytes.
    pub size: u64,
    /// The [`digest`] of its source data (as stored in the source).
    pub source_digest: u64,
    /// The [`digest`] of its data in the output.
    pub digest: u64,
    /// The digest of the importance values it was quantized with
    /// ([`reuse::imatrix_digest`]), if any.
    pub imatrix_digest: Option<u64>,
}

/// The tensor list of a model as [`super::plan::plan`] takes it: in model order, with
/// the part and offset that order `--keep-split` output.
pub fn tensor_specs(model: &impl ModelSource) -> Result<Vec<TensorSpec>, RunError> {
    Ok(model
        .tensors()?
        .iter()
        .map(|v| {
            let dims = v.gguf_dims();
            TensorSpec {
                name: v.name().to_string(),
                ne: dims.ne4(),
                ty: dims.ty,
                split: u16::try_from(v.part()).unwrap_or(u16::MAX),
                offset: v.offset(),
            }
        })
        .collect())
}

/// One output of a run: the plan it follows and where it goes (with a split layout, the
/// prefix of its parts).
#[derive(Clone, Copy, Debug)]
pub struct Target<'a> {
    /// The plan.
    pub plan: &'a Plan,
    /// The output file, or the prefix of its parts.
    pub output: &'a Path,
}

/// Writes the quantized model to `output` (atomically: nothing appears under that name
/// unless the whole file was written), calling `progress` after each tensor.
pub fn run(
    model: &impl ModelSource,
    plan: &Plan,
    output: &Path,
    options: &RunOptions,
    progress: impl FnMut(&Progress<'_>) + Send,
) -> Result<Summary, RunError> {
    let mut summaries = run_many(model, &[Target { plan, output }], options, progress)?;
    Ok(summaries.remove(0))
}

/// Writes several quantizations of one model in one pass, one per target: each source
/// tensor is read and widened to f32 once and quantized for every output that converts
/// it, and each output is the file [`run`] writes for its plan, byte for byte. The plans
/// must list the same tensors in the same order (plans of one model made with the same
/// options but the preset). No output takes its name unless every output was written;
/// `progress` is called after each tensor of each output.
pub fn run_many(
    model: &impl ModelSource,
    targets: &[Target<'_>],
    options: &RunOptions,
    mut progress: impl FnMut(&Progress<'_>) + Send,
) -> Result<Vec<Summary>, RunError> {
    let start = Instant::now();
    let tensors = model.tensors()?;
    // With --only-part, each output's plan is cut to the tensors of that part.
    let part_plans = match options.only_part {
        Some(k) => {
            let metadata = model.gguf_metadata()?;
            let plans = targets
                .iter()
                .map(|t| part_plan(&metadata, t, k, options))
                .collect::<Result<Vec<_>, _>>()?;
            Some(plans)
        }
        None => None,
    };
    let plans: Vec<&Plan> = match &part_plans {
        Some(plans) => plans.iter().collect(),
        None => targets.iter().map(|t| t.plan).collect(),
    };
    let Some(first) = plans.first() else {
        return Ok(Vec::new());
    };
    for plan in &plans {
        let same_tensors = plan.tensors.len() == first.tensors.len()
            && plan
                .tensors
                .iter()
                .zip(&first.tensors)
                .all(|(a, b)| a.input_index == b.input_index);
        if !same_tensors {
            return Err(RunError::PlanMismatch(
                "the outputs' plans list different tensors or orders".to_string(),
            ));
        }
        for t in &plan.tensors {
            let fits = tensors
                .get(t.input_index)
                .is_some_and(|v| v.name() == t.source_name && v.gguf_dims().ty == t.source);
            if !fits {
                return Err(RunError::PlanMismatch(format!(
                    "tensor #{} is not {} of type {}",
                    t.input_index, t.source_name, t.source
                )));
            }
            check_convertible(t)?;
        }
    }
    let imatrix = options.imatrix.as_ref();
    if let Some(m) = imatrix {
        m.check_finite()?;
    }
    let uses = plans
        .iter()
        .map(|plan| {
            plan.tensors
                .iter()
                .map(|t| match imatrix {
                    Some(m) if t.converts() => m.use_for(t).map(Some),
                    _ => Ok(None),
                })
                .collect::<Result<Vec<_>, _>>()
        })
        .collect::<Result<Vec<_>, _>>()?;
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(options.threads)
        .build()
        .map_err(|cause| RunError::Threads {
            threads: options.threads,
            cause,
        })?;

    let sources: Vec<&Tensor<'_>> = first
        .tensors
        .iter()
        .map(|t| &tensors[t.input_index])
        .collect();
    let weights: Vec<Vec<Option<&[f32]>>> = plans
        .iter()
        .zip(&uses)
        .map(|(plan, uses)| {
            plan.tensors
                .iter()
                .zip(uses)
                .map(|(t, u)| match (imatrix, u) {
                    (Some(m), Some(ImatrixUse::Used)) => m.get(&t.source_name),
                    _ => None,
                })
                .collect()
        })
        .collect();
    // Every file is created, its size reserved and its header written before any tensor
    // is converted: a disk without room fails at once. One output's header (a copy of the
    // source's metadata) is built at a time.
    let metadata = model.gguf_metadata()?;
    let mut outputs = Outputs::default();
    let mut sets = Vec::with_capacity(targets.len());
    for target in targets {
        let header = output_header(&metadata, target.plan, &options.kv_overrides)?;
        let mut parts = output_parts(header, target.plan, target.output, options.layout)?;
        let set: Vec<PathBuf> = parts.iter().map(|p| p.path.clone()).collect();
        sets.push((set, options.only_part.map_or(0, |k| k - 1)));
        if let Some(k) = options.only_part {
            parts = vec![parts.swap_remove(k - 1)];
        }
        outputs.add(&parts, options.durability)?;
    }
    drop(metadata);
    let Outputs {
        mut files,
        owners,
        headers,
        places,
        header_digests,
    } = outputs;
    if places.iter().any(|p| p.len() != first.tensors.len()) {
        return Err(RunError::PlanMismatch(
            "the output files hold a different number of tensors than the plan".to_string(),
        ));
    }
    let pieces = schedule::pieces(&plans, &sources, &places)?;
    let batches = schedule::batches(&pieces);
    // --reuse: which converted tensors an earlier run made the same way, their source
    // digests read and checked first (on all threads).
    let reused: Vec<Option<(&[u8], TensorRecord)>> = match &options.reuse {
        Some(_) if plans.len() > 1 => {
            return Err(RunError::PlanMismatch(
                "--reuse takes one output".to_string(),
            ));
        }
        Some(r) => pool.install(|| {
            use rayon::prelude::*;
            first
                .tensors
                .par_iter()
                .zip(&sources)
                .zip(&weights[0])
                .map(|((t, source), w)| match t.converts() {
                    true => r.find(t, source, *w),
                    false => Ok(None),
                })
                .collect::<Result<Vec<_>, _>>()
        })?,
        None => vec![None; first.tensors.len()],
    };
    let quality = options
        .quality
        .then(|| quality::Quality::new(plans.iter().map(|p| p.tensors.len())));
    let digests = digest::Digests::new(plans.len(), first.tensors.len());
    for (i, r) in reused.iter().enumerate() {
        if let Some((_, old)) = r {
            digests.add_source(i, old.source_digest);
        }
    }
    let old_data: Vec<Option<(&[u8], u64)>> = reused
        .iter()
        .zip(places.first().into_iter().flatten())
        .map(|(r, place)| r.as_ref().map(|(data, _)| (*data, place.at)))
        .collect();
    let job = Job {
        reused: &old_data,
        digests: &digests,
        quality: quality.as_ref(),
        plans: &plans,
        sources: &sources,
        weights: &weights,
        pieces: &pieces,
        batches: &batches,
    };
    let mut tracker = Tracker::new(
        &plans,
        &uses,
        &weights,
        &pieces,
        quality.as_ref(),
        &mut progress,
    );
    pool.install(|| job.write_all(&mut files, headers, &mut tracker))?;
    let mut summaries = tracker.into_summaries();
    for (k, (summary, (set, first_part))) in summaries.iter_mut().zip(sets).enumerate() {
        summary.set = set;
        summary.first_part = first_part;
        let first_file = owners.iter().position(|&o| o == k).unwrap_or(0);
        summary.records = plans[k]
            .tensors
            .iter()
            .zip(&places[k])
            .enumerate()
            .map(|(i, (t, place))| TensorRecord {
                name: t.name.clone(),
                ty: t.target,
                source_type: t.source,
                ne: t.ne,
                file: place.part - first_file,
                offset: place.at,
                size: t.bytes_as(t.target).unwrap_or(0),
                source_digest: digests.source(i),
                digest: digests.output(k, i),
                imatrix_digest: weights[k][i].map(reuse::imatrix_digest),
            })
            .collect();
    }
    if let Some(summary) = summaries.first_mut() {
        let olds: Vec<Option<TensorRecord>> =
            reused.into_iter().map(|r| r.map(|(_, old)| old)).collect();
        reuse::check(&summary.records, &olds)?;
        summary.reused = olds.iter().flatten().count();
    }
    // Only once every file is complete does any take its name.
    for ((file, k), header) in files.into_iter().zip(owners).zip(header_digests) {
        let summary = &mut summaries[k];
        summary.headers.push(header);
        summary.file_size += file.len();
        summary.files.push(file.path().to_path_buf());
        let path = file.path().to_path_buf();
        file.commit().map_err(|cause| RunError::Output {
            what: "cannot write",
            path,
            cause,
        })?;
    }
    let seconds = start.elapsed().as_secs_f64();
    for summary in &mut summaries {
        summary.seconds = seconds;
    }
    Ok(summaries)
}

/// The plan of part `k` (from 1) of `target`'s split set: its tensors only, which the
/// parts hold in plan order.
fn part_plan(
    metadata: &quantforge_formats::gguf::Metadata,
    target: &Target<'_>,
    k: usize,
    options: &RunOptions,
) -> Result<Plan, RunError> {
    let header = output_header(metadata, target.plan, &options.kv_overrides)?;
    let parts = output_parts(header, target.plan, target.output, options.layout)?;
    if k == 0 || k > parts.len() {
        return Err(RunError::NoSuchPart {
            part: k,
            parts: parts.len(),
        });
    }
    let before: usize = parts[..k - 1]
        .iter()
        .map(|p| p.header.tensors().len())
        .sum();
    let count = parts[k - 1].header.tensors().len();
    let mut plan = target.plan.clone();
    plan.tensors = plan.tensors[before..before + count].to_vec();
    Ok(plan)
}
