//! llama.cpp's quantizer (`llama_model_quantize` in `src/llama-quant.cpp`), linked from the
//! same llama-cpp-sys-2 build as ggml, for tests that compare quantforge's plan and output
//! with what llama.cpp writes.
//!
//! The parameter struct is declared here field for field as `include/llama.h` has it
//! (`struct llama_model_quantize_params`); a test checks its layout against the bindings
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
    /// `const struct llama_model_imatrix_data *` (NULL-name terminated), or NULL.
    pub imatrix: *const c_void,
    /// `const struct llama_model_kv_override *` (empty-key terminated), or NULL.
    pub kv_overrides: *const c_void,
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
    let text = unsafe { CStr::from_ptr(text) }.to_string_lossy();
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

/// Runs llama.cpp's quantizer from `input` (a GGUF) to `output`. Returns the warnings
/// llama.cpp logged (fallbacks, overrides) on success.
pub fn quantize(input: &Path, output: &Path, q: &Quantize) -> Result<String, QuantizeError> {
    init();
    let inp = c_path(input)?;
    let out = c_path(output)?;
    let patterns: Vec<CString> = q
        .tensor_types
        .iter()
        .map(|(p, _)| {
            CString::new(p.as_str()).map_err(|_| QuantizeError {
                log: format!("tensor type pattern {p:?} contains NUL"),
            })
        })
        .collect::<Result<_, _>>()?;
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

    let mut params = default_params();
    params.nthread = q.nthread;
    params.ftype = q.ftype;
    params.allow_requantize = q.allow_requantize;
    params.quantize_output_tensor = q.quantize_output_tensor;
    params.only_copy = q.only_copy;
    params.pure = q.pure;
    params.output_tensor_type = q.output_tensor_type.unwrap_or(NO_TYPE);
    params.token_embedding_type = q.token_embedding_type.unwrap_or(NO_TYPE);
    if !q.tensor_types.is_empty() {
        params.tt_overrides = overrides.as_ptr();
    }

    let _run = RUN.lock().unwrap_or_else(|e| e.into_inner());
    LOG.lock().unwrap_or_else(|e| e.into_inner()).clear();
    // SAFETY: the paths are NUL-terminated strings and `params` (with the override list
    // and its patterns) outlives the call; llama.cpp reports failure by its return value.
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
