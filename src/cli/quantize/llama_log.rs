//! `quantize --log-format llama`: the text llama-quantize prints for the same run, so
//! scripts that parse it keep working.
//!
//! Everything here is computed from the plan, the source's header and the sizes the run
//! reports; llama.cpp's formats are reproduced exactly (`printf` widths, `std::to_string`
//! for numbers, values cut at 40 bytes, strings cut at their first NUL as C strings are).
//! Only the version and timing lines differ: they name quantforge and its own times.

use super::report::mib;
use quantforge::pipeline::imatrix::{Imatrix, ImatrixUse};
use quantforge::pipeline::plan::{Plan, Reason, TensorPlan, TensorSpec};
use quantforge_formats::gguf::{Array, Metadata, Value, c_str};
use quantforge_kernels::GgmlType;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::Write as _;

/// The function names llama.cpp's messages start with.
const LOADER: &str = "llama_model_loader";
const IMPL: &str = "llama_model_quantize_impl";

/// What the source looks like to llama.cpp's model loader.
pub(super) struct Source<'a> {
    /// The path as given.
    pub path: &'a std::path::Path,
    /// The first file's GGUF version.
    pub version: u32,
    /// Files in the set (1 unless split).
    pub files: usize,
    /// The first file's metadata, in file order.
    pub metadata: &'a Metadata,
    /// Every tensor of the set.
    pub tensors: &'a [TensorSpec],
}

/// `std::to_string` of a float (`%f` of the value widened to double).
fn c_float(v: f64) -> String {
    if v.is_nan() {
        if v.is_sign_negative() { "-nan" } else { "nan" }.to_string()
    } else if v.is_infinite() {
        if v < 0.0 { "-inf" } else { "inf" }.to_string()
    } else {
        format!("{v:.6}")
    }
}

/// The longest value text llama.cpp prints; longer ones are cut to 37 bytes and `...`.
const MAX_VALUE_LEN: usize = 40;

/// `gguf_kv_to_str`, computed only as far as the printed text needs (a vocabulary's
/// 262,144 entries would otherwise all be formatted to print 40 bytes).
fn value_text(v: &Value) -> Vec<u8> {
    let scalar = |v: &Value| -> String {
        match v {
            Value::U8(x) => x.to_string(),
            Value::I8(x) => x.to_string(),
            Value::U16(x) => x.to_string(),
            Value::I16(x) => x.to_string(),
            Value::U32(x) => x.to_string(),
            Value::I32(x) => x.to_string(),
            Value::U64(x) => x.to_string(),
            Value::I64(x) => x.to_string(),
            Value::F32(x) => c_float(f64::from(*x)),
            Value::F64(x) => c_float(*x),
            Value::Bool(b) => b.to_string(),
            Value::String(_) | Value::Array(_) => String::new(),
        }
    };
    match v {
        Value::String(s) => c_str(s.as_bytes()).to_vec(),
        Value::Array(a) => {
            let mut out = b"[".to_vec();
            let n = a.len();
            for j in 0..n {
                if out.len() > MAX_VALUE_LEN {
                    // The rest is cut anyway; what follows only has to keep it long.
                    return out;
                }
                match a {
                    Array::String(s) => {
                        out.push(b'"');
                        for &b in c_str(&s[j]) {
                            match b {
                                b'\\' => out.extend_from_slice(b"\\\\"),
                                b'"' => out.extend_from_slice(b"\\\""),
                                _ => out.push(b),
                            }
                        }
                        out.push(b'"');
                    }
                    Array::Array(_) => out.extend_from_slice(b"???"),
                    _ => out.extend_from_slice(element_text(a, j).as_bytes()),
                }
                if j + 1 < n {
                    out.extend_from_slice(b", ");
                }
            }
            out.push(b']');
            out
        }
        other => scalar(other).into_bytes(),
    }
}

/// Element `j` of a numeric or bool array, as `gguf_data_to_str` prints it.
fn element_text(a: &Array, j: usize) -> String {
    match a {
        Array::U8(v) => v[j].to_string(),
        Array::I8(v) => v[j].to_string(),
        Array::U16(v) => v[j].to_string(),
        Array::I16(v) => v[j].to_string(),
        Array::U32(v) => v[j].to_string(),
        Array::I32(v) => v[j].to_string(),
        Array::U64(v) => v[j].to_string(),
        Array::I64(v) => v[j].to_string(),
        Array::F32(v) => c_float(f64::from(v[j])),
        Array::F64(v) => c_float(v[j]),
        Array::Bool(v) => v[j].to_string(),
        Array::String(_) | Array::Array(_) => String::new(),
    }
}

