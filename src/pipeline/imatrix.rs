//! Importance matrices (`--imatrix FILE`): per-column weights that steer the quantizers of
//! most block types toward the columns a model's activations use most.
//!
//! The rules are llama.cpp's, as vendored by llama-cpp-sys-2 0.1.161:
//!
//! - Reading: `common/imatrix-loader.cpp` (`common_imatrix_load`). A file that does not
//!   start with the GGUF magic is the legacy format: an `i32` entry count, then per entry
//!   an `i32` name length, the name, `i32` ncall, `i32` value count and the `f32` values,
//!   then optionally the `i32` chunk count and a length-prefixed dataset name. A GGUF
//!   imatrix holds `<name>.in_sum2` (sums of squared activations, one row of `ne0` per
//!   expert) and `<name>.counts` (one count per expert) for each weight, and the metadata
//!   `imatrix.datasets`, `imatrix.chunk_count`, `imatrix.chunk_size`.
//! - Averaging: `tools/quantize/quantize.cpp` (`load_imatrix`). Legacy values are divided by
//!   ncall when it is positive; GGUF sums by their expert's count (rounded to an integer as
//!   `lround` does), and an expert that never saw a token gets weights of 1.
//! - Filtering: `prepare_imatrix` (`--include-weights`, `--exclude-weights`): an entry is
//!   kept or dropped when its name contains one of the given strings.
//! - Use: `src/llama-quant.cpp`. A converted tensor takes the entry of its own name; its
//!   length must be `ne0 x ne2` (one row per expert) and row `r` uses expert
//!   `r / ne1`'s row. A tensor without an entry is quantized without one (an error for
//!   the types that require one); a length mismatch is an error except for the token
//!   embeddings, which are then quantized without one.
//! - Metadata: `quantize.imatrix.*` keys added after the user's `--override-kv` keys.
//!
//! Where llama.cpp would abort or read out of bounds (wrong metadata types, negative
//! lengths, counts of a GGUF entry that is empty), this module returns an error naming the
//! file and the entry or offset; it never allocates more than the file's size justifies.

use super::plan::TensorPlan;
use quantforge_formats::gguf::{GGUF_MAGIC, GgufError, GgufFile, GgufString, Value, c_str};
use quantforge_kernels::GgmlType;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// `quantize.imatrix.file`: the imatrix file as given on the command line.
pub const KEY_FILE: &str = "quantize.imatrix.file";
/// `quantize.imatrix.dataset`: the first dataset the imatrix was computed on.
pub const KEY_DATASET: &str = "quantize.imatrix.dataset";
/// `quantize.imatrix.entries_count`: entries used (after include/exclude filtering).
pub const KEY_ENTRIES_COUNT: &str = "quantize.imatrix.entries_count";
/// `quantize.imatrix.chunks_count`: chunks the imatrix was computed on, when positive.
pub const KEY_CHUNKS_COUNT: &str = "quantize.imatrix.chunks_count";

/// llama-quantize copies strings into `char val_str[128]` overrides: at most 127 bytes.
const MAX_OVERRIDE_STR: usize = 127;

