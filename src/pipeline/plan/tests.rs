//! Expectations written out from llama.cpp's rules for synthetic llama- and gemma-shaped
//! models; the live comparison against llama.cpp itself is in
//! `ggml-ref/tests/llama_quantize_plan.rs`.

use super::*;
use GgmlType as T;

const F16: GgmlType = T::F16;
const F32: GgmlType = T::F32;

/// A llama-shaped model: 8 layers, n_embd 512 (every row a multiple of 256), 8 query heads
/// sharing 4 key/value heads, an untied output.
fn llama(n_layer: u32) -> (ModelParams, Vec<TensorSpec>) {
    let mut t = vec![
        TensorSpec::new("token_embd.weight", [512, 1000, 1, 1], F16),
        TensorSpec::new("output_norm.weight", [512, 1, 1, 1], F32),
        TensorSpec::new("output.weight", [512, 1000, 1, 1], F16),
        TensorSpec::new("rope_freqs.weight", [32, 1, 1, 1], F32),
    ];
    for i in 0..n_layer {
        let l = |s: &str| format!("blk.{i}.{s}");
        t.extend([
            TensorSpec::new(l("attn_norm.weight"), [512, 1, 1, 1], F32),
            TensorSpec::new(l("attn_q.weight"), [512, 512, 1, 1], F16),
            TensorSpec::new(l("attn_k.weight"), [512, 256, 1, 1], F16),
            TensorSpec::new(l("attn_v.weight"), [512, 256, 1, 1], F16),
            TensorSpec::new(l("attn_output.weight"), [512, 512, 1, 1], F16),
            TensorSpec::new(l("ffn_norm.weight"), [512, 1, 1, 1], F32),
            TensorSpec::new(l("ffn_gate.weight"), [512, 1024, 1, 1], F16),
            TensorSpec::new(l("ffn_up.weight"), [512, 1024, 1, 1], F16),
            TensorSpec::new(l("ffn_down.weight"), [1024, 512, 1, 1], F16),
        ]);
    }
    (ModelParams::new("llama", n_layer, 8, 4), t)
}

/// A gemma3-270M-shaped model: n_embd 640 (not a multiple of 256), 4 query heads on one
/// key/value head of 256, tied embeddings, 18 layers.
fn gemma() -> (ModelParams, Vec<TensorSpec>) {
    let mut t = vec![
        TensorSpec::new("token_embd.weight", [640, 2048, 1, 1], F16),
        TensorSpec::new("output_norm.weight", [640, 1, 1, 1], F32),
    ];
    for i in 0..18 {
        let l = |s: &str| format!("blk.{i}.{s}");
        t.extend([
            TensorSpec::new(l("attn_norm.weight"), [640, 1, 1, 1], F32),
            TensorSpec::new(l("attn_q.weight"), [640, 1024, 1, 1], F16),
            TensorSpec::new(l("attn_q_norm.weight"), [256, 1, 1, 1], F32),
            TensorSpec::new(l("attn_k.weight"), [640, 256, 1, 1], F16),
            TensorSpec::new(l("attn_k_norm.weight"), [256, 1, 1, 1], F32),
            TensorSpec::new(l("attn_v.weight"), [640, 256, 1, 1], F16),
            TensorSpec::new(l("attn_output.weight"), [1024, 640, 1, 1], F16),
            TensorSpec::new(l("post_attention_norm.weight"), [640, 1, 1, 1], F32),
            TensorSpec::new(l("ffn_norm.weight"), [640, 1, 1, 1], F32),
            TensorSpec::new(l("ffn_gate.weight"), [640, 2048, 1, 1], F16),
            TensorSpec::new(l("ffn_up.weight"), [640, 2048, 1, 1], F16),
            TensorSpec::new(l("ffn_down.weight"), [2048, 640, 1, 1], F16),
            TensorSpec::new(l("post_ffw_norm.weight"), [640, 1, 1, 1], F32),
        ]);
    }
    (ModelParams::new("gemma3", 18, 4, 1), t)
}

fn run(model: &ModelParams, tensors: &[TensorSpec], preset: &str) -> Plan {
    let preset = Preset::parse(preset).expect("a preset");
    plan(model, tensors, &Options::new(preset)).expect("a plan")
}

/// The layer of `blk.N.` names (none for global tensors).
fn layer(name: &str) -> Option<i64> {
    layer_of(name)
}

