//! `quantforge convert DIR OUT` on a Hugging Face folder: the real all-MiniLM-L6-v2 converted
//! every way `tests/hf/cases.json` lists must give the file llama.cpp's
//! `convert_hf_to_gguf.py` wrote for it (sha256 recorded there by
//! `scripts/check-hf-convert --update`, checked live in CI by `scripts/check-hf-convert`);
//! bad folders fail with one line naming the file and key or tensor, exit code 2 and no
//! output.

#[path = "../golden/hf_fixtures.rs"]
mod hf_fixtures;
mod st_common;

use serde_json::Value;
use st_common::real_model;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn quantforge(args: &[&std::ffi::OsStr]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_quantforge"))
        .args(args)
        .output()
        .expect("cannot run quantforge")
}

/// The real MiniLM folder, fetched if missing.
fn minilm_dir() -> Option<PathBuf> {
    real_model("all-minilm-l6-v2/tokenizer.json").map(|p| p.parent().unwrap().to_path_buf())
}

/// The generated fixtures (golden/hf_fixtures.rs), written once per test binary.
fn fixtures() -> Option<&'static Path> {
    static DIR: std::sync::OnceLock<Option<tempfile::TempDir>> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        let vocab = real_model("llama-vocabs/ggml-vocab-llama-bpe.gguf")?;
        let dir = tempfile::tempdir().unwrap();
        hf_fixtures::write_all(vocab.parent().unwrap(), dir.path());
        Some(dir)
    })
    .as_ref()
    .map(|d| d.path())
}

/// A folder named `name` under `root` holding the model's files as links, README.md as
/// `readme` says (absent key: the model's own; null: none; a string: that text), as
/// `scripts/check-hf-convert` builds it.
fn case_folder(model: &Path, root: &Path, name: &str, readme: Option<&Value>) -> PathBuf {
    let dir = root.join(name);
    std::fs::create_dir_all(&dir).unwrap();
    for entry in std::fs::read_dir(model).unwrap() {
        let entry = entry.unwrap();
        let file = entry.file_name();
        if file == "SHA256SUMS" || file == "README.md" {
            continue;
        }
        std::os::unix::fs::symlink(entry.path(), dir.join(&file)).unwrap();
    }
    match readme {
        None if model.join("README.md").exists() => {
            std::os::unix::fs::symlink(model.join("README.md"), dir.join("README.md")).unwrap()
        }
        None => {}
        Some(Value::String(text)) => std::fs::write(dir.join("README.md"), text).unwrap(),
        Some(_) => {}
    }
    dir
}

#[test]
fn every_recorded_case_converts_to_the_converters_bytes() {
    let Some(model) = minilm_dir() else { return };
    let Some(fixtures) = fixtures() else { return };
    let spec: Value = serde_json::from_str(
        &std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/hf/cases.json"))
            .unwrap(),
    )
    .unwrap();
    let cases = spec["cases"].as_array().unwrap();
    assert!(cases.len() >= 39);
    for (i, case) in cases.iter().enumerate() {
        let tmp = tempfile::tempdir().unwrap();
        let source = match case.get("fixture") {
            Some(f) => fixtures.join(f.as_str().unwrap()),
            None => model.clone(),
        };
        let folder = case_folder(
            &source,
            tmp.path(),
            case["folder"].as_str().unwrap(),
            case.get("readme"),
        );
        let out = tmp.path().join("out.gguf");
        let mut args: Vec<std::ffi::OsString> =
            vec!["convert".into(), folder.into(), out.clone().into()];
        args.extend(
            case["args"]
                .as_array()
                .unwrap()
                .iter()
                .map(|a| a.as_str().unwrap().into()),
        );
        if let Some(meta) = case.get("metadata") {
            let file = tmp.path().join("metadata.json");
            std::fs::write(&file, meta.to_string()).unwrap();
            args.push("--metadata".into());
            args.push(file.into());
        }
        let refs: Vec<&std::ffi::OsStr> = args.iter().map(|a| a.as_os_str()).collect();
        let r = quantforge(&refs);
        assert!(
            r.status.success(),
            "case {i}: {}",
            String::from_utf8_lossy(&r.stderr)
        );
        // The check text's ids hashed to an entry of the converter's table: the
        // tokenizer (narrowed to the texts it encodes) gave the converter's very ids.
        assert!(
            !String::from_utf8_lossy(&r.stderr).contains("not in the converter's table"),
            "case {i}: {}",
            String::from_utf8_lossy(&r.stderr)
        );
        assert_eq!(
            output_sha256(&out),
            case["sha256"].as_str().unwrap(),
            "case {i} ({} {:?}): not the converter's bytes",
            case["folder"],
            case["args"]
        );
    }
}

