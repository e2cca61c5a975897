//! llama.cpp's quantizer outputs, remembered by digest between test runs.
//!
//! The byte-for-byte suites quantize the real Gemma-3-270M with every preset through
//! `llama_model_quantize`, which takes seconds to half a minute per i-quant preset. What a
//! comparison needs from llama.cpp is only its output's SHA-256 and length (and the log it
//! returned), and those are a function of the input file's bytes, the options and the
//! llama.cpp build. [`quantize_remembered`] keys them by exactly that, keeps them in
//! `$GGML_REF_CACHE` (default `$HOME/.cache/quantforge-oracle/llama-quantize`), and runs
//! llama.cpp only for a run it has not seen. A changed input, option, imatrix value or
//! llama.cpp version is a new key, so the answer always comes from the live reference,
//! once. `GGML_REF_NO_CACHE=1` runs llama.cpp every time.
//!
//! Only single-file, non-dry runs are remembered; `--keep-split` and `--dry-run` always
//! run live.

use crate::llama::{Quantize, QuantizeError, quantize};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::fs::File;
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::SystemTime;

/// The llama.cpp build the answers come from: the pinned `llama-cpp-sys-2` of
/// `ggml-ref/Cargo.toml` (a test keeps the two equal).
pub const LLAMA_CPP_SYS: &str = "0.1.161";

/// Bumped when what a key covers or an entry holds changes.
const FORMAT: &str = "ggml-ref remembered llama_model_quantize v1";

/// What llama.cpp made of one run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reference {
    /// Lowercase hex SHA-256 of the output file.
    pub sha256: String,
    /// The output's length in bytes.
    pub len: u64,
    /// The warnings llama.cpp logged (what [`quantize`] returns on success).
    pub log: String,
    /// The output was written to the path given in this call (llama.cpp ran); when the
    /// answer was remembered nothing was written.
    pub written: bool,
}

impl Reference {
    /// Whether the file at `path` is llama.cpp's output: same length, same SHA-256.
    pub fn matches(&self, path: &Path) -> io::Result<bool> {
        if std::fs::metadata(path)?.len() != self.len {
            return Ok(false);
        }
        Ok(sha256_file(path)? == self.sha256)
    }
}

/// llama.cpp's answer for quantizing `input` with `q`: remembered from an earlier run with
/// the same input bytes, options and llama.cpp build, or made now by running
/// [`quantize`] with `output` as its output (then [`Reference::written`] is set). A
/// refusal is returned as it is and not remembered.
pub fn quantize_remembered(
    input: &Path,
    output: &Path,
    q: &Quantize,
) -> Result<Reference, QuantizeError> {
    answer(input, output, q, true)
}

/// Runs llama.cpp now (into `output`) and remembers its answer in place of any earlier
/// one for the same run: for a comparison whose remembered answer disagreed.
pub fn quantize_fresh(
    input: &Path,
    output: &Path,
    q: &Quantize,
) -> Result<Reference, QuantizeError> {
    answer(input, output, q, false)
}

fn answer(
    input: &Path,
    output: &Path,
    q: &Quantize,
    recall: bool,
) -> Result<Reference, QuantizeError> {
    let io_error = |what: &str, e: io::Error| QuantizeError {
        log: format!("{what}: {e}"),
    };
    let dir = cache_dir();
    let remembering = dir.is_some() && !q.keep_split && !q.dry_run;
    let key = if remembering {
        Some(key(input, q).map_err(|e| io_error(&format!("reading {}", input.display()), e))?)
    } else {
        None
    };
    let entry = match (&dir, &key) {
        (Some(dir), Some(key)) => Some(dir.join(format!("{key}.txt"))),
        _ => None,
    };
    if recall
        && let Some(entry) = &entry
        && let Some(answer) = read_entry(entry)
    {
        return Ok(answer);
    }
    let answer = quantize(input, output, q).and_then(|log| {
        let len = std::fs::metadata(output)
            .map_err(|e| io_error("llama.cpp's output", e))?
            .len();
        let sha256 = sha256_file(output).map_err(|e| io_error("llama.cpp's output", e))?;
        Ok(Reference {
            sha256,
            len,
            log,
            written: true,
        })
    });
    // Only outputs are remembered: a refusal may come from this machine (a full disk)
    // rather than the run, and refusals come early and cost little. A cache that cannot
    // be written only costs the next run time.
    if let (Some(entry), Ok(r)) = (&entry, &answer) {
        let _ = write_entry(entry, r);
    }
    answer
}