/// Why an importance matrix cannot be read or used.
#[derive(Debug, thiserror::Error)]
pub enum ImatrixError {
    /// The file could not be read.
    #[error("{}: cannot read: {cause}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// What the system said.
        cause: std::io::Error,
    },
    /// A problem with the contents of a file, named by its path.
    #[error("{}: {error}", path.display())]
    InFile {
        /// The file.
        path: PathBuf,
        /// The problem.
        error: Box<ImatrixError>,
    },
    /// The GGUF container is malformed.
    #[error(transparent)]
    Gguf(#[from] GgufError),
    /// The file holds no entries at all (a legacy count below 1, a GGUF without tensors).
    #[error("no importance matrix data in the file")]
    NoData,
    /// A legacy file ends inside an entry.
    #[error(
        "legacy imatrix truncated: {what} of entry {entry} at offset {offset} needs {needed} bytes, {available} left"
    )]
    Truncated {
        /// The field being read.
        what: &'static str,
        /// The entry (1-based).
        entry: u64,
        /// Where the field starts.
        offset: u64,
        /// Bytes it needs.
        needed: u64,
        /// Bytes left in the file.
        available: u64,
    },
    /// A legacy entry's name length is negative.
    #[error("legacy imatrix: entry {entry} at offset {offset} has a negative name length {len}")]
    NegativeNameLength {
        /// The entry (1-based).
        entry: u64,
        /// Where the length is.
        offset: u64,
        /// The length read.
        len: i32,
    },
    /// A legacy entry has no values.
    #[error(
        "legacy imatrix: entry {entry} ({name}) at offset {offset} has {count} values, at least 1 needed"
    )]
    BadValueCount {
        /// The entry (1-based).
        entry: u64,
        /// Its name.
        name: String,
        /// Where the count is.
        offset: u64,
        /// The count read.
        count: i32,
    },
    /// A GGUF imatrix lacks the metadata llama-quantize requires.
    #[error(
        "GGUF imatrix: missing metadata {0} (imatrix.datasets, imatrix.chunk_count and imatrix.chunk_size are required)"
    )]
    MissingMetadata(String),
    /// A GGUF imatrix metadata value has the wrong type.
    #[error("GGUF imatrix: {key} is {found}, expected u32")]
    MetadataType {
        /// The key.
        key: &'static str,
        /// Its type in the file.
        found: String,
    },
    /// A GGUF entry's tensors do not go together.
    #[error("GGUF imatrix: entry {name}: {problem}")]
    BadEntry {
        /// The entry (tensor name without suffix).
        name: String,
        /// What is wrong.
        problem: String,
    },
    /// A NaN or infinity among the values used (llama.cpp refuses the whole imatrix).
    #[error("imatrix entry {name}: non-finite value {value} at index {index}")]
    NonFinite {
        /// The entry.
        name: String,
        /// Index of the value in the entry.
        index: usize,
        /// The value.
        value: f32,
    },
    /// A tensor's entry does not have one value per column and expert.
    #[error(
        "tensor {tensor}: its imatrix entry has {len} values, the tensor needs {expected} (columns x experts)"
    )]
    SizeMismatch {
        /// The tensor.
        tensor: String,
        /// Values in the entry.
        len: usize,
        /// `ne0 * ne2` of the tensor.
        expected: u64,
    },
    /// A tensor whose target type requires importance data has no entry.
    #[error(
        "tensor {tensor}: quantizing to {ty} requires importance data and the imatrix has no entry for it"
    )]
    Missing {
        /// The tensor.
        tensor: String,
        /// Its target type.
        ty: GgmlType,
    },
    /// `--include-weights` and `--exclude-weights` together.
    #[error("--include-weights and --exclude-weights cannot be used together")]
    IncludeAndExclude,
}

impl ImatrixError {
    fn in_file(self, path: &Path) -> ImatrixError {
        match self {
            ImatrixError::Io { .. } | ImatrixError::InFile { .. } => self,
            // GGUF errors from a file read in memory carry no path yet.
            error => ImatrixError::InFile {
                path: path.to_path_buf(),
                error: Box::new(error),
            },
        }
    }
}

/// The two file formats `llama-imatrix` writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ImatrixFormat {
    /// The original binary format (`--output-format dat`).
    Legacy,
    /// GGUF with `.in_sum2` and `.counts` tensors (the default since 2025).
    Gguf,
}

/// A loaded importance matrix: averaged values by entry name, as llama-quantize hands them
/// to `llama_model_quantize`.
#[derive(Clone, Debug)]
pub struct Imatrix {
    entries: BTreeMap<Vec<u8>, Vec<f32>>,
    datasets: Vec<Vec<u8>>,
    chunk_count: i32,
    format: ImatrixFormat,
    skipped: Vec<Vec<u8>>,
}

/// How a converted tensor uses the importance matrix.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ImatrixUse {
    /// Its entry weights the quantizer.
    Used,
    /// The imatrix has no entry of its name; quantized without one.
    NoEntry,
    /// Token embeddings whose entry has the wrong length; quantized without one.
    WrongSizeIgnored {
        /// Values in the entry.
        len: usize,
        /// Values needed (`ne0 * ne2`).
        expected: u64,
    },
}