/// Asserts every tensor's target against `expected(name, source)`.
fn check(plan: &Plan, what: &str, expected: impl Fn(&str, GgmlType) -> GgmlType) {
    let mut wrong = Vec::new();
    for t in &plan.tensors {
        let want = expected(&t.name, t.source);
        if t.target != want {
            wrong.push(format!(
                "{}: got {} want {want} ({})",
                t.name, t.target, t.reason
            ));
        }
    }
    assert!(wrong.is_empty(), "{what}:\n{}", wrong.join("\n"));
}

/// 1-D tensors keep their type in every preset.
fn kept_1d(name: &str) -> bool {
    name.ends_with("norm.weight") || name == "rope_freqs.weight"
}

/// use_more_bits for 8 layers: the first eighth, the last eighth, every third between.
const MORE_BITS_8: [i64; 4] = [0, 3, 6, 7];
/// ... and for 18 layers.
const MORE_BITS_18: [i64; 9] = [0, 1, 4, 7, 10, 13, 15, 16, 17];

fn in_layers(name: &str, layers: &[i64]) -> bool {
    layer(name).is_some_and(|l| layers.contains(&l))
}

#[test]
fn presets_parse_like_llama_quantize() {
    assert_eq!(Preset::parse("Q4_K_M").unwrap().ftype, FileType::Q4_K_M);
    assert_eq!(Preset::parse("q4_k_m").unwrap().ftype, FileType::Q4_K_M);
    assert_eq!(Preset::parse("Q4_K").unwrap().ftype, FileType::Q4_K_M);
    assert_eq!(Preset::parse("q3_K").unwrap().ftype, FileType::Q3_K_M);
    assert_eq!(Preset::parse("15").unwrap().ftype, FileType::Q4_K_M);
    assert_eq!(Preset::parse("12").unwrap().name, "Q3_K");
    assert_eq!(Preset::parse(" 7 ").unwrap().ftype, FileType::Q8_0);
    assert_eq!(Preset::parse("0").unwrap().name, "F32");
    let copy = Preset::parse("copy").unwrap();
    assert!(copy.copy && copy.ftype == FileType::F32);
    assert!(!Preset::parse("F32").unwrap().copy);
    for bad in ["", "Q4_K_X", "99", "4", "q8_1", "99999999999"] {
        assert!(Preset::parse(bad).is_none(), "{bad:?}");
    }
    for p in Preset::ALL {
        assert_eq!(FileType::from_code(p.ftype.code()), Some(p.ftype));
    }
    assert_eq!(FileType::NVFP4.default_type(), None);
    assert_eq!(FileType::IQ2_S.default_type(), Some(T::IQ2_XS));
}

#[test]
fn llama_k_quant_mixes() {
    let (m, ts) = llama(8);
    let mix =
        |preset: &str, default: GgmlType, rule: &dyn Fn(&str, GgmlType) -> Option<GgmlType>| {
            let p = run(&m, &ts, preset);
            assert_eq!(p.file_type, Preset::parse(preset).unwrap().ftype.code());
            assert_eq!(p.quantization_version, 2);
            assert_eq!(p.n_fallback, 0, "{preset}: rows are multiples of 256");
            check(&p, preset, |name, src| {
                if kept_1d(name) {
                    src
                } else if name == "output.weight" {
                    T::Q6_K
                } else {
                    rule(name, default).unwrap_or(default)
                }
            });
        };
    mix("Q4_K_M", T::Q4_K, &|n, _| {
        ((n.contains("attn_v") || n.contains("ffn_down")) && in_layers(n, &MORE_BITS_8))
            .then_some(T::Q6_K)
    });
    mix("Q5_K_M", T::Q5_K, &|n, _| {
        ((n.contains("attn_v") || n.contains("ffn_down")) && in_layers(n, &MORE_BITS_8))
            .then_some(T::Q6_K)
    });
    mix("Q4_K_S", T::Q4_K, &|n, _| {
        let attn_v = n.contains("attn_v") && in_layers(n, &[0, 1, 2, 3]);
        let ffn_down = n.contains("ffn_down") && in_layers(n, &[0]);
        (attn_v || ffn_down).then_some(T::Q5_K)
    });
    mix("Q5_K_S", T::Q5_K, &|_, _| None);
    mix("Q6_K", T::Q6_K, &|_, _| None);
    mix("Q3_K_S", T::Q3_K, &|_, _| None);
    mix("Q3_K_M", T::Q3_K, &|n, _| {
        if n.contains("attn_v") {
            Some(if in_layers(n, &[0, 1]) {
                T::Q5_K
            } else {
                T::Q4_K
            })
        } else if n.contains("ffn_down") || n.contains("attn_output") {
            Some(T::Q4_K)
        } else {
            None
        }
    });
    mix("Q3_K_L", T::Q3_K, &|n, _| {
        ["attn_v", "ffn_down", "attn_output"]
            .iter()
            .any(|s| n.contains(s))
            .then_some(T::Q5_K)
    });
    // n_gqa = 2 < 4: attn_v gets q3_K.
    mix("Q2_K", T::Q2_K, &|n, _| {
        ["attn_v", "ffn_down", "attn_output"]
            .iter()
            .any(|s| n.contains(s))
            .then_some(T::Q3_K)
    });
    // Ternary presets: the untied token embedding gets q4_K.
    for (preset, ty) in [("TQ1_0", T::TQ1_0), ("TQ2_0", T::TQ2_0)] {
        mix(preset, ty, &|n, _| {
            (n == "token_embd.weight").then_some(T::Q4_K)
        });
    }
    for (preset, ty) in [
        ("Q4_0", T::Q4_0),
        ("Q4_1", T::Q4_1),
        ("Q5_0", T::Q5_0),
        ("Q5_1", T::Q5_1),
    ] {
        mix(preset, ty, &|_, _| None);
    }
}

