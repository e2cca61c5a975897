//! The output's header as llama.cpp's quantizer builds it (`llama_model_quantize_impl`):
//! the source's metadata with the quantizer's own keys and the overrides, every tensor of
//! the plan with its target type, and how that header is cut into files.

use super::{OutputLayout, RunError};
use crate::pipeline::plan::Plan;
use quantforge_formats::gguf::{
    GgufHeader, KEY_SPLIT_COUNT, KEY_SPLIT_NO, KEY_SPLIT_TENSORS_COUNT, Metadata, TensorInfo,
    Value, plan_split, split_path,
};
use std::path::{Path, PathBuf};

/// The output's metadata as llama.cpp's quantizer writes it: the source's keys in their
/// order, then `general.quantization_version` and `general.file_type` (moved to the end,
/// as `gguf_set_val_*` removes a key before appending it), without the `split.*` keys,
/// then the overrides (each also moved to the end), then with `--prune-layers` the new
/// `{arch}.block_count`.
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
    if let Some((key, count)) = &plan.block_count {
        put(&mut meta, key, Value::U32(*count));
    }
    meta
}

/// The output header: [`output_metadata`] of the source's keys and every tensor of the
/// plan in its order with its target type. Dimensions are written as ggml counts them
/// (`ggml_n_dims`: trailing 1s dropped).
pub fn output_header(
    source: &Metadata,
    plan: &Plan,
    overrides: &[(String, Value)],
) -> Result<GgufHeader, RunError> {
    let mut header = GgufHeader::new();
    *header.metadata_mut() = output_metadata(source, plan, overrides);
    for t in &plan.tensors {
        let n_dims = t.ne.iter().rposition(|&n| n > 1).map_or(1, |i| i + 1);
        header.push_tensor(TensorInfo::new(&t.name, t.target, &t.ne[..n_dims])?)?;
    }
    Ok(header)
}

/// One output file: where it goes and its header.
#[derive(Clone, Debug)]
pub struct OutputPart {
    /// Its final name.
    pub path: PathBuf,
    /// Its header: metadata (the first part's only, when split) and its tensors.
    pub header: GgufHeader,
}

/// The output files and their headers: `header` (every tensor of the plan, in order) as
/// one file or cut into parts as `layout` says.
pub fn output_parts(
    header: GgufHeader,
    plan: &Plan,
    output: &Path,
    layout: OutputLayout,
) -> Result<Vec<OutputPart>, RunError> {
    let parts = match layout {
        OutputLayout::Single => {
            return Ok(vec![OutputPart {
                path: output.to_path_buf(),
                header,
            }]);
        }
        OutputLayout::Split(limits) => plan_split(&header, limits)?,
        OutputLayout::KeepSplit => keep_split_parts(&header, plan)?,
    };
    let count = u16::try_from(parts.len()).map_err(|_| {
        RunError::PlanMismatch(format!("{} output files are too many", parts.len()))
    })?;
    Ok((0u16..)
        .zip(parts)
        .map(|(no, header)| OutputPart {
            path: split_path(output, no, count),
            header,
        })
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

/// A file a run would write.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlannedFile {
    /// Its path.
    pub path: PathBuf,
    /// Its exact size.
    pub size: u64,
    /// Its header, as the run will write it.
    pub header: super::FileHeader,
}

/// The files a run of `plan` would write to `output` as `layout` says, each with its
/// exact size and header: what `--dry-run` reports and `--resume` checks finished parts
/// by, without writing anything.
pub fn planned_files(
    source: &Metadata,
    plan: &Plan,
    overrides: &[(String, Value)],
    output: &Path,
    layout: OutputLayout,
) -> Result<Vec<PlannedFile>, RunError> {
    let header = output_header(source, plan, overrides)?;
    output_parts(header, plan, output, layout)?
        .into_iter()
        .map(|part| {
            let (bytes, layout) = part.header.encode()?;
            Ok(PlannedFile {
                path: part.path,
                size: layout.file_size(),
                header: super::FileHeader {
                    data_offset: bytes.len() as u64,
                    digest: super::digest::bytes_digest(&bytes),
                },
            })
        })
        .collect()
}