#[test]
fn the_default_output_name_is_the_converters() {
    let Some(model) = minilm_dir() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let folder = case_folder(&model, tmp.path(), "all-MiniLM-L6-v2", None);
    let r = quantforge(&[
        "convert".as_ref(),
        folder.as_os_str(),
        "--outtype".as_ref(),
        "q8_0".as_ref(),
    ]);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    assert!(folder.join("all-MiniLM-L6-23M-v2-Q8_0.gguf").is_file());
    let out = tmp.path().join("m-{FTYPE}.gguf");
    let r = quantforge(&[
        "convert".as_ref(),
        folder.as_os_str(),
        out.as_os_str(),
        "--outtype".as_ref(),
        "bf16".as_ref(),
    ]);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    assert!(tmp.path().join("m-BF16.gguf").is_file());
}

/// sha256 of a conversion's output: the file, or a split set's parts in order, concatenated.
fn output_sha256(out: &Path) -> String {
    use sha2::{Digest, Sha256};
    let parts: Vec<PathBuf> = if out.exists() {
        vec![out.to_path_buf()]
    } else {
        let stem = out.file_stem().unwrap().to_string_lossy().into_owned();
        let mut v: Vec<PathBuf> = std::fs::read_dir(out.parent().unwrap())
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| {
                let n = p.file_name().unwrap().to_string_lossy();
                n.starts_with(&format!("{stem}-")) && n.contains("-of-") && n.ends_with(".gguf")
            })
            .collect();
        v.sort();
        v
    };
    assert!(!parts.is_empty(), "no output at {}", out.display());
    let mut h = Sha256::new();
    for p in parts {
        h.update(std::fs::read(p).unwrap());
    }
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

/// Runs `convert` on `folder`, expects exit code 2, one error line containing every one
/// of `needles`, and no output file.
fn refused(folder: &Path, extra: &[&str], needles: &[&str]) {
    let out = folder.parent().unwrap().join("refused.gguf");
    let mut args: Vec<&std::ffi::OsStr> =
        vec!["convert".as_ref(), folder.as_os_str(), out.as_os_str()];
    args.extend(extra.iter().map(|a| std::ffi::OsStr::new(*a)));
    let r = quantforge(&args);
    let err = String::from_utf8_lossy(&r.stderr);
    assert_eq!(r.status.code(), Some(2), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    for n in needles {
        assert!(err.contains(n), "{n:?} not in: {err}");
    }
    assert!(!out.exists(), "no output left behind");
    let left: Vec<_> = std::fs::read_dir(folder.parent().unwrap())
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().contains(".tmp"))
        .collect();
    assert!(left.is_empty(), "temporary files left: {left:?}");
}

/// Replaces the link `name` in `folder` by a file holding `text`.
fn replace(folder: &Path, name: &str, text: &[u8]) {
    let p = folder.join(name);
    let _ = std::fs::remove_file(&p);
    std::fs::write(p, text).unwrap();
}