#[test]
fn llama_q8_0_keeps_output_at_q8_0() {
    let (m, ts) = llama(8);
    let p = run(&m, &ts, "Q8_0");
    check(&p, "Q8_0", |n, src| if kept_1d(n) { src } else { T::Q8_0 });
}

#[test]
fn float_presets_and_copy() {
    let (m, mut ts) = llama(4);
    ts[0].ty = T::BF16; // token_embd
    for (preset, ty) in [("F16", T::F16), ("BF16", T::BF16), ("F32", T::F32)] {
        let p = run(&m, &ts, preset);
        check(&p, preset, |n, src| if kept_1d(n) { src } else { ty });
        assert!(p.tensors.iter().all(|t| t.fallback.is_none()));
    }
    let p = run(&m, &ts, "COPY");
    check(&p, "COPY", |_, src| src);
    assert!(p.tensors.iter().all(|t| t.reason == Reason::Kept("COPY")));
    // Most tensors are f16, and the model has no general.file_type: guessed F16.
    assert_eq!(p.file_type, FileType::F16.code() | FILE_TYPE_GUESSED);
    let mut with_ftype = m.clone();
    with_ftype.file_type = Some(15);
    assert_eq!(run(&with_ftype, &ts, "COPY").file_type, 15);
}

#[test]
fn guessed_file_type_is_first_to_reach_the_top_count_in_load_order() {
    let m = ModelParams::new("llama", 2, 1, 1);
    // Two q8_0 and two q4_K: blk.0 (q8_0) loads before blk.1 (q4_K), so q8_0 wins.
    let ts = [
        TensorSpec::new("blk.1.a.weight", [32, 2, 1, 1], T::Q4_K),
        TensorSpec::new("blk.1.b.weight", [32, 2, 1, 1], T::Q4_K),
        TensorSpec::new("blk.0.a.weight", [32, 2, 1, 1], T::Q8_0),
        TensorSpec::new("blk.0.b.weight", [32, 2, 1, 1], T::Q8_0),
    ];
    let p = run(&m, &ts, "COPY");
    assert_eq!(p.file_type, FileType::Q8_0.code() | FILE_TYPE_GUESSED);
}

