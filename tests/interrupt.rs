//! An interrupted run (Ctrl-C, `SIGTERM`) stops with exit code 2 and a message, and
//! leaves the output directory as it was: no file under OUT's name, no temporary file.

#![cfg(target_os = "linux")]

#[path = "../golden/tiny_llama.rs"]
mod tiny_llama;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use tiny_llama::TinyLlama;

fn entries(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// Whether process `pid` has a file of `dir` open.
fn writes_in(pid: u32, dir: &Path) -> bool {
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return false;
    };
    fds.flatten()
        .any(|fd| std::fs::read_link(fd.path()).is_ok_and(|target| target.parent() == Some(dir)))
}

fn interrupt_quantize(signal: libc::c_int) {
    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().join("out");
    std::fs::create_dir(&out_dir).unwrap();
    let model = dir.path().join("model.gguf");
    // Seconds of IQ4_XS on one thread, so the signal comes mid-run.
    TinyLlama::MID_SIZED.write(&model).unwrap();
    let out = out_dir.join("out.gguf");
    let child = Command::new(env!("CARGO_BIN_EXE_quantforge"))
        .args(["quantize", "--threads", "1", "--quiet", "--type", "IQ4_XS"])
        .arg(&model)
        .arg(&out)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Wait until the output is being written: the process has a file in OUT's directory
    // open (one without a name, on Linux, until it is committed).
    let start = Instant::now();
    while !writes_in(child.id(), &out_dir) {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "no output started"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    // SAFETY: a signal to our own child process.
    assert_eq!(unsafe { libc::kill(child.id() as libc::pid_t, signal) }, 0);
    let res = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&res.stderr);
    assert_eq!(res.status.code(), Some(2), "stderr: {stderr}");
    assert!(stderr.contains("interrupted"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_eq!(entries(&out_dir), Vec::<String>::new());
}

#[test]
fn ctrl_c_leaves_no_output() {
    interrupt_quantize(libc::SIGINT);
}

#[test]
fn sigterm_leaves_no_output() {
    interrupt_quantize(libc::SIGTERM);
}
