//! `--imatrix` against llama.cpp's quantizer, byte for byte. A random importance matrix
//! for the generated llama (and an 8-expert MoE llama) is written in both file formats
//! and read with quantforge's loader; `llama_model_quantize` takes the averaged values in
//! memory, as llama-quantize hands them over, together with the `quantize.imatrix.*`
//! overrides after a user `--override-kv`. Both quantizers must write identical files.
//! The loader itself is tested against hand-built files in `src/pipeline/imatrix/tests.rs`.

#[path = "../../src/pipeline/imatrix/files.rs"]
mod imatrix_files;
mod llama_common;
#[path = "../../golden/tiny_llama.rs"]
mod tiny_llama;

use llama_common::*;

use ggml_ref::llama::{KvValue, Quantize, quantize};
use quantforge::pipeline::imatrix::{Imatrix, WeightFilter};
use quantforge::pipeline::plan::{ModelParams, Options, Preset, plan};
use quantforge::pipeline::run::{RunOptions, run, tensor_specs};
use quantforge_formats::gguf::{GgufModel, Value};
use std::path::{Path, PathBuf};
use tiny_llama::TinyLlama;

/// Presets whose tensors take importance data (and Q8_0, whose do not), Q2_K_S requiring it.
const PRESETS: [&str; 10] = [
    "Q4_K_M", "Q4_0", "IQ4_XS", "Q2_K", "Q2_K_S", "Q3_K_M", "Q5_K_S", "Q6_K", "Q5_1", "IQ4_NL",
];

/// The i-quant presets below 4 bits: most require importance data, all use it.
const IQ_PRESETS: [&str; 10] = [
    "IQ1_S", "IQ1_M", "IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ2_M", "IQ3_XXS", "IQ3_XS", "IQ3_S", "IQ3_M",
];

/// A user override before the imatrix keys; the second is replaced by llama-quantize's own.
fn user_overrides() -> Vec<(String, Value)> {
    vec![
        ("general.name".to_string(), Value::from("weighted")),
        ("quantize.imatrix.file".to_string(), Value::from("replaced")),
    ]
}

fn kv_value(value: &Value) -> KvValue {
    match value {
        Value::U32(v) => KvValue::Int(i64::from(*v)),
        Value::String(s) => KvValue::Str(s.as_bytes().to_vec()),
        other => panic!("no override of type {}", other.type_name()),
    }
}

/// xorshift64, for the sums and counts.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// Uniform in [0, 1).
    fn unit(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 24) as f32
    }
}

/// Raw imatrix data for a model: per weight matrix, sums (`ne0` per expert) and one count
/// per expert, as llama-imatrix would collect them (no `token_embd`, which it never sees,
/// unless `embd_wrong_size` gives it an entry of the wrong length). Some experts saw no
/// tokens; some counts are not integers.
struct RawImatrix {
    entries: Vec<(String, Vec<f32>, Vec<f32>)>,
}

impl RawImatrix {
    fn random(model: &TinyLlama, seed: u64, embd_wrong_size: bool) -> RawImatrix {
        let tensors = model.tensors().into_iter().map(|(name, ne, _)| (name, ne));
        Self::random_for(tensors, seed, embd_wrong_size)
    }

    /// Random data for every weight matrix of a GGUF model.
    fn random_for_gguf(path: &Path, seed: u64) -> RawImatrix {
        let model = GgufModel::open(path).expect("open the model");
        let tensors: Vec<(String, [u64; 4])> = model
            .tensors()
            .map(|t| {
                let mut ne = [1u64; 4];
                ne[..t.ne().len()].copy_from_slice(t.ne());
                (t.name().to_string(), ne)
            })
            .collect();
        Self::random_for(tensors.into_iter(), seed, false)
    }

    fn random_for(
        tensors: impl Iterator<Item = (String, [u64; 4])>,
        seed: u64,
        embd_wrong_size: bool,
    ) -> RawImatrix {
        let mut rng = Rng(seed | 1);
        let mut entries = Vec::new();
        for (name, ne) in tensors {
            if ne[1] == 1 || name == "token_embd.weight" {
                continue;
            }
            let n_expert = ne[2] as usize;
            let sums = (0..ne[0] as usize * n_expert)
                .map(|_| 50.0 * rng.unit() * rng.unit())
                .collect();
            let counts = (0..n_expert)
                .map(|_| match rng.next() % 8 {
                    0 if n_expert > 1 => 0.0,
                    1 => 10.5,
                    _ => (1 + rng.next() % 600) as f32,
                })
                .collect();
            entries.push((name, sums, counts));
        }
        if embd_wrong_size {
            entries.push(("token_embd.weight".to_string(), vec![1.0; 7], vec![3.0]));
        }
        RawImatrix { entries }
    }

