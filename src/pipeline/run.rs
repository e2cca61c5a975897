//! Carrying out a [`Plan`] on a GGUF model: the output header as llama.cpp's quantizer
//! builds it (`llama_model_quantize_impl`), then every tensor copied or converted and
//! streamed, in the plan's order, into a file that takes OUT's name only when complete.
//!
//! The tensors are cut into pieces (rows of a converted tensor, bytes of a copied one, at
//! most a slab of 16 MiB each) and the pieces grouped into batches of about a slab, which
//! cross tensor boundaries: small tensors share one parallel pass, and the end of one
//! tensor is written while the next one is converted. A batch's converted rows are widened
//! to f32 and quantized on all threads of a rayon pool, in tasks of 64 Ki values; each
//! row is quantized by itself, so the bytes are the same whatever the thread count. Two
//! output slabs alternate: while one batch is handed to the writer, the workers fill the
//! other; the writer's own thread puts the bytes on disk (see
//! [`quantforge_formats::gguf::AtomicFile`]). Memory stays around two output slabs, the
//! writer's few 4 MiB buffers and a few hundred KiB per thread: the source is mapped, the
//! next batch's pages are asked for ahead of use, and each piece's pages are released
//! once it is done.
//!
//! With an importance matrix, each converted tensor is weighted by its entry (see
//! [`super::imatrix`]); every entry is looked up and checked before the output is created,
//! so a missing or misfit entry leaves no file behind.

use super::imatrix::{Imatrix, ImatrixError, ImatrixUse};
use super::plan::{Plan, TensorPlan, TensorSpec};
use quantforge_formats::gguf::{
    AtomicFile, GgufBuilder, GgufError, GgufFile, GgufHeader, GgufModel, GgufWriter,
    KEY_SPLIT_COUNT, KEY_SPLIT_NO, KEY_SPLIT_TENSORS_COUNT, Metadata, SplitLimits, TensorInfo,
    TensorView, Value, plan_split, split_path,
};
use quantforge_kernels::{GgmlType, can_dequantize, can_quantize};
use rayon::prelude::*;
use std::ops::Range;
use std::path::Path;
use std::path::PathBuf;
use std::time::Instant;

