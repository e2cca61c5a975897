//! llama.cpp's quantizer (`llama_model_quantize` in `src/llama-quant.cpp`), linked from the
//! same llama-cpp-sys-2 build as ggml, for tests that compare quantforge's plan and output
//! with what llama.cpp writes.
//!
//! The parameter struct is declared here field for field as `include/llama.h` has it
//! (`struct llama_model_quantize_params`, with `llama_model_imatrix_data` and
//! `llama_model_kv_override`); a test checks their layout against the bindings
//! llama-cpp-sys-2 generates.

use std::ffi::{CStr, CString, c_char, c_void};
use std::fmt;
use std::path::Path;
use std::sync::{Mutex, Once};

/// `GGML_TYPE_COUNT`: "no type given" in the type fields of [`QuantizeParams`].
const NO_TYPE: u32 = crate::TYPE_COUNT;

/// `struct llama_model_tensor_override`: a `--tensor-type` rule.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct TensorTypeOverride {
    /// Regular expression (ECMAScript, searched anywhere in the name); NULL ends the list.
    pub pattern: *const c_char,
    /// `enum ggml_type`.
    pub ty: u32,
}

/// `struct llama_model_imatrix_data`: one importance matrix entry; a NULL name ends the
/// list.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ImatrixData {
    /// The tensor name.
    pub name: *const c_char,
    /// `size` averaged values (`ne0` per expert).
    pub data: *const f32,
    /// Number of values.
    pub size: usize,
}

/// The value of a `struct llama_model_kv_override` (its anonymous union).
#[repr(C)]
#[derive(Clone, Copy)]
pub union KvOverrideValue {
    /// `LLAMA_KV_OVERRIDE_TYPE_INT`.
    pub val_i64: i64,
    /// `LLAMA_KV_OVERRIDE_TYPE_FLOAT`.
    pub val_f64: f64,
    /// `LLAMA_KV_OVERRIDE_TYPE_BOOL`.
    pub val_bool: bool,
    /// `LLAMA_KV_OVERRIDE_TYPE_STR`: NUL-terminated, at most 127 bytes.
    pub val_str: [c_char; 128],
}

/// `struct llama_model_kv_override`: a metadata key set in the output; an empty key ends
/// the list.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct KvOverride {
    /// `enum llama_model_kv_override_type`: 0 int, 1 float, 2 bool, 3 str.
    pub tag: u32,
    /// NUL-terminated key, at most 127 bytes.
    pub key: [c_char; 128],
    /// The value, as `tag` says.
    pub value: KvOverrideValue,
}

/// A `--override-kv` value as llama-quantize parses it (`string_parse_kv_override`).
#[derive(Clone, Debug, PartialEq)]
pub enum KvValue {
    /// `int:` (written as u32 of the absolute value).
    Int(i64),
    /// `float:` (written as f32).
    Float(f64),
    /// `bool:`.
    Bool(bool),
    /// `str:` (at most 127 bytes are kept).
    Str(Vec<u8>),
}

/// Copies `bytes` into a fixed C string field, cut to 127 bytes.
fn c_field(bytes: &[u8]) -> [c_char; 128] {
    let mut field = [0 as c_char; 128];
    for (f, &b) in field.iter_mut().zip(bytes.iter().take(127)) {
        *f = b as c_char;
    }
    field
}

impl KvOverride {
    /// The C struct for a key and value.
    pub fn new(key: &str, value: &KvValue) -> KvOverride {
        let (tag, value) = match value {
            KvValue::Int(v) => (0, KvOverrideValue { val_i64: *v }),
            KvValue::Float(v) => (1, KvOverrideValue { val_f64: *v }),
            KvValue::Bool(v) => (2, KvOverrideValue { val_bool: *v }),
            KvValue::Str(s) => (
                3,
                KvOverrideValue {
                    val_str: c_field(s),
                },
            ),
        };
        KvOverride {
            tag,
            key: c_field(key.as_bytes()),
            value,
        }
    }

    /// The empty-key entry that ends a list.
    fn end() -> KvOverride {
        KvOverride {
            tag: 0,
            key: [0; 128],
            value: KvOverrideValue { val_i64: 0 },
        }
    }
}

