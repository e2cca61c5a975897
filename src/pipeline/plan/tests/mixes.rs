//! The preset mixes and their shape fallbacks, on llama- and gemma-shaped models.

use super::*;

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
