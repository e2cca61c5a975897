//! The `quantforge` command as a user runs it: outputs, exit codes, and no partial files.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn quantforge(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_quantforge"))
        .args(args)
        .output()
        .expect("run quantforge")
}

fn write_f32(path: &Path, values: &[f32]) {
    let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    std::fs::write(path, bytes).unwrap();
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn sample(n: usize) -> Vec<f32> {
    (0..n)
        .map(|i| ((i * 7919 % 1000) as f32 - 500.0) / 37.0)
        .collect()
}

struct Dir(tempfile::TempDir);

impl Dir {
    fn new() -> Dir {
        Dir(tempfile::tempdir().unwrap())
    }
    fn path(&self, name: &str) -> PathBuf {
        self.0.path().join(name)
    }
    /// Names of the files left in the directory.
    fn files(&self) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(self.0.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }
}

fn assert_user_error(out: &Output, needle: &str) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "stderr: {stderr}");
    assert!(stderr.contains(needle), "'{needle}' not in: {stderr}");
}

#[test]
fn quantize_then_dequantize_matches_the_library() {
    let dir = Dir::new();
    let x = sample(4 * 512);
    write_f32(&dir.path("x.f32"), &x);
    let w: Vec<f32> = (0..512).map(|i| 1.0 + (i % 5) as f32).collect();
    write_f32(&dir.path("w.f32"), &w);
    for ty in ["q4_K", "Q8_0", "iq4_xs", "f16", "q5_1"] {
        let bin = dir.path(&format!("{ty}.bin"));
        let out = quantforge(&[
            "codec",
            "quantize",
            "--type",
            ty,
            "--row",
            "512",
            "--imatrix",
            s(&dir.path("w.f32")),
            s(&dir.path("x.f32")),
            s(&bin),
        ]);
        assert!(
            out.status.success(),
            "{ty}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let t = quantforge::GgmlType::from_name(ty).unwrap();
        let mut expected = vec![0u8; 4 * t.row_size(512).unwrap()];
        quantforge::quantize(t, &x, 512, Some(&w), &mut expected).unwrap();
        assert_eq!(std::fs::read(&bin).unwrap(), expected, "{ty}");

        let back = dir.path(&format!("{ty}.f32"));
        let out = quantforge(&["codec", "dequantize", "-t", ty, s(&bin), s(&back)]);
        assert!(
            out.status.success(),
            "{ty}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let mut y = vec![0f32; x.len()];
        quantforge::dequantize(t, &expected, &mut y).unwrap();
        let bytes: Vec<u8> = y.iter().flat_map(|v| v.to_le_bytes()).collect();
        assert_eq!(std::fs::read(&back).unwrap(), bytes, "{ty}");
    }
}

#[test]
fn nan_input_names_the_element_and_leaves_no_output() {
    let dir = Dir::new();
    let mut x = sample(256);
    x[77] = f32::NAN;
    write_f32(&dir.path("x.f32"), &x);
    let out = quantforge(&[
        "codec",
        "quantize",
        "--type",
        "q4_K",
        s(&dir.path("x.f32")),
        s(&dir.path("o.bin")),
    ]);
    assert_user_error(&out, "element 77");
    assert_eq!(dir.files(), ["x.f32"]);
}

#[test]
fn bad_sizes_and_names_are_user_errors() {
    let dir = Dir::new();
    write_f32(&dir.path("x.f32"), &sample(300));
    std::fs::write(dir.path("odd.f32"), [0u8; 10]).unwrap();
    write_f32(&dir.path("w.f32"), &sample(100));
    write_f32(&dir.path("y.f32"), &sample(512));
    let y = s(&dir.path("y.f32")).to_string();
    let odd = s(&dir.path("odd.f32")).to_string();
    let missing = s(&dir.path("missing.f32")).to_string();
    let x = s(&dir.path("x.f32")).to_string();
    let o = s(&dir.path("o.bin")).to_string();
    let cases: &[(&[&str], &str)] = &[
        (
            &["codec", "quantize", "--type", "q4_K", &x, &o],
            "whole number of q4_K blocks",
        ),
        (
            &["codec", "quantize", "--type", "q4_0", "--row", "7", &x, &o],
            "whole number of rows",
        ),
        (
            &["codec", "quantize", "--type", "q9_X", &x, &o],
            "unknown ggml type name",
        ),
        (
            &["codec", "quantize", "--type", "q4_0_4_4", &x, &o],
            "was removed",
        ),
        (
            &[
                "codec", "quantize", "--type", "iq2_xxs", "--row", "256", &y, &o,
            ],
            "needs an importance matrix",
        ),
        (
            &[
                "codec", "quantize", "--type", "q8_0", "--row", "100", &x, &o,
            ],
            "whole number of q8_0 blocks",
        ),
        (
            &[
                "codec", "quantize", "--type", "q8_0", "--row", "300", "--isa", "sse9", &x, &o,
            ],
            "unknown ISA",
        ),
        (
            &["codec", "dequantize", "--type", "q8_0", &odd, &o],
            "whole number of q8_0 blocks",
        ),
        (
            &["codec", "quantize", "--type", "f16", &odd, &o],
            "whole number of f32",
        ),
        (
            &["codec", "quantize", "--type", "f16", &missing, &o],
            "cannot read",
        ),
    ];
    for (args, needle) in cases {
        assert_user_error(&quantforge(args), needle);
    }
    // An importance matrix of the wrong length.
    write_f32(&dir.path("x320.f32"), &sample(320));
    let x = s(&dir.path("x320.f32")).to_string();
    let out = quantforge(&[
        "codec",
        "quantize",
        "--type",
        "q4_0",
        "--row",
        "320",
        "--imatrix",
        s(&dir.path("w.f32")),
        &x,
        &o,
    ]);
    assert_user_error(&out, "importance matrix length");
    assert_eq!(
        dir.files(),
        ["odd.f32", "w.f32", "x.f32", "x320.f32", "y.f32"]
    );
}

#[test]
fn a_failed_run_keeps_an_existing_output_intact() {
    let dir = Dir::new();
    let mut x = sample(64);
    x[3] = f32::INFINITY;
    write_f32(&dir.path("x.f32"), &x);
    std::fs::write(dir.path("o.bin"), b"precious").unwrap();
    let out = quantforge(&[
        "codec",
        "quantize",
        "-t",
        "q8_0",
        s(&dir.path("x.f32")),
        s(&dir.path("o.bin")),
    ]);
    assert_user_error(&out, "element 3");
    assert_eq!(std::fs::read(dir.path("o.bin")).unwrap(), b"precious");
    assert_eq!(dir.files(), ["o.bin", "x.f32"]);
}

#[test]
fn types_lists_the_catalogue() {
    let out = quantforge(&["types"]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    for ty in quantforge::GgmlType::ALL {
        assert!(
            text.lines()
                .any(|l| l.split_whitespace().nth(1) == Some(ty.name())),
            "{ty}"
        );
    }
    assert!(
        text.contains("q4_K        256    144  4.5000  yes"),
        "{text}"
    );
    // The columns come from the kernels' table of codecs: q4_K has a SIMD path, mxfp4 not.
    let row = |name: &str| {
        let line = text
            .lines()
            .find(|l| l.split_whitespace().nth(1) == Some(name));
        line.unwrap().split_whitespace().skip(5).collect::<Vec<_>>()
    };
    assert_eq!(row("q4_K"), ["yes", "yes", "yes", "yes"], "{text}");
    assert_eq!(row("q4_1"), ["yes", "yes", "yes", "yes"], "{text}");
    assert_eq!(row("mxfp4"), ["yes", "yes", "-", "-"], "{text}");
    // iq2_xxs has SIMD paths and, as in ggml, needs an importance matrix.
    assert_eq!(row("iq2_xxs"), ["yes", "yes", "required", "yes"], "{text}");
}
