//! Carrying out a [`Plan`] on a GGUF model: the output header as llama.cpp's quantizer
//! builds it (`llama_model_quantize_impl`), then every tensor copied or converted and
//! written in place into a file that takes OUT's name only when complete.
//!
//! Every output file is created first with its whole size reserved (a disk without room
//! fails before any work) and each tensor's place in it known from the header. The
//! tensors are cut into pieces (rows of a converted tensor, bytes of a copied one, at most
//! a slab of 16 MiB each) and the pieces grouped into batches of about a slab, which cross
//! tensor boundaries, so that small tensors share one parallel pass. A batch's rows are
//! widened to f32 and quantized on all threads of a rayon pool, in tasks of 64 Ki values,
//! straight into an output slab laid out as the file is (tensor padding included); each
//! row is quantized by itself, so the bytes are the same whatever the thread count. A
//! thread of its own writes each filled slab at its offset (whole blocks by direct I/O,
//! from the slab itself: see [`PlacedFile`]) while the workers fill the next one.
//!
//! Since any part of a file can be written at any time, batches are converted in an
//! order that mixes the cheap ones with much output (an embedding converted to q8_0) with
//! the costly ones with little (k-quants): the output keeps pace with the work, and a disk
//! slower than the cheap conversions drains them while the costly ones run, instead of
//! stalling every thread. Memory stays around four output slabs and a few hundred KiB per
//! thread: the source is mapped, the next batch's pages are asked for ahead of use, and
//! each batch's pages are released once it is converted.
//!
//! With an importance matrix, each converted tensor is weighted by its entry (see
//! [`super::imatrix`]); every entry is looked up and checked before the output is created,
//! so a missing or misfit entry leaves no file behind.

