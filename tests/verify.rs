//! The manifests `quantize` writes beside every output (`FILE.qf.json`) and `quantforge
//! verify`: the digests are those of the files' bytes (and of the source's tensors), a
//! split set made part by part on separate runs verifies, and a corrupted, truncated or
//! missing part is caught with exit code 2.

mod model_cli;

use model_cli::{arg as s, fails_naming, quantforge, success, tiny};
use quantforge::formats::gguf::GgufModel;
use quantforge::pipeline::run::digest::rows_digest;
use serde_json::Value;
use std::path::{Path, PathBuf};

fn manifest(file: &Path) -> Value {
    let mut name = file.as_os_str().to_owned();
    name.push(".qf.json");
    serde_json::from_str(&std::fs::read_to_string(PathBuf::from(name)).unwrap()).unwrap()
}

/// Flips one byte of `file` at `at`.
fn flip(file: &Path, at: usize) {
    let mut bytes = std::fs::read(file).unwrap();
    bytes[at] ^= 0x40;
    std::fs::write(file, bytes).unwrap();
}

#[test]
fn the_manifest_holds_the_digests_of_source_and_output_tensors() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("q.gguf");
    success(&quantforge(&[
        "quantize",
        "-q",
        s(&tiny()),
        s(&out),
        "Q4_K_M",
    ]));
    let m = manifest(&out);
    assert_eq!(m["preset"], "Q4_K_M");
    assert_eq!(m["file"], "q.gguf");
    assert_eq!(m["set"], serde_json::json!(["q.gguf"]));
    assert_eq!(m["size"], std::fs::metadata(&out).unwrap().len());
    let source = GgufModel::open(tiny()).unwrap();
    let output = GgufModel::open(&out).unwrap();
    let tensors = m["tensors"].as_array().unwrap();
    assert_eq!(tensors.len(), output.n_tensors());
    for t in tensors {
        let name = t["name"].as_str().unwrap();
        let digest_of = |model: &GgufModel, key: &str| {
            let v = model.tensors().find(|v| v.name() == name).unwrap();
            let row = v.ty().row_size(v.ne()[0] as usize).unwrap();
            let want = format!("{:016x}", rows_digest(v.data(), row, 0));
            assert_eq!(t[key], want.as_str(), "{name} {key}");
        };
        digest_of(&source, "source_digest");
        digest_of(&output, "digest");
    }
    assert!(success(&quantforge(&["verify", s(&out)])).starts_with("ok: 1 file(s), 39 tensors"));
}

#[test]
fn verify_catches_changed_bytes_anywhere() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("q.gguf");
    success(&quantforge(&[
        "quantize",
        "-q",
        s(&tiny()),
        s(&out),
        "Q8_0",
    ]));
    let original = std::fs::read(&out).unwrap();
    let m = manifest(&out);
    let header = m["header"]["bytes"].as_u64().unwrap() as usize;
    let last = &m["tensors"].as_array().unwrap().last().unwrap().clone();
    let last_at = (last["offset"].as_u64().unwrap() + last["size"].as_u64().unwrap()) as usize - 1;
    let name = last["name"].as_str().unwrap();
    flip(&out, last_at);
    fails_naming(&quantforge(&["verify", s(&out)]), &format!("tensor {name}"));
    std::fs::write(&out, &original).unwrap();
    flip(&out, header / 2);
    fails_naming(&quantforge(&["verify", s(&out)]), "header differs");
    std::fs::write(&out, &original[..original.len() - 1]).unwrap();
    fails_naming(
        &quantforge(&["verify", s(&out)]),
        "bytes, the manifest says",
    );
    std::fs::write(&out, &original).unwrap();
    success(&quantforge(&["verify", s(&out)]));
    std::fs::remove_file(dir.path().join("q.gguf.qf.json")).unwrap();
    fails_naming(&quantforge(&["verify", s(&out)]), "no manifest");
}