#[test]
fn gemma_mixes_fall_back_on_rows_of_640() {
    let (m, ts) = gemma();
    let narrow = |n: &str| {
        ["attn_q.", "attn_k.", "attn_v.", "ffn_gate", "ffn_up"]
            .iter()
            .any(|s| n.contains(s))
    };
    type Rule<'a> = &'a dyn Fn(&str) -> GgmlType;
    let cases: [(&str, Rule); 8] = [
        ("Q4_K_M", &|n| {
            let more = in_layers(n, &MORE_BITS_18);
            if n.contains("attn_v") {
                if more { T::Q8_0 } else { T::Q5_0 }
            } else if n.contains("ffn_down") {
                if more { T::Q6_K } else { T::Q4_K }
            } else if narrow(n) {
                T::Q5_0
            } else {
                T::Q4_K
            }
        }),
        ("Q5_K_S", &|n| if narrow(n) { T::Q5_1 } else { T::Q5_K }),
        ("Q6_K", &|n| if narrow(n) { T::Q8_0 } else { T::Q6_K }),
        ("Q8_0", &|_| T::Q8_0),
        ("Q4_0", &|_| T::Q4_0),
        // n_gqa = 4: attn_v q4_K, falling back to q5_0.
        ("Q2_K", &|n| {
            if n.contains("attn_v") {
                T::Q5_0
            } else if n.contains("ffn_down") || n.contains("attn_output") {
                T::Q3_K
            } else if narrow(n) {
                T::Q4_0
            } else {
                T::Q2_K
            }
        }),
        ("Q3_K_M", &|n| {
            if n.contains("attn_v") {
                // q5_K for the first two, q4_K after; both fall back to 32-blocks.
                if in_layers(n, &[0, 1]) {
                    T::Q5_1
                } else {
                    T::Q5_0
                }
            } else if n.contains("ffn_down") {
                // The first sixteenth of 18 layers is layer 0.
                if in_layers(n, &[0]) { T::Q5_K } else { T::Q4_K }
            } else if n.contains("attn_output") {
                T::Q4_K
            } else if narrow(n) {
                T::Q4_0
            } else {
                T::Q3_K
            }
        }),
        ("TQ2_0", &|n| if narrow(n) { T::Q4_0 } else { T::TQ2_0 }),
    ];
    for (preset, rule) in cases {
        let p = run(&m, &ts, preset);
        check(&p, preset, |n, src| {
            if n.ends_with("norm.weight") {
                src
            } else if n == "token_embd.weight" {
                // Tied: the output rule; 640 is not whole q-K blocks, so q8_0.
                T::Q8_0
            } else {
                rule(n)
            }
        });
        let expect_fallbacks = p.tensors.iter().filter(|t| t.fallback.is_some()).count();
        assert_eq!(p.n_fallback, expect_fallbacks);
    }
}

#[test]
fn fallback_is_recorded_with_what_was_wanted() {
    let (m, ts) = gemma();
    let p = run(&m, &ts, "Q4_K_M");
    let t = p
        .tensors
        .iter()
        .find(|t| t.name == "blk.0.attn_v.weight")
        .unwrap();
    assert_eq!(t.target, T::Q8_0);
    assert_eq!(
        t.fallback,
        Some(Fallback {
            wanted: T::Q6_K,
            ncols: 640
        })
    );
    assert_eq!(t.reason, Reason::Mix(Category::AttentionV));
    // 5 narrow tensors per layer.
    assert_eq!(p.n_fallback, 18 * 5);
    // Q4_0: the tied embedding wants q6_K (output rule) and falls back to q8_0.
    let p = run(&m, &ts, "Q4_0");
    let t = &p.tensors[1];
    assert_eq!((t.name.as_str(), t.target), ("token_embd.weight", T::Q8_0));
    assert_eq!(t.fallback.unwrap().wanted, T::Q6_K);
}

#[test]
fn fallback_table() {
    let f = |ty, n| rules::fallback("t", n, ty).unwrap();
    assert_eq!(f(T::Q4_K, 512), None);
    assert_eq!(f(T::Q4_K, 640), Some(T::Q5_0));
    assert_eq!(f(T::Q5_K, 640), Some(T::Q5_1));
    assert_eq!(f(T::Q6_K, 640), Some(T::Q8_0));
    assert_eq!(f(T::Q2_K, 96), Some(T::Q4_0));
    assert_eq!(f(T::TQ1_0, 96), Some(T::Q4_0));
    assert_eq!(f(T::IQ2_XXS, 96), Some(T::IQ4_NL));
    assert_eq!(f(T::Q4_K, 100), Some(T::F16));
    assert_eq!(f(T::Q8_0, 100), Some(T::F16));
    assert_eq!(f(T::F16, 7), None);
    assert!(matches!(
        rules::fallback("t", 96, T::Q1_0),
        Err(PlanError::NoFallback { ncols: 96, .. })
    ));
    // A row of 16 is not whole blocks of anything quantized: f16.
    let m = ModelParams::new("llama", 1, 1, 1);
    let ts = [TensorSpec::new("blk.0.attn_q.weight", [16, 16, 1, 1], F16)];
    let p = run(&m, &ts, "Q4_K_M");
    assert_eq!(p.tensors[0].target, T::F16);
    assert_eq!(p.tensors[0].fallback.unwrap().wanted, T::Q4_K);
}

