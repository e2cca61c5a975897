//! q6_K: 256 values per super-block in 16 sub-blocks of 16, 6-bit codes meaning
//! `d*sc*(q-32)` with signed 8-bit sub-block scales `sc`; the low 4 bits of each code go to
//! `ql`, the high 2 to `qh`.
//! Mirrors `quantize_row_q6_K_ref`, `quantize_row_q6_K_impl` (the path `quantize_q6_K`
//! takes with an importance matrix) and `dequantize_row_q6_K` of ggml 0.26.0.

use super::kquant::{GROUP_MAX_EPS, make_qx_quants, requantize_symmetric};
use crate::blocks::{BlockQ6K, QK_K};
use crate::num::{F16Le, nearest_int};
use bytemuck::Zeroable;

/// Sub-blocks per super-block.
const SUB: usize = QK_K / 16;

/// One row as `quantize_q6_K` does it: `quantize_row_q6_K_ref` without an importance
/// matrix, `quantize_row_q6_K_impl` with one (`imatrix` holds one weight per column).
/// The two differ only in the weights of the per-sub-block `make_qx_quants`: `x²`, or the
/// importance weights as they are.
pub fn quantize_row(x: &[f32], imatrix: Option<&[f32]>, y: &mut [BlockQ6K]) {
    debug_assert_eq!(x.len(), y.len() * QK_K);
    for (i, (xb, block)) in x.chunks_exact(QK_K).zip(y.iter_mut()).enumerate() {
        let qw = imatrix.map(|w| &w[QK_K * i..QK_K * (i + 1)]);
        quantize_block(xb, qw, block);
    }
}

/// One super-block of either path.
fn quantize_block(x: &[f32], qw: Option<&[f32]>, block: &mut BlockQ6K) {
    let mut l = [0i8; QK_K];
    let mut scales = [0.0f32; SUB];
    for (j, (xs, ls)) in x.chunks_exact(16).zip(l.chunks_exact_mut(16)).enumerate() {
        let ws = qw.map(|w| &w[16 * j..16 * (j + 1)]);
        scales[j] = make_qx_quants(16, 32, xs, ls, 1, ws);
    }
    let mut max_abs_scale = 0.0f32;
    let mut max_scale = 0.0f32;
    for &s in &scales {
        if s.abs() > max_abs_scale {
            max_abs_scale = s.abs();
            max_scale = s;
        }
    }
    if max_abs_scale < GROUP_MAX_EPS {
        *block = BlockQ6K::zeroed();
        return;
    }
    let iscale = -128.0 / max_scale;
    block.d = F16Le::from_f32(1.0 / iscale);
    for (sc, &s) in block.scales.iter_mut().zip(&scales) {
        *sc = nearest_int(iscale * s).min(127) as i8;
    }
    let d = block.d.to_f32();
    for ((xs, ls), &sc) in x
        .chunks_exact(16)
        .zip(l.chunks_exact_mut(16))
        .zip(&block.scales)
    {
        requantize_symmetric(xs, d * sc as f32, 32, ls);
    }
    pack_codes(&l, block);
}

/// Packs 256 codes (`0..64`) into `ql` and `qh` as q6_K lays them out.
pub(crate) fn pack_codes(l: &[i8; QK_K], block: &mut BlockQ6K) {
    // Each 128 values fill 64 bytes of `ql` and 32 of `qh`: value `32*k + i` of the group
    // has its low nibble in `ql[i + 32*(k%2)]` (high nibble when k >= 2) and its high bits
    // in `qh[i]` at bit `2*k`.
    for ((lg, ql), qh) in l
        .chunks_exact(128)
        .zip(block.ql.chunks_exact_mut(64))
        .zip(block.qh.chunks_exact_mut(32))
    {
        let lg: [u8; 128] = std::array::from_fn(|i| lg[i] as u8);
        for i in 0..32 {
            let (q1, q2, q3, q4) = (lg[i], lg[i + 32], lg[i + 64], lg[i + 96]);
            ql[i] = (q1 & 0xF) | ((q3 & 0xF) << 4);
            ql[i + 32] = (q2 & 0xF) | ((q4 & 0xF) << 4);
            qh[i] = (q1 >> 4) | ((q2 >> 4) << 2) | ((q3 >> 4) << 4) | ((q4 >> 4) << 6);
        }
    }
}