/// The loader's lines: what it read, every key and value, the tensor types.
pub(super) fn loader_dump(src: &Source<'_>) -> Vec<u8> {
    let mut out = Vec::new();
    if src.files > 1 {
        let _ = writeln!(
            out,
            "{LOADER}: additional {} GGUFs metadata loaded.",
            src.files - 1
        );
    }
    let version = match src.version {
        1 => "GGUF V1 (support until nov 2023)",
        2 => "GGUF V2",
        3 => "GGUF V3 (latest)",
        _ => "unknown",
    };
    let _ = writeln!(
        out,
        "{LOADER}: loaded meta data with {} key-value pairs and {} tensors from {} (version {version})",
        src.metadata.len(),
        src.tensors.len(),
        src.path.display()
    );
    let _ = writeln!(
        out,
        "{LOADER}: Dumping metadata keys/values. Note: KV overrides do not apply in this output."
    );
    for (i, (key, value)) in src.metadata.iter().enumerate() {
        let ty = match value {
            Value::Array(a) => format!("arr[{},{}]", a.elem_type().name(), a.len()),
            other => other.value_type().name().to_string(),
        };
        let mut text = value_text(value);
        if text.len() > MAX_VALUE_LEN {
            text.truncate(MAX_VALUE_LEN - 3);
            text.extend_from_slice(b"...");
        }
        let mut shown = Vec::with_capacity(text.len());
        for b in text {
            if b == b'\n' {
                shown.extend_from_slice(b"\\n");
            } else {
                shown.push(b);
            }
        }
        let key = c_str(key.as_bytes());
        let pad = 42usize.saturating_sub(key.len());
        let _ = write!(out, "{LOADER}: - kv {i:3}: {:pad$}", "");
        out.extend_from_slice(key);
        let _ = write!(out, " {ty:<16} = ");
        out.extend_from_slice(&shown);
        out.push(b'\n');
    }
    let mut counts: BTreeMap<u32, (GgmlType, usize)> = BTreeMap::new();
    for t in src.tensors {
        counts.entry(t.ty.code()).or_insert((t.ty, 0)).1 += 1;
    }
    for (ty, n) in counts.values() {
        let _ = writeln!(out, "{LOADER}: - type {:>4}: {n:4} tensors", ty.name());
    }
    out
}

/// The warnings llama.cpp logs while it plans, in tensor order: `--tensor-type`
/// overrides of the file type's default type, and fallbacks for rows that do not fit.
pub(super) fn plan_warnings(plan: &Plan, default_type: Option<GgmlType>) -> String {
    let mut out = String::new();
    for t in &plan.tensors {
        let chosen = t.fallback.as_ref().map_or(t.target, |f| f.wanted);
        if let (Reason::TensorType(_), Some(default)) = (&t.reason, default_type)
            && chosen != default
        {
            let _ = writeln!(
                out,
                "llama_tensor_get_type: {:<36} - applying manual override: {} -> {}",
                t.name,
                default.name(),
                chosen.name()
            );
        }
        if let Some(f) = &t.fallback {
            let _ = write!(
                out,
                "warning: {:<36} - ncols {:6} not divisible by {:3} (required for type {:>7}) ",
                t.name,
                f.ncols,
                f.wanted.block_size(),
                f.wanted.name()
            );
            // Every fallback type has blocks of 32: F16 is what is left when those do not
            // fit either.
            if t.target == GgmlType::F16 && f.ncols % 32 != 0 {
                out.push_str("(WARNING: must use F16 due to unusual shape) ");
            }
            let _ = writeln!(out, "-> falling back to {:>7}", t.target.name());
        }
    }
    out
}

fn shape(t: &TensorPlan) -> String {
    let dims: Vec<String> = t.ne.iter().map(|n| format!("{n:6}")).collect();
    dims.join(", ")
}

/// Running totals and the per-tensor lines of one output.
pub(super) struct TensorLog {
    /// Tensors in the source (llama.cpp counts them before pruning).
    n_tensors: usize,
    /// Elements in the source.
    n_elements: u64,
    dry_run: bool,
    has_imatrix: bool,
    done: usize,
    size_org: u64,
    size_new: u64,
    /// Tensors finished ahead of an earlier one, by plan position: llama.cpp prints in
    /// plan order.
    waiting: BTreeMap<usize, Finished>,
}

/// A finished tensor's sizes and how it used the importance matrix.
type Finished = (u64, u64, Option<ImatrixUse>);

