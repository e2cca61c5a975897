//! A disk that fills up mid-write: the commands that write models fail with exit code 2
//! and a message naming the output, and leave no file under its name, nor a temporary
//! file beside it; an existing output survives.
//!
//! The "disk" is the file-size limit (`RLIMIT_FSIZE`): a write past it fails with
//! `EFBIG` once `SIGXFSZ` is ignored, as a full filesystem fails with `ENOSPC`.

#![cfg(target_os = "linux")]

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Runs quantforge with writes limited to `limit` bytes per file.
fn quantforge_limited(args: &[&str], limit: u64) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_quantforge"));
    cmd.args(args);
    // SAFETY: only async-signal-safe calls (setrlimit, signal) between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            let lim = libc::rlimit {
                rlim_cur: limit,
                rlim_max: libc::RLIM_INFINITY,
            };
            if libc::setrlimit(libc::RLIMIT_FSIZE, &lim) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
            Ok(())
        });
    }
    cmd.output().expect("run quantforge")
}

/// `quantize` of the tiny llama to `out` as F32 (about twice the input's size) under a
/// file-size limit.
fn quantize_to_f32(out: &Path, limit: u64) -> Output {
    quantforge_limited(
        &[
            "quantize",
            tiny().to_str().unwrap(),
            out.to_str().unwrap(),
            "--type",
            "F32",
            "--quiet",
        ],
        limit,
    )
}

fn tiny() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("golden/tiny-llama-f16.gguf")
}

fn entries(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

fn assert_fails_cleanly(out: &Output, output: &Path) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "stderr: {stderr}");
    assert!(
        stderr.contains(&*output.to_string_lossy()),
        "the message names the output: {stderr}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
}

#[test]
fn quantize_onto_a_full_disk_leaves_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.gguf");
    // The f32 output is about twice the f16 input; let a quarter of it fit.
    let limit = std::fs::metadata(tiny()).unwrap().len() / 2;
    let res = quantize_to_f32(&out, limit);
    assert_fails_cleanly(&res, &out);
    assert_eq!(entries(dir.path()), Vec::<String>::new());
}

#[test]
fn a_failed_quantize_keeps_the_previous_output() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.gguf");
    std::fs::write(&out, b"previous contents").unwrap();
    let limit = std::fs::metadata(tiny()).unwrap().len() / 2;
    let res = quantize_to_f32(&out, limit);
    assert_fails_cleanly(&res, &out);
    assert_eq!(entries(dir.path()), vec!["out.gguf".to_string()]);
    assert_eq!(std::fs::read(&out).unwrap(), b"previous contents");
}

#[test]
fn a_write_that_fits_succeeds_under_the_same_limit() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.gguf");
    let limit = std::fs::metadata(tiny()).unwrap().len() * 3;
    let res = quantize_to_f32(&out, limit);
    assert!(
        res.status.success(),
        "{}",
        String::from_utf8_lossy(&res.stderr)
    );
    assert_eq!(entries(dir.path()), ["out.gguf", "out.gguf.qf.json"]);
}