use super::imatrix::{Imatrix, ImatrixError, ImatrixUse};
use super::plan::{Plan, TensorPlan, TensorSpec};
use quantforge_formats::gguf::{
    GgufError, GgufFile, GgufHeader, GgufModel, KEY_SPLIT_COUNT, KEY_SPLIT_NO,
    KEY_SPLIT_TENSORS_COUNT, Metadata, SplitLimits, TensorInfo, TensorView, Value, plan_split,
    split_path,
};
use quantforge_formats::output::{AlignedBuffer, PlacedFile};
use quantforge_kernels::{GgmlType, can_dequantize, can_quantize};
use rayon::prelude::*;
use std::ops::Range;
use std::path::Path;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
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
        .map_err(|cause| RunError::Threads {
            threads: options.threads,
            cause,
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
    // Every file is created, its size reserved and its header written before any tensor
    // is converted: a disk without room fails at once.
    let mut files = Vec::with_capacity(parts.len());
    let mut headers = Vec::with_capacity(parts.len());
    let mut places = Vec::with_capacity(plan.tensors.len());
    for (p, (path, header)) in parts.iter().enumerate() {
        let (bytes, layout) = header.encode()?;
        let write_error = |what, cause| RunError::Output {
            what,
            path: path.clone(),
            cause,
        };
        let file = PlacedFile::create(path, layout.file_size())
            .map_err(|e| write_error("cannot create", e))?;
        // Written by the writing thread, straight from aligned memory, while the first
        // batches convert.
        let mut header_bytes = AlignedBuffer::zeroed(bytes.len());
        header_bytes.as_mut_slice().copy_from_slice(&bytes);
        headers.push(Filled {
            batch: None,
            slab: header_bytes,
            skip: 0,
            len: bytes.len(),
            part: p,
            at: 0,
        });
        let n = layout.offsets.len();
        for k in 0..n {
            let at = layout.data_offset + layout.offsets[k];
            let end = match layout.offsets.get(k + 1) {
                Some(next) => layout.data_offset + next,
                None => layout.file_size(),
            };
            places.push(Place {
                part: p,
                at,
                room: end - at,
            });
        }
        files.push(file);
    }
    if places.len() != plan.tensors.len() {
        return Err(RunError::PlanMismatch(
            "the output files hold a different number of tensors than the plan".to_string(),
        ));
    }
    let pieces = pieces(plan, &sources, &places)?;
    let batches = batches(&pieces);
    let job = Job {
        plan,
        sources: &sources,
        weights: &weights,
        pieces: &pieces,
        batches: &batches,
    };
    let mut tracker = Tracker {
        plan,
        uses: &uses,
        weighted: &weights,
        pieces_left: plan.tensors.iter().map(|_| 0).collect(),
        bytes_out: plan.tensors.iter().map(|_| 0).collect(),
        summary: Summary::default(),
        progress: &mut progress,
    };
    for p in &pieces {
        tracker.pieces_left[p.tensor] += 1;
    }
    pool.install(|| job.run(&mut files, headers, &mut tracker))?;
    let mut summary = tracker.summary;
    // Only once every file is complete does any take its name.
    for file in files {
        summary.file_size += file.len();
        summary.files.push(file.path().to_path_buf());
        let path = file.path().to_path_buf();
        file.commit().map_err(|cause| RunError::Output {
            what: "cannot write",
            path,
            cause,
        })?;
    }
    summary.seconds = start.elapsed().as_secs_f64();
    Ok(summary)
}

/// Where a tensor's data goes: its output file, its offset there, and the bytes up to
/// the next tensor (or the end of the file), padding included.
struct Place {
    part: usize,
    at: u64,
    room: u64,
}

/// A run of one tensor's source handled as a unit: rows of a converted tensor, or bytes
/// of a copied one, and where their output goes.
struct Piece {
    /// The tensor's index in the plan.
    tensor: usize,
    /// The bytes of the tensor's source data.
    src: Range<usize>,
    /// Output bytes (the converted rows, or the copied bytes).
    out_len: usize,
    /// The output file.
    part: usize,
    /// The output's offset in that file.
    at: u64,
    /// Zero bytes after it in the file: the tensor's padding, after its last piece.
    pad: usize,
}

impl Piece {
    /// The file bytes this piece accounts for, padding included.
    fn file_len(&self) -> u64 {
        (self.out_len + self.pad) as u64
    }
}

/// Every tensor cut into pieces of at most [`SLAB_BYTES`] of source and of output (or
/// one row, if a row is larger), in plan order, each placed in the output files; a tensor
/// without data is one empty piece.
fn pieces(plan: &Plan, sources: &[Source<'_>], places: &[Place]) -> Result<Vec<Piece>, RunError> {
    let mut pieces = Vec::new();
    for (i, ((t, source), place)) in plan.tensors.iter().zip(sources).zip(places).enumerate() {
        // Source and output bytes of a step, and of the unit a step is made of.
        let (src_unit, out_unit, units) = match row_sizes(t)? {
            Some((src_row, dst_row)) => {
                let task_rows = task_rows(t);
                let rows = (SLAB_BYTES / src_row.max(dst_row))
                    .max(1)
                    .next_multiple_of(task_rows);
                (src_row, dst_row, rows)
            }
            None if t.converts() => (1, 0, SLAB_BYTES),
            None => (1, 1, SLAB_BYTES / 2),
        };
        let len = source.data.len();
        let out_total = (len / src_unit * out_unit) as u64;
        if out_total > place.room {
            return Err(RunError::PlanMismatch(format!(
                "tensor {} needs {out_total} bytes in the output, its place holds {}",
                t.name, place.room
            )));
        }
        let mut at = 0;
        loop {
            let end = (at + src_unit * units).min(len);
            let out_at = (at / src_unit * out_unit) as u64;
            let out_len = (end - at) / src_unit * out_unit;
            pieces.push(Piece {
                tensor: i,
                src: at..end,
                out_len,
                part: place.part,
                at: place.at + out_at,
                pad: if end == len {
                    (place.room - out_total) as usize
                } else {
                    0
                },
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
    let codec_error = |cause| RunError::Codec {
        tensor: t.name.clone(),
        cause,
    };
    let src_row = t.source.row_size(n_per_row).map_err(codec_error)?;
    let dst_row = t.target.row_size(n_per_row).map_err(codec_error)?;
    Ok(Some((src_row, dst_row)))
}

/// Rows of `t` each parallel task converts.
fn task_rows(t: &TensorPlan) -> usize {
    (TASK_ELEMENTS / (t.ne[0] as usize).max(1)).max(1)
}

/// Consecutive pieces of one output file grouped so that each group's source and output
/// together stay within [`SLAB_BYTES`] (a single larger piece is a group by itself).
/// Groups cross tensor boundaries, so that small tensors share one parallel pass; each
/// group is one contiguous range of its file.
fn batches(pieces: &[Piece]) -> Vec<Range<usize>> {
    let mut batches = Vec::new();
    let mut start = 0;
    let mut used = 0;
    for (i, p) in pieces.iter().enumerate() {
        let size = p.src.len() + p.out_len;
        if i > start && (used + size > SLAB_BYTES || p.part != pieces[start].part) {
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

/// Rough cost of converting one element to `ty`, in units of a widening pass: the order
/// in which batches are converted mixes the cheap ones with much output and the costly
/// ones with little (see [`Job::order`]). Only the order depends on it, never the bytes.
fn element_cost(ty: GgmlType) -> f64 {
    use GgmlType::*;
    match ty {
        F32 | F16 | BF16 | Q8_0 | Q4_0 | Q5_0 | Q8_K | TQ2_0 => 1.0,
        Q6_K => 8.0,
        Q3_K => 10.0,
        Q2_K | Q4_K | Q5_K => 15.0,
        IQ4_NL | IQ4_XS => 25.0,
        _ => 20.0,
    }
}

/// A batch converted into a slab, on its way to the file.
struct Filled {
    /// The batch (`None`: a file's header).
    batch: Option<usize>,
    /// Its output; the file's bytes `at..` are `slab[skip..skip + len]`, placed so that
    /// the slab's memory is aligned like the file offsets (direct I/O writes from it).
    slab: AlignedBuffer,
    skip: usize,
    len: usize,
    part: usize,
    at: u64,
}

/// Output slabs in use at once: converted, queued, or being written.
const SLABS: usize = 4;

/// What the converting side of a run reads.
struct Job<'a, 's> {
    plan: &'a Plan,
    sources: &'a [Source<'s>],
    weights: &'a [Option<&'a [f32]>],
    pieces: &'a [Piece],
    batches: &'a [Range<usize>],
}

impl Job<'_, '_> {
    /// Converts batch after batch on the current rayon pool, in [`Job::order`], while a
    /// thread of its own writes each converted slab in place; at most [`SLABS`] slabs
    /// are in use, so the converting waits only when the disk is that far behind.
    fn run(
        &self,
        files: &mut [PlacedFile],
        headers: Vec<Filled>,
        tracker: &mut Tracker<'_, '_>,
    ) -> Result<(), RunError> {
        let order = self.order();
        let files_path = files
            .first()
            .map(|f| f.path().to_path_buf())
            .unwrap_or_default();
        let abandon = AtomicBool::new(false);
        let abandon = &abandon;
        std::thread::scope(|scope| {
            let (to_writer, queue) = std::sync::mpsc::channel::<Filled>();
            let (back, written) = std::sync::mpsc::channel::<(Filled, Result<(), RunError>)>();
            let writer = std::thread::Builder::new()
                .name("quantforge-writer".into())
                .spawn_scoped(scope, move || {
                    for f in queue {
                        if abandon.load(Ordering::Relaxed) {
                            break;
                        }
                        let file = &mut files[f.part];
                        let done = file
                            .write_at(&f.slab.as_slice()[f.skip..f.skip + f.len], f.at)
                            .map_err(|cause| RunError::Output {
                                what: "cannot write",
                                path: file.path().to_path_buf(),
                                cause,
                            });
                        let failed = done.is_err();
                        if back.send((f, done)).is_err() || failed {
                            break;
                        }
                    }
                })
                .map_err(|cause| RunError::Output {
                    what: "cannot start the thread that writes",
                    path: files_path.clone(),
                    cause,
                })?;
            let mut in_flight = 0;
            for h in headers {
                // A send fails only once the writer stopped on an error, sent back.
                in_flight += usize::from(to_writer.send(h).is_ok());
            }
            let converted = self.convert_all(&order, in_flight, &to_writer, &written, tracker);
            // After a failure the writer drops what is queued (the file is deleted anyway);
            // its own failure came back through `written`, a panic of it is re-raised.
            abandon.store(converted.is_err(), Ordering::Relaxed);
            drop(to_writer);
            if let Err(panic) = writer.join() {
                std::panic::resume_unwind(panic);
            }
            converted
        })
    }

    /// The converting loop of [`Job::run`].
    fn convert_all(
        &self,
        order: &[usize],
        mut in_flight: usize,
        to_writer: &std::sync::mpsc::Sender<Filled>,
        written: &std::sync::mpsc::Receiver<(Filled, Result<(), RunError>)>,
        tracker: &mut Tracker<'_, '_>,
    ) -> Result<(), RunError> {
        // Every slab is made once, as large as the largest batch needs.
        let slab_len = (0..self.batches.len())
            .map(|b| {
                let (skip, len) = self.extent(b);
                skip + len
            })
            .max()
            .unwrap_or(0);
        let mut free: Vec<AlignedBuffer> = Vec::new();
        let mut made = 0;
        // A slab back from the writer: its batch is on disk.
        let mut take_back = |(f, done): (Filled, Result<(), RunError>),
                             free: &mut Vec<AlignedBuffer>|
         -> Result<(), RunError> {
            done?;
            if let Some(b) = f.batch {
                tracker.written(&self.pieces[self.batches[b].clone()]);
                free.push(f.slab);
            }
            Ok(())
        };
        if let Some(&first) = order.first() {
            self.prefetch(first)?;
        }
        for (k, &b) in order.iter().enumerate() {
            let slab = loop {
                if let Some(slab) = free.pop() {
                    break slab;
                }
                if made < SLABS {
                    made += 1;
                    break AlignedBuffer::zeroed(slab_len);
                }
                // Every slab is queued or being written: wait for one.
                let back = written.recv().map_err(|_| writer_gone())?;
                in_flight -= 1;
                take_back(back, &mut free)?;
            };
            let before = k.checked_sub(1).map(|j| order[j]);
            let filled = self.fill(b, slab, before, order.get(k + 1).copied())?;
            if to_writer.send(filled).is_err() {
                // The writer stopped on an error, which it sent back first.
                while let Ok(back) = written.recv() {
                    take_back(back, &mut free)?;
                }
                return Err(writer_gone());
            }
            in_flight += 1;
            while let Ok(back) = written.try_recv() {
                in_flight -= 1;
                take_back(back, &mut free)?;
            }
        }
        if let Some(&last) = order.last() {
            self.release(last)?;
        }
        while in_flight > 0 {
            let back = written.recv().map_err(|_| writer_gone())?;
            in_flight -= 1;
            take_back(back, &mut free)?;
        }
        Ok(())
    }

    /// The order in which batches are converted: two runs in plan order, the batches
    /// with more output per unit of work than the whole model's and the rest, merged so
    /// that the output produced keeps pace with the work done. A disk that writes slower
    /// than the cheap conversions produce (a large embedding of q8_0) then drains it
    /// while the costly ones run, instead of stalling all threads.
    fn order(&self) -> Vec<usize> {
        let stats: Vec<(f64, f64)> = self
            .batches
            .iter()
            .map(|r| {
                let pieces = &self.pieces[r.clone()];
                let out: f64 = pieces.iter().map(|p| p.file_len() as f64).sum();
                let work: f64 = pieces
                    .iter()
                    .map(|p| {
                        let t = &self.plan.tensors[p.tensor];
                        match row_sizes(t) {
                            Ok(Some((src_row, _))) => {
                                let elements = p.src.len() / src_row * t.ne[0] as usize;
                                elements as f64 * (1.0 + element_cost(t.target))
                            }
                            _ => p.src.len() as f64 / 8.0,
                        }
                    })
                    .sum();
                (out, work.max(1.0))
            })
            .collect();
        let out_total: f64 = stats.iter().map(|s| s.0).sum();
        let work_total: f64 = stats.iter().map(|s| s.1).sum();
        let (heavy, light): (Vec<usize>, Vec<usize>) =
            (0..stats.len()).partition(|&b| stats[b].0 * work_total > out_total * stats[b].1);
        let (mut heavy, mut light) = (heavy.into_iter().peekable(), light.into_iter().peekable());
        let (mut out, mut work) = (0.0, 0.0);
        let mut order = Vec::with_capacity(stats.len());
        while heavy.peek().is_some() || light.peek().is_some() {
            let behind = out * work_total <= work * out_total;
            let next = match (behind, heavy.peek(), light.peek()) {
                (true, Some(_), _) | (_, Some(_), None) => heavy.next(),
                _ => light.next(),
            };
            let Some(b) = next else { break };
            out += stats[b].0;
            work += stats[b].1;
            order.push(b);
        }
        order
    }

    /// Where batch `b`'s output sits in a slab: after `skip` bytes (its file offset's
    /// distance from the block boundary before it), `len` bytes.
    fn extent(&self, b: usize) -> (usize, usize) {
        let pieces = &self.pieces[self.batches[b].clone()];
        let (first, last) = (&pieces[0], &pieces[pieces.len() - 1]);
        let skip = (first.at % PlacedFile::BLOCK) as usize;
        (skip, (last.at + last.file_len() - first.at) as usize)
    }

    /// Lets the source pages of the pieces in batch `b` leave the resident set.
    fn release(&self, b: usize) -> Result<(), RunError> {
        for p in &self.pieces[self.batches[b].clone()] {
            if !p.src.is_empty() {
                self.sources[p.tensor].release(p.src.clone())?;
            }
        }
        Ok(())
    }

    /// Asks for the source pages of the pieces in batch `b`.
    fn prefetch(&self, b: usize) -> Result<(), RunError> {
        for p in &self.pieces[self.batches[b].clone()] {
            if !p.src.is_empty() {
                self.sources[p.tensor].prefetch(p.src.clone())?;
            }
        }
        Ok(())
    }

    /// Converts (or copies) the pieces of batch `b` into `slab` (as large as the largest
    /// batch needs), their rows spread over the pool in tasks of about [`TASK_ELEMENTS`];
    /// beside them, releases the source pages of the batch converted `before` and asks
    /// for those of the `next` one.
    fn fill(
        &self,
        b: usize,
        mut slab: AlignedBuffer,
        before: Option<usize>,
        next: Option<usize>,
    ) -> Result<Filled, RunError> {
        let pieces = &self.pieces[self.batches[b].clone()];
        let first = &pieces[0];
        let (skip, len) = self.extent(b);
        let at = first.at;
        let mut tasks: Vec<Task<'_, '_>> = Vec::new();
        let mut rest = &mut slab.as_mut_slice()[skip..skip + len];
        for p in pieces {
            let (out, more) = std::mem::take(&mut rest).split_at_mut(p.out_len);
            let (pad, more) = more.split_at_mut(p.pad);
            pad.fill(0);
            rest = more;
            let t = &self.plan.tensors[p.tensor];
            let src = &self.sources[p.tensor].data[p.src.clone()];
            match row_sizes(t)? {
                Some((src_row, dst_row)) => {
                    let task_rows = task_rows(t);
                    let first_row = p.src.start / src_row;
                    let mut out = out;
                    for (k, x) in src.chunks(task_rows * src_row).enumerate() {
                        let (y, more) =
                            std::mem::take(&mut out).split_at_mut(x.len() / src_row * dst_row);
                        out = more;
                        tasks.push(Task::Convert {
                            tensor: p.tensor,
                            x,
                            first_row: first_row + k * task_rows,
                            y,
                        });
                    }
                }
                None if p.out_len > 0 => {
                    let chunk = 4 * TASK_ELEMENTS;
                    for (x, y) in src.chunks(chunk).zip(out.chunks_mut(chunk)) {
                        tasks.push(Task::Copy { x, y });
                    }
                }
                None => {}
            }
        }
        let (kept, converted) = rayon::join(
            || -> Result<(), RunError> {
                if let Some(before) = before {
                    self.release(before)?;
                }
                match next {
                    Some(next) => self.prefetch(next),
                    None => Ok(()),
                }
            },
            || {
                tasks.into_par_iter().try_for_each(|task| match task {
                    Task::Copy { x, y } => {
                        y.copy_from_slice(x);
                        Ok(())
                    }
                    Task::Convert {
                        tensor,
                        x,
                        first_row,
                        y,
                    } => {
                        let t = &self.plan.tensors[tensor];
                        let n = y.len() / t.target.type_size() * t.target.block_size();
                        let mut f32s = SCRATCH.take();
                        f32s.resize(n, 0.0);
                        let done = widen_and_quantize(
                            t,
                            x,
                            &mut f32s[..n],
                            first_row,
                            self.weights[tensor],
                            y,
                        );
                        SCRATCH.set(f32s);
                        done
                    }
                })
            },
        );
        kept?;
        converted?;
        Ok(Filled {
            batch: Some(b),
            slab,
            skip,
            len,
            part: first.part,
            at,
        })
    }
}

/// One parallel task of [`Job::fill`].
enum Task<'s, 'o> {
    /// Rows of a converted tensor, from row `first_row` on.
    Convert {
        tensor: usize,
        x: &'s [u8],
        first_row: usize,
        y: &'o mut [u8],
    },
    /// Bytes of a copied tensor.
    Copy { x: &'s [u8], y: &'o mut [u8] },
}

/// The writing thread stopped without a failure of its own (it cannot: it stops early
/// only after sending one back, or after a panic, which is re-raised).
fn writer_gone() -> RunError {
    RunError::Output {
        what: "cannot write",
        path: PathBuf::new(),
        cause: std::io::Error::other("the writing thread stopped"),
    }
}

/// The tensors written so far: the summary and the progress calls.
struct Tracker<'a, 'p> {
    plan: &'a Plan,
    uses: &'a [Option<ImatrixUse>],
    weighted: &'a [Option<&'a [f32]>],
    /// Pieces of each tensor not yet on disk.
    pieces_left: Vec<usize>,
    /// Output bytes of each tensor so far.
    bytes_out: Vec<u64>,
    summary: Summary,
    progress: &'p mut (dyn FnMut(&Progress<'_>) + Send),
}

impl Tracker<'_, '_> {
    /// Counts `pieces` as written; reports each tensor whose last piece that was.
    fn written(&mut self, pieces: &[Piece]) {
        for piece in pieces {
            let i = piece.tensor;
            self.bytes_out[i] += piece.out_len as u64;
            self.pieces_left[i] -= 1;
            if self.pieces_left[i] > 0 {
                continue;
            }
            let t = &self.plan.tensors[i];
            let bytes_in = piece.src.end as u64;
            self.summary.tensors += 1;
            self.summary.converted += usize::from(t.converts());
            self.summary.imatrix_used += usize::from(self.weighted[i].is_some());
            self.summary.bytes_in += bytes_in;
            self.summary.bytes_out += self.bytes_out[i];
            (self.progress)(&Progress {
                done: self.summary.tensors,
                total: self.plan.tensors.len(),
                tensor: t,
                bytes_in,
                bytes_out: self.bytes_out[i],
                imatrix: self.uses[i],
            });
        }
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
    let codec_error = |cause| RunError::Codec {
        tensor: t.name.clone(),
        cause,
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