#[test]
fn bad_folders_are_refused_with_the_file_and_key_named() {
    let Some(model) = minilm_dir() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let mk = |n: &str| case_folder(&model, tmp.path(), n, None);

    let f = mk("bad-config");
    replace(&f, "config.json", b"{\"architectures\": [\"BertModel\"], ");
    refused(&f, &[], &["config.json", "not valid JSON"]);

    let f = mk("no-arch");
    replace(&f, "config.json", b"{\"hidden_size\": 384}");
    refused(&f, &[], &["config.json", "architectures"]);

    let f = mk("unknown-arch");
    replace(
        &f,
        "config.json",
        b"{\"architectures\": [\"FancyNewModel\"]}",
    );
    refused(&f, &[], &["FancyNewModel", "BertModel"]);

    let f = mk("no-tokenizer");
    std::fs::remove_file(f.join("tokenizer.json")).unwrap();
    refused(&f, &[], &["tokenizer.json", "missing"]);

    let f = mk("bad-tokenizer");
    replace(&f, "tokenizer.json", b"{\"model\": 12}");
    refused(&f, &[], &["tokenizer.json"]);

    let f = mk("bad-outtype");
    refused(&f, &["--outtype", "q4_k"], &["--outtype", "q4_k"]);

    let config = std::fs::read_to_string(model.join("config.json")).unwrap();
    let f = mk("wrong-width");
    replace(
        &f,
        "config.json",
        config
            .replace("\"hidden_size\": 384", "\"hidden_size\": 512")
            .as_bytes(),
    );
    refused(&f, &[], &["token_embd.weight", "hidden_size", "512"]);

    let f = mk("too-few-layers");
    replace(
        &f,
        "config.json",
        config
            .replace("\"num_hidden_layers\": 6", "\"num_hidden_layers\": 4")
            .as_bytes(),
    );
    refused(&f, &[], &["encoder.layer.4"]);
}

#[test]
fn a_nan_in_a_weight_being_quantized_is_named() {
    let Some(model) = minilm_dir() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let f = case_folder(&model, tmp.path(), "nan-model", None);
    let mut bytes = std::fs::read(model.join("model.safetensors")).unwrap();
    let header_len = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let header: Value = serde_json::from_slice(&bytes[8..8 + header_len]).unwrap();
    let name = "encoder.layer.2.attention.self.query.weight";
    let start = header[name]["data_offsets"][0].as_u64().unwrap() as usize + 8 + header_len;
    bytes[start + 4 * 7..start + 4 * 8].copy_from_slice(&f32::NAN.to_le_bytes());
    replace(&f, "model.safetensors", &bytes);
    refused(
        &f,
        &["--outtype", "q8_0"],
        &["encoder.layer.2.attention.self.query.weight"],
    );
}

#[test]
fn quantize_reads_a_folder_in_one_pass() {
    let Some(fixtures) = fixtures() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("q.gguf");
    let dir = fixtures.join("qwen3-tiny");
    let r = quantforge(&[
        "quantize".as_ref(),
        dir.as_os_str(),
        out.as_os_str(),
        "Q4_K_M".as_ref(),
        "--quiet".as_ref(),
    ]);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let r = quantforge(&["inspect".as_ref(), out.as_os_str()]);
    let text = String::from_utf8_lossy(&r.stdout);
    assert!(
        text.lines()
            .any(|l| l.contains("general.file_type") && l.trim_end().ends_with(" 15")),
        "{text}"
    );
    assert!(
        text.contains("tokenizer.ggml.pre") && text.contains("qwen2"),
        "{text}"
    );
}

#[test]
fn several_presets_of_a_folder_in_one_pass_equal_single_runs() {
    let Some(fixtures) = fixtures() else { return };
    // Llama's interleaved Q/K rows, FP8 rows widened as read, experts stacked from shards.
    for name in [
        "llama-bpe-tiny",
        "llama-fp8-tiny",
        "mixtral-tiny",
        "qwen3moe-tiny",
    ] {
        let dir = fixtures.join(name);
        let tmp = tempfile::tempdir().unwrap();
        let presets = ["Q4_K_M", "COPY", "Q8_0", "F16"];
        let mut many: Vec<std::ffi::OsString> = vec!["quantize".into(), dir.clone().into()];
        for p in presets {
            let single = tmp.path().join(format!("single-{p}.gguf"));
            let r = quantforge(&[
                "quantize".as_ref(),
                dir.as_os_str(),
                single.as_os_str(),
                p.as_ref(),
                "--quiet".as_ref(),
            ]);
            assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
            let one = tmp.path().join(format!("many-{p}.gguf"));
            many.extend(["--out".into(), format!("{p}={}", one.display()).into()]);
        }
        many.push("--quiet".into());
        let args: Vec<&std::ffi::OsStr> = many.iter().map(|a| a.as_os_str()).collect();
        let r = quantforge(&args);
        assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
        for p in presets {
            let read = |k: &str| std::fs::read(tmp.path().join(format!("{k}-{p}.gguf"))).unwrap();
            assert!(read("single") == read("many"), "{name} {p}");
        }
    }
}

