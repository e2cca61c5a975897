//! `quantforge dequantize` as a user runs it: a Q4_K_M tiny llama back to f32, f16 and
//! bf16 (values checked against the kernels' own dequantizer), GGUF and safetensors
//! outputs and inputs (which must agree byte for byte), split-set input, and the errors
//! (exit code 2, a one-line reason naming the file or tensor, no output left behind).

mod model_cli;

use model_cli::{
    arg, bits, decoded, fails_naming, quantforge, success, tensor_f32, tiny, tiny_quantized,
};
use quantforge::convert::KEY_GGUF_METADATA;
use quantforge::formats::gguf::{GgufBuilder, GgufFile, Value};
use quantforge::formats::safetensors::{Dtype, SafeTensors};
use quantforge::kernels::{GgmlType, quantize};
use std::path::{Path, PathBuf};

fn dequantize(input: &Path, output: &Path, extra: &[&str]) -> String {
    let mut args = vec!["dequantize", arg(input), arg(output)];
    args.extend_from_slice(extra);
    success(&quantforge(&args))
}

/// The tiny llama as Q4_K_M, and that dequantized to an f32 GGUF by the plain command.
fn q4_and_f32(dir: &Path) -> (PathBuf, PathBuf) {
    let q4 = tiny_quantized(dir, "Q4_K_M");
    let f32s = dir.join("direct.gguf");
    dequantize(&q4, &f32s, &[]);
    (q4, f32s)
}

#[test]
fn q4_k_m_to_f32_gives_the_kernels_values_and_the_source_metadata() {
    let dir = tempfile::tempdir().unwrap();
    let q4 = tiny_quantized(dir.path(), "Q4_K_M");
    let out = dir.path().join("f32.gguf");
    let printed = dequantize(&q4, &out, &[]);
    assert!(printed.contains("39 tensors as f32"), "{printed}");

    let src = GgufFile::open(&q4).unwrap();
    let dst = GgufFile::open(&out).unwrap();
    assert_eq!(dst.tensors().len(), src.tensors().len());
    let mut quantized = 0;
    for (s, d) in src.tensors().iter().zip(dst.tensors()) {
        assert_eq!(d.name(), s.name());
        assert_eq!(d.ty(), GgmlType::F32, "{}", d.name());
        assert_eq!(d.ne(), s.ne(), "{}", d.name());
        let expected = tensor_f32(&src, s.name());
        let got = decoded(GgmlType::F32, dst.tensor(d.name()).unwrap().data());
        assert_eq!(bits(&got), bits(&expected), "{}", d.name());
        quantized += usize::from(matches!(s.ty(), GgmlType::Q4_K | GgmlType::Q6_K));
    }
    assert!(
        quantized >= 30,
        "only {quantized} quantized tensors in the source"
    );

    // Metadata: the source's keys in order, general.file_type now ALL_F32 (0).
    let (sm, dm) = (src.metadata(), dst.metadata());
    assert_eq!(dm.keys().collect::<Vec<_>>(), sm.keys().collect::<Vec<_>>());
    for (key, value) in sm.iter() {
        match key {
            "general.file_type" => assert_eq!(dm.get(key), Some(&Value::U32(0))),
            _ => assert_eq!(dm.get(key), Some(value), "{key}"),
        }
    }

    // The thread count changes nothing.
    let one = dir.path().join("one-thread.gguf");
    dequantize(&q4, &one, &["--threads", "1"]);
    assert_eq!(std::fs::read(&one).unwrap(), std::fs::read(&out).unwrap());
}

#[test]
fn f16_and_bf16_outputs_are_the_dequantized_values_rounded_to_nearest_even() {
    let dir = tempfile::tempdir().unwrap();
    let q4 = tiny_quantized(dir.path(), "Q4_K_M");
    let src = GgufFile::open(&q4).unwrap();
    for (name, ty, file_type) in [("f16", GgmlType::F16, 1), ("BF16", GgmlType::BF16, 32)] {
        let out = dir.path().join(format!("{name}.gguf"));
        dequantize(&q4, &out, &["--type", name]);
        let dst = GgufFile::open(&out).unwrap();
        assert_eq!(
            dst.metadata().get("general.file_type"),
            Some(&Value::U32(file_type))
        );
        for d in dst.tensors() {
            assert_eq!(d.ty(), ty, "{}", d.name());
            let wide = tensor_f32(&src, d.name());
            let mut expected = vec![0u8; wide.len() * 2];
            quantize(ty, &wide, wide.len(), None, &mut expected).unwrap();
            let got = dst.tensor(d.name()).unwrap().data();
            assert!(got == expected.as_slice(), "{} as {name}", d.name());
        }
    }
    // f16 to f16 is a copy of the bytes.
    let same = dir.path().join("same.gguf");
    dequantize(&tiny(), &same, &["--type", "f16"]);
    let (a, b) = (
        GgufFile::open(tiny()).unwrap(),
        GgufFile::open(&same).unwrap(),
    );
    for t in a.tensor_views() {
        if t.ty() == GgmlType::F16 {
            assert_eq!(b.tensor(t.name()).unwrap().data(), t.data(), "{}", t.name());
        }
    }
}

