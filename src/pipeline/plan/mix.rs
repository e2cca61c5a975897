//! The preset mixes of llama.cpp's quantizer (`llama_tensor_get_type_impl`, llama-cpp-sys-2
//! 0.1.161): the type each quantizable tensor gets from the file type, its category, its
//! layer and the counters kept across tensors. The order of the `if` chains is
//! llama.cpp's, because the first rule that matches decides.

use super::ftype::FileType;
use super::rules::Category;
use super::{ModelParams, PlanError};
use quantforge_kernels::GgmlType;

/// llama.cpp's `use_more_bits`: the first and last eighth of the layers, and every third
/// layer in between, get more bits in the medium mixes.
fn use_more_bits(i_layer: i64, n_layers: i64) -> bool {
    i_layer < n_layers / 8 || i_layer >= 7 * n_layers / 8 || (i_layer - n_layers / 8) % 3 == 2
}

/// Counters llama.cpp keeps across tensors (`quantize_state_impl`): how many
/// value-projection tensors exist and how many of each kind have been seen so far.
#[derive(Debug, Default)]
pub struct Counters {
    /// Number of value-projection-like tensors in the model.
    pub n_attention_wv: i64,
    /// Value-projection-like tensors typed so far by the mix rules.
    pub i_attention_wv: i64,
    /// `ffn_down` tensors typed so far.
    pub i_ffn_down: i64,
    /// `ffn_gate` tensors typed so far.
    pub i_ffn_gate: i64,
    /// `ffn_up` tensors typed so far.
    pub i_ffn_up: i64,
    /// Whether the model has no `output.weight`, so the token embedding doubles as it.
    pub tied_embeddings: bool,
}

/// What the mix rules see of the run: the model, the file type, and the options that
/// change a mix.
pub struct MixContext<'a> {
    /// The model's hyperparameters and architecture.
    pub model: &'a ModelParams,
    /// The target file type.
    pub ftype: FileType,
    /// `--output-tensor-type`.
    pub output_tensor_type: Option<GgmlType>,
    /// `--token-embedding-type`.
    pub token_embedding_type: Option<GgmlType>,
    /// Whether an importance matrix was given.
    pub has_imatrix: bool,
}

impl MixContext<'_> {
    /// The layer of a per-layer tensor for the layer-dependent rules: the running count
    /// for dense models, the `blk.N.` in the name for MoE models, whose expert tensors are
    /// not stored in layer order (llama.cpp's `layer_info`).
    fn layer(&self, counter: i64, name: &str) -> Result<LayerPos, PlanError> {
        let n_layer = i64::from(self.model.n_layer);
        if self.model.n_expert <= 1 {
            return Ok(LayerPos {
                i_layer: counter,
                n_layer,
            });
        }
        let layer = super::order::layer_of(name).ok_or_else(|| PlanError::NoLayer {
            tensor: name.to_string(),
        })?;
        if layer < 0 || layer >= n_layer {
            return Err(PlanError::BadLayer {
                tensor: name.to_string(),
                layer,
                n_layer: self.model.n_layer,
            });
        }
        Ok(LayerPos {
            i_layer: layer,
            n_layer,
        })
    }
}

/// Where a per-layer tensor is for the layer-dependent rules: its layer and how many the
/// model has.
struct LayerPos {
    i_layer: i64,
    n_layer: i64,
}