/// `$GGML_REF_CACHE`, else `$HOME/.cache/quantforge-oracle/llama-quantize`; `None` with
/// `GGML_REF_NO_CACHE=1` or neither variable set.
fn cache_dir() -> Option<PathBuf> {
    if std::env::var_os("GGML_REF_NO_CACHE").is_some_and(|v| v == "1") {
        return None;
    }
    if let Some(dir) = std::env::var_os("GGML_REF_CACHE") {
        return Some(PathBuf::from(dir));
    }
    let home = std::env::var_os("HOME")?;
    Some(Path::new(&home).join(".cache/quantforge-oracle/llama-quantize"))
}

/// SHA-256 of everything the output depends on: this format, the llama.cpp build and the
/// CPU features its C code may have been compiled for, the input's bytes, and every option
/// except the thread count (llama.cpp's output does not depend on it).
fn key(input: &Path, q: &Quantize) -> io::Result<String> {
    let mut h = Sha256::new();
    h.update(FORMAT.as_bytes());
    h.update(LLAMA_CPP_SYS.as_bytes());
    h.update(cpu_features().as_bytes());
    h.update(input_sha256(input)?.as_bytes());
    let Quantize {
        ftype,
        nthread: _,
        allow_requantize,
        quantize_output_tensor,
        only_copy,
        pure,
        output_tensor_type,
        token_embedding_type,
        tensor_types,
        keep_split,
        imatrix,
        kv_overrides,
        prune_layers,
        dry_run,
    } = q;
    let options = format!(
        "{ftype} {allow_requantize} {quantize_output_tensor} {only_copy} {pure} \
         {output_tensor_type:?} {token_embedding_type:?} {tensor_types:?} {keep_split} \
         {kv_overrides:?} {prune_layers:?} {dry_run} {}",
        imatrix.len()
    );
    h.update(options.as_bytes());
    for (name, values) in imatrix {
        h.update((name.len() as u64).to_le_bytes());
        h.update(name);
        h.update((values.len() as u64).to_le_bytes());
        for v in values {
            h.update(v.to_bits().to_le_bytes());
        }
    }
    Ok(hex(&h.finalize()))
}

/// The architecture and the x86 features a native build of ggml would use.
fn cpu_features() -> String {
    #[cfg(target_arch = "x86_64")]
    {
        let f = [
            ("avx2", std::arch::is_x86_feature_detected!("avx2")),
            ("fma", std::arch::is_x86_feature_detected!("fma")),
            ("f16c", std::arch::is_x86_feature_detected!("f16c")),
            ("avx512f", std::arch::is_x86_feature_detected!("avx512f")),
        ];
        let on: Vec<&str> = f.iter().filter(|(_, on)| *on).map(|(n, _)| *n).collect();
        format!("x86_64 {}", on.join(","))
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        std::env::consts::ARCH.to_string()
    }
}

/// The SHA-256 of an input file, computed once per process for a path whose length and
/// modification time have not changed (the suites quantize one input many times).
fn input_sha256(path: &Path) -> io::Result<String> {
    type Seen = HashMap<(PathBuf, u64, Option<SystemTime>), String>;
    static SEEN: Mutex<Option<Seen>> = Mutex::new(None);
    let meta = std::fs::metadata(path)?;
    let id = (path.to_path_buf(), meta.len(), meta.modified().ok());
    if let Some(d) = SEEN
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .as_ref()
        .and_then(|s| s.get(&id))
    {
        return Ok(d.clone());
    }
    let d = sha256_file(path)?;
    SEEN.lock()
        .unwrap_or_else(|e| e.into_inner())
        .get_or_insert_with(HashMap::new)
        .insert(id, d.clone());
    Ok(d)
}