#[test]
fn a_set_made_part_by_part_verifies_and_a_lost_part_does_not() {
    let dir = tempfile::tempdir().unwrap();
    let prefix = dir.path().join("q.gguf");
    // Three separate runs, one part each, as a job array would make them.
    for k in ["3", "1", "2"] {
        success(&quantforge(&[
            "quantize",
            "-q",
            s(&tiny()),
            s(&prefix),
            "Q4_K_M",
            "--split-max-tensors",
            "13",
            "--only-part",
            k,
        ]));
    }
    let part = |k: u32| dir.path().join(format!("q-{k:05}-of-00003.gguf"));
    assert_eq!(manifest(&part(2))["part"], 2);
    for k in 1..=3 {
        let text = success(&quantforge(&["verify", s(&part(k))]));
        assert!(text.starts_with("ok: 3 file(s), 39 tensors"), "{text}");
    }
    flip(
        &part(2),
        std::fs::metadata(part(2)).unwrap().len() as usize - 100,
    );
    fails_naming(
        &quantforge(&["verify", s(&part(1))]),
        "q-00002-of-00003.gguf: 1 tensor(s) differ",
    );
    std::fs::remove_file(part(1)).unwrap();
    std::fs::remove_file(dir.path().join("q-00001-of-00003.gguf.qf.json")).unwrap();
    // Asked about the lost part itself, the other parts' manifests tell the set.
    fails_naming(
        &quantforge(&["verify", s(&part(1))]),
        "2 of 3 file(s) fail: q-00001-of-00003.gguf",
    );
}

#[test]
fn every_output_of_a_one_pass_run_and_of_a_copy_verifies() {
    let dir = tempfile::tempdir().unwrap();
    success(&quantforge(&[
        "quantize",
        "-q",
        s(&tiny()),
        "--types",
        "Q4_K_M,COPY,IQ4_XS",
        "--out-dir",
        s(dir.path()),
    ]));
    for preset in ["Q4_K_M", "COPY", "IQ4_XS"] {
        let file = dir.path().join(format!("tiny-llama-f16-{preset}.gguf"));
        success(&quantforge(&["verify", s(&file)]));
        // A copied tensor's output digest is its source digest.
        if preset == "COPY" {
            for t in manifest(&file)["tensors"].as_array().unwrap() {
                assert_eq!(t["digest"], t["source_digest"]);
            }
        }
    }
}

/// The parts of `prefix` (`q.gguf` in `dir`), `n` of them.
fn parts(dir: &Path, n: u32) -> Vec<PathBuf> {
    (1..=n)
        .map(|k| dir.join(format!("q-{k:05}-of-{n:05}.gguf")))
        .collect()
}

#[test]
fn resume_keeps_verified_parts_and_remakes_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let (whole, resumed) = (dir.path().join("whole"), dir.path().join("resumed"));
    std::fs::create_dir(&whole).unwrap();
    std::fs::create_dir(&resumed).unwrap();
    let split = ["Q4_K_M", "--split-max-tensors", "13"];
    let input = tiny();
    let run = |folder: &Path, more: &[&str]| {
        let out = folder.join("q.gguf");
        let mut args = vec!["quantize", s(&input), s(&out)];
        args.extend(split);
        args.extend(more);
        success(&quantforge(&args))
    };
    run(&whole, &[]);
    run(&resumed, &["--resume"]);
    let (want, got) = (parts(&whole, 3), parts(&resumed, 3));
    let same = |k: usize| std::fs::read(&want[k]).unwrap() == std::fs::read(&got[k]).unwrap();
    assert!((0..3).all(same));
    // A damaged part and a lost one are made again; the good one is kept as it is.
    flip(&got[1], 5000);
    std::fs::remove_file(&got[2]).unwrap();
    let inode = |p: &Path| std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(p).unwrap());
    let kept = inode(&got[0]);
    let text = run(&resumed, &["--resume"]);
    assert!(
        text.contains(&format!("kept {}: verified", s(&got[0]))),
        "{text}"
    );
    assert!(text.contains(&format!("remaking {}", s(&got[1]))), "{text}");
    assert_eq!(inode(&got[0]), kept);
    assert!((0..3).all(same));
    // Another preset's parts under the same names are not this run's.
    let out = resumed.join("q.gguf");
    let mut args = vec!["quantize", s(&input), s(&out)];
    args.extend(["Q8_0", "--split-max-tensors", "13", "--resume"]);
    let text = success(&quantforge(&args));
    assert_eq!(text.matches("made by another run").count(), 3, "{text}");
}

