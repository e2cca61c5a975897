//! How a quantize run makes its output durable, read from the system calls it makes
//! (`strace`): every write to the temporary file comes before that file's fsync, the fsync
//! before the rename onto OUT, and the directory's fsync after the rename; written ranges
//! are waited for on disk while the run goes on (`sync_file_range` with its wait flags), so
//! the final fsync has little left. With `--no-sync` there is no fsync and no wait at all.
//! And a run killed with `SIGKILL` at any point leaves under OUT's name either nothing or
//! the whole output.
//!
//! The `strace` checks are skipped, saying so, where `strace` is not installed, unless
//! `QF_REQUIRE_STRACE` is set (CI sets it).

#![cfg(target_os = "linux")]

#[path = "../golden/tiny_llama.rs"]
mod tiny_llama;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use tiny_llama::TinyLlama;

/// A model of about 20 M weights, written in many slabs.
fn model(dir: &Path) -> PathBuf {
    let path = dir.join("model.gguf");
    TinyLlama::MID_SIZED.write(&path).unwrap();
    path
}

fn quantize(model: &Path, out: &Path, extra: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_quantforge"));
    cmd.args(["quantize", "--threads", "1", "--quiet", "--type", "IQ4_XS"])
        .args(extra)
        .arg(model)
        .arg(out);
    cmd
}

fn entries(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// One completed system call from an `strace -f -y` log: its name and its argument text.
#[derive(Debug)]
struct Call {
    name: String,
    args: String,
}

/// The calls of an `strace -f` log in the order they completed, a call interrupted by
/// another thread's (`<unfinished ...>`, then `<... name resumed>`) put where it resumed.
fn parse_strace(log: &str) -> Vec<Call> {
    let mut open: HashMap<String, String> = HashMap::new();
    let mut calls = Vec::new();
    for line in log.lines() {
        let Some((pid, rest)) = line.split_once(' ') else {
            continue;
        };
        let rest = rest.trim_start();
        let text = if let Some(start) = rest.strip_suffix(" <unfinished ...>") {
            open.insert(pid.to_string(), start.to_string());
            continue;
        } else if let Some(tail) = rest.strip_prefix("<... ") {
            let Some((_, tail)) = tail.split_once(" resumed>") else {
                continue;
            };
            match open.remove(pid) {
                Some(start) => format!("{start}{tail}"),
                None => continue,
            }
        } else {
            rest.to_string()
        };
        let Some((name, args)) = text.split_once('(') else {
            continue;
        };
        calls.push(Call {
            name: name.to_string(),
            args: args.to_string(),
        });
    }
    calls
}

/// Whether a call's first argument is a descriptor of `path` (`strace -y` prints
/// `3</dir/file>`, and `3</dir/#inode>(deleted)` for a file without a name).
fn on(call: &Call, path: &Path) -> bool {
    let want = format!("<{}>", path.display());
    call.args.split([',', ')']).next().is_some_and(|fd| {
        let fd = fd.trim();
        fd.ends_with(&want)
            || fd
                .strip_suffix("(deleted")
                .is_some_and(|f| f.ends_with(&want))
    })
}

fn strace_available() -> bool {
    let found = Command::new("strace")
        .arg("-V")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !found {
        assert!(
            std::env::var_os("QF_REQUIRE_STRACE").is_none(),
            "QF_REQUIRE_STRACE is set but strace cannot be run"
        );
        eprintln!("skipped: strace is not installed");
    }
    found
}

/// What a run under strace did: the calls that touch files, and the paths they name.
struct Traced {
    calls: Vec<Call>,
    /// The temporary file the output was written to (on Linux a file without a name,
    /// which strace shows as `DIR/#inode`).
    tmp: PathBuf,
    /// The name it is renamed from: `tmp` itself, or the name an unnamed file was linked
    /// under just before.
    moved_from: PathBuf,
    out: PathBuf,
    out_dir: PathBuf,
    _dir: tempfile::TempDir,
}

/// Runs quantize under strace.
fn traced_run(extra: &[&str]) -> Traced {
    let temp = tempfile::tempdir().unwrap();
    let dir = temp.path().to_path_buf();
    let model = model(&dir);
    let out_dir = dir.join("out");
    std::fs::create_dir(&out_dir).unwrap();
    let out = out_dir.join("out.gguf");
    let log = dir.join("strace.log");
    let inner = quantize(&model, &out, extra);
    let status = Command::new("strace")
        .args(["-f", "-qq", "-y", "-s", "0", "-o"])
        .arg(&log)
        .args([
            "-e",
            "trace=write,pwrite64,pwritev,pwritev2,fsync,fdatasync,sync_file_range,rename,renameat,renameat2,linkat",
        ])
        .arg(inner.get_program())
        .args(inner.get_args())
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert!(status.success(), "quantize under strace failed: {status}");
    let calls = parse_strace(&std::fs::read_to_string(&log).unwrap());
    let tmp = calls
        .iter()
        .find_map(|c| {
            if !is_write(c) {
                return None;
            }
            let fd = c.args.split([',', ')']).next()?;
            let fd = fd.strip_suffix("(deleted").unwrap_or(fd);
            let path = fd.split_once('<')?.1.strip_suffix('>')?;
            let p = Path::new(path);
            let name = p.file_name()?.to_str()?;
            (p.parent() == Some(out_dir.as_path())
                && (name.starts_with(".quantforge-") || name.starts_with('#')))
            .then(|| p.to_path_buf())
        })
        .expect("writes to a temporary file beside OUT");
    let unnamed = tmp
        .file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.starts_with('#'));
    let moved_from = if unnamed {
        // linkat(AT_FDCWD, "/proc/self/fd/N", AT_FDCWD, "OUT_DIR/.quantforge-....tmp", ...)
        calls
            .iter()
            .filter(|c| c.name == "linkat")
            .find_map(|c| {
                let name = c.args.split('"').nth(3)?;
                let p = Path::new(name);
                (p.parent() == Some(out_dir.as_path())).then(|| p.to_path_buf())
            })
            .expect("the unnamed file linked into OUT's directory")
    } else {
        tmp.clone()
    };
    Traced {
        calls,
        tmp,
        moved_from,
        out,
        out_dir,
        _dir: temp,
    }
}

