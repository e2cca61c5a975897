//! Carrying out a [`Plan`] on a GGUF model: the output header as llama.cpp's quantizer
//! builds it (`llama_model_quantize_impl`), then every tensor copied or converted and
//! streamed, in the plan's order, into a file that takes OUT's name only when complete.
//!
//! A converted tensor is widened to f32 a slab of rows at a time and quantized on all
//! threads of a rayon pool; each row is quantized by itself, so the bytes are the same
//! whatever the thread count. Two output slabs alternate: while one is handed to the
//! writer, the workers fill the other; the writer's own thread puts the bytes on disk
//! (see [`quantforge_formats::gguf::AtomicFile`]). Memory stays around two output slabs,
//! the writer's few 4 MiB buffers and a few hundred KiB per thread: the source is
//! mapped, the next slab's pages are asked for ahead of use, and each slab's pages are
//! released once it is converted.
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
    mut progress: impl FnMut(&Progress<'_>),
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
    let mut parts = output_parts(header, plan, output, options.layout)?.into_iter();
    let mut summary = Summary::default();
    let mut finished: Vec<AtomicFile> = Vec::new();
    let mut writer: Option<GgufWriter<'_, AtomicFile>> = None;
    let mut left = 0usize;
    let mut slab = [Vec::new(), Vec::new()];
    for (i, t) in plan.tensors.iter().enumerate() {
        while left == 0 {
            if let Some(w) = writer.take() {
                summary.file_size += w.bytes_written();
                finished.push(w.finish()?);
            }
            let Some((path, header)) = parts.next() else {
                return Err(RunError::PlanMismatch(
                    "the output files hold fewer tensors than the plan".to_string(),
                ));
            };
            left = header.tensors().len();
            writer = Some(GgufBuilder::from_header(header).create(&path)?);
        }
        left -= 1;
        let writer = writer
            .as_mut()
            .expect("a file is open while tensors are left");
        let view = &views[t.input_index];
        let data = view.data();
        let source = Source {
            file: &model.parts()[view.part()],
            offset: view.offset(),
            data,
        };
        let weights = match (imatrix, uses[i]) {
            (Some(m), Some(ImatrixUse::Used)) => m.get(&t.name),
            _ => None,
        };
        let bytes_out = if t.converts() {
            pool.install(|| {
                convert(t, &source, weights, &mut slab, |chunk| {
                    writer.write_chunk(chunk)
                })
            })?
        } else {
            copy(&source, |chunk| writer.write_chunk(chunk))?
        };
        summary.tensors += 1;
        summary.converted += usize::from(t.converts());
        summary.imatrix_used += usize::from(weights.is_some());
        summary.bytes_in += data.len() as u64;
        summary.bytes_out += bytes_out;
        progress(&Progress {
            done: i + 1,
            total: plan.tensors.len(),
            tensor: t,
            bytes_in: data.len() as u64,
            bytes_out,
            imatrix: uses[i],
        });
    }
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

    /// The byte ranges of consecutive slabs of `rows_per_slab` rows of `row_bytes`.
    fn slabs(&self, row_bytes: usize, rows_per_slab: usize) -> Vec<Range<usize>> {
        let step = (row_bytes * rows_per_slab).max(1);
        (0..self.data.len())
            .step_by(step)
            .map(|start| start..(start + step).min(self.data.len()))
            .collect()
    }
}

/// Copies a tensor's bytes in slabs.
fn copy(
    source: &Source<'_>,
    mut write: impl FnMut(&[u8]) -> Result<(), GgufError>,
) -> Result<u64, RunError> {
    if source.data.is_empty() {
        write(&[])?;
    }
    let slabs = source.slabs(1, SLAB_BYTES);
    for (i, range) in slabs.iter().enumerate() {
        if let Some(next) = slabs.get(i + 1) {
            source.prefetch(next.clone())?;
        }
        write(&source.data[range.clone()])?;
        source.release(range.clone())?;
    }
    Ok(source.data.len() as u64)
}

/// Widens and quantizes a tensor slab by slab, each slab's rows spread over the current
/// rayon pool; returns the bytes written. `weights`, when given, holds `ne0` importance
/// values per expert (`ne2`); row `r` takes those of expert `r / ne1`.
fn convert(
    t: &TensorPlan,
    source: &Source<'_>,
    weights: Option<&[f32]>,
    out: &mut [Vec<u8>; 2],
    mut write: impl FnMut(&[u8]) -> Result<(), GgufError> + Send,
) -> Result<u64, RunError> {
    let codec_error = |source| RunError::Codec {
        tensor: t.name.clone(),
        source,
    };
    let n_per_row = t.ne[0] as usize;
    let n_rows = t.ne[1..].iter().product::<u64>() as usize;
    if n_per_row == 0 || n_rows == 0 {
        write(&[])?;
        return Ok(0);
    }
    let src_row = t.source.row_size(n_per_row).map_err(codec_error)?;
    let dst_row = t.target.row_size(n_per_row).map_err(codec_error)?;
    let task_rows = (TASK_ELEMENTS / n_per_row).max(1);
    let slab_rows = (SLAB_BYTES / src_row.max(dst_row))
        .max(1)
        .next_multiple_of(task_rows);
    // Two output slabs, reused from tensor to tensor (their pages stay mapped): while
    // one is written out, the workers fill the other.
    let slab_len = slab_rows.min(n_rows) * dst_row;
    for b in out.iter_mut() {
        b.resize(b.len().max(slab_len), 0);
    }
    let [ready, filling] = out;
    let slabs = source.slabs(src_row, slab_rows);
    source.prefetch(slabs[0].clone())?;
    let fill = |i: usize, dst: &mut Vec<u8>| -> Result<usize, RunError> {
        if let Some(next) = slabs.get(i + 1) {
            source.prefetch(next.clone())?;
        }
        let first = i * slab_rows;
        let src = &source.data[slabs[i].clone()];
        let rows = src.len() / src_row;
        dst[..rows * dst_row]
            .par_chunks_mut(task_rows * dst_row)
            .zip(src.par_chunks(task_rows * src_row))
            .enumerate()
            .try_for_each(|(k, (y, x))| {
                let n = x.len() / src_row * n_per_row;
                let mut f32s = SCRATCH.take();
                f32s.resize(n, 0.0);
                let done =
                    widen_and_quantize(t, x, &mut f32s[..n], first + k * task_rows, weights, y);
                SCRATCH.set(f32s);
                done
            })?;
        source.release(slabs[i].clone())?;
        Ok(rows * dst_row)
    };
    let mut written = 0u64;
    let mut len = fill(0, ready)?;
    for i in 0..slabs.len() {
        let (wrote, next) = rayon::join(
            || write(&ready[..len]),
            || match i + 1 < slabs.len() {
                true => fill(i + 1, filling).map(Some),
                false => Ok(None),
            },
        );
        wrote?;
        written += len as u64;
        if let Some(next_len) = next? {
            len = next_len;
            std::mem::swap(ready, filling);
        }
    }
    Ok(written)
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