impl TensorLog {
    /// Nothing written yet, of a source with `tensors`.
    pub(super) fn new(tensors: &[TensorSpec], dry_run: bool, has_imatrix: bool) -> TensorLog {
        TensorLog {
            n_tensors: tensors.len(),
            n_elements: tensors.iter().map(|t| t.ne.iter().product::<u64>()).sum(),
            dry_run,
            has_imatrix,
            done: 0,
            size_org: 0,
            size_new: 0,
            waiting: BTreeMap::new(),
        }
    }

    /// Tensor `index` of `plan` finished (`bytes_in` bytes in the source, `bytes_out` in
    /// the output, `imatrix` how its quantizer used the importance matrix): the lines of
    /// it and of the tensors after it that were waiting for it, or nothing while an
    /// earlier tensor is still unfinished.
    pub(super) fn finished(
        &mut self,
        plan: &Plan,
        index: usize,
        bytes_in: u64,
        bytes_out: u64,
        imatrix: Option<ImatrixUse>,
    ) -> String {
        self.waiting.insert(index, (bytes_in, bytes_out, imatrix));
        let mut out = String::new();
        while let Some((bytes_in, bytes_out, imatrix)) = self.waiting.remove(&self.done) {
            let t = &plan.tensors[self.done];
            out += &self.tensor(t, bytes_in, bytes_out, imatrix);
        }
        out
    }

    /// The line of the next tensor, `t`, `bytes_in` bytes in the source and `bytes_out`
    /// in the output; `imatrix` is how its quantizer used the importance matrix.
    pub(super) fn tensor(
        &mut self,
        t: &TensorPlan,
        bytes_in: u64,
        bytes_out: u64,
        imatrix: Option<ImatrixUse>,
    ) -> String {
        self.done += 1;
        self.size_org += bytes_in;
        self.size_new += bytes_out;
        let mut out = format!(
            "[{:4}/{:4}] {:<36} - [{}], type = {:>6}, ",
            self.done,
            self.n_tensors,
            t.name,
            shape(t),
            t.source.name()
        );
        if !t.converts() {
            let _ = writeln!(out, "size = {:8.3} MiB", mib(bytes_out));
        } else if self.dry_run {
            let _ = writeln!(
                out,
                "size = {:8.2} MiB -> {:8.2} MiB ({})",
                mib(bytes_in),
                mib(bytes_out),
                t.target.name()
            );
        } else {
            if self.has_imatrix {
                match imatrix {
                    Some(ImatrixUse::NoEntry) => {
                        let _ = write!(
                            out,
                            "\n====== {IMPL}: did not find weights for {}\n",
                            t.name
                        );
                    }
                    Some(ImatrixUse::WrongSizeIgnored { len, expected }) => {
                        let _ = write!(
                            out,
                            "\n====== {IMPL}: imatrix size {} is different from tensor size {} for {}\n",
                            len as i32, expected as i32, t.name
                        );
                    }
                    Some(ImatrixUse::Used) | None => {}
                }
            }
            let _ = writeln!(
                out,
                "converting to {} .. size = {:8.2} MiB -> {:8.2} MiB",
                t.target.name(),
                mib(bytes_in),
                mib(bytes_out)
            );
        }
        out
    }

    /// The closing lines: the sizes, and the warnings llama.cpp ends with.
    pub(super) fn footer(&self, plan: &Plan) -> String {
        let bpw = |bytes: u64| bytes as f64 * 8.0 / self.n_elements.max(1) as f64;
        let mut out = format!(
            "{IMPL}: model size  = {:8.2} MiB ({:.2} BPW)\n{IMPL}: quant size  = {:8.2} MiB ({:.2} BPW)\n",
            mib(self.size_org),
            bpw(self.size_org),
            mib(self.size_new),
            bpw(self.size_new)
        );
        if self.dry_run && !self.has_imatrix && plan.tensors.iter().any(needs_imatrix) {
            let _ = writeln!(
                out,
                "{IMPL}: WARNING: dry run completed successfully, but actually completing this quantization will require an imatrix!"
            );
        }
        if plan.n_fallback > 0 {
            let _ = writeln!(
                out,
                "{IMPL}: WARNING: {} of {} tensor(s) required fallback quantization",
                plan.n_fallback, self.n_tensors
            );
        }
        out
    }
}

/// Whether llama.cpp's dry run counts `t` as needing an importance matrix.
fn needs_imatrix(t: &TensorPlan) -> bool {
    t.quantizable && t.requires_imatrix
}

