//! `quantforge quantize` writing split sets: `--keep-split` (one output per input file,
//! laid out as llama.cpp's quantizer does) and `--split-max-size` / `--split-max-tensors`
//! (cut as gguf-split does). Every set loads back as the same tensors and metadata as the
//! single-file output. Byte-identity of `--keep-split` with llama.cpp is checked in
//! `ggml-ref/tests/llama_quantize_bytes.rs`.

mod model_cli;

use model_cli::{arg as s, names, quantforge, success as ok, tiny};
use quantforge::formats::gguf::{GgufFile, GgufModel, Value};

/// Every tensor (name, type, bytes) of a model, in order.
fn tensors(model: &GgufModel) -> Vec<(String, String, Vec<u8>)> {
    model
        .tensors()
        .map(|t| (t.name().to_string(), t.ty().to_string(), t.data().to_vec()))
        .collect()
}

/// The metadata without the `split.*` keys.
fn keys_without_split(file: &GgufFile) -> Vec<(String, Value)> {
    file.metadata()
        .iter()
        .filter(|(k, _)| !k.starts_with("split."))
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect()
}

fn split_keys(file: &GgufFile) -> Vec<(String, Value)> {
    file.metadata()
        .iter()
        .filter(|(k, _)| k.starts_with("split."))
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect()
}

#[test]
fn split_max_tensors_cuts_a_set_that_loads_as_the_single_file() {
    let dir = tempfile::tempdir().unwrap();
    let single = dir.path().join("single.gguf");
    ok(&quantforge(&[
        "quantize",
        s(&tiny()),
        s(&single),
        "--type",
        "Q4_K_M",
        "--quiet",
    ]));
    let parts = dir.path().join("parts");
    std::fs::create_dir(&parts).unwrap();
    let out = parts.join("m.gguf");
    ok(&quantforge(&[
        "quantize",
        s(&tiny()),
        s(&out),
        "--type",
        "Q4_K_M",
        "--quiet",
        "--split-max-tensors",
        "10",
    ]));
    let n_tensors = GgufModel::open(&single).unwrap().n_tensors();
    let count = n_tensors.div_ceil(10);
    let expected: Vec<String> = (1..=count)
        .map(|i| format!("m-{i:05}-of-{count:05}.gguf"))
        .collect();
    assert_eq!(names(&parts), expected);
    let set = GgufModel::open(parts.join(&expected[0])).unwrap();
    let one = GgufModel::open(&single).unwrap();
    assert_eq!(tensors(&set), tensors(&one));
    assert_eq!(
        keys_without_split(&set.parts()[0]),
        keys_without_split(&one.parts()[0])
    );
    for (no, part) in set.parts().iter().enumerate() {
        assert_eq!(
            split_keys(part),
            vec![
                ("split.no".to_string(), Value::U16(no as u16)),
                (
                    "split.tensors.count".to_string(),
                    Value::I32(n_tensors as i32)
                ),
                ("split.count".to_string(), Value::U16(count as u16)),
            ]
        );
        assert!(part.tensors().len() <= 10);
    }
}

#[test]
fn split_max_size_bounds_each_part() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("m");
    ok(&quantforge(&[
        "quantize",
        s(&tiny()),
        s(&out),
        "--type",
        "Q8_0",
        "--quiet",
        "--split-max-size",
        "1M",
    ]));
    let files = names(dir.path());
    assert!(files.len() > 1, "{files:?}");
    let set = GgufModel::open(dir.path().join(&files[0])).unwrap();
    for part in set.parts() {
        let data: u64 = part.tensors().iter().map(|t| t.n_bytes()).sum();
        assert!(
            data <= 1_000_000 || part.tensors().len() == 1,
            "{data} bytes in a part"
        );
    }
}

#[test]
fn keep_split_writes_one_output_per_input_file() {
    let dir = tempfile::tempdir().unwrap();
    // The input: the tiny llama as a set of three files.
    let input = dir.path().join("in");
    std::fs::create_dir(&input).unwrap();
    let n_tensors = GgufModel::open(tiny()).unwrap().n_tensors();
    let per_part = n_tensors.div_ceil(3).to_string();
    ok(&quantforge(&[
        "convert",
        s(&tiny()),
        s(&input.join("tiny.gguf")),
        "--split-max-tensors",
        &per_part,
    ]));
    let first_in = input.join("tiny-00001-of-00003.gguf");
    let source = GgufModel::open(&first_in).unwrap();

    let out_dir = dir.path().join("out");
    std::fs::create_dir(&out_dir).unwrap();
    ok(&quantforge(&[
        "quantize",
        s(&first_in),
        s(&out_dir.join("q.gguf")),
        "Q8_0",
        "--keep-split",
        "--quiet",
    ]));
    let expected: Vec<String> = (1..=3).map(|i| format!("q-{i:05}-of-00003.gguf")).collect();
    assert_eq!(names(&out_dir), expected);
    let set = GgufModel::open(out_dir.join(&expected[0])).unwrap();
    for (no, (part, src)) in set.parts().iter().zip(source.parts()).enumerate() {
        // The same tensors in each file as in the input file it comes from.
        let mut a: Vec<&str> = part.tensors().iter().map(|t| t.name()).collect();
        let mut b: Vec<&str> = src.tensors().iter().map(|t| t.name()).collect();
        a.sort_unstable();
        b.sort_unstable();
        assert_eq!(a, b, "part {no}");
        // llama.cpp: the metadata in the first file only, the split keys in the order it
        // sets them.
        let split = vec![
            ("split.no".to_string(), Value::U16(no as u16)),
            ("split.count".to_string(), Value::U16(3)),
            (
                "split.tensors.count".to_string(),
                Value::I32(n_tensors as i32),
            ),
        ];
        assert_eq!(split_keys(part), split);
        if no == 0 {
            assert!(part.metadata().get("general.architecture").is_some());
        } else {
            assert_eq!(part.metadata().len(), 3, "part {no} holds only split keys");
        }
    }
}