#[test]
fn output_order_is_by_layer_then_name() {
    let m = ModelParams::new("llama", 11, 1, 1);
    let names = [
        "blk.10.attn_q.weight",
        "output.weight",
        "blk.9.ffn_up.weight",
        "blk.9.attn_q.weight",
        "token_embd.weight",
        "blk.0.attn_q.weight",
    ];
    let ts: Vec<_> = names
        .iter()
        .enumerate()
        .map(|(i, n)| {
            let mut t = TensorSpec::new(*n, [256, 4, 1, 1], F16);
            t.offset = i as u64;
            t.split = (i % 2) as u16;
            t
        })
        .collect();
    let p = run(&m, &ts, "Q8_0");
    let got: Vec<_> = p.tensors.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(
        got,
        [
            "output.weight",
            "token_embd.weight",
            "blk.0.attn_q.weight",
            "blk.9.attn_q.weight",
            "blk.9.ffn_up.weight",
            "blk.10.attn_q.weight",
        ]
    );
    assert!(p.tensors.iter().all(|t| t.split == 0));
    let mut opts = Options::new(Preset::parse("Q8_0").unwrap());
    opts.keep_split = true;
    let p = plan(&m, &ts, &opts).unwrap();
    let got: Vec<_> = p.tensors.iter().map(|t| t.input_index).collect();
    assert_eq!(got, [0, 2, 4, 1, 3, 5]);
    assert_eq!(p.tensors[3].split, 1);
}

#[test]
fn layer_parsing_follows_sscanf() {
    assert_eq!(layer_of("blk.12.attn_q.weight"), Some(12));
    assert_eq!(layer_of("blk.3"), Some(3));
    assert_eq!(layer_of("blk. -2.x"), Some(-2));
    assert_eq!(layer_of("blk.x.y"), None);
    assert_eq!(layer_of("output.weight"), None);
    assert_eq!(layer_of("blk.4294967297.x"), Some(1));
}

#[test]
fn kept_tensors_and_reasons() {
    let m = ModelParams::new("bert", 1, 1, 1);
    let keep = |name: &str, ne: [u64; 4]| {
        let ts = [TensorSpec::new(name, ne, F16)];
        let p = run(&m, &ts, "Q8_0");
        match &p.tensors[0].reason {
            Reason::Kept(why) => Some(*why),
            _ => None,
        }
    };
    let w = [256, 256, 1, 1];
    assert_eq!(keep("blk.0.attn_q.weight", [256, 1, 1, 1]), Some("1-D"));
    assert_eq!(keep("blk.0.attn_q.weight", [256, 1, 4, 1]), None); // 3-D
    assert_eq!(keep("blk.0.attn_q.bias", w), Some("not a weight"));
    assert_eq!(keep("blk.0.attn_q_norm.weight", w), Some("norm"));
    assert_eq!(keep("blk.0.ffn_gate_inp.weight", w), Some("expert router"));
    assert_eq!(keep("position_embd.weight", w), Some("position embedding"));
    assert_eq!(keep("token_types.weight", w), Some("token types"));
    assert_eq!(keep("blk.0.ssm_conv1d.weight", w), Some("conv1d"));
    assert_eq!(keep("v.patch_embd.weight", w), Some("multimodal tensor"));
    assert_eq!(
        keep("blk.0.time_mix_w1.weight", w),
        Some("RWKV small weight")
    );
    assert_eq!(keep("blk.0.hc_x.weight", w), None); // only for glm5-next
    assert_eq!(keep("blk.0.attn_q.weight", w), None);
}