    fn write_gguf(&self, path: &Path) {
        let entries: Vec<_> = self
            .entries
            .iter()
            .map(|(n, s, c)| (n.as_str(), s.as_slice(), c.as_slice()))
            .collect();
        imatrix_files::gguf_builder(&entries, &["random.txt"], 37, 512)
            .and_then(|b| b.write(path))
            .expect("write the GGUF imatrix");
    }

    /// The legacy format has one ncall per entry: the first count, values scaled by it as
    /// llama-imatrix stores them.
    fn write_legacy(&self, path: &Path) {
        let scaled: Vec<(&str, i32, Vec<f32>)> = self
            .entries
            .iter()
            .map(|(n, s, c)| (n.as_str(), c[0] as i32, s.clone()))
            .collect();
        let entries: Vec<_> = scaled
            .iter()
            .map(|(n, ncall, v)| (*n, *ncall, v.as_slice()))
            .collect();
        let bytes = imatrix_files::legacy_bytes(&entries, Some((23, "legacy-data.txt")));
        std::fs::write(path, bytes).expect("write the legacy imatrix");
    }
}

/// What llama-quantize hands llama.cpp's quantizer: the entries and, after the user's
/// overrides, the imatrix keys (neither when no entry is left).
fn llama_params(preset: Preset, m: Option<&Imatrix>, file: &Path, prune: &[u32]) -> Quantize {
    let mut q = Quantize::new(preset.ftype.code());
    q.nthread = threads() as i32;
    q.prune_layers = prune.iter().map(|&l| l as i32).collect();
    let mut overrides = user_overrides();
    if let Some(m) = m {
        q.imatrix = m
            .entries()
            .map(|(name, values)| (name.to_vec(), values.to_vec()))
            .collect();
        overrides.extend(m.metadata(recorded_name(file)));
    }
    q.kv_overrides = overrides
        .iter()
        .map(|(k, v)| (k.clone(), kv_value(v)))
        .collect();
    q
}

fn quantforge_quantize(
    input: &Path,
    out: &Path,
    preset: Preset,
    m: Option<&Imatrix>,
    file: &Path,
    prune: &[u32],
) -> Result<(), String> {
    let model = GgufModel::open(input).map_err(|e| e.to_string())?;
    let params = ModelParams::from_gguf(model.metadata()).map_err(|e| e.to_string())?;
    let mut options = Options::new(preset);
    options.has_imatrix = m.is_some();
    options.prune_layers = prune.to_vec();
    let plan = plan(
        &params,
        &tensor_specs(&model).map_err(|e| e.to_string())?,
        &options,
    )
    .map_err(|e| e.to_string())?;
    plan.check_runnable().map_err(|e| e.to_string())?;
    let mut kv_overrides = user_overrides();
    if let Some(m) = m {
        kv_overrides.extend(m.metadata(recorded_name(file)));
    }
    let run_options = RunOptions {
        threads: threads(),
        kv_overrides,
        imatrix: m.cloned(),
        ..RunOptions::default()
    };
    run(&model, &plan, out, &run_options, |_| {})
        .map(drop)
        .map_err(|e| e.to_string())
}

/// Quantizes `input` both ways with the imatrix of `file` for each preset; returns the
/// presets that differ or fail on one side only.
fn compare(input: &Path, file: &Path, filter: &WeightFilter, presets: &[&str]) -> Vec<String> {
    compare_pruned(input, file, filter, presets, &[])
}

/// [`compare`] with `--prune-layers`.
fn compare_pruned(
    input: &Path,
    file: &Path,
    filter: &WeightFilter,
    presets: &[&str],
    prune: &[u32],
) -> Vec<String> {
    let mut m = Imatrix::load(file).expect("quantforge reads the imatrix");
    m.retain(filter);
    let m = (!m.is_empty()).then_some(m);
    let dir = tempfile::tempdir().expect("temp dir");
    let (ours, theirs) = (dir.path().join("ours.gguf"), dir.path().join("llama.gguf"));
    let mut failures = Vec::new();
    for name in presets {
        let preset = Preset::parse(name).expect("a preset");
        let q = llama_params(preset, m.as_ref(), file, prune);
        let llama = llama_reference(input, &theirs, &q);
        let qf = quantforge_quantize(input, &ours, preset, m.as_ref(), file, prune);
        match (llama, qf) {
            (Ok(reference), Ok(())) => {
                if let Some(diff) = difference(&reference, input, &q, &ours, &theirs) {
                    failures.push(format!("{name}: {diff}"));
                }
            }
            (Err(_), Err(_)) => failures.push(format!("{name}: both refused")),
            (a, b) => failures.push(format!("{name}: llama.cpp {a:?}, quantforge {b:?}")),
        }
    }
    failures
}