/// Copies (not links) the fixture `name` to `root/new`.
fn copy_fixture(name: &str, root: &Path, new: &str) -> Option<PathBuf> {
    let src = fixtures()?.join(name);
    let dst = root.join(new);
    std::fs::create_dir_all(&dst).unwrap();
    for e in std::fs::read_dir(&src).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), dst.join(e.file_name())).unwrap();
    }
    Some(dst)
}

#[test]
fn bad_shards_are_refused_with_the_file_and_tensor_named() {
    let tmp = tempfile::tempdir().unwrap();
    let Some(f) = copy_fixture("qwen3-sharded", tmp.path(), "missing") else {
        return;
    };
    std::fs::remove_file(f.join("model-00002-of-00003.safetensors")).unwrap();
    refused(
        &f,
        &[],
        &[
            "model.safetensors.index.json",
            "model-00002-of-00003.safetensors",
            "missing",
        ],
    );

    let f = copy_fixture("qwen3-sharded", tmp.path(), "truncated").unwrap();
    let shard = f.join("model-00003-of-00003.safetensors");
    let len = std::fs::metadata(&shard).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&shard)
        .unwrap()
        .set_len(len / 2)
        .unwrap();
    refused(&f, &[], &["model-00003-of-00003.safetensors"]);

    let f = copy_fixture("qwen3-sharded", tmp.path(), "duplicate").unwrap();
    std::fs::copy(
        f.join("model-00001-of-00003.safetensors"),
        f.join("model-00004-of-00003.safetensors"),
    )
    .unwrap();
    let index_path = f.join("model.safetensors.index.json");
    let mut index: Value =
        serde_json::from_str(&std::fs::read_to_string(&index_path).unwrap()).unwrap();
    let map = index["weight_map"].as_object_mut().unwrap();
    let name = map
        .iter()
        .find(|(_, v)| v.as_str() == Some("model-00001-of-00003.safetensors"))
        .map(|(k, _)| k.clone())
        .unwrap();
    map.insert(
        name.clone(),
        Value::String("model-00004-of-00003.safetensors".into()),
    );
    std::fs::write(&index_path, index.to_string()).unwrap();
    refused(
        &f,
        &[],
        &[name.as_str(), "model-00004-of-00003.safetensors"],
    );

    let f = copy_fixture("qwen3-sharded", tmp.path(), "bad-index").unwrap();
    std::fs::write(
        f.join("model.safetensors.index.json"),
        b"{\"weight_map\": [",
    )
    .unwrap();
    refused(&f, &[], &["model.safetensors.index.json"]);
}

/// Rewrites `tokenizer.json` of `dir` through `edit`.
fn edit_tokenizer(dir: &Path, edit: impl FnOnce(&mut Value)) {
    let path = dir.join("tokenizer.json");
    let mut t: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    edit(&mut t);
    std::fs::write(&path, serde_json::to_string(&t).unwrap()).unwrap();
}