/// llama-quantize's opening lines (standard error): its version, then what it does.
pub(super) fn opening(
    input: &std::path::Path,
    output: Option<&std::path::Path>,
    preset: &str,
    threads: usize,
) -> String {
    let mut out = format!(
        "version: quantforge {} (build 0, commit unknown)\nbuilt with rustc for {}-{}\n",
        env!("CARGO_PKG_VERSION"),
        std::env::consts::ARCH,
        std::env::consts::OS
    );
    match output {
        Some(o) => {
            let _ = write!(
                out,
                "main: quantizing '{}' to '{}' as {preset}",
                input.display(),
                o.display()
            );
        }
        None => {
            let _ = write!(
                out,
                "main: calculating quantization size for '{}' as {preset}",
                input.display()
            );
        }
    }
    if threads > 0 {
        let _ = write!(out, " using {threads} threads");
    }
    out.push('\n');
    out
}

/// llama-quantize's lines (standard output) for the imatrix it loaded from `path`:
/// `loaded` entries, of which `m` holds those `--include/--exclude-weights` kept.
pub(super) fn imatrix_loaded(m: &Imatrix, loaded: usize, path: &std::path::Path) -> String {
    let mut out = String::new();
    if let [first, rest @ ..] = m.datasets() {
        let _ = write!(
            out,
            "load_imatrix: imatrix datasets=['{}'",
            String::from_utf8_lossy(first)
        );
        for d in rest {
            let _ = write!(out, ", '{}'", String::from_utf8_lossy(d));
        }
        out.push_str("]\n");
    }
    let _ = writeln!(
        out,
        "load_imatrix: loaded {loaded} importance matrix entries from {} computed on {} chunks",
        path.display(),
        m.chunk_count()
    );
    if !m.is_empty() {
        let _ = writeln!(
            out,
            "prepare_imatrix: have {} importance matrix entries",
            m.len()
        );
    }
    out
}

/// llama.cpp's line for an importance matrix of `entries` entries handed to the quantizer.
pub(super) fn imatrix_in_use(entries: usize) -> String {
    format!("\n{IMPL}: have importance matrix data with {entries} entries\n")
}

/// llama-quantize's closing lines (standard output): its times, in milliseconds.
pub(super) fn closing(quantize_ms: f64, total_ms: f64) -> String {
    format!(
        "\nmain: quantize time = {quantize_ms:8.2} ms\nmain:    total time = {total_ms:8.2} ms\n"
    )
}

/// Writes `bytes` to standard error as they are (values may hold bytes that are not
/// UTF-8, as llama.cpp prints them).
pub(super) fn to_stderr(bytes: &[u8]) {
    let mut err = std::io::stderr().lock();
    let _ = err.write_all(bytes);
    let _ = err.flush();
}

#[cfg(test)]
mod tests {
    use super::*;
    use quantforge_formats::gguf::{GgufString, StringArray};

    #[test]
    fn floats_print_as_std_to_string() {
        assert_eq!(c_float(1e-6), "0.000001");
        assert_eq!(c_float(0.0078125), "0.007812");
        assert_eq!(c_float(-1000.0), "-1000.000000");
        assert_eq!(c_float(f64::NAN), "nan");
        assert_eq!(c_float(-f64::NAN), "-nan");
        assert_eq!(c_float(f64::NEG_INFINITY), "-inf");
    }

    #[test]
    fn values_are_cut_as_c_strings_and_escaped_in_arrays() {
        let s = Value::String(GgufString::from_bytes(b"ab\0cd".to_vec()));
        assert_eq!(value_text(&s), b"ab");
        let tokens: StringArray = vec![&b"a\"b"[..], b"c\\", b"x\0y"].into();
        let a = Value::Array(Array::String(tokens));
        assert_eq!(value_text(&a), br#"["a\"b", "c\\", "x"]"#);
        let nested = Value::Array(Array::Array(vec![Array::U8(vec![1])]));
        assert_eq!(value_text(&nested), b"[???]");
        let bools = Value::Array(Array::Bool(vec![true, false]));
        assert_eq!(value_text(&bools), b"[true, false]");
    }

    #[test]
    fn long_arrays_stop_once_the_cut_text_is_known() {
        let big = Value::Array(Array::I32(vec![3; 1_000_000]));
        let text = value_text(&big);
        assert!(text.len() <= MAX_VALUE_LEN + 4, "{}", text.len());
        assert!(text.starts_with(b"[3, 3, 3"));
    }
}