/// `dequantize_row_q6_K`: `y = (d*sc)*(q-32)`.
#[inline(always)]
pub fn dequantize_row(x: &[BlockQ6K], y: &mut [f32]) {
    debug_assert_eq!(y.len(), x.len() * QK_K);
    for (block, yb) in x.iter().zip(y.chunks_exact_mut(QK_K)) {
        let d = block.d.to_f32();
        for (((yg, ql), qh), sc) in yb
            .chunks_exact_mut(128)
            .zip(block.ql.chunks_exact(64))
            .zip(block.qh.chunks_exact(32))
            .zip(block.scales.chunks_exact(8))
        {
            for i in 0..32 {
                let is = i / 16;
                let h = qh[i];
                let q1 = ((ql[i] & 0xF) | (h & 3) << 4) as i32 - 32;
                let q2 = ((ql[i + 32] & 0xF) | ((h >> 2) & 3) << 4) as i32 - 32;
                let q3 = ((ql[i] >> 4) | ((h >> 4) & 3) << 4) as i32 - 32;
                let q4 = ((ql[i + 32] >> 4) | ((h >> 6) & 3) << 4) as i32 - 32;
                yg[i] = d * sc[is] as f32 * q1 as f32;
                yg[i + 32] = d * sc[is + 2] as f32 * q2 as f32;
                yg[i + 64] = d * sc[is + 4] as f32 * q3 as f32;
                yg[i + 96] = d * sc[is + 6] as f32 * q4 as f32;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scalar::testing;

    fn round_trip(x: &[f32], w: Option<&[f32]>) -> Vec<f32> {
        testing::round_trip(quantize_row, dequantize_row, x, w)
    }

    #[test]
    fn round_trip_error_is_bounded() {
        let x = testing::wave(4 * QK_K, 13);
        let w: Vec<f32> = testing::wave(x.len(), 2)
            .iter()
            .map(|v| v.abs() + 0.1)
            .collect();
        for y in [round_trip(&x, None), round_trip(&x, Some(&w))] {
            let rmse = testing::rmse(&x, &y);
            // 6 bits over a range of 2: a step of ~0.032.
            assert!(rmse < 0.012, "rmse {rmse}");
        }
    }

    #[test]
    fn zero_row_gives_zero_block() {
        let x = vec![0.0f32; QK_K];
        let mut blocks = [BlockQ6K::zeroed()];
        blocks[0].ql[3] = 9;
        quantize_row(&x, None, &mut blocks);
        assert_eq!(blocks[0], BlockQ6K::zeroed());
        assert!(round_trip(&x, Some(&[1.0; QK_K])).iter().all(|&v| v == 0.0));
    }

    #[test]
    fn constant_row_is_nearly_exact() {
        let x = vec![0.3f32; QK_K];
        for v in round_trip(&x, None) {
            assert!((v - 0.3).abs() < 1e-3, "{v}");
        }
    }

    #[test]
    fn dequantize_hand_built_block() {
        let mut b = BlockQ6K::zeroed();
        b.d = F16Le::from_f32(0.5);
        b.scales[0] = -3;
        b.scales[13] = 7; // sub-block 13: group 1, values 64..96 of it, second half
        b.ql[0] = 0x0F; // element 0: low nibble 15
        b.qh[0] = 0b10; // element 0: high bits 2 -> q = 47 - 32
        b.ql[64 + 16] = 0x50; // group 1, element 128 + 64 + 16: low nibble 5
        let mut y = [0.0f32; QK_K];
        dequantize_row(&[b], &mut y);
        assert_eq!(y[0], 0.5 * -3.0 * 15.0);
        assert_eq!(y[208], 0.5 * 7.0 * (5.0 - 32.0));
    }
}