fn sha256_file(path: &Path) -> io::Result<String> {
    let mut f = File::open(path)?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(hex(&h.finalize()))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// An entry is `ok LEN SHA256` on its first line, the log after it.
fn read_entry(path: &Path) -> Option<Reference> {
    let text = std::fs::read_to_string(path).ok()?;
    let (first, log) = text.split_once('\n')?;
    let mut words = first.split(' ');
    (words.next()? == "ok").then_some(())?;
    let len = words.next()?.parse().ok()?;
    let sha256 = words.next()?.to_string();
    (sha256.len() == 64 && words.next().is_none()).then(|| Reference {
        sha256,
        len,
        log: log.to_string(),
        written: false,
    })
}

/// Writes an entry whole or not at all (a temporary file renamed over it), so parallel
/// tests never read half of one.
fn write_entry(path: &Path, r: &Reference) -> io::Result<()> {
    let text = format!("ok {} {}\n{}", r.len, r.sha256, r.log);
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    // Unique to this process and this write: two tests of one binary may remember the
    // same run at once.
    static WRITES: AtomicU64 = AtomicU64::new(0);
    let tmp = dir.join(format!(
        ".{}.{}.{}",
        path.file_name().and_then(|n| n.to_str()).unwrap_or("entry"),
        std::process::id(),
        WRITES.fetch_add(1, Ordering::Relaxed)
    ));
    let mut f = File::create(&tmp)?;
    f.write_all(text.as_bytes())?;
    drop(f);
    std::fs::rename(&tmp, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pinned_llama_cpp_sys_is_the_one_named_in_keys() {
        let manifest = include_str!("../Cargo.toml");
        let pin = format!("llama-cpp-sys-2 = {{ version = \"={LLAMA_CPP_SYS}\"");
        assert!(manifest.contains(&pin), "ggml-ref/Cargo.toml lacks {pin}");
    }

    #[test]
    fn entries_read_back_as_written() {
        let dir = std::env::temp_dir().join(format!("ggml-ref-entry-{}", std::process::id()));
        let path = dir.join("e.txt");
        let ok = Reference {
            sha256: "ab".repeat(32),
            len: 1234,
            log: "line one\nline two\n".to_string(),
            written: true,
        };
        write_entry(&path, &ok).unwrap();
        let back = read_entry(&path).unwrap();
        assert_eq!(
            back,
            Reference {
                written: false,
                ..ok
            }
        );
        std::fs::write(&path, "ok 12 short\n").unwrap();
        assert!(
            read_entry(&path).is_none(),
            "a damaged entry is not an answer"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn keys_cover_options_and_imatrix_values_but_not_threads() {
        let dir = std::env::temp_dir().join(format!("ggml-ref-key-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let input = dir.join("in.bin");
        std::fs::write(&input, b"some input bytes").unwrap();
        let q = Quantize::new(15);
        let k = key(&input, &q).unwrap();
        let mut threads = q.clone();
        threads.nthread = 7;
        assert_eq!(key(&input, &threads).unwrap(), k);
        let mut pure = q.clone();
        pure.pure = true;
        assert_ne!(key(&input, &pure).unwrap(), k);
        let mut m = q.clone();
        m.imatrix = vec![(b"w".to_vec(), vec![1.0, 2.0])];
        let km = key(&input, &m).unwrap();
        m.imatrix[0].1[1] = 2.5;
        assert_ne!(key(&input, &m).unwrap(), km);
        // Other input bytes (a different file, same length).
        let other = dir.join("other.bin");
        std::fs::write(&other, b"other input byte").unwrap();
        assert_ne!(key(&other, &q).unwrap(), k);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