/// Bytes of source (or of output, if larger) converted per slab before it is written.
const SLAB_BYTES: usize = 16 << 20;
/// Elements each parallel task widens and quantizes (llama.cpp's chunk is 16 Ki).
const TASK_ELEMENTS: usize = 64 << 10;

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
    #[error("tensor {tensor}: {source}")]
    Codec {
        /// The tensor.
        tensor: String,
        /// What the codec said.
        source: quantforge_kernels::Error,
    },
    /// The importance matrix cannot be used for this plan.
    #[error(transparent)]
    Imatrix(#[from] ImatrixError),
    /// The thread pool could not be built.
    #[error("cannot start {threads} threads: {source}")]
    Threads {
        /// The count asked for.
        threads: usize,
        /// Why not.
        source: rayon::ThreadPoolBuildError,
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

/// One tensor done, for progress reports.
#[derive(Debug)]
pub struct Progress<'a> {
    /// Tensors done so far, this one included.
    pub done: usize,
    /// Tensors in the plan.
    pub total: usize,
    /// The tensor just written.
    pub tensor: &'a TensorPlan,
    /// Its bytes in the source.
    pub bytes_in: u64,
    /// Its bytes in the output.
    pub bytes_out: u64,
    /// How it used the importance matrix (`None`: none given, or the tensor was copied).
    pub imatrix: Option<ImatrixUse>,
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
}

/// The tensor list of a model as [`super::plan::plan`] takes it: in model order, with
/// the part and offset that order `--keep-split` output.
pub fn tensor_specs(model: &GgufModel) -> Vec<TensorSpec> {
    model
        .tensors()
        .map(|v| TensorSpec {
            name: v.name().to_string(),
            ne: v.info().ne4(),
            ty: v.ty(),
            split: u16::try_from(v.part()).unwrap_or(u16::MAX),
            offset: v.offset(),
        })
        .collect()
}

/// The output's metadata as llama.cpp's quantizer writes it: the source's keys in their
/// order, then `general.quantization_version` and `general.file_type` (moved to the end,
/// as `gguf_set_val_*` removes a key before appending it), without the `split.*` keys,
/// then the overrides (each also moved to the end).
pub fn output_metadata(source: &Metadata, plan: &Plan, overrides: &[(String, Value)]) -> Metadata {
    let mut meta = source.clone();
    let put = |meta: &mut Metadata, key: &str, value: Value| {
        meta.remove(key);
        // Keys come from a parsed file or the command line, so they are never empty.
        let _ = meta.set(key, value);
    };
    put(
        &mut meta,
        "general.quantization_version",
        Value::U32(plan.quantization_version),
    );
    put(&mut meta, "general.file_type", Value::U32(plan.file_type));
    for key in [KEY_SPLIT_NO, KEY_SPLIT_COUNT, KEY_SPLIT_TENSORS_COUNT] {
        meta.remove(key);
    }
    for (key, value) in overrides {
        put(&mut meta, key, value.clone());
    }
    meta
}

/// The output header: [`output_metadata`] and every tensor of the plan in its order with
/// its target type. Dimensions are written as ggml counts them (`ggml_n_dims`: trailing
/// 1s dropped).
pub fn output_header(
    model: &GgufModel,
    plan: &Plan,
    overrides: &[(String, Value)],
) -> Result<GgufHeader, RunError> {
    let mut header = GgufHeader::new();
    *header.metadata_mut() = output_metadata(model.metadata(), plan, overrides);
    for t in &plan.tensors {
        let n_dims = t.ne.iter().rposition(|&n| n > 1).map_or(1, |i| i + 1);
        header.push_tensor(TensorInfo::new(&t.name, t.target, &t.ne[..n_dims])?)?;
    }
    Ok(header)
}

/// Writes the quantized model to `output` (atomically: nothing appears under that name
/// unless the whole file was written), calling `progress` after each tensor.
pub fn run(
    model: &GgufModel,
    plan: &Plan,
    output: &Path,
    options: &RunOptions,
    mut progress: impl FnMut(&Progress<'_>) + Send,
) -> Result<Summary, RunError> {
    let start = Instant::now();
    let views: Vec<TensorView<'_>> = model.tensors().collect();
    for t in &plan.tensors {
        let fits = views
            .get(t.input_index)
            .is_some_and(|v| v.name() == t.name && v.ty() == t.source);
        if !fits {
            return Err(RunError::PlanMismatch(format!(
                "tensor #{} is not {} of type {}",
                t.input_index, t.name, t.source
            )));
        }
        check_convertible(t)?;
    }
    let imatrix = options.imatrix.as_ref();
    if let Some(m) = imatrix {
        m.check_finite()?;
    }
    let uses = plan
        .tensors
        .iter()
        .map(|t| match imatrix {
            Some(m) if t.converts() => m.use_for(t).map(Some),
            _ => Ok(None),
        })
        .collect::<Result<Vec<_>, _>>()?;
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(options.threads)
        .build()
        .map_err(|source| RunError::Threads {
            threads: options.threads,
            source,
        })?;

    let header = output_header(model, plan, &options.kv_overrides)?;
    let parts = output_parts(header, plan, output, options.layout)?;
    let sources: Vec<Source<'_>> = plan
        .tensors
        .iter()
        .map(|t| {
            let view = &views[t.input_index];
            Source {
                file: &model.parts()[view.part()],
                offset: view.offset(),
                data: view.data(),
            }
        })
        .collect();
    let weights: Vec<Option<&[f32]>> = plan
        .tensors
        .iter()
        .zip(&uses)
        .map(|(t, u)| match (imatrix, u) {
            (Some(m), Some(ImatrixUse::Used)) => m.get(&t.name),
            _ => None,
        })
        .collect();
    let pieces = pieces(plan, &sources)?;
    let batches = batches(&pieces);
    let mut sink = Sink {
        plan,
        uses: &uses,
        weighted: &weights,
        parts: parts.into_iter(),
        writer: None,
        finished: Vec::new(),
        left: 0,
        tensor_bytes_out: 0,
        summary: Summary::default(),
        progress: &mut progress,
    };
    let job = Job {
        plan,
        sources: &sources,
        weights: &weights,
        pieces: &pieces,
        batches: &batches,
    };
    let mut slabs = [Vec::new(), Vec::new()];
    pool.install(|| job.run(&mut sink, &mut slabs))?;
    let Sink {
        parts,
        writer,
        mut finished,
        mut summary,
        ..
    } = sink;
    // The file being written, then any that hold no tensor at all.
    if let Some(w) = writer {
        summary.file_size += w.bytes_written();
        finished.push(w.finish()?);
    }
    for (path, header) in parts {
        let w = GgufBuilder::from_header(header).create(&path)?;
        summary.file_size += w.bytes_written();
        finished.push(w.finish()?);
    }
    // Only once every file is complete does any take its name.
    for file in finished {
        summary.files.push(file.path().to_path_buf());
        file.commit()?;
    }
    summary.seconds = start.elapsed().as_secs_f64();
    Ok(summary)
}

/// A run of one tensor's source handled as a unit: rows of a converted tensor (converted
/// into a slab, then written) or bytes of a copied one (written straight from the map).
struct Piece {
    /// The tensor's index in the plan.
    tensor: usize,
    /// The bytes of the tensor's source data.
    src: Range<usize>,
    /// Output bytes in the slab (0 for a copied piece).
    out_len: usize,
    /// Whether the tensor starts with this piece.
    first: bool,
    /// Whether the tensor ends with this piece.
    last: bool,
}

/// Every tensor cut into pieces of at most [`SLAB_BYTES`] of source and of output (or
/// one row, if a row is larger), in plan order; a tensor without data is one empty piece.
fn pieces(plan: &Plan, sources: &[Source<'_>]) -> Result<Vec<Piece>, RunError> {
    let mut pieces = Vec::new();
    for (i, (t, source)) in plan.tensors.iter().zip(sources).enumerate() {
        // Source and output bytes of a step, and of the unit a step is made of.
        let (src_unit, out_unit, units) = match row_sizes(t)? {
            Some((src_row, dst_row)) => {
                let task_rows = task_rows(t);
                let rows = (SLAB_BYTES / src_row.max(dst_row))
                    .max(1)
                    .next_multiple_of(task_rows);
                (src_row, dst_row, rows)
            }
            None => (1, 0, SLAB_BYTES),
        };
        let len = source.data.len();
        let mut at = 0;
        loop {
            let end = (at + src_unit * units).min(len);
            pieces.push(Piece {
                tensor: i,
                src: at..end,
                out_len: (end - at) / src_unit * out_unit,
                first: at == 0,
                last: end == len,
            });
            if end == len {
                break;
            }
            at = end;
        }
    }
    Ok(pieces)
}

/// The source and output bytes of one row of a converted tensor that has data; `None`
/// for a copied or empty one.
fn row_sizes(t: &TensorPlan) -> Result<Option<(usize, usize)>, RunError> {
    let n_per_row = t.ne[0] as usize;
    if !t.converts() || n_per_row == 0 || t.ne[1..].contains(&0) {
        return Ok(None);
    }
    let codec_error = |source| RunError::Codec {
        tensor: t.name.clone(),
        source,
    };
    let src_row = t.source.row_size(n_per_row).map_err(codec_error)?;
    let dst_row = t.target.row_size(n_per_row).map_err(codec_error)?;
    Ok(Some((src_row, dst_row)))
}

/// Rows of `t` each parallel task converts.
fn task_rows(t: &TensorPlan) -> usize {
    (TASK_ELEMENTS / (t.ne[0] as usize).max(1)).max(1)
}

/// Consecutive pieces grouped so that each group's source and output together stay
/// within [`SLAB_BYTES`] (a single larger piece is a group by itself). Groups cross tensor
/// boundaries, so that small tensors share one parallel pass and the writing of one
/// tensor's end overlaps the converting of the next one's start.
fn batches(pieces: &[Piece]) -> Vec<Range<usize>> {
    let mut batches = Vec::new();
    let mut start = 0;
    let mut used = 0;
    for (i, p) in pieces.iter().enumerate() {
        let size = p.src.len() + p.out_len;
        if i > start && used + size > SLAB_BYTES {
            batches.push(start..i);
            start = i;
            used = 0;
        }
        used += size;
    }
    if start < pieces.len() {
        batches.push(start..pieces.len());
    }
    batches
}

/// What the converting side of a run reads.
struct Job<'a, 's> {
    plan: &'a Plan,
    sources: &'a [Source<'s>],
    weights: &'a [Option<&'a [f32]>],
    pieces: &'a [Piece],
    batches: &'a [Range<usize>],
}

impl Job<'_, '_> {
    /// Converts batch after batch; while one batch's output is written, the workers of
    /// the current rayon pool convert the next batch into the other slab.
    fn run(&self, sink: &mut Sink<'_, '_>, slabs: &mut [Vec<u8>; 2]) -> Result<(), RunError> {
        let Some(first) = self.batches.first() else {
            return Ok(());
        };
        self.prefetch(first.clone())?;
        let [ready, filling] = slabs;
        self.fill(0, ready)?;
        for b in 0..self.batches.len() {
            let (wrote, filled) = rayon::join(
                || self.write(b, ready, sink),
                || match b + 1 < self.batches.len() {
                    true => self.fill(b + 1, filling),
                    false => Ok(()),
                },
            );
            wrote?;
            filled?;
            std::mem::swap(ready, filling);
        }
        Ok(())
    }

    /// Asks for the source pages of the pieces in `batch`.
    fn prefetch(&self, batch: Range<usize>) -> Result<(), RunError> {
        for p in &self.pieces[batch] {
            if !p.src.is_empty() {
                self.sources[p.tensor].prefetch(p.src.clone())?;
            }
        }
        Ok(())
    }

    /// Converts the converted pieces of batch `b` into `slab`, their rows spread over the
    /// pool in tasks of about [`TASK_ELEMENTS`], then releases their source pages.
    fn fill(&self, b: usize, slab: &mut Vec<u8>) -> Result<(), RunError> {
        if let Some(next) = self.batches.get(b + 1) {
            self.prefetch(next.clone())?;
        }
        let pieces = &self.pieces[self.batches[b].clone()];
        let out_len: usize = pieces.iter().map(|p| p.out_len).sum();
        if slab.len() < out_len {
            slab.resize(out_len, 0);
        }
        // (tensor, source rows, first row, output rows) per task, in output order.
        let mut tasks: Vec<(usize, &[u8], usize, &mut [u8])> = Vec::new();
        let mut rest = &mut slab[..out_len];
        for p in pieces {
            let t = &self.plan.tensors[p.tensor];
            let Some((src_row, dst_row)) = row_sizes(t)? else {
                continue;
            };
            let task_rows = task_rows(t);
            let first_row = p.src.start / src_row;
            let src = &self.sources[p.tensor].data[p.src.clone()];
            for (k, x) in src.chunks(task_rows * src_row).enumerate() {
                let (y, more) = std::mem::take(&mut rest).split_at_mut(x.len() / src_row * dst_row);
                rest = more;
                tasks.push((p.tensor, x, first_row + k * task_rows, y));
            }
        }
        tasks.into_par_iter().try_for_each(|(i, x, first_row, y)| {
            let t = &self.plan.tensors[i];
            let n = y.len() / t.target.type_size() * t.target.block_size();
            let mut f32s = SCRATCH.take();
            f32s.resize(n, 0.0);
            let done = widen_and_quantize(t, x, &mut f32s[..n], first_row, self.weights[i], y);
            SCRATCH.set(f32s);
            done
        })?;
        for p in pieces
            .iter()
            .filter(|p| self.plan.tensors[p.tensor].converts())
        {
            if !p.src.is_empty() {
                self.sources[p.tensor].release(p.src.clone())?;
            }
        }
        Ok(())
    }

    /// Writes batch `b`: converted pieces from `slab`, copied ones from the source.
    fn write(&self, b: usize, slab: &[u8], sink: &mut Sink<'_, '_>) -> Result<(), RunError> {
        let mut at = 0;
        for p in &self.pieces[self.batches[b].clone()] {
            let source = &self.sources[p.tensor];
            if self.plan.tensors[p.tensor].converts() {
                sink.write(p, &slab[at..at + p.out_len])?;
                at += p.out_len;
            } else {
                sink.write(p, &source.data[p.src.clone()])?;
                if !p.src.is_empty() {
                    source.release(p.src.clone())?;
                }
            }
        }
        Ok(())
    }
}

/// The writing side of a run: the output files in turn, the summary, the progress calls.
struct Sink<'a, 'p> {
    plan: &'a Plan,
    uses: &'a [Option<ImatrixUse>],
    weighted: &'a [Option<&'a [f32]>],
    parts: std::vec::IntoIter<(PathBuf, GgufHeader)>,
    writer: Option<GgufWriter<'static, AtomicFile>>,
    finished: Vec<AtomicFile>,
    /// Tensors left in the current file.
    left: usize,
    /// Output bytes of the current tensor so far.
    tensor_bytes_out: u64,
    summary: Summary,
    progress: &'p mut (dyn FnMut(&Progress<'_>) + Send),
}