/// Which entries of an imatrix to keep (`--include-weights` / `--exclude-weights`).
#[derive(Clone, Debug, Default)]
pub enum WeightFilter {
    /// Every entry.
    #[default]
    All,
    /// Entries whose name contains one of these.
    Include(Vec<String>),
    /// Entries whose name contains none of these.
    Exclude(Vec<String>),
}

impl WeightFilter {
    /// The filter of llama-quantize's options; both kinds together are an error.
    pub fn new(include: Vec<String>, exclude: Vec<String>) -> Result<WeightFilter, ImatrixError> {
        match (include.is_empty(), exclude.is_empty()) {
            (true, true) => Ok(WeightFilter::All),
            (false, true) => Ok(WeightFilter::Include(include)),
            (true, false) => Ok(WeightFilter::Exclude(exclude)),
            (false, false) => Err(ImatrixError::IncludeAndExclude),
        }
    }

    /// Whether an entry of this name is kept.
    pub fn keeps(&self, name: &[u8]) -> bool {
        let contains = |s: &String| contains(name, s.as_bytes());
        match self {
            WeightFilter::All => true,
            WeightFilter::Include(names) => names.iter().any(contains),
            WeightFilter::Exclude(names) => !names.iter().any(contains),
        }
    }
}

/// `std::string::find(needle) != npos`, bytewise.
fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    needle.is_empty() || haystack.windows(needle.len()).any(|w| w == needle)
}

impl Imatrix {
    /// Reads an imatrix file in either format.
    pub fn load(path: &Path) -> Result<Imatrix, ImatrixError> {
        let bytes = std::fs::read(path).map_err(|cause| ImatrixError::Io {
            path: path.to_path_buf(),
            cause,
        })?;
        Imatrix::from_bytes(bytes).map_err(|e| e.in_file(path))
    }

    /// Parses an imatrix held in memory: GGUF if it starts with the GGUF magic, else the
    /// legacy format.
    pub fn from_bytes(bytes: Vec<u8>) -> Result<Imatrix, ImatrixError> {
        if bytes.starts_with(&GGUF_MAGIC) {
            Imatrix::from_gguf(&GgufFile::from_bytes(bytes)?)
        } else {
            Imatrix::from_legacy(&bytes)
        }
    }