#[test]
fn keep_split_of_a_single_file_is_one_part_without_split_keys() {
    let dir = tempfile::tempdir().unwrap();
    ok(&quantforge(&[
        "quantize",
        s(&tiny()),
        s(&dir.path().join("q.gguf")),
        "Q8_0",
        "--keep-split",
        "--quiet",
    ]));
    assert_eq!(names(dir.path()), vec!["q-00001-of-00001.gguf".to_string()]);
    let file = GgufFile::open(dir.path().join("q-00001-of-00001.gguf")).unwrap();
    assert!(split_keys(&file).is_empty());
}

#[test]
fn keep_split_and_a_size_limit_do_not_go_together() {
    let dir = tempfile::tempdir().unwrap();
    let out = quantforge(&[
        "quantize",
        s(&tiny()),
        s(&dir.path().join("q.gguf")),
        "Q8_0",
        "--keep-split",
        "--split-max-size",
        "1G",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(names(dir.path()).is_empty());
}

/// Runs `quantize INPUT OUT` with `args` once whole and once per part with `--only-part
/// K` (each into a folder of its own), and asserts the `parts` files written apart are
/// the whole run's, byte for byte.
fn parts_apart_equal_the_whole_set(input: &std::path::Path, args: &[&str], parts: usize) {
    let dir = tempfile::tempdir().unwrap();
    let (whole, apart) = (dir.path().join("whole"), dir.path().join("apart"));
    std::fs::create_dir(&whole).unwrap();
    std::fs::create_dir(&apart).unwrap();
    let run = |folder: &std::path::Path, more: &[&str]| {
        let out = folder.join("q.gguf");
        let mut all = vec!["quantize", "-q", s(input), s(&out)];
        all.extend(args);
        all.extend(more);
        ok(&quantforge(&all));
    };
    run(&whole, &[]);
    for k in 1..=parts {
        let k = k.to_string();
        run(&apart, &["--only-part", &k]);
    }
    let files = names(&whole);
    assert_eq!(files.len(), parts, "{files:?}");
    assert_eq!(files, names(&apart));
    for f in files {
        assert!(
            std::fs::read(whole.join(&f)).unwrap() == std::fs::read(apart.join(&f)).unwrap(),
            "{f} written apart differs from the whole run's"
        );
    }
    // A part the set does not have, and no split layout at all, are refused.
    let out = dir.path().join("x.gguf");
    let mut beyond = vec!["quantize", s(input), s(&out)];
    beyond.extend(args);
    let k = (parts + 1).to_string();
    beyond.extend(["--only-part", &k]);
    model_cli::fails_naming(
        &quantforge(&beyond),
        &format!("--only-part {k}: the output is a set of {parts} part(s)"),
    );
    model_cli::fails_naming(
        &quantforge(&["quantize", s(input), s(&out), "Q8_0", "--only-part", "1"]),
        "--only-part needs a split set",
    );
    assert!(!out.exists());
}

#[test]
fn only_part_writes_the_whole_set_s_part() {
    parts_apart_equal_the_whole_set(&tiny(), &["Q4_K_M", "--split-max-tensors", "13"], 3);
    parts_apart_equal_the_whole_set(&tiny(), &["IQ4_XS", "--split-max-size", "600K"], 3);
    // --keep-split of a three-file input.
    let dir = tempfile::tempdir().unwrap();
    let per_part = GgufModel::open(tiny()).unwrap().n_tensors().div_ceil(3);
    ok(&quantforge(&[
        "convert",
        s(&tiny()),
        s(&dir.path().join("tiny.gguf")),
        "--split-max-tensors",
        &per_part.to_string(),
    ]));
    let first = dir.path().join("tiny-00001-of-00003.gguf");
    parts_apart_equal_the_whole_set(&first, &["Q8_0", "--keep-split"], 3);
}