#[test]
fn explicit_type_options() {
    let (m, ts) = llama(8);
    let preset = Preset::parse("Q4_K_M").unwrap();
    let target = |opts: &Options, name: &str| {
        let p = plan(&m, &ts, opts).unwrap();
        let t = p.tensors.iter().find(|t| t.name == name).unwrap().clone();
        (t.target, t.reason)
    };

    let mut o = Options::new(preset);
    o.pure = true;
    assert_eq!(target(&o, "blk.0.attn_v.weight"), (T::Q4_K, Reason::Pure));
    assert_eq!(target(&o, "output.weight"), (T::Q4_K, Reason::Pure));

    let mut o = Options::new(preset);
    o.quantize_output_tensor = false;
    assert_eq!(
        target(&o, "output.weight"),
        (F16, Reason::Kept("--leave-output-tensor"))
    );

    let mut o = Options::new(preset);
    o.output_tensor_type = Some(T::Q8_0);
    o.token_embedding_type = Some(T::Q3_K);
    assert_eq!(
        target(&o, "output.weight"),
        (T::Q8_0, Reason::OutputTensorType)
    );
    assert_eq!(
        target(&o, "token_embd.weight"),
        (T::Q3_K, Reason::TokenEmbeddingType)
    );

    let mut o = Options::new(preset);
    o.tensor_types = vec![
        TensorTypeRule::parse("ATTN_V=q8_0").unwrap(),
        TensorTypeRule::parse("attn=Q5_K").unwrap(),
        TensorTypeRule::parse(r"blk\.[0-3]\.ffn_down=f16").unwrap(),
    ];
    let rule = |p: &str| Reason::TensorType(p.to_string());
    assert_eq!(target(&o, "blk.0.attn_v.weight"), (T::Q8_0, rule("attn_v")));
    assert_eq!(target(&o, "blk.5.attn_q.weight"), (T::Q5_K, rule("attn")));
    assert_eq!(
        target(&o, "blk.2.ffn_down.weight"),
        (F16, rule(r"blk\.[0-3]\.ffn_down"))
    );
    // Overridden tensors do not advance the mix's ffn_down counter: blk.4 is the first
    // the mix sees (more bits), blk.6 the third (not), blk.7 the fourth (more bits).
    assert_eq!(target(&o, "blk.4.ffn_down.weight").0, T::Q6_K);
    assert_eq!(target(&o, "blk.6.ffn_down.weight").0, T::Q4_K);
    assert_eq!(target(&o, "blk.7.ffn_down.weight").0, T::Q6_K);

    assert!(matches!(
        TensorTypeRule::parse("attn_v"),
        Err(PlanError::MalformedTensorType(_))
    ));
    assert!(matches!(
        TensorTypeRule::parse("attn_v=q9_9"),
        Err(PlanError::UnknownType(_))
    ));
    assert!(matches!(
        TensorTypeRule::parse("(=q8_0"),
        Err(PlanError::BadPattern { .. })
    ));
}

#[test]
fn explicit_types_that_do_not_fit_are_errors() {
    let (m, ts) = gemma();
    let mut o = Options::new(Preset::parse("Q8_0").unwrap());
    o.token_embedding_type = Some(T::Q4_K);
    let err = plan(&m, &ts, &o).unwrap_err();
    assert!(
        matches!(err, PlanError::RowNotWholeBlocks { ncols: 640, .. }),
        "{err}"
    );
    // A --tensor-type rule still gets the fallback.
    let mut o = Options::new(Preset::parse("Q8_0").unwrap());
    o.tensor_types = vec![TensorTypeRule::parse("ffn_up=q4_K").unwrap()];
    let p = plan(&m, &ts, &o).unwrap();
    let t = p
        .tensors
        .iter()
        .find(|t| t.name == "blk.0.ffn_up.weight")
        .unwrap();
    assert_eq!(t.target, T::Q5_0);
}

#[test]
fn per_layer_token_embd_can_be_named_by_a_rule() {
    let m = ModelParams::new("gemma3n", 1, 1, 1);
    let ts = [
        TensorSpec::new("token_embd.weight", [256, 8, 1, 1], F16),
        TensorSpec::new("per_layer_token_embd.weight", [256, 8, 1, 1], F16),
        TensorSpec::new("output.weight", [256, 8, 1, 1], F16),
    ];
    let mut o = Options::new(Preset::parse("Q4_K_M").unwrap());
    o.token_embedding_type = Some(T::Q8_0);
    o.tensor_types = vec![TensorTypeRule::parse("per_layer=q5_K").unwrap()];
    let p = plan(&m, &ts, &o).unwrap();
    let got: Vec<_> = p
        .tensors
        .iter()
        .map(|t| (t.name.as_str(), t.target))
        .collect();
    assert_eq!(
        got,
        [
            ("output.weight", T::Q6_K),
            ("per_layer_token_embd.weight", T::Q5_K),
            ("token_embd.weight", T::Q8_0),
        ]
    );
}

