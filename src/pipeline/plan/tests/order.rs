//! Output order, layer parsing and the tensors every preset keeps.

use super::*;

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