impl Sink<'_, '_> {
    /// Writes one piece's output; opens the next file before a tensor that does not fit
    /// in the current one, reports a tensor once its last piece is written.
    fn write(&mut self, piece: &Piece, bytes: &[u8]) -> Result<(), RunError> {
        if piece.first {
            while self.left == 0 {
                if let Some(w) = self.writer.take() {
                    self.summary.file_size += w.bytes_written();
                    self.finished.push(w.finish()?);
                }
                let Some((path, header)) = self.parts.next() else {
                    return Err(RunError::PlanMismatch(
                        "the output files hold fewer tensors than the plan".to_string(),
                    ));
                };
                self.left = header.tensors().len();
                self.writer = Some(GgufBuilder::from_header(header).create(&path)?);
            }
            self.left -= 1;
            self.tensor_bytes_out = 0;
        }
        let writer = self
            .writer
            .as_mut()
            .expect("a file is open while tensors are left");
        writer.write_chunk(bytes)?;
        self.tensor_bytes_out += bytes.len() as u64;
        if piece.last {
            let i = piece.tensor;
            let t = &self.plan.tensors[i];
            let bytes_in = piece.src.end as u64;
            self.summary.tensors += 1;
            self.summary.converted += usize::from(t.converts());
            self.summary.imatrix_used += usize::from(self.weighted[i].is_some());
            self.summary.bytes_in += bytes_in;
            self.summary.bytes_out += self.tensor_bytes_out;
            (self.progress)(&Progress {
                done: i + 1,
                total: self.plan.tensors.len(),
                tensor: t,
                bytes_in,
                bytes_out: self.tensor_bytes_out,
                imatrix: self.uses[i],
            });
        }
        Ok(())
    }
}