#[test]
fn imatrix_and_requantize_checks() {
    let (m, mut ts) = llama(8);
    let p = run(&m, &ts, "IQ2_XXS");
    let err = p.check_runnable().unwrap_err();
    assert!(
        matches!(err, PlanError::ImatrixRequired { ty: T::IQ2_XXS, .. }),
        "{err}"
    );
    let mut o = Options::new(Preset::parse("IQ2_XXS").unwrap());
    o.has_imatrix = true;
    plan(&m, &ts, &o).unwrap().check_runnable().unwrap();
    // Q2_K tensors need an imatrix only in Q2_K_S.
    run(&m, &ts, "Q2_K").check_runnable().unwrap();
    assert!(run(&m, &ts, "Q2_K_S").check_runnable().is_err());

    ts[4].ty = T::Q8_0; // blk.0.attn_norm is 1-D, so take a weight
    let idx = ts
        .iter()
        .position(|t| t.name == "blk.0.attn_q.weight")
        .unwrap();
    ts[idx].ty = T::Q8_0;
    let err = run(&m, &ts, "Q4_K_M").check_runnable().unwrap_err();
    assert!(
        matches!(&err, PlanError::RequantizeDisabled { tensor, from: T::Q8_0 } if tensor == "blk.0.attn_q.weight"),
        "{err}"
    );
    // Same type: copied, no requantization.
    run(&m, &ts, "Q8_0").check_runnable().unwrap();
    let mut o = Options::new(Preset::parse("Q4_K_M").unwrap());
    o.allow_requantize = true;
    plan(&m, &ts, &o).unwrap().check_runnable().unwrap();
}

#[test]
fn imatrix_changes_some_mixes() {
    let (m, ts) = llama(8);
    let ty = |preset: &str, imatrix: bool, name: &str| {
        let mut o = Options::new(Preset::parse(preset).unwrap());
        o.has_imatrix = imatrix;
        let p = plan(&m, &ts, &o).unwrap();
        p.tensors.iter().find(|t| t.name == name).unwrap().target
    };
    assert_eq!(ty("Q4_0", false, "blk.0.ffn_down.weight"), T::Q4_0);
    assert_eq!(ty("Q4_0", true, "blk.0.ffn_down.weight"), T::Q4_1);
    assert_eq!(ty("Q5_0", true, "blk.0.ffn_down.weight"), T::Q5_1);
    assert_eq!(ty("Q5_0", true, "blk.1.ffn_down.weight"), T::Q5_0);
    assert_eq!(ty("IQ3_XXS", false, "blk.0.attn_v.weight"), T::IQ3_S);
    assert_eq!(ty("IQ3_XXS", true, "blk.0.attn_v.weight"), T::IQ3_XXS);
}

#[test]
fn moe_rules_read_the_layer_from_the_name() {
    let mut m = ModelParams::new("llama", 4, 32, 8);
    m.n_expert = 8;
    let mut ts = Vec::new();
    // Experts deliberately listed out of layer order.
    for i in [3, 0, 2, 1] {
        let l = |s: &str| format!("blk.{i}.{s}");
        ts.extend([
            TensorSpec::new(l("attn_v.weight"), [256, 256, 1, 1], F16),
            TensorSpec::new(l("attn_k.weight"), [256, 256, 1, 1], F16),
            TensorSpec::new(l("attn_output.weight"), [256, 256, 1, 1], F16),
            TensorSpec::new(l("ffn_gate_inp.weight"), [256, 8, 1, 1], F32),
            TensorSpec::new(l("ffn_down_exps.weight"), [256, 256, 8, 1], F16),
            TensorSpec::new(l("ffn_up_exps.weight"), [256, 256, 8, 1], F16),
        ]);
    }
    ts.push(TensorSpec::new("output.weight", [256, 64, 1, 1], F16));
    let p = run(&m, &ts, "Q4_K_M");
    check(&p, "MoE Q4_K_M", |n, src| {
        if n.contains("ffn_gate_inp") {
            src
        } else if n.contains("attn_v") || n.contains("attn_k") {
            T::Q8_0
        } else if n.contains("attn_output") {
            T::Q5_K
        } else if n == "output.weight" {
            T::Q6_K
        } else if n.contains("ffn_down") && in_layers(n, &[2, 3]) {
            // use_more_bits(layer, 4): layer >= 3, or layer % 3 == 2.
            T::Q6_K
        } else {
            T::Q4_K
        }
    });
    let p = run(&m, &ts, "MXFP4_MOE");
    check(&p, "MXFP4_MOE", |n, src| {
        if n.contains("ffn_gate_inp") {
            src
        } else if n.contains("_exps") {
            T::MXFP4
        } else {
            T::Q8_0
        }
    });

    ts.push(TensorSpec::new(
        "ffn_down_exps.weight",
        [256, 256, 8, 1],
        F16,
    ));
    let err = plan(&m, &ts, &Options::new(Preset::parse("Q4_K_M").unwrap())).unwrap_err();
    assert!(matches!(err, PlanError::NoLayer { .. }), "{err}");
    ts.pop();
    ts.push(TensorSpec::new(
        "blk.4.ffn_down_exps.weight",
        [256, 256, 8, 1],
        F16,
    ));
    let err = plan(&m, &ts, &Options::new(Preset::parse("Q4_K_M").unwrap())).unwrap_err();
    assert!(matches!(err, PlanError::BadLayer { layer: 4, .. }), "{err}");
}