#[test]
fn a_resumed_run_killed_mid_way_finishes_as_an_uninterrupted_one() {
    let dir = tempfile::tempdir().unwrap();
    let Some(f16) = model_cli::gemma_f16(dir.path()) else {
        return;
    };
    let (whole, resumed) = (dir.path().join("whole"), dir.path().join("resumed"));
    std::fs::create_dir(&whole).unwrap();
    std::fs::create_dir(&resumed).unwrap();
    let args = |folder: &Path, resume: bool| {
        let mut a = vec![
            "quantize".to_string(),
            "-q".into(),
            s(&f16).into(),
            s(&folder.join("q.gguf")).into(),
            "Q5_K_M".into(),
            "--split-max-tensors".into(),
            "60".into(),
        ];
        if resume {
            a.push("--resume".into());
        }
        a
    };
    success(&quantforge(
        &args(&whole, false)
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>(),
    ));
    // Killed once its first part is committed (its manifest follows the file).
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_quantforge"))
        .args(args(&resumed, true))
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let first_manifest = resumed.join("q-00001-of-00004.gguf.qf.json");
    let start = std::time::Instant::now();
    while !first_manifest.exists() && start.elapsed().as_secs() < 60 {
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(first_manifest.exists(), "the first part was never finished");
    let text = success(&quantforge(
        &args(&resumed, true)
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>(),
    ));
    assert!(text.contains("kept "), "{text}");
    for (a, b) in parts(&whole, 4).iter().zip(parts(&resumed, 4)) {
        assert!(
            std::fs::read(a).unwrap() == std::fs::read(&b).unwrap(),
            "{}",
            s(&b)
        );
    }
    // Nothing else is left behind: no temporary files of the killed run's parts.
    assert_eq!(model_cli::names(&resumed).len(), 4);
}

#[test]
fn reuse_copies_what_is_unchanged_and_the_result_is_a_fresh_run() {
    let dir = tempfile::tempdir().unwrap();
    let imatrix = dir.path().join("imatrix.gguf");
    model_cli::tiny_imatrix(&imatrix, &[], |_, _| {});
    let path = |name: &str| dir.path().join(name);
    let input = tiny();
    let old = path("old.gguf");
    let run = |out: &Path, more: &[&str]| {
        let mut args = vec![
            "quantize",
            s(&input),
            s(out),
            "IQ3_M",
            "--imatrix",
            s(&imatrix),
        ];
        args.extend(more);
        success(&quantforge(&args))
    };
    run(&old, &[]);
    // One rule changed: the rest is copied, the result is what a fresh run writes.
    let rule = ["--tensor-type", "blk\\.2\\.attn_v=q8_0"];
    run(&path("fresh.gguf"), &rule);
    let mut with_reuse = rule.to_vec();
    with_reuse.extend(["--reuse", s(&old)]);
    let text = run(&path("new.gguf"), &with_reuse);
    let reused: usize = text
        .lines()
        .find_map(|l| l.strip_prefix("reused ")?.split(' ').next()?.parse().ok())
        .unwrap_or_else(|| panic!("{text}"));
    assert!(reused > 20, "{text}");
    assert!(std::fs::read(path("fresh.gguf")).unwrap() == std::fs::read(path("new.gguf")).unwrap());
    success(&quantforge(&["verify", s(&path("new.gguf"))]));
    // Other importance values: nothing the old run weighted is reused.
    let other = path("other.gguf");
    model_cli::tiny_imatrix(&other, &[], |_, sums| sums.reverse());
    let out = path("again.gguf");
    let text = success(&quantforge(&[
        "quantize",
        s(&input),
        s(&out),
        "IQ3_M",
        "--imatrix",
        s(&other),
        "--reuse",
        s(&old),
    ]));
    // Only the token embeddings, which have no entry and so no importance values.
    assert!(text.contains("reused 1 tensor(s)"), "{text}");
    // A damaged old output fails the run and leaves nothing under OUT.
    let m = manifest(&old);
    let t = &m["tensors"].as_array().unwrap()[3];
    let at = t["offset"].as_u64().unwrap() as usize + 1;
    flip(&old, at);
    let out = path("bad.gguf");
    let mut args = vec![
        "quantize",
        s(&input),
        s(&out),
        "IQ3_M",
        "--imatrix",
        s(&imatrix),
    ];
    args.extend(["--reuse", s(&old)]);
    fails_naming(&quantforge(&args), "does not match its manifest");
    assert!(!out.exists());
}
