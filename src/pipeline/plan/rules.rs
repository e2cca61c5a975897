//! The per-tensor rules of llama.cpp's quantizer (`src/llama-quant.cpp`, llama-cpp-sys-2
//! 0.1.161): which tensors may be quantized at all (`tensor_allows_quantization`), the
//! broad category a name falls in (`tensor_get_category`), the shape fallbacks
//! (`tensor_type_fallback`) and which targets need an importance matrix
//! (`tensor_requires_imatrix`). The preset mixes are in [`super::mix`].
//!
//! The rules are transcribed as tables and conditions; the order of the `if` chains is
//! llama.cpp's, because the first rule that matches decides.

use super::PlanError;
use super::ftype::FileType;
use quantforge_kernels::GgmlType;

/// The broad kind of a tensor, from its name (llama.cpp's `tensor_category`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Category {
    /// `token_embd.weight` or `per_layer_token_embd.weight`.
    TokenEmbd,
    /// `attn_q.weight`.
    AttentionQ,
    /// `attn_v.weight`.
    AttentionV,
    /// `attn_k.weight`.
    AttentionK,
    /// `attn_qkv.weight` (fused).
    AttentionQkv,
    /// `attn_kv_b.weight` (MLA).
    AttentionKvB,
    /// `attn_output.weight`.
    AttentionOutput,
    /// Names containing `ffn_up`.
    FfnUp,
    /// Names containing `ffn_gate`.
    FfnGate,
    /// Names containing `ffn_down`.
    FfnDown,
    /// `output.weight`.
    Output,
    /// Anything else.
    Other,
}

impl Category {
    /// The category of a tensor name; the first match in llama.cpp's order wins.
    pub fn of(name: &str) -> Category {
        if name == "output.weight" {
            return Category::Output;
        }
        if is_token_embd(name) {
            return Category::TokenEmbd;
        }
        const BY_SUBSTRING: [(&str, Category); 9] = [
            ("attn_qkv.weight", Category::AttentionQkv),
            ("attn_kv_b.weight", Category::AttentionKvB),
            ("attn_v.weight", Category::AttentionV),
            ("attn_k.weight", Category::AttentionK),
            ("attn_q.weight", Category::AttentionQ),
            ("attn_output.weight", Category::AttentionOutput),
            ("ffn_up", Category::FfnUp),
            ("ffn_gate", Category::FfnGate),
            ("ffn_down", Category::FfnDown),
        ];
        BY_SUBSTRING
            .iter()
            .find(|(needle, _)| name.contains(needle))
            .map_or(Category::Other, |(_, cat)| *cat)
    }

    /// Value-projection-like tensors, which the mixes treat as the most sensitive.
    pub fn is_attn_v(self) -> bool {
        matches!(
            self,
            Category::AttentionV | Category::AttentionQkv | Category::AttentionKvB
        )
    }
}

/// Whether a name is one of the token-embedding tables.
pub fn is_token_embd(name: &str) -> bool {
    name == "token_embd.weight" || name == "per_layer_token_embd.weight"
}

/// Name fragments of 2-D weights llama.cpp never quantizes, with the reason.
const KEEP_IF_CONTAINS: &[(&str, &str)] = &[
    ("_norm.weight", "norm"),
    ("ffn_gate_inp.weight", "expert router"),
    ("ffn_gate_tid2eid.weight", "expert routing table"),
    ("altup", "altup (tiny)"),
    ("laurel", "laurel (tiny)"),
    ("per_layer_model_proj", "per-layer model projection"),
    ("ssm_conv1d", "conv1d"),
    ("shortconv.conv.weight", "conv1d"),
    ("indexer.k_proj.weight", "indexer projection"),
    ("indexer.q_proj.weight", "indexer projection"),
];

/// Like [`KEEP_IF_CONTAINS`], for the `glm5-next` architecture only.
const KEEP_IF_CONTAINS_GLM5_NEXT: &[&str] = &[
    "hc_",
    "indexer.attn_q_b",
    "indexer.attn_k",
    "indexer.proj",
    "indexer_compressor_gate",
    "indexer_compressor_ape",
    "ssm_f_a.weight",
    "ssm_f_b.weight",
    "ssm_g_a.weight",
    "ssm_g_b.weight",
    "ssm_beta.weight",
    "attn_kv_a_mqa.weight",
    "attn_k_b.weight",
    "attn_v_b.weight",
];