/// The output files and their headers: `header` (every tensor of the plan, in order) as
/// one file or cut into parts as `layout` says.
pub fn output_parts(
    header: GgufHeader,
    plan: &Plan,
    output: &Path,
    layout: OutputLayout,
) -> Result<Vec<(PathBuf, GgufHeader)>, RunError> {
    let parts = match layout {
        OutputLayout::Single => return Ok(vec![(output.to_path_buf(), header)]),
        OutputLayout::Split(limits) => plan_split(&header, limits)?,
        OutputLayout::KeepSplit => keep_split_parts(&header, plan)?,
    };
    let count = u16::try_from(parts.len()).map_err(|_| {
        RunError::PlanMismatch(format!("{} output files are too many", parts.len()))
    })?;
    Ok((0u16..)
        .zip(parts)
        .map(|(no, part)| (split_path(output, no, count), part))
        .collect())
}

/// llama.cpp's `--keep-split` files: tensors by their input file, the metadata in the
/// first, `split.no` (u16), `split.count` (u16), `split.tensors.count` (i32) appended to
/// each when there are several (`llama_model_quantize_impl`).
fn keep_split_parts(header: &GgufHeader, plan: &Plan) -> Result<Vec<GgufHeader>, RunError> {
    let count = plan
        .tensors
        .iter()
        .map(|t| t.split)
        .max()
        .map_or(1, |m| m + 1);
    let total = i32::try_from(plan.tensors.len())
        .map_err(|_| RunError::PlanMismatch("too many tensors for split.tensors.count".into()))?;
    let mut parts: Vec<GgufHeader> = (0..count)
        .map(|no| {
            let mut part = GgufHeader::new();
            if no == 0 {
                *part.metadata_mut() = header.metadata().clone();
            }
            part
        })
        .collect();
    let mut last = 0;
    for (t, info) in plan.tensors.iter().zip(header.tensors()) {
        if t.split < last {
            return Err(RunError::PlanMismatch(
                "keep-split tensors are not ordered by input file".into(),
            ));
        }
        last = t.split;
        parts[usize::from(t.split)].push_tensor(info.clone())?;
    }
    if count > 1 {
        for (no, part) in (0u16..).zip(parts.iter_mut()) {
            let meta = part.metadata_mut();
            meta.remove(KEY_SPLIT_NO);
            meta.remove(KEY_SPLIT_COUNT);
            meta.remove(KEY_SPLIT_TENSORS_COUNT);
            // Non-empty constant keys: `set` cannot fail.
            let _ = meta.set(KEY_SPLIT_NO, Value::U16(no));
            let _ = meta.set(KEY_SPLIT_COUNT, Value::U16(count));
            let _ = meta.set(KEY_SPLIT_TENSORS_COUNT, Value::I32(total));
        }
    }
    Ok(parts)
}