/// `struct llama_model_quantize_params` of `llama.h`, in its field order.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct QuantizeParams {
    /// Threads; <= 0 means all hardware threads.
    pub nthread: i32,
    /// `enum llama_ftype` to quantize to.
    pub ftype: u32,
    /// `enum ggml_type` of `output.weight`, `GGML_TYPE_COUNT` for the mix's choice.
    pub output_tensor_type: u32,
    /// `enum ggml_type` of the token embeddings, `GGML_TYPE_COUNT` for the mix's choice.
    pub token_embedding_type: u32,
    /// Allow quantizing tensors that are already quantized.
    pub allow_requantize: bool,
    /// Quantize `output.weight` (false: `--leave-output-tensor`).
    pub quantize_output_tensor: bool,
    /// Only copy tensors (`COPY`).
    pub only_copy: bool,
    /// Every tensor to the default type (`--pure`).
    pub pure: bool,
    /// One output file per input file.
    pub keep_split: bool,
    /// Compute sizes only; write nothing.
    pub dry_run: bool,
    /// Importance matrix entries (NULL-name terminated), or NULL.
    pub imatrix: *const ImatrixData,
    /// Metadata overrides (empty-key terminated), or NULL.
    pub kv_overrides: *const KvOverride,
    /// `--tensor-type` rules (NULL-pattern terminated), or NULL.
    pub tt_overrides: *const TensorTypeOverride,
    /// Layers to prune (-1 terminated), or NULL.
    pub prune_layers: *const i32,
    /// Bytes of tensor rows kept in memory at once; 0 for the default (8 GiB).
    pub max_buf_size: usize,
}

type LogCallback = unsafe extern "C" fn(level: u32, text: *const c_char, user_data: *mut c_void);

unsafe extern "C" {
    fn llama_backend_init();
    fn llama_log_set(callback: Option<LogCallback>, user_data: *mut c_void);
    fn llama_model_quantize_default_params() -> QuantizeParams;
    fn llama_model_quantize(
        fname_inp: *const c_char,
        fname_out: *const c_char,
        params: *const QuantizeParams,
    ) -> u32;
}

/// `llama_model_quantize_default_params()`.
pub fn default_params() -> QuantizeParams {
    // SAFETY: returns a struct by value; no arguments.
    unsafe { llama_model_quantize_default_params() }
}

/// What [`quantize`] runs: llama-quantize's options in safe form.
#[derive(Clone, Debug)]
pub struct Quantize {
    /// `enum llama_ftype` (`general.file_type` value; COPY is `0` with `only_copy`).
    pub ftype: u32,
    /// Threads (<= 0: all).
    pub nthread: i32,
    /// `--allow-requantize`.
    pub allow_requantize: bool,
    /// `false` for `--leave-output-tensor`.
    pub quantize_output_tensor: bool,
    /// `COPY`.
    pub only_copy: bool,
    /// `--pure`.
    pub pure: bool,
    /// `--output-tensor-type` (ggml type code).
    pub output_tensor_type: Option<u32>,
    /// `--token-embedding-type` (ggml type code).
    pub token_embedding_type: Option<u32>,
    /// `--tensor-type PATTERN=TYPE` rules (pattern as llama.cpp gets it, type code).
    pub tensor_types: Vec<(String, u32)>,
    /// `--keep-split`: one output per input file, named `OUTPUT-0000i-of-0000n.gguf`
    /// (`output` is then the prefix).
    pub keep_split: bool,
    /// Importance matrix entries (name, averaged values) as llama-quantize loads them;
    /// empty for none.
    pub imatrix: Vec<(Vec<u8>, Vec<f32>)>,
    /// Metadata overrides in order: `--override-kv`, then the `quantize.imatrix.*` keys.
    pub kv_overrides: Vec<(String, KvValue)>,
    /// `--prune-layers` (as llama-quantize passes them: sorted, no duplicates); empty for
    /// none.
    pub prune_layers: Vec<i32>,
    /// `--dry-run`: sizes only, no file written.
    pub dry_run: bool,
}

impl Quantize {
    /// llama.cpp's defaults for a file type.
    pub fn new(ftype: u32) -> Quantize {
        Quantize {
            ftype,
            nthread: 0,
            allow_requantize: false,
            quantize_output_tensor: true,
            only_copy: false,
            pure: false,
            output_tensor_type: None,
            token_embedding_type: None,
            tensor_types: Vec::new(),
            keep_split: false,
            imatrix: Vec::new(),
            kv_overrides: Vec::new(),
            prune_layers: Vec::new(),
            dry_run: false,
        }
    }
}

/// A failed `llama_model_quantize`, with what llama.cpp logged at warning level and above.
#[derive(Debug)]
pub struct QuantizeError {
    /// llama.cpp's warnings and errors of the run, or why the call was not made.
    pub log: String,
}

impl fmt::Display for QuantizeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "llama_model_quantize failed: {}", self.log.trim_end())
    }
}

impl std::error::Error for QuantizeError {}

/// Warnings and errors logged by the run in progress (runs are serialized).
static LOG: Mutex<String> = Mutex::new(String::new());
/// Everything logged by the run in progress, as llama.cpp's default logger would print
/// it (the bytes as they are: metadata values need not be UTF-8).
static FULL_LOG: Mutex<Vec<u8>> = Mutex::new(Vec::new());
/// llama.cpp's quantizer and logger are process-global: one run at a time.
static RUN: Mutex<()> = Mutex::new(());

