//! Output files are written to a temporary file beside their final name and renamed over
//! it once complete, so a crash or an error never leaves a partial file under that name.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use tempfile::NamedTempFile;

/// Set once the process is asked to stop (Ctrl-C, `SIGTERM`).
static STOP: AtomicBool = AtomicBool::new(false);

/// Makes every output being written fail at its next write, and none be committed, so
/// that the writers' error paths remove their temporary files: what an interrupted run
/// leaves behind is what was there before it. Safe to call from a signal-handling thread.
pub fn request_stop() {
    STOP.store(true, Ordering::SeqCst);
}

/// `Ok` unless [`request_stop`] was called; then the error every write returns.
pub fn check_stop() -> std::io::Result<()> {
    if STOP.load(Ordering::Relaxed) {
        Err(std::io::Error::other("interrupted"))
    } else {
        Ok(())
    }
}

/// The directory `path` will live in (`.` for a bare file name).
pub fn parent_dir(path: &Path) -> &Path {
    match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    }
}

/// A new temporary file in `path`'s directory (so the final rename is atomic), created
/// with mode 0666 less the process umask on Unix, as `fopen` creates files: the renamed
/// output gets the permissions any other tool's output would.
pub fn temp_file_beside(path: &Path) -> std::io::Result<NamedTempFile> {
    let mut builder = tempfile::Builder::new();
    builder.prefix(".quantforge-").suffix(".tmp");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        builder.permissions(std::fs::Permissions::from_mode(0o666));
    }
    builder.tempfile_in(parent_dir(path))
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn temp_files_follow_the_umask() {
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let umask = status
            .lines()
            .find_map(|l| l.strip_prefix("Umask:"))
            .map(|v| u32::from_str_radix(v.trim(), 8).unwrap())
            .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let file = temp_file_beside(&dir.path().join("out.gguf")).unwrap();
        let mode = file.as_file().metadata().unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o666 & !umask);
    }
}
