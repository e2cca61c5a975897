//! FP8 checkpoints (`quantization_config.quant_method` `fp8`): each weight stored as
//! `F8_E4M3` (or `F8_E5M2`) beside a `<weight>_scale_inv` tensor, dequantized as the
//! converter's `dequant_model` does, `weight.float() * scale` with the scale widened to
//! f32 and spread over the weight by `dequant_simple`: each scale axis repeated
//! `weight_block_size` times (the last axes), cut to the weight's extent, trailing axes
//! added until the ranks agree, then broadcast. One f32 product per element, as torch
//! computes it.

use crate::error::{Error, Result, bail};
use quantforge_formats::safetensors::{self as st, Dtype, TensorView};

/// How one axis of the weight reads the scale.
#[derive(Clone, Debug)]
struct Axis {
    /// Elements of the scale one step along this axis skips (0: broadcast).
    stride: usize,
    /// Weight elements along this axis per scale element (the block size).
    rep: usize,
    /// The weight's extent along this axis.
    len: usize,
}

/// A weight's scale, spread over the weight as `dequant_simple` spreads it.
#[derive(Debug)]
pub struct Scale {
    values: Vec<f32>,
    axes: Vec<Axis>,
}

impl Scale {
    /// The scale `scale` for weight `weight`, with the checkpoint's `weight_block_size`;
    /// an error (naming both tensors) where torch would fail to broadcast it.
    pub fn new(
        weight: &TensorView<'_>,
        scale: &TensorView<'_>,
        block: Option<&[usize]>,
    ) -> Result<Scale> {
        let fail = |why: &str| {
            Error::invalid(format!(
                "tensor `{}` {:?} cannot scale `{}` {:?}: {why}",
                scale.name(),
                scale.shape(),
                weight.name(),
                weight.shape()
            ))
        };
        let w = weight.shape();
        let s = scale.shape();
        let mut values = vec![0f32; s.iter().product()];
        st::decode_f32_into(scale.name(), scale.dtype(), scale.data(), &mut values)
            .map_err(|e| fail(&e.to_string()))?;
        if s.len() > w.len() {
            return Err(fail("it has more axes than the weight"));
        }
        let mut rep = vec![1usize; s.len()];
        if let Some(block) = block {
            if block.len() > s.len() {
                return Err(fail("weight_block_size has more axes than the scale"));
            }
            let offset = s.len() - block.len();
            for (i, &b) in block.iter().enumerate() {
                rep[offset + i] = b.max(1);
            }
        }
        let mut axes = Vec::with_capacity(w.len());
        for (j, &len) in w.iter().enumerate() {
            let (n, r, stride) = match s.get(j) {
                Some(&n) => (n, rep[j], s[j + 1..].iter().product::<usize>()),
                None => (1, 1, 0),
            };
            let spread = n.saturating_mul(r).min(len);
            let axis = if spread == len {
                Axis {
                    stride,
                    rep: r,
                    len,
                }
            } else if spread == 1 {
                Axis {
                    stride: 0,
                    rep: 1,
                    len,
                }
            } else {
                return Err(fail(&format!(
                    "axis {j} spreads to {spread} elements, not {len}"
                )));
            };
            axes.push(axis);
        }
        Ok(Scale { values, axes })
    }

    /// Multiplies row `row` of the weight (its outer axes flattened), widened to f32 in
    /// `x`, by its scale.
    pub fn apply_row(&self, row: usize, x: &mut [f32]) {
        let Some((last, outer)) = self.axes.split_last() else {
            if let Some(&s) = self.values.first() {
                x.iter_mut().for_each(|v| *v *= s);
            }
            return;
        };
        let mut base = 0;
        let mut rest = row;
        for a in outer.iter().rev() {
            let i = rest % a.len.max(1);
            rest /= a.len.max(1);
            base += i / a.rep * a.stride;
        }
        if last.stride == 0 {
            let s = self.values[base];
            x.iter_mut().for_each(|v| *v *= s);
            return;
        }
        for (b, block) in x.chunks_mut(last.rep).enumerate() {
            let s = self.values[base + b * last.stride];
            block.iter_mut().for_each(|v| *v *= s);
        }
    }
}

/// What an FP8 checkpoint's `quantization_config` says.
pub struct Fp8 {
    /// `weight_block_size`, when given.
    pub block: Option<Vec<usize>>,
}

impl Fp8 {
    /// The checkpoint's quantization from `quantization_config`: `None` for none, an
    /// FP8 description for `fp8`, and an error naming any other method (the converter's
    /// GPTQ, bitnet, compressed-tensors, ModelOpt and MXFP4 readings are not supported).
    pub fn from_config(config: Option<&serde_json::Value>) -> Result<Option<Fp8>> {
        let Some(q) = config.and_then(|c| c.as_object()) else {
            return Ok(None);
        };
        match q.get("quant_method").and_then(|m| m.as_str()) {
            Some("fp8") => {}
            Some(other) => bail!(
                "config.json: quantization_config.quant_method `{other}` is not supported \
                 (quantforge reads fp8 checkpoints and unquantized ones)"
            ),
            None => return Ok(None),
        }
        let block = match q.get("weight_block_size") {
            None | Some(serde_json::Value::Null) => None,
            Some(serde_json::Value::Array(list)) => Some(
                list.iter()
                    .map(|v| v.as_u64().and_then(|n| usize::try_from(n).ok()))
                    .collect::<Option<Vec<usize>>>()
                    .filter(|b| b.iter().all(|&n| n > 0))
                    .ok_or_else(|| {
                        Error::invalid(format!(
                            "config.json: quantization_config.weight_block_size is {}, not a \
                             list of block sizes",
                            serde_json::Value::Array(list.clone())
                        ))
                    })?,
            ),
            Some(v) => bail!(
                "config.json: quantization_config.weight_block_size is {v}, not a list of \
                 block sizes"
            ),
        };
        Ok(Some(Fp8 { block }))
    }

    /// The weight a tensor named `name` scales (`<weight>_scale_inv`), if it is a scale.
    pub fn scaled_weight(name: &str) -> Option<&str> {
        name.strip_suffix("_scale_inv")
    }

    /// Whether the converter drops tensor `name` of an FP8 checkpoint unread (activation
    /// scales).
    pub fn unused(name: &str) -> bool {
        name.ends_with(".activation_scale")
            || name.ends_with("_activation_scale")
            || name.ends_with(".qscale_act")
    }
}

/// Whether `d` is an FP8 element type the converter widens.
pub fn is_fp8(d: Dtype) -> bool {
    matches!(d, Dtype::F8E4M3 | Dtype::F8E5M2)
}