#[test]
fn an_unknown_pre_tokenizer_hash_is_named_by_its_configuration() {
    let tmp = tempfile::tempdir().unwrap();
    // A finetune's added token changes the check text's ids: the converter refuses this
    // folder ("BPE pre-tokenizer was not recognized", chkhsh a8ce96a8...).
    let Some(f) = copy_fixture("llama-bpe-tiny", tmp.path(), "added-token") else {
        return;
    };
    edit_tokenizer(&f, |t| {
        for a in t["added_tokens"].as_array_mut().unwrap() {
            if a["id"] == 128255 {
                a["content"] = Value::String("\u{1F999}".into());
                a["special"] = Value::Bool(false);
            }
        }
    });
    let out = tmp.path().join("added.gguf");
    let r = quantforge(&["convert".as_ref(), f.as_os_str(), out.as_os_str()]);
    let err = String::from_utf8_lossy(&r.stderr);
    assert!(r.status.success(), "{err}");
    assert!(
        err.contains("warning") && err.contains("llama-bpe"),
        "{err}"
    );
    assert!(
        err.contains("a8ce96a8dac7bc413dd2b087fe2eac0fa7be95aaadd9700064ed915a7860f34a"),
        "the converter's hash of this tokenizer: {err}"
    );
    let r = quantforge(&["inspect".as_ref(), out.as_os_str()]);
    let text = String::from_utf8_lossy(&r.stdout);
    assert!(text.contains("\"llama-bpe\""), "{text}");

    // A pre-tokenizer configured as no known one is refused, naming the nearest; a name
    // given with --vocab-pre is taken.
    let f = copy_fixture("llama-bpe-tiny", tmp.path(), "new-split").unwrap();
    edit_tokenizer(&f, |t| {
        let re = &mut t["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"];
        *re = Value::String(re.as_str().unwrap().replace(r"\p{N}{1,3}", r"\p{N}{1,2}"));
    });
    refused(
        &f,
        &[],
        &["tokenizer.json", "nearest: llama-bpe, qwen2", "--vocab-pre"],
    );
    let out = tmp.path().join("named.gguf");
    let r = quantforge(&[
        "convert".as_ref(),
        f.as_os_str(),
        out.as_os_str(),
        "--vocab-pre".as_ref(),
        "llama-bpe".as_ref(),
    ]);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
}

#[test]
fn a_malformed_sentencepiece_model_is_refused_by_name() {
    let tmp = tempfile::tempdir().unwrap();
    let Some(f) = copy_fixture("llama2-spm-tiny", tmp.path(), "bad-spm") else {
        return;
    };
    let mut bytes = std::fs::read(f.join("tokenizer.model")).unwrap();
    bytes.truncate(bytes.len() / 3);
    std::fs::write(f.join("tokenizer.model"), bytes).unwrap();
    refused(&f, &[], &["tokenizer.model", "not a SentencePiece model"]);
}

#[test]
fn experts_that_do_not_fill_their_blocks_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    // The config promises nine experts per block; the shards hold eight.
    let Some(f) = copy_fixture("qwen3moe-tiny", tmp.path(), "nine-experts") else {
        return;
    };
    let path = f.join("config.json");
    let mut c: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    c["num_experts"] = Value::from(9);
    std::fs::write(&path, c.to_string()).unwrap();
    refused(&f, &[], &["nine-experts", "expert tensors", "mlp.experts."]);
}

#[test]
fn fp8_checkpoints_the_converter_cannot_read_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let edit = |name: &str, q: Value| -> Option<PathBuf> {
        let f = copy_fixture("qwen3-fp8-tiny", tmp.path(), name)?;
        let path = f.join("config.json");
        let mut c: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        c["quantization_config"] = q;
        std::fs::write(&path, c.to_string()).unwrap();
        Some(f)
    };
    let Some(f) = edit(
        "gptq",
        serde_json::json!({"quant_method": "gptq", "bits": 4}),
    ) else {
        return;
    };
    refused(
        &f,
        &[],
        &["gptq", "quantization_config.quant_method `gptq`"],
    );
    // Blocks along one axis leave the scale's rows too few for the weight's.
    let f = edit(
        "one-axis",
        serde_json::json!({"quant_method": "fp8", "weight_block_size": [48]}),
    )
    .unwrap();
    refused(
        &f,
        &[],
        &["one-axis", "_scale_inv`", "cannot scale", "axis 0"],
    );
    let f = edit(
        "bad-block",
        serde_json::json!({"quant_method": "fp8", "weight_block_size": [0, "x"]}),
    )
    .unwrap();
    refused(&f, &[], &["bad-block", "weight_block_size"]);
}