fn is_write(c: &Call) -> bool {
    matches!(
        c.name.as_str(),
        "write" | "pwrite64" | "pwritev" | "pwritev2"
    )
}

fn is_sync(c: &Call) -> bool {
    matches!(c.name.as_str(), "fsync" | "fdatasync")
}

fn renames_onto(c: &Call, tmp: &Path, out: &Path) -> bool {
    c.name.starts_with("rename")
        && c.args.contains(&format!("\"{}\"", tmp.display()))
        && c.args.contains(&format!("\"{}\"", out.display()))
}

#[test]
fn every_byte_is_synced_before_the_rename_and_the_directory_after() {
    if !strace_available() {
        return;
    }
    let Traced {
        calls,
        tmp,
        moved_from,
        out,
        out_dir,
        ..
    } = traced_run(&[]);
    let last_write = calls
        .iter()
        .rposition(|c| is_write(c) && on(c, &tmp))
        .expect("writes to the temporary file");
    let rename = calls
        .iter()
        .position(|c| renames_onto(c, &moved_from, &out))
        .expect("a rename onto OUT");
    let file_sync = calls
        .iter()
        .position(|c| is_sync(c) && on(c, &tmp))
        .expect("an fsync of the temporary file");
    assert!(
        last_write < file_sync && file_sync < rename,
        "writes up to call {last_write}, fsync at {file_sync}, rename at {rename}"
    );
    let dir_sync = calls
        .iter()
        .rposition(|c| is_sync(c) && on(c, &out_dir))
        .expect("an fsync of OUT's directory");
    assert!(
        rename < dir_sync,
        "rename at {rename}, directory fsync at {dir_sync}"
    );
    // Written ranges were waited for while later ones were written.
    let waits: Vec<usize> = calls
        .iter()
        .enumerate()
        .filter(|(_, c)| {
            c.name == "sync_file_range" && on(c, &tmp) && c.args.contains("WAIT_AFTER")
        })
        .map(|(k, _)| k)
        .collect();
    assert!(
        waits.first().is_some_and(|&k| k < last_write),
        "no writeback waited for during the run: {waits:?}, last write at {last_write}"
    );
}

#[test]
fn no_sync_renames_without_waiting_for_the_disk() {
    if !strace_available() {
        return;
    }
    let Traced {
        calls,
        tmp,
        moved_from,
        out,
        out_dir,
        ..
    } = traced_run(&["--no-sync"]);
    assert!(calls.iter().any(|c| renames_onto(c, &moved_from, &out)));
    let synced: Vec<&Call> = calls
        .iter()
        .filter(|c| {
            (is_sync(c) && (on(c, &tmp) || on(c, &out) || on(c, &out_dir)))
                || (c.name == "sync_file_range" && c.args.contains("WAIT"))
        })
        .collect();
    assert!(synced.is_empty(), "{synced:?}");
}

#[test]
fn a_killed_run_leaves_nothing_or_everything_under_out() {
    let dir = tempfile::tempdir().unwrap();
    let model = model(dir.path());
    let whole = dir.path().join("whole.gguf");
    let start = Instant::now();
    let status = quantize(&model, &whole, &[]).status().unwrap();
    assert!(status.success());
    let took = start.elapsed();
    let want = std::fs::read(&whole).unwrap();
    // Kill points from before the output exists to after the run would have finished.
    for k in 0..=6u32 {
        let out_dir = dir.path().join(format!("out{k}"));
        std::fs::create_dir(&out_dir).unwrap();
        let out = out_dir.join("out.gguf");
        let mut child = quantize(&model, &out, &[])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(took.mul_f64(f64::from(k) / 5.0) + Duration::from_millis(1));
        let _ = child.kill();
        child.wait().unwrap();
        match std::fs::read(&out) {
            Ok(got) => assert!(got == want, "kill point {k}: OUT exists but differs"),
            Err(e) => assert_eq!(e.kind(), std::io::ErrorKind::NotFound, "kill point {k}"),
        }
        // Anything else left is a temporary file, never a name a user would take for
        // the output.
        for name in entries(&out_dir) {
            assert!(
                name == "out.gguf"
                    || (name == "out.gguf.qf.json" && out.exists())
                    || (name.starts_with(".quantforge-") && name.ends_with(".tmp")),
                "kill point {k}: {name}"
            );
        }
    }
}
