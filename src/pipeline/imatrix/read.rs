//! Reading an importance matrix: the legacy format (`common_imatrix_load_legacy`) and the
//! GGUF one (`common_imatrix_load`), each averaged as `load_imatrix` does.

use super::{Imatrix, ImatrixError, ImatrixFormat};
use quantforge_formats::gguf::{Array, GgufFile, TensorInfo, Value, c_str};
use quantforge_kernels::GgmlType;
use std::collections::BTreeMap;

impl Imatrix {
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