/// Applies after the architecture-specific list, like the rest of llama.cpp's checks.
const KEEP_IF_CONTAINS_LATE: &[(&str, &str)] = &[
    ("time_mix_first.weight", "RWKV small weight"),
    ("time_mix_w0.weight", "RWKV small weight"),
    ("time_mix_w1.weight", "RWKV small weight"),
    ("time_mix_w2.weight", "RWKV small weight"),
    ("time_mix_v0.weight", "RWKV small weight"),
    ("time_mix_v1.weight", "RWKV small weight"),
    ("time_mix_v2.weight", "RWKV small weight"),
    ("time_mix_a0.weight", "RWKV small weight"),
    ("time_mix_a1.weight", "RWKV small weight"),
    ("time_mix_a2.weight", "RWKV small weight"),
    ("time_mix_g1.weight", "RWKV small weight"),
    ("time_mix_g2.weight", "RWKV small weight"),
    ("time_mix_decay_w1.weight", "RWKV small weight"),
    ("time_mix_decay_w2.weight", "RWKV small weight"),
    ("time_mix_lerp_fused.weight", "RWKV small weight"),
    ("attn_rel_b.weight", "relative position bias"),
    (".position_embd", "multimodal position embedding"),
    ("sam.pos_embd", "multimodal position embedding"),
    ("sam.neck.", "multimodal tensor"),
    ("sam.net_", "multimodal tensor"),
    (".rel_pos", "multimodal tensor"),
    (".patch_embd", "multimodal tensor"),
    (".patch_merger", "multimodal tensor"),
    ("a.rvq.codebook", "audio codebook"),
    ("mm.a.code_embd", "audio codebook"),
];

/// `ggml_n_dims`: the number of dimensions up to the last one above 1 (at least 1).
pub fn n_dims(ne: &[u64; 4]) -> usize {
    ne.iter().rposition(|&n| n > 1).map_or(1, |i| i + 1)
}

/// Why a tensor stays as it is, or `None` when llama.cpp lets it be quantized
/// (`tensor_allows_quantization`).
pub fn keep_reason(
    name: &str,
    ne: &[u64; 4],
    arch: &str,
    only_copy: bool,
    quantize_output_tensor: bool,
) -> Option<&'static str> {
    if only_copy {
        return Some("COPY");
    }
    if n_dims(ne) < 2 {
        return Some("1-D");
    }
    if !name.ends_with("weight") {
        return Some("not a weight");
    }
    if !quantize_output_tensor && name == "output.weight" {
        return Some("--leave-output-tensor");
    }
    if let Some((_, why)) = KEEP_IF_CONTAINS.iter().find(|(s, _)| name.contains(s)) {
        return Some(why);
    }
    if name == "position_embd.weight" {
        return Some("position embedding");
    }
    if name == "token_types.weight" {
        return Some("token types");
    }
    if arch == "glm5-next" && KEEP_IF_CONTAINS_GLM5_NEXT.iter().any(|s| name.contains(s)) {
        return Some("glm5-next small tensor");
    }
    KEEP_IF_CONTAINS_LATE
        .iter()
        .find(|(s, _)| name.contains(s))
        .map(|(_, why)| *why)
}

/// The type llama.cpp demotes to when a row of `ncols` is not whole blocks of `target`
/// (`tensor_type_fallback`): a 32-block cousin, or f16 when even that does not fit.
/// `Ok(None)` when the target fits.
pub fn fallback(name: &str, ncols: u64, target: GgmlType) -> Result<Option<GgmlType>, PlanError> {
    let block = target.block_size() as u64;
    if ncols.is_multiple_of(block) {
        return Ok(None);
    }
    use GgmlType as T;
    let demoted = match target {
        T::IQ1_S
        | T::IQ1_M
        | T::IQ2_XXS
        | T::IQ2_XS
        | T::IQ2_S
        | T::IQ3_XXS
        | T::IQ3_S
        | T::IQ4_XS => T::IQ4_NL,
        T::Q2_0 | T::Q2_K | T::Q3_K | T::TQ1_0 | T::TQ2_0 => T::Q4_0,
        T::Q4_K => T::Q5_0,
        T::Q5_K => T::Q5_1,
        T::Q6_K => T::Q8_0,
        // Already a 32-block type: nothing smaller to demote to, so f16 below.
        _ if block <= 32 => target,
        _ => {
            return Err(PlanError::NoFallback {
                tensor: name.to_string(),
                ty: target,
                ncols,
            });
        }
    };
    if ncols.is_multiple_of(demoted.block_size() as u64) {
        Ok(Some(demoted))
    } else {
        Ok(Some(T::F16))
    }
}

/// Whether llama.cpp refuses to make `target` without an importance matrix
/// (`tensor_requires_imatrix`).
pub fn requires_imatrix(name: &str, target: GgmlType, ftype: FileType) -> bool {
    if is_token_embd(name) || name == "output.weight" {
        return false;
    }
    match target {
        GgmlType::IQ3_XXS
        | GgmlType::IQ2_XXS
        | GgmlType::IQ2_XS
        | GgmlType::IQ2_S
        | GgmlType::IQ1_M
        | GgmlType::IQ1_S => true,
        // The only K-quant exception: q2_K tensors of a Q2_K_S file.
        GgmlType::Q2_K => ftype == FileType::Q2_K_S,
        _ => false,
    }
}