#[test]
fn safetensors_output_reads_back_and_every_route_gives_the_same_gguf() {
    let dir = tempfile::tempdir().unwrap();
    let (q4, direct) = q4_and_f32(dir.path());

    // GGUF -> safetensors: readable by the crate's reader, same names, shapes, values.
    let st_path = dir.path().join("f32.safetensors");
    dequantize(&q4, &st_path, &[]);
    let st = SafeTensors::read(&st_path).unwrap();
    let src = GgufFile::open(&q4).unwrap();
    assert_eq!(st.len(), src.tensors().len());
    let names: Vec<&str> = st.tensors().map(|t| t.name()).collect();
    let src_names: Vec<&str> = src.tensors().iter().map(|t| t.name()).collect();
    assert_eq!(names, src_names, "GGUF order kept");
    for t in st.tensors() {
        let s = src.tensor(t.name()).unwrap();
        assert_eq!(t.dtype(), Dtype::F32);
        let shape: Vec<u64> = t.shape().iter().map(|&d| d as u64).collect();
        assert_eq!(shape, s.shape(), "{}", t.name());
        assert_eq!(
            bits(&t.to_f32().unwrap()),
            bits(&tensor_f32(&src, t.name()))
        );
    }
    assert_eq!(
        st.metadata_value("general.architecture"),
        Some("llama"),
        "string keys become __metadata__"
    );
    assert!(st.metadata_value(KEY_GGUF_METADATA).is_some());

    // Back to GGUF, the same file as the direct route: from the f32 safetensors (the
    // metadata record restores the keys), and from the safetensors that carries the q4_K
    // blocks as `convert` writes it.
    let q4_st = dir.path().join("q4.safetensors");
    success(&quantforge(&["convert", arg(&q4), arg(&q4_st)]));
    for input in [&st_path, &q4_st] {
        let back = dir.path().join("back.gguf");
        dequantize(input, &back, &[]);
        let same = std::fs::read(&back).unwrap() == std::fs::read(&direct).unwrap();
        assert!(
            same,
            "{} -> GGUF differs from the direct route",
            input.display()
        );
    }

    // safetensors -> safetensors (bf16): canonical order, block list dropped.
    let bf16 = dir.path().join("bf16.safetensors");
    dequantize(&q4_st, &bf16, &["--type", "bf16"]);
    let st = SafeTensors::read(&bf16).unwrap();
    assert!(st.tensors().all(|t| t.dtype() == Dtype::BF16));
    assert_eq!(st.metadata_value(quantforge::convert::KEY_GGML_TYPES), None);
    let w = st.tensor("blk.0.attn_q.weight").unwrap();
    let wide = tensor_f32(&src, "blk.0.attn_q.weight");
    let mut expected = vec![0u8; wide.len() * 2];
    quantize(GgmlType::BF16, &wide, wide.len(), None, &mut expected).unwrap();
    assert!(w.data() == expected.as_slice());
}

#[test]
fn a_split_set_dequantizes_as_the_whole_model() {
    let dir = tempfile::tempdir().unwrap();
    let (q4, whole) = q4_and_f32(dir.path());
    let prefix = dir.path().join("part");
    let args = [
        "convert",
        "--split-max-tensors",
        "10",
        arg(&q4),
        arg(&prefix),
    ];
    success(&quantforge(&args));
    let first = dir.path().join("part-00001-of-00004.gguf");
    let merged = dir.path().join("merged.gguf");
    dequantize(&first, &merged, &[]);
    let out = GgufFile::open(&merged).unwrap();
    assert!(!out.metadata().keys().any(|k| k.starts_with("split.")));
    assert_eq!(
        std::fs::read(&merged).unwrap(),
        std::fs::read(&whole).unwrap()
    );
}

#[test]
fn bad_input_exits_2_naming_the_file_or_tensor_and_leaves_out_alone() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.gguf");
    std::fs::write(&out, b"previous contents").unwrap();

    let missing = dir.path().join("missing.gguf");
    fails_naming(
        &quantforge(&["dequantize", arg(&missing), arg(&out)]),
        "missing.gguf",
    );

    let truncated = dir.path().join("truncated.gguf");
    let bytes = std::fs::read(tiny()).unwrap();
    std::fs::write(&truncated, &bytes[..bytes.len() / 2]).unwrap();
    fails_naming(
        &quantforge(&["dequantize", arg(&truncated), arg(&out)]),
        "truncated.gguf",
    );

    // An integer tensor cannot be widened: the error names it, before anything is written.
    let ints = dir.path().join("ints.gguf");
    let mut builder = GgufBuilder::new();
    let floats: Vec<u8> = [1.0f32; 32].iter().flat_map(|v| v.to_le_bytes()).collect();
    builder
        .add_tensor("w", GgmlType::F32, &[32], floats)
        .unwrap();
    builder
        .add_tensor("token_ids", GgmlType::I32, &[8], vec![0u8; 32])
        .unwrap();
    builder.write(&ints).unwrap();
    fails_naming(
        &quantforge(&["dequantize", arg(&ints), arg(&out)]),
        "tensor `token_ids`: type i32 cannot be decoded",
    );

    let bad_ext = dir.path().join("out.bin");
    fails_naming(
        &quantforge(&["dequantize", arg(&tiny()), arg(&bad_ext)]),
        "out.bin",
    );
    let bad_type = quantforge(&["dequantize", arg(&tiny()), arg(&out), "--type", "q8_0"]);
    assert_eq!(bad_type.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad_type.stderr).contains("f32, f16, bf16"));

    assert_eq!(std::fs::read(&out).unwrap(), b"previous contents");
    let entries = std::fs::read_dir(dir.path()).unwrap().count();
    assert_eq!(
        entries, 3,
        "only ints.gguf, out.gguf, truncated.gguf may remain"
    );
}
