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
use quantforge_formats::gguf::{
    Array, GGUF_MAGIC, GgufError, GgufFile, GgufString, TensorInfo, Value,
};
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

/// Bytes up to the first NUL: what a C string built from them holds.
fn c_str(bytes: &[u8]) -> &[u8] {
    bytes.split(|&b| b == 0).next().unwrap_or_default()
}

fn f32s(bytes: &[u8]) -> impl ExactSizeIterator<Item = f32> + '_ {
    bytes
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
}

/// `(float) std::lround(count)`: half away from zero; NaN, infinities and values beyond
/// the range of `long` give `LONG_MIN` (what glibc's `lroundf` returns on x86-64).
fn rounded_count(count: f32) -> f32 {
    let r = count.round();
    if r.is_finite() && r.abs() < 9_223_372_036_854_775_808.0 {
        r
    } else {
        i64::MIN as f32
    }
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

    /// Parses the legacy format (`common_imatrix_load_legacy`) and averages by ncall.
    pub fn from_legacy(bytes: &[u8]) -> Result<Imatrix, ImatrixError> {
        let mut r = Reader { bytes, at: 0 };
        let n_entries = r.i32("entry count", 0).map_err(|_| ImatrixError::NoData)?;
        if n_entries < 1 {
            return Err(ImatrixError::NoData);
        }
        let mut entries = BTreeMap::new();
        for entry in 1..=n_entries as u64 {
            let len_at = r.at;
            let len = r.i32("name length", entry)?;
            let len = usize::try_from(len).map_err(|_| ImatrixError::NegativeNameLength {
                entry,
                offset: len_at as u64,
                len,
            })?;
            let name = c_str(r.take(len, "name", entry)?).to_vec();
            let ncall = r.i32("ncall", entry)?;
            let count_at = r.at;
            let nval = r.i32("value count", entry)?;
            if nval < 1 {
                return Err(ImatrixError::BadValueCount {
                    entry,
                    name: String::from_utf8_lossy(&name).into_owned(),
                    offset: count_at as u64,
                    count: nval,
                });
            }
            let sums = r.take(nval as usize * 4, "values", entry)?;
            // quantize.cpp: sums / ncall when ncall > 0, else the sums as they are. A name
            // seen twice keeps its last values, as the loader's map does.
            let values = f32s(sums)
                .map(|s| if ncall > 0 { s / ncall as f32 } else { s })
                .collect();
            entries.insert(name, values);
        }
        // The trailer (chunk count, dataset name) is optional and read as far as it goes:
        // a short read keeps the bytes it got, as std::istream::read does.
        let mut chunk_count = 0;
        let mut datasets = Vec::new();
        let rest = &bytes[r.at..];
        if !rest.is_empty() {
            let mut n = [0u8; 4];
            let got = rest.len().min(4);
            n[..got].copy_from_slice(&rest[..got]);
            chunk_count = i32::from_le_bytes(n);
            if let Some(len) = rest.get(4..8) {
                let len = i32::from_le_bytes([len[0], len[1], len[2], len[3]]);
                if let Ok(len @ 1..) = usize::try_from(len)
                    && let Some(name) = rest.get(8..8 + len)
                {
                    datasets.push(c_str(name).to_vec());
                }
            }
        }
        Ok(Imatrix {
            entries,
            datasets,
            chunk_count,
            format: ImatrixFormat::Legacy,
            skipped: Vec::new(),
        })
    }

    /// Reads a GGUF imatrix (`common_imatrix_load`) and averages each expert's row by its
    /// count.
    pub fn from_gguf(file: &GgufFile) -> Result<Imatrix, ImatrixError> {
        if file.tensors().is_empty() {
            return Err(ImatrixError::NoData);
        }
        let meta = file.metadata();
        let u32_key = |key: &'static str| -> Result<Option<u32>, ImatrixError> {
            match meta.get(key) {
                None => Ok(None),
                Some(Value::U32(v)) => Ok(Some(*v)),
                Some(other) => Err(ImatrixError::MetadataType {
                    key,
                    found: other.type_name(),
                }),
            }
        };
        let chunk_count = u32_key("imatrix.chunk_count")?;
        let chunk_size = u32_key("imatrix.chunk_size")?;
        u32_key("imatrix.n_layer_nextn")?;
        let missing: Vec<&str> = [
            ("imatrix.datasets", meta.contains_key("imatrix.datasets")),
            ("imatrix.chunk_count", chunk_count.is_some()),
            ("imatrix.chunk_size", chunk_size.is_some()),
        ]
        .into_iter()
        .filter_map(|(key, present)| (!present).then_some(key))
        .collect();
        if !missing.is_empty() {
            return Err(ImatrixError::MissingMetadata(missing.join(", ")));
        }
        let datasets = match meta.get("imatrix.datasets") {
            Some(Value::Array(Array::String(names))) => {
                names.iter().map(|s| c_str(s).to_vec()).collect()
            }
            _ => Vec::new(),
        };

        #[derive(Default)]
        struct Parts<'a> {
            in_sum: Option<&'a TensorInfo>,
            in_sum2: Option<(usize, &'a TensorInfo)>,
            counts: Option<(usize, &'a TensorInfo)>,
        }
        let mut by_name: BTreeMap<&str, Parts<'_>> = BTreeMap::new();
        for (i, t) in file.tensors().iter().enumerate() {
            let name = t.name();
            if let Some(base) = name.strip_suffix(".in_sum") {
                by_name.entry(base).or_default().in_sum = Some(t);
            } else if let Some(base) = name.strip_suffix(".in_sum2") {
                by_name.entry(base).or_default().in_sum2 = Some((i, t));
            } else if let Some(base) = name.strip_suffix(".counts") {
                by_name.entry(base).or_default().counts = Some((i, t));
            }
        }

        let mut entries = BTreeMap::new();
        let mut skipped = Vec::new();
        for (name, parts) in by_name {
            let bad = |problem: String| ImatrixError::BadEntry {
                name: name.to_string(),
                problem,
            };
            let (Some((i_sums, sums)), Some((i_counts, counts))) = (parts.in_sum2, parts.counts)
            else {
                return Err(bad(
                    "mismatched sums and counts: needs both .in_sum2 and .counts".to_string(),
                ));
            };
            if let Some(in_sum) = parts.in_sum
                && in_sum.n_elements() != sums.n_elements()
            {
                return Err(bad(format!(
                    "mismatched sums: .in_sum has {} elements, .in_sum2 {}",
                    in_sum.n_elements(),
                    sums.n_elements()
                )));
            }
            for (what, t) in [(".in_sum2", sums), (".counts", counts)] {
                if t.ty() != GgmlType::F32 {
                    return Err(bad(format!("{what} is {}, must be f32", t.ty())));
                }
            }
            let data = |i: usize| file.tensor_at(i).map_or(&[][..], |v| v.data());
            let sums: Vec<f32> = f32s(data(i_sums)).collect();
            let counts: Vec<f32> = f32s(data(i_counts)).map(rounded_count).collect();
            if counts.is_empty() || sums.is_empty() {
                // llama-quantize skips such an entry ("no counts for entry").
                skipped.push(name.as_bytes().to_vec());
                continue;
            }
            let ne0 = sums.len() / counts.len();
            // Values past counts x ne0 (sums not a whole number of rows) stay 0.
            let mut values = vec![0.0f32; sums.len()];
            for (j, &count) in counts.iter().enumerate() {
                let row = j * ne0..(j + 1) * ne0;
                for (v, &s) in values[row.clone()].iter_mut().zip(&sums[row]) {
                    *v = if count > 0.0 { s / count } else { 1.0 };
                }
            }
            entries.insert(name.as_bytes().to_vec(), values);
        }
        Ok(Imatrix {
            entries,
            datasets,
            chunk_count: chunk_count.unwrap_or(0) as i32,
            format: ImatrixFormat::Gguf,
            skipped,
        })
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
    /// for a target type that requires an entry when it gets none.
    pub fn use_for(&self, t: &TensorPlan) -> Result<ImatrixUse, ImatrixError> {
        let found = match self.get(&t.name) {
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
}

/// `tensor_name_match_token_embd`.
fn is_token_embd(name: &str) -> bool {
    name == "token_embd.weight" || name == "per_layer_token_embd.weight"
}

/// A cursor over a legacy file whose reads name the field and entry when they fall short.
struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize, what: &'static str, entry: u64) -> Result<&'a [u8], ImatrixError> {
        let available = self.bytes.len() - self.at;
        if n > available {
            return Err(ImatrixError::Truncated {
                what,
                entry,
                offset: self.at as u64,
                needed: n as u64,
                available: available as u64,
            });
        }
        let out = &self.bytes[self.at..self.at + n];
        self.at += n;
        Ok(out)
    }

    fn i32(&mut self, what: &'static str, entry: u64) -> Result<i32, ImatrixError> {
        let b = self.take(4, what, entry)?;
        Ok(i32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
}

#[cfg(test)]
mod files;
#[cfg(test)]
mod tests;