fn check_convertible(t: &TensorPlan) -> Result<(), RunError> {
    if !t.converts() {
        return Ok(());
    }
    if !can_dequantize(t.source) {
        return Err(RunError::CannotDecode {
            tensor: t.name.clone(),
            ty: t.source,
        });
    }
    if !can_quantize(t.target) {
        return Err(RunError::CannotEncode {
            tensor: t.name.clone(),
            ty: t.target,
        });
    }
    Ok(())
}

/// A tensor's bytes in the (mapped) file that holds them.
struct Source<'a> {
    file: &'a GgufFile,
    offset: u64,
    data: &'a [u8],
}

impl Source<'_> {
    /// Asks the kernel to start reading `range` of the data (no-op for files in memory).
    fn prefetch(&self, range: Range<usize>) -> Result<(), GgufError> {
        self.file
            .prefetch_bytes(self.offset + range.start as u64, range.len())
    }

    /// Lets the pages of `range` leave the resident set; they come back from the file if
    /// read again.
    fn release(&self, range: Range<usize>) -> Result<(), GgufError> {
        self.file
            .release_bytes(self.offset + range.start as u64, range.len())
    }
}

thread_local! {
    /// Each worker's f32 rows, kept between tasks and tensors (a fresh buffer per task
    /// would be mapped, faulted in and unmapped every time).
    static SCRATCH: std::cell::Cell<Vec<f32>> = const { std::cell::Cell::new(Vec::new()) };
}

