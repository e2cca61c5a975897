//! The options that change a plan: explicit types, an importance matrix, requantizing.

use super::*;

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