#[test]
fn low_bit_mixes_use_gqa() {
    let (mut m, ts) = llama(8);
    let attn_v = |m: &ModelParams, preset: &str| {
        let p = run(m, &ts, preset);
        p.tensors
            .iter()
            .find(|t| t.name == "blk.4.attn_v.weight")
            .unwrap()
            .target
    };
    assert_eq!(attn_v(&m, "Q2_K"), T::Q3_K);
    m.n_head_kv = 2; // gqa 4
    assert_eq!(attn_v(&m, "Q2_K"), T::Q4_K);
    assert_eq!(attn_v(&m, "IQ4_NL"), T::Q5_K);
    m.n_head_kv = 0;
    assert_eq!(m.n_gqa(), 0);
}

#[test]
fn seventy_b_gets_more_bits_for_attn_v() {
    let (mut m, ts) = llama(80);
    assert!(m.is_70b());
    assert!(!llama(79).0.is_70b());
    let p = run(&m, &ts, "Q3_K_M");
    let t = p
        .tensors
        .iter()
        .find(|t| t.name == "blk.40.attn_v.weight")
        .unwrap();
    assert_eq!(t.target, T::Q5_K);
    m.n_head_kv = 8;
    assert!(!m.is_70b(), "65B: no grouped-query attention");
    let q = ModelParams::new("qwen2", 80, 64, 64);
    assert!(q.is_70b());
}

#[test]
fn invalid_inputs_are_errors() {
    let (m, mut ts) = llama(1);
    let o = Options::new(Preset {
        name: "NVFP4",
        ftype: FileType::NVFP4,
        copy: false,
    });
    assert!(matches!(
        plan(&m, &ts, &o),
        Err(PlanError::InvalidFileType(_))
    ));
    ts.push(ts[0].clone());
    assert!(matches!(
        plan(&m, &ts, &Options::new(Preset::parse("Q8_0").unwrap())),
        Err(PlanError::DuplicateTensor(_))
    ));
}

#[test]
fn model_params_from_gguf_metadata() {
    use quantforge_formats::gguf::{Array, Metadata, Value};
    let mut meta = Metadata::new();
    meta.set("general.architecture", Value::from("llama"))
        .unwrap();
    assert!(matches!(
        ModelParams::from_gguf(&meta),
        Err(PlanError::Metadata(_))
    ));
    meta.set("llama.block_count", Value::U32(3)).unwrap();
    meta.set(
        "llama.attention.head_count",
        Value::Array(Array::U32(vec![8, 8, 8])),
    )
    .unwrap();
    meta.set("llama.attention.head_count_kv", Value::U32(2))
        .unwrap();
    meta.set("general.file_type", Value::U32(1)).unwrap();
    let p = ModelParams::from_gguf(&meta).unwrap();
    assert_eq!((p.n_layer, p.n_head, p.n_head_kv, p.n_gqa()), (3, 8, 2, 4));
    assert_eq!(p.file_type, Some(1));
    meta.set(
        "llama.attention.head_count",
        Value::Array(Array::U32(vec![8, 8])),
    )
    .unwrap();
    assert!(ModelParams::from_gguf(&meta).is_err());
    meta.set("llama.attention.head_count", Value::U32(8))
        .unwrap();
    meta.set("llama.block_count", Value::U32(513)).unwrap();
    assert!(ModelParams::from_gguf(&meta).is_err());
    meta.set("llama.block_count", Value::F32(3.0)).unwrap();
    assert!(ModelParams::from_gguf(&meta).is_err());
}