unsafe extern "C" fn capture_log(level: u32, text: *const c_char, _user_data: *mut c_void) {
    const WARN: u32 = 3;
    const ERROR: u32 = 4;
    const CONT: u32 = 5;
    if text.is_null() {
        return;
    }
    // SAFETY: llama.cpp passes a NUL-terminated message valid for this call.
    let bytes = unsafe { CStr::from_ptr(text) }.to_bytes();
    if let Ok(mut full) = FULL_LOG.lock() {
        full.extend_from_slice(bytes);
    }
    let text = String::from_utf8_lossy(bytes);
    if std::env::var_os("GGML_REF_LLAMA_LOG").is_some() {
        eprint!("{text}");
    }
    if matches!(level, WARN | ERROR | CONT)
        && let Ok(mut log) = LOG.lock()
    {
        log.push_str(&text);
    }
}

fn init() {
    static INIT: Once = Once::new();
    INIT.call_once(|| {
        // SAFETY: one-time global initialisation; the callback is a plain function that
        // lives for the whole program.
        unsafe {
            llama_backend_init();
            llama_log_set(Some(capture_log), std::ptr::null_mut());
        }
    });
}

fn c_path(path: &Path) -> Result<CString, QuantizeError> {
    let fail = |why: &str| QuantizeError {
        log: format!("path {}: {why}", path.display()),
    };
    let s = path.to_str().ok_or_else(|| fail("not UTF-8"))?;
    CString::new(s).map_err(|_| fail("contains NUL"))
}

/// The strings as C strings for the call; one with a NUL inside is refused, naming `what`.
fn c_strings<'a>(
    strings: impl Iterator<Item = &'a [u8]>,
    what: &str,
) -> Result<Vec<CString>, QuantizeError> {
    strings
        .map(|s| {
            CString::new(s).map_err(|_| QuantizeError {
                log: format!("{what} {:?} contains NUL", String::from_utf8_lossy(s)),
            })
        })
        .collect()
}

/// Runs llama.cpp's quantizer from `input` (a GGUF) to `output`. Returns the warnings
/// llama.cpp logged (fallbacks, overrides) on success.
pub fn quantize(input: &Path, output: &Path, q: &Quantize) -> Result<String, QuantizeError> {
    quantize_logged(input, output, q).0
}

/// [`quantize`], with everything llama.cpp logged during the run: the text llama-quantize
/// prints on standard error between its own opening and closing lines.
pub fn quantize_logged(
    input: &Path,
    output: &Path,
    q: &Quantize,
) -> (Result<String, QuantizeError>, Vec<u8>) {
    // Before the log is cleared: starting the backend on the first run may log too.
    init();
    let _run = RUN.lock().unwrap_or_else(|e| e.into_inner());
    FULL_LOG.lock().unwrap_or_else(|e| e.into_inner()).clear();
    let result = quantize_locked(input, output, q);
    let full = std::mem::take(&mut *FULL_LOG.lock().unwrap_or_else(|e| e.into_inner()));
    (result, full)
}