fn check(what: &str, model: &TinyLlama, raw: &RawImatrix) {
    let dir = tempfile::tempdir().unwrap();
    let input = write_model(dir.path(), model);
    let mut presets = presets(&PRESETS);
    presets.extend(self::presets(&IQ_PRESETS));
    let files: [(&str, PathBuf); 2] = [
        ("GGUF", dir.path().join("imatrix.gguf")),
        ("legacy", dir.path().join("imatrix.dat")),
    ];
    raw.write_gguf(&files[0].1);
    raw.write_legacy(&files[1].1);
    let mut failures = Vec::new();
    for (format, file) in &files {
        let f = compare(&input, file, &WeightFilter::All, &presets);
        eprintln!(
            "{what}, {format} imatrix: {} of {} presets byte-identical to llama.cpp",
            presets.len() - f.len(),
            presets.len()
        );
        failures.extend(f.into_iter().map(|f| format!("{format}: {f}")));
    }
    assert!(failures.is_empty(), "{what}:\n{}", failures.join("\n"));
}

#[test]
fn tiny_llama_with_imatrix_bytes() {
    let model = TinyLlama::COMMITTED;
    check("tiny llama", &model, &RawImatrix::random(&model, 11, true));
}

#[test]
fn moe_llama_with_imatrix_bytes() {
    let model = TinyLlama {
        n_layer: 3,
        n_ff: 256,
        n_expert: 8,
        ..TinyLlama::COMMITTED
    };
    check("MoE llama", &model, &RawImatrix::random(&model, 12, false));
}

/// Drawn shapes (`QF_PLAN_SEED` replays), always with experts: expert boundaries fall
/// inside the row ranges quantized together, and rows that are not whole K-quant blocks
/// take fallback types that use importance data too.
#[test]
fn drawn_moe_llama_with_imatrix_bytes() {
    let (seed, mut model) = drawn_model();
    if model.n_expert == 0 {
        model.n_expert = 4;
    }
    check(
        &format!("drawn MoE llama (QF_PLAN_SEED={seed})"),
        &model,
        &RawImatrix::random(&model, seed, seed % 2 == 0),
    );
}