    /// The file format it was read from.
    pub fn format(&self) -> ImatrixFormat {
        self.format
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether there are no entries (llama-quantize then quantizes as without `--imatrix`).
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The entries (name bytes, averaged values), sorted by name.
    pub fn entries(&self) -> impl ExactSizeIterator<Item = (&[u8], &[f32])> {
        self.entries
            .iter()
            .map(|(k, v)| (k.as_slice(), v.as_slice()))
    }

    /// The averaged values of an entry.
    pub fn get(&self, name: &str) -> Option<&[f32]> {
        self.entries.get(name.as_bytes()).map(Vec::as_slice)
    }

    /// The datasets it was computed on, as C strings (without NUL).
    pub fn datasets(&self) -> &[Vec<u8>] {
        &self.datasets
    }

    /// The chunk count the file records (0 when it records none), as llama-quantize reads
    /// it into an `int`.
    pub fn chunk_count(&self) -> i32 {
        self.chunk_count
    }

    /// GGUF entries left out because their counts or sums are empty.
    pub fn skipped(&self) -> &[Vec<u8>] {
        &self.skipped
    }

    /// Keeps the entries `filter` keeps.
    pub fn retain(&mut self, filter: &WeightFilter) {
        self.entries.retain(|name, _| filter.keeps(name));
    }

    /// Checks that every value is finite, as `llama_model_quantize` does before anything
    /// else; the first offender (by entry name, then index) is named.
    pub fn check_finite(&self) -> Result<(), ImatrixError> {
        for (name, values) in &self.entries {
            if let Some((index, &value)) = values.iter().enumerate().find(|(_, v)| !v.is_finite()) {
                return Err(ImatrixError::NonFinite {
                    name: String::from_utf8_lossy(name).into_owned(),
                    index,
                    value,
                });
            }
        }
        Ok(())
    }

    /// How a converted tensor of the plan uses this imatrix (`llama_model_quantize_impl`):
    /// its entry if the length is `ne0 * ne2`; none if there is no entry; none for token
    /// embeddings of the wrong length; an error for other tensors of the wrong length, and
    /// for a target type that requires an entry when it gets none. The entry is looked up
    /// by the tensor's source name (a layer renumbered by `--prune-layers` keeps its
    /// entry); errors name it as it is in the output, as llama.cpp's do.
    pub fn use_for(&self, t: &TensorPlan) -> Result<ImatrixUse, ImatrixError> {
        let found = match self.get(&t.source_name) {
            None => ImatrixUse::NoEntry,
            Some(values) => {
                let expected = t.ne[0].saturating_mul(t.ne[2]);
                if values.len() as u64 == expected {
                    ImatrixUse::Used
                } else if is_token_embd(&t.name) {
                    ImatrixUse::WrongSizeIgnored {
                        len: values.len(),
                        expected,
                    }
                } else {
                    return Err(ImatrixError::SizeMismatch {
                        tensor: t.name.clone(),
                        len: values.len(),
                        expected,
                    });
                }
            }
        };
        if found != ImatrixUse::Used && t.requires_imatrix {
            return Err(ImatrixError::Missing {
                tensor: t.name.clone(),
                ty: t.target,
            });
        }
        Ok(found)
    }

    /// The `quantize.imatrix.*` metadata llama-quantize passes as overrides after the
    /// user's: the file name as given, the first dataset (if any), the entry count, and
    /// the chunk count (if positive). Strings are cut to 127 bytes, as llama-quantize's
    /// fixed-size override strings cut them.
    pub fn metadata(&self, file_arg: &[u8]) -> Vec<(String, Value)> {
        let string = |bytes: &[u8]| {
            let bytes = c_str(bytes);
            Value::String(GgufString::from_bytes(
                bytes[..bytes.len().min(MAX_OVERRIDE_STR)].to_vec(),
            ))
        };
        let mut keys = vec![(KEY_FILE.to_string(), string(file_arg))];
        if let Some(dataset) = self.datasets.first() {
            keys.push((KEY_DATASET.to_string(), string(dataset)));
        }
        // Int overrides are written as u32 of the absolute value.
        keys.push((
            KEY_ENTRIES_COUNT.to_string(),
            Value::U32(self.entries.len() as u32),
        ));
        if self.chunk_count > 0 {
            keys.push((
                KEY_CHUNKS_COUNT.to_string(),
                Value::U32(self.chunk_count as u32),
            ));
        }
        keys
    }

    /// What llama-quantize hands `llama_model_quantize` for this matrix (`file_arg` as
    /// given on its command line): the averaged entries and the [`Imatrix::metadata`]
    /// overrides, for runs side by side with llama.cpp.
    #[cfg(feature = "ggml")]
    pub fn llama_inputs(&self, file_arg: &[u8]) -> LlamaInputs {
        use ggml_ref::llama::KvValue;
        let entries = self
            .entries()
            .map(|(name, values)| (name.to_vec(), values.to_vec()))
            .collect();
        let overrides = self
            .metadata(file_arg)
            .into_iter()
            .filter_map(|(key, value)| match value {
                Value::U32(v) => Some((key, KvValue::Int(i64::from(v)))),
                Value::String(s) => Some((key, KvValue::Str(s.into_bytes()))),
                // `metadata` makes only u32 and string keys.
                _ => None,
            })
            .collect();
        (entries, overrides)
    }
}

/// [`Imatrix::llama_inputs`]: `ggml_ref::llama::Quantize`'s `imatrix` and `kv_overrides`.
#[cfg(feature = "ggml")]
pub type LlamaInputs = (
    Vec<(Vec<u8>, Vec<f32>)>,
    Vec<(String, ggml_ref::llama::KvValue)>,
);

/// `tensor_name_match_token_embd`.
fn is_token_embd(name: &str) -> bool {
    name == "token_embd.weight" || name == "per_layer_token_embd.weight"
}

mod read;

#[cfg(test)]
mod files;
#[cfg(test)]
mod tests;