/// The type the preset mix gives a quantizable tensor that starts as `new_type` (the file
/// type's default), before shape fallbacks (`llama_tensor_get_type_impl`). Updates the
/// counters exactly where llama.cpp does.
// One branch per llama.cpp rule, in its order, even where two neighbours agree: the
// chain is easier to check against the original that way.
#[allow(clippy::if_same_then_else)]
pub fn mix_type(
    cx: &MixContext<'_>,
    qs: &mut Counters,
    name: &str,
    ne: &[u64; 4],
    category: Category,
    mut new_type: GgmlType,
) -> Result<GgmlType, PlanError> {
    use Category as C;
    use FileType as F;
    use GgmlType as T;
    let ftype = cx.ftype;
    let model = cx.model;
    let arch = model.arch.as_str();
    let falcon = arch == "falcon";
    let n_expert = model.n_expert;
    let n_gqa = model.n_gqa();
    let is_iq2_s_or_m = matches!(ftype, F::IQ2_S | F::IQ2_M);

    // glm5-next keeps its query and nextn projections at q8_0 or better.
    if arch == "glm5-next"
        && ["attn_q_a", "attn_q_b", "nextn.eh_proj"]
            .iter()
            .any(|s| name.contains(s))
        && !matches!(new_type, T::F32 | T::BF16 | T::F16)
    {
        return Ok(T::Q8_0);
    }

    if category == C::Output || (qs.tied_embeddings && category == C::TokenEmbd) {
        // The output projection (or the token embedding standing in for it).
        if let Some(ty) = cx.output_tensor_type {
            new_type = ty;
        } else if ftype == F::MXFP4_MOE
            || falcon
            || !ne[0].is_multiple_of(new_type.block_size() as u64)
        {
            new_type = T::Q8_0;
        } else if matches!(
            ftype,
            F::IQ2_XXS | F::IQ2_XS | F::IQ3_XXS | F::IQ1_S | F::IQ2_S | F::IQ2_M | F::IQ1_M
        ) {
            new_type = T::Q5_K;
        } else if new_type != T::Q8_0 {
            new_type = T::Q6_K;
        }
    } else if ftype == F::MXFP4_MOE {
        // Expert tensors (3-D) mxfp4, everything else q8_0; bailingmoe3's MLA projections
        // are 3-D too, so there only the FFN roles count as experts.
        let expert_role = matches!(category, C::FfnUp | C::FfnGate | C::FfnDown);
        new_type = if ne[2] > 1 && (arch != "bailingmoe3" || expert_role) {
            T::MXFP4
        } else {
            T::Q8_0
        };
    } else if category == C::TokenEmbd {
        if let Some(ty) = cx.token_embedding_type {
            new_type = ty;
        } else if matches!(ftype, F::IQ2_XXS | F::IQ2_XS | F::IQ1_S | F::IQ1_M) {
            new_type = T::Q2_K;
        } else if matches!(ftype, F::IQ2_S | F::IQ2_M | F::IQ3_XXS) {
            new_type = T::IQ3_S;
        } else if matches!(ftype, F::TQ1_0 | F::TQ2_0 | F::Q2_0) {
            new_type = T::Q4_K;
        }
    } else if matches!(
        ftype,
        F::IQ2_XXS | F::IQ2_XS | F::IQ1_S | F::IQ2_S | F::IQ2_M | F::IQ1_M
    ) {
        let low = if is_iq2_s_or_m { T::IQ3_S } else { T::Q2_K };
        if category.is_attn_v() {
            new_type = if n_gqa >= 4 || n_expert >= 4 {
                T::Q4_K
            } else {
                low
            };
            qs.i_attention_wv += 1;
        } else if n_expert == 8 && category == C::AttentionK {
            new_type = T::Q4_K;
        } else if category == C::FfnDown {
            if qs.i_ffn_down < i64::from(model.n_layer) / 8 {
                new_type = low;
            }
            qs.i_ffn_down += 1;
        } else if category == C::AttentionOutput {
            if n_expert == 8 {
                new_type = T::Q5_K;
            } else if matches!(ftype, F::IQ1_S | F::IQ1_M) {
                new_type = T::IQ2_XXS;
            } else if is_iq2_s_or_m {
                new_type = T::IQ3_S;
            }
        }
    } else if category.is_attn_v() {
        if ftype == F::Q2_K {
            new_type = if n_gqa >= 4 { T::Q4_K } else { T::Q3_K };
        } else if ftype == F::Q2_K_S && n_gqa >= 4 {
            new_type = T::Q4_K;
        } else if ftype == F::IQ3_XXS {
            new_type = if n_gqa >= 4 {
                T::Q4_K
            } else if !cx.has_imatrix {
                T::IQ3_S
            } else {
                T::IQ3_XXS
            };
        } else if matches!(ftype, F::IQ3_XS | F::IQ3_S) && n_gqa >= 4 {
            new_type = T::Q4_K;
        } else if ftype == F::IQ3_M {
            new_type = T::Q4_K;
        } else if ftype == F::Q3_K_M {
            new_type = if qs.i_attention_wv < 2 {
                T::Q5_K
            } else {
                T::Q4_K
            };
        } else if ftype == F::Q3_K_L {
            new_type = T::Q5_K;
        } else if matches!(ftype, F::IQ4_NL | F::IQ4_XS) && n_gqa >= 4 {
            new_type = T::Q5_K;
        } else if matches!(ftype, F::Q4_K_M | F::Q5_K_M)
            && use_more_bits(qs.i_attention_wv, qs.n_attention_wv)
        {
            new_type = T::Q6_K;
        } else if ftype == F::Q4_K_S && qs.i_attention_wv < 4 {
            new_type = T::Q5_K;
        }
        // 70B models share one attn_v among 8 heads: it is 8x smaller than attn_q, so
        // more bits cost little.
        if model.is_70b() && matches!(new_type, T::Q3_K | T::Q4_K) {
            new_type = T::Q5_K;
        }
        if n_expert == 8 {
            new_type = T::Q8_0;
        }
        qs.i_attention_wv += 1;
    } else if category == C::AttentionK {
        if n_expert == 8 {
            new_type = T::Q8_0;
        } else if ftype == F::IQ3_XS {
            new_type = T::IQ3_XXS;
        } else if ftype == F::IQ3_XXS {
            new_type = T::IQ2_S;
        }
    } else if category == C::AttentionQ {
        if ftype == F::IQ3_XS {
            new_type = T::IQ3_XXS;
        } else if ftype == F::IQ3_XXS {
            new_type = T::IQ2_S;
        }
    } else if category == C::FfnDown {
        let LayerPos { i_layer, n_layer } = cx.layer(qs.i_ffn_down, name)?;
        if ftype == F::Q2_K {
            new_type = T::Q3_K;
        } else if ftype == F::Q2_K_S {
            if i_layer < n_layer / 8 {
                new_type = T::Q4_K;
            }
        } else if ftype == F::IQ3_XXS && !cx.has_imatrix {
            new_type = if i_layer < n_layer / 8 {
                T::Q4_K
            } else {
                T::Q3_K
            };
        } else if ftype == F::Q3_K_M {
            new_type = if i_layer < n_layer / 16 {
                T::Q5_K
            } else if !falcon || use_more_bits(i_layer, n_layer) {
                T::Q4_K
            } else {
                T::Q3_K
            };
        } else if ftype == F::IQ3_M
            && (i_layer < n_layer / 8 || (n_expert == 8 && use_more_bits(i_layer, n_layer)))
        {
            new_type = T::Q4_K;
        } else if ftype == F::Q3_K_L {
            new_type = if falcon { T::Q4_K } else { T::Q5_K };
        } else if ftype == F::Q4_K_M {
            if falcon {
                new_type = if i_layer < n_layer / 16 {
                    T::Q6_K
                } else if use_more_bits(i_layer, n_layer) {
                    T::Q5_K
                } else {
                    T::Q4_K
                };
            } else if use_more_bits(i_layer, n_layer) {
                new_type = T::Q6_K;
            }
        } else if i_layer < n_layer / 8 && matches!(ftype, F::IQ4_NL | F::IQ4_XS) && !cx.has_imatrix
        {
            new_type = T::Q5_K;
        } else if ftype == F::Q5_K_M && use_more_bits(i_layer, n_layer) {
            new_type = T::Q6_K;
        } else if ftype == F::Q4_K_S && !falcon && i_layer < n_layer / 8 {
            new_type = T::Q5_K;
        } else if matches!(ftype, F::Q4_0 | F::Q5_0) && cx.has_imatrix && i_layer < n_layer / 8 {
            // Guards the first ffn_down layers, which go wrong even with an imatrix; only
            // with one, so that quantizing without stays what it always was.
            new_type = if ftype == F::Q4_0 { T::Q4_1 } else { T::Q5_1 };
        }
        qs.i_ffn_down += 1;
    } else if category == C::AttentionOutput {
        if !falcon {
            if n_expert == 8 {
                if matches!(
                    ftype,
                    F::Q2_K
                        | F::IQ3_XS
                        | F::IQ3_XXS
                        | F::Q3_K_S
                        | F::Q3_K_M
                        | F::IQ4_NL
                        | F::Q4_K_S
                        | F::Q4_K_M
                        | F::IQ3_S
                        | F::IQ3_M
                        | F::IQ4_XS
                ) {
                    new_type = T::Q5_K;
                }
            } else if ftype == F::Q2_K {
                new_type = T::Q3_K;
            } else if ftype == F::IQ3_XXS {
                new_type = T::IQ3_S;
            } else if ftype == F::Q3_K_M {
                new_type = T::Q4_K;
            } else if ftype == F::Q3_K_L {
                new_type = T::Q5_K;
            } else if ftype == F::IQ3_M {
                new_type = T::Q4_K;
            }
        } else if ftype == F::Q3_K_L {
            new_type = T::Q4_K;
        }
    } else if category == C::AttentionQkv {
        if matches!(ftype, F::Q3_K_M | F::Q3_K_L | F::IQ3_M) {
            new_type = T::Q4_K;
        } else if ftype == F::Q4_K_M {
            new_type = T::Q5_K;
        } else if ftype == F::Q5_K_M {
            new_type = T::Q6_K;
        }
    } else if category == C::FfnGate {
        let LayerPos { i_layer, n_layer } = cx.layer(qs.i_ffn_gate, name)?;
        if ftype == F::IQ3_XS && i_layer >= n_layer / 8 && i_layer < 7 * n_layer / 8 {
            new_type = T::IQ3_XXS;
        }
        qs.i_ffn_gate += 1;
    } else if category == C::FfnUp {
        let LayerPos { i_layer, n_layer } = cx.layer(qs.i_ffn_up, name)?;
        if ftype == F::IQ3_XS && i_layer >= n_layer / 8 && i_layer < 7 * n_layer / 8 {
            new_type = T::IQ3_XXS;
        }
        qs.i_ffn_up += 1;
    }
    Ok(new_type)
}