/// The real Gemma-3-270M F16 (640-wide rows: the i-quant tensors that are not whole
/// 256-blocks take the fallback types) with a GGUF importance matrix, every i-quant preset.
/// The legacy format is read into the same values (the tiny models above check both).
#[test]
fn real_gemma_iq_presets_with_imatrix_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let Some(f16) = gemma_f16(dir.path()) else {
        return;
    };
    let file = dir.path().join("imatrix.gguf");
    RawImatrix::random_for_gguf(&f16, 21).write_gguf(&file);
    let presets = presets(&IQ_PRESETS);
    let failures = compare(&f16, &file, &WeightFilter::All, &presets);
    eprintln!(
        "real Gemma-3-270M F16, GGUF imatrix: {} of {} presets byte-identical to llama.cpp",
        presets.len() - failures.len(),
        presets.len()
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// `--prune-layers`: layers dropped and renumbered, `block_count` rewritten, the mixes
/// still counting the source's layers, the importance entries found by the source names;
/// dense and MoE (whose expert rules read the layer from the new names), lists at the
/// start, middle and end and beyond the model.
#[test]
fn prune_layers_bytes() {
    let dense = TinyLlama {
        n_layer: 8,
        ..TinyLlama::COMMITTED
    };
    let moe = TinyLlama {
        n_layer: 4,
        n_ff: 256,
        n_expert: 4,
        ..TinyLlama::COMMITTED
    };
    let presets = ["Q4_K_M", "Q3_K_M", "Q2_K_S", "IQ2_M", "IQ3_XS", "IQ1_M"];
    let mut failures = Vec::new();
    for (what, model, lists) in [
        ("dense", &dense, &[&[0u32, 3][..], &[7], &[2, 5, 6, 11]][..]),
        ("MoE", &moe, &[&[1u32][..], &[0, 3]][..]),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let input = write_model(dir.path(), model);
        let file = dir.path().join("imatrix.gguf");
        RawImatrix::random(model, 15, false).write_gguf(&file);
        // The pruned file is what it should be (so the comparisons compare pruning).
        let m = Imatrix::load(&file).unwrap();
        let out = dir.path().join("pruned.gguf");
        let preset = Preset::parse("Q4_K_M").unwrap();
        quantforge_quantize(&input, &out, preset, Some(&m), &file, lists[0]).unwrap();
        let pruned = GgufModel::open(&out).unwrap();
        let kept = model.n_layer - lists[0].len() as u32;
        assert_eq!(
            pruned.metadata().get("llama.block_count"),
            Some(&Value::U32(kept))
        );
        let layers: std::collections::BTreeSet<&str> = pruned
            .tensors()
            .filter_map(|t| t.name().strip_prefix("blk."))
            .filter_map(|n| n.split('.').next())
            .collect();
        assert_eq!(layers.len() as u32, kept, "{layers:?}");
        for prune in lists {
            let f = compare_pruned(&input, &file, &WeightFilter::All, &presets, prune);
            eprintln!(
                "{what} llama, --prune-layers {prune:?}: {} of {} presets byte-identical",
                presets.len() - f.len(),
                presets.len()
            );
            failures.extend(f.into_iter().map(|f| format!("{what} {prune:?}: {f}")));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// `--include-weights` / `--exclude-weights`: fewer entries, a smaller entry count in the
/// metadata; none left is no imatrix at all (the mixes that depend on one change back).
#[test]
fn include_and_exclude_weights_bytes() {
    // Eight layers: the first ffn_down follows the Q4_0/IQ4_NL rules that depend on
    // whether an imatrix is given.
    let model = TinyLlama {
        n_layer: 8,
        ..TinyLlama::COMMITTED
    };
    let dir = tempfile::tempdir().unwrap();
    let input = write_model(dir.path(), &model);
    let file = dir.path().join("imatrix.gguf");
    RawImatrix::random(&model, 14, true).write_gguf(&file);
    let names = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let filters = [
        (
            "include attn_v, ffn_down",
            WeightFilter::new(names(&["attn_v", "ffn_down"]), vec![]),
        ),
        (
            "exclude blk.1., output",
            WeightFilter::new(vec![], names(&["blk.1.", "output"])),
        ),
        (
            "include nothing there",
            WeightFilter::new(names(&["no-such-tensor"]), vec![]),
        ),
    ];
    let presets = ["Q4_K_M", "Q4_0", "IQ4_NL", "Q2_K"];
    let mut failures = Vec::new();
    for (what, filter) in filters {
        let filter = filter.expect("one kind of filter");
        failures.extend(
            compare(&input, &file, &filter, &presets)
                .into_iter()
                .map(|f| format!("{what}: {f}")),
        );
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The importance values change the output (so the comparison above compares something),
/// and missing entries behave alike: quantized without for most types, refused by both
/// for Q2_K_S.
#[test]
fn partial_imatrix_and_its_effect() {
    let model = TinyLlama::COMMITTED;
    let dir = tempfile::tempdir().unwrap();
    let input = write_model(dir.path(), &model);
    let mut raw = RawImatrix::random(&model, 13, false);
    raw.entries.retain(|(name, _, _)| !name.contains("attn_k"));
    let file = dir.path().join("partial.gguf");
    raw.write_gguf(&file);

    let failures = compare(&input, &file, &WeightFilter::All, &["Q4_K_M", "Q4_0"]);
    assert!(failures.is_empty(), "{}", failures.join("\n"));

    let preset = Preset::parse("Q2_K_S").unwrap();
    let m = Imatrix::load(&file).unwrap();
    let out = dir.path().join("out.gguf");
    let llama = quantize(&input, &out, &llama_params(preset, Some(&m), &file, &[]));
    let qf = quantforge_quantize(&input, &out, preset, Some(&m), &file, &[]);
    assert!(
        llama.is_err(),
        "llama.cpp quantized Q2_K_S without attn_k data"
    );
    let qf = qf.expect_err("quantforge quantized Q2_K_S without attn_k data");
    assert!(qf.contains("blk.0.attn_k.weight"), "{qf}");

    let preset = Preset::parse("Q4_K_M").unwrap();
    let (with, without) = (
        dir.path().join("with.gguf"),
        dir.path().join("without.gguf"),
    );
    quantforge_quantize(&input, &with, preset, Some(&m), &file, &[]).unwrap();
    quantforge_quantize(&input, &without, preset, None, &file, &[]).unwrap();
    let (a, b) = (
        GgufModel::open(&with).unwrap(),
        GgufModel::open(&without).unwrap(),
    );
    let data = |m: &GgufModel, name: &str| {
        m.tensors()
            .find(|t| t.name() == name)
            .map(|t| t.data().to_vec())
            .unwrap()
    };
    assert_ne!(
        data(&a, "blk.0.attn_q.weight"),
        data(&b, "blk.0.attn_q.weight")
    );
    // attn_k had no entry: quantized as without an imatrix.
    assert_eq!(
        data(&a, "blk.0.attn_k.weight"),
        data(&b, "blk.0.attn_k.weight")
    );
}