/// [`quantize`], with [`RUN`] held by the caller.
fn quantize_locked(input: &Path, output: &Path, q: &Quantize) -> Result<String, QuantizeError> {
    init();
    let inp = c_path(input)?;
    let out = c_path(output)?;
    let patterns = c_strings(
        q.tensor_types.iter().map(|(p, _)| p.as_bytes()),
        "tensor type pattern",
    )?;
    let mut overrides: Vec<TensorTypeOverride> = patterns
        .iter()
        .zip(&q.tensor_types)
        .map(|(p, (_, ty))| TensorTypeOverride {
            pattern: p.as_ptr(),
            ty: *ty,
        })
        .collect();
    overrides.push(TensorTypeOverride {
        pattern: std::ptr::null(),
        ty: NO_TYPE,
    });

    let names = c_strings(q.imatrix.iter().map(|(n, _)| n.as_slice()), "imatrix entry")?;
    let mut imatrix: Vec<ImatrixData> = names
        .iter()
        .zip(&q.imatrix)
        .map(|(name, (_, values))| ImatrixData {
            name: name.as_ptr(),
            data: values.as_ptr(),
            size: values.len(),
        })
        .collect();
    imatrix.push(ImatrixData {
        name: std::ptr::null(),
        data: std::ptr::null(),
        size: 0,
    });
    let mut kv_overrides: Vec<KvOverride> = q
        .kv_overrides
        .iter()
        .map(|(key, value)| KvOverride::new(key, value))
        .collect();
    kv_overrides.push(KvOverride::end());

    let prune: Vec<i32> = q.prune_layers.iter().copied().chain([-1]).collect();

    let mut params = default_params();
    params.nthread = q.nthread;
    params.ftype = q.ftype;
    params.allow_requantize = q.allow_requantize;
    params.quantize_output_tensor = q.quantize_output_tensor;
    params.only_copy = q.only_copy;
    params.pure = q.pure;
    params.keep_split = q.keep_split;
    params.dry_run = q.dry_run;
    params.output_tensor_type = q.output_tensor_type.unwrap_or(NO_TYPE);
    params.token_embedding_type = q.token_embedding_type.unwrap_or(NO_TYPE);
    if !q.tensor_types.is_empty() {
        params.tt_overrides = overrides.as_ptr();
    }
    if !q.imatrix.is_empty() {
        params.imatrix = imatrix.as_ptr();
    }
    if !q.kv_overrides.is_empty() {
        params.kv_overrides = kv_overrides.as_ptr();
    }
    if !q.prune_layers.is_empty() {
        params.prune_layers = prune.as_ptr();
    }

    LOG.lock().unwrap_or_else(|e| e.into_inner()).clear();
    // SAFETY: the paths are NUL-terminated strings and `params` (with the override lists,
    // their patterns, the imatrix names and values, the pruned layers) outlives the call;
    // the lists end with the terminators llama.cpp looks for; it reports failure by its
    // return value.
    let status = unsafe { llama_model_quantize(inp.as_ptr(), out.as_ptr(), &params) };
    let log = std::mem::take(&mut *LOG.lock().unwrap_or_else(|e| e.into_inner()));
    if status == 0 {
        Ok(log)
    } else {
        Err(QuantizeError { log })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{offset_of, size_of};

    #[test]
    fn params_layout_matches_the_generated_bindings() {
        use llama_cpp_sys_2::llama_model_quantize_params as Sys;
        assert_eq!(size_of::<QuantizeParams>(), size_of::<Sys>());
        assert_eq!(offset_of!(QuantizeParams, ftype), offset_of!(Sys, ftype));
        assert_eq!(
            offset_of!(QuantizeParams, token_embedding_type),
            offset_of!(Sys, token_embedding_type)
        );
        assert_eq!(
            offset_of!(QuantizeParams, dry_run),
            offset_of!(Sys, dry_run)
        );
        assert_eq!(
            offset_of!(QuantizeParams, imatrix),
            offset_of!(Sys, imatrix)
        );
        assert_eq!(
            offset_of!(QuantizeParams, tt_overrides),
            offset_of!(Sys, tt_overrides)
        );
        assert_eq!(
            offset_of!(QuantizeParams, max_buf_size),
            offset_of!(Sys, max_buf_size)
        );
    }

    #[test]
    fn imatrix_and_kv_override_layouts_match_the_generated_bindings() {
        use llama_cpp_sys_2::{llama_model_imatrix_data as Imat, llama_model_kv_override as Kv};
        assert_eq!(size_of::<ImatrixData>(), size_of::<Imat>());
        assert_eq!(offset_of!(ImatrixData, data), offset_of!(Imat, data));
        assert_eq!(offset_of!(ImatrixData, size), offset_of!(Imat, size));
        assert_eq!(size_of::<KvOverride>(), size_of::<Kv>());
        assert_eq!(
            std::mem::align_of::<KvOverride>(),
            std::mem::align_of::<Kv>()
        );
        assert_eq!(offset_of!(KvOverride, key), offset_of!(Kv, key));
        assert_eq!(offset_of!(KvOverride, value), size_of::<Kv>() - 128);
    }

    #[test]
    fn kv_override_fields_are_cut_to_127_bytes() {
        let long = vec![b'x'; 200];
        let o = KvOverride::new(
            std::str::from_utf8(&long).unwrap(),
            &KvValue::Str(long.clone()),
        );
        assert_eq!(o.tag, 3);
        assert_eq!(o.key[126], b'x' as c_char);
        assert_eq!(o.key[127], 0);
        // SAFETY: tag 3 means the string member was written.
        let s = unsafe { o.value.val_str };
        assert_eq!((s[126], s[127]), (b'x' as c_char, 0));
    }

    #[test]
    fn default_params_are_llama_cpps() {
        let p = default_params();
        assert_eq!((p.nthread, p.ftype), (0, 7)); // Q8_0
        assert_eq!(p.output_tensor_type, NO_TYPE);
        assert_eq!(p.token_embedding_type, NO_TYPE);
        assert!(p.quantize_output_tensor && !p.allow_requantize && !p.only_copy && !p.pure);
        assert!(p.tt_overrides.is_null() && p.imatrix.is_null());
        assert_eq!(p.max_buf_size, 8 << 30);
    }
}