/// Widens the source rows `x` of `t` into `f32s` and quantizes them into `y`; the rows
/// start at row `first_row` of the tensor.
fn widen_and_quantize(
    t: &TensorPlan,
    x: &[u8],
    f32s: &mut [f32],
    first_row: usize,
    weights: Option<&[f32]>,
    y: &mut [u8],
) -> Result<(), RunError> {
    let codec_error = |source| RunError::Codec {
        tensor: t.name.clone(),
        source,
    };
    let n_per_row = t.ne[0] as usize;
    quantforge_kernels::dequantize(t.source, x, f32s).map_err(codec_error)?;
    quantize_rows(t, f32s, first_row, weights, y).map_err(|(at, e)| match e {
        quantforge_kernels::Error::NonFinite { index, value } => {
            let index = (first_row * n_per_row + at + index) as u64;
            RunError::NonFinite {
                tensor: t.name.clone(),
                value,
                index,
                row: index / n_per_row as u64,
                column: index % n_per_row as u64,
            }
        }
        other => codec_error(other),
    })
}

/// Quantizes consecutive rows of `t` starting at row `first_row` of the tensor, each run of
/// rows of one expert with that expert's importance values (`llama_tensor_quantize_impl`
/// never lets a chunk cross an expert boundary). Errors carry the element offset in `src`
/// of the call that failed.
fn quantize_rows(
    t: &TensorPlan,
    src: &[f32],
    first_row: usize,
    weights: Option<&[f32]>,
    dst: &mut [u8],
) -> Result<(), (usize, quantforge_kernels::Error)> {
    let n_per_row = t.ne[0] as usize;
    let Some(weights) = weights else {
        return quantforge_kernels::quantize(t.target, src, n_per_row, None, dst)
            .map(drop)
            .map_err(|e| (0, e));
    };
    let rows_per_expert = t.ne[1] as usize;
    let n_expert = t.ne[2] as usize;
    let rows = src.len() / n_per_row;
    let dst_row = dst.len() / rows.max(1);
    let mut r = 0;
    while r < rows {
        let row = first_row + r;
        // A 4-D tensor repeats its experts along ne3.
        let expert = (row / rows_per_expert) % n_expert;
        let run = (rows - r).min(rows_per_expert - row % rows_per_expert);
        let w = &weights[expert * n_per_row..(expert + 1) * n_per_row];
        quantforge_kernels::quantize(
            t.target,
            &src[r * n_per_row..(r + run) * n_per_row],
            n_per_row,
            Some(w),
            &mut dst[r * dst_row..(r + run) * dst_row],
        )
        .map_err(|e| (r * n_per_row, e))?;
        r += run;
    }
    Ok(())
}
