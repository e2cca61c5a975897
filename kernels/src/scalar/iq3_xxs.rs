//! iq3_xxs: 256 weights per super-block, 3.0625 bits each. Groups of 4 weights are one
//! point of [`IQ3XXS_GRID`]; 8 weights share 7 stored sign bits; each sub-block of 32 has
//! a 4-bit scale. Mirrors ggml's `quantize_iq3_xxs` and `dequantize_row_iq3_xxs`, and
//! holds the sub-block search iq3_xxs and [`super::iq3_s`] share: ggml's
//! `quantize_row_iq3_xxs_impl`, its near-copy `quantize_row_iq3_s_impl` (the differences
//! are the fields of [`Iq3Rules`]) and `iq3_find_best_neighbour`.

use super::iq_grid::{IQ3XXS, IqGrid, IqSearch, IqWrite, MAX_TRIALS, Q_IQ3, Serial, Trials};
use super::tables::{IQ3XXS_GRID, KSIGNS_IQ2XS};
use crate::blocks::{BlockIq3Xxs, QK_K};
use crate::num::{F16Le, nearest_int};

/// Levels per coordinate of the iq3 grids (ggml's `kMaxQ`): a coordinate is `2l + 1`.
const K_MAX_Q: i32 = 8;

/// How ggml's iq3_xxs and iq3_s searches of a sub-block of 32 differ.
pub(super) struct Iq3Rules {
    /// The grid and its search data.
    pub grid: &'static IqGrid<4>,
    /// The scale search tries `id = (15 + 0.2 * is) / max` for `is` in `-steps..=steps`.
    pub steps: i32,
    /// iq3_xxs stores 7 sign bits per 8 weights: an odd count of negatives is made even by
    /// flipping the weight with the least `w * x * x` (the 8th sign is the parity).
    pub even_signs: bool,
    /// A sub-block whose largest `|x|` (after that flip) is below this is stored as zero.
    pub zero_below: f32,
    /// What the groups count as before any candidate scale wins: if none ever does, the
    /// refinement runs only when some group is marked off the grid.
    pub on_grid_before_search: bool,
    /// Whether the refinement also re-quantizes the groups that were on the grid.
    pub refine_on_grid: bool,
}

/// `quantize_row_iq3_xxs_impl` with `grid_size = 256`.
pub(super) static IQ3XXS_RULES: Iq3Rules = Iq3Rules {
    grid: &IQ3XXS,
    steps: 15,
    even_signs: true,
    // ggml's GROUP_MAX_EPS_IQ3_XXS.
    zero_below: 1e-8,
    on_grid_before_search: true,
    refine_on_grid: false,
};

/// One sub-block of 32 as the search leaves it.
#[derive(Clone, Copy, Debug)]
pub(super) struct Iq3SubBlock {
    /// The sub-block's scale (`>= 0` for every input ggml accepts).
    pub scale: f32,
    /// The grid index of each group of 4 weights.
    pub grid: [u16; 8],
    /// Per group of 8 weights, bit `i` set when weight `i` is stored negative (7 bits for
    /// iq3_xxs).
    pub signs: [u8; 4],
}

/// One super-block `xbl` of 256 weights searched sub-block by sub-block, with the
/// importance weights `qw` of the same span if any (`None` for a sub-block stored as
/// zero). The weights are `qw * sqrt(sigma2 + x^2)`, `sigma2 = 2 * mean(x^2)`, or `x^2`
/// without an importance matrix.
#[inline(always)]
pub(super) fn search_super_block<S: IqSearch>(
    rules: &Iq3Rules,
    xbl: &[f32],
    qw: Option<&[f32]>,
) -> [Option<Iq3SubBlock>; QK_K / 32] {
    let mut sumx2 = 0.0f32;
    for &v in xbl {
        sumx2 += v * v;
    }
    let sigma2 = 2.0 * sumx2 / QK_K as f32;
    // A loop, not `array::from_fn`: the search must inline into a SIMD entry point.
    let mut subs = [None; QK_K / 32];
    for (ib, sub) in subs.iter_mut().enumerate() {
        let xb = &xbl[32 * ib..32 * (ib + 1)];
        let mut weight = [0.0f32; 32];
        match qw {
            Some(qw) => {
                let qw = &qw[32 * ib..32 * (ib + 1)];
                for i in 0..32 {
                    weight[i] = qw[i] * (sigma2 + xb[i] * xb[i]).sqrt();
                }
            }
            None => {
                for i in 0..32 {
                    weight[i] = xb[i] * xb[i];
                }
            }
        }
        *sub = search_sub_block::<S>(rules, xb, &weight);
    }
    subs
}

/// The super-block scale `d = max_scale / 31` (before ggml's fudge factor) and each
/// sub-block's 4-bit code `nearest_int(0.5 * (scale / d - 1))` (a zero sub-block counts
/// as scale 0), or `None` when every scale is zero.
pub(super) fn scale_codes(subs: &[Option<Iq3SubBlock>; QK_K / 32]) -> Option<(f32, [u8; 8])> {
    let mut max_scale = 0.0f32;
    for sub in subs.iter().flatten() {
        max_scale = c_max(max_scale, sub.scale);
    }
    if max_scale == 0.0 {
        return None;
    }
    let d = max_scale / 31.0;
    let id = 1.0 / d;
    let codes = std::array::from_fn(|ib| {
        let scale = subs[ib].map_or(0.0, |s| s.scale);
        nearest_int(0.5 * (id * scale - 1.0)).clamp(0, 15) as u8
    });
    Some((d, codes))
}

/// C's `MAX(a, b)` on floats: `a > b ? a : b`.
#[inline(always)]
fn c_max(a: f32, b: f32) -> f32 {
    if a > b { a } else { b }
}

/// The search of one sub-block `xb` of 32 weights with weights `weight`: the signs
/// split off, the best of `2 * steps + 1` candidate scales (each group of 4 rounded to
/// its lattice point, or to the best listed grid neighbour when that is off the grid),
/// then the groups re-quantized at the winning scale and the scale refitted.
#[inline(always)]
fn search_sub_block<S: IqSearch>(
    rules: &Iq3Rules,
    xb: &[f32],
    weight: &[f32; 32],
) -> Option<Iq3SubBlock> {
    let grid = rules.grid;
    let waux: [f32; 32] = std::array::from_fn(|i| weight[i].sqrt());
    let mut xval = [0.0f32; 32];
    let mut signs = [0u8; 4];
    for (k, s) in signs.iter_mut().enumerate() {
        let mut nflip = 0;
        for i in 8 * k..8 * k + 8 {
            if xb[i] >= 0.0 {
                xval[i] = xb[i];
            } else {
                xval[i] = -xb[i];
                nflip += 1;
                *s |= 1 << (i - 8 * k);
            }
        }
        if rules.even_signs && nflip % 2 == 1 {
            let mut imin = 8 * k;
            let mut min = weight[imin] * xb[imin] * xb[imin];
            for i in 8 * k + 1..8 * k + 8 {
                let ax = weight[i] * xb[i] * xb[i];
                if ax < min {
                    min = ax;
                    imin = i;
                }
            }
            // The weight is stored with the wrong sign, so its xval is negative.
            xval[imin] = -xval[imin];
            *s ^= 1 << (imin - 8 * k);
        }
        if rules.even_signs {
            *s &= 127;
        }
    }
    let max = xval[1..].iter().fold(xval[0], |m, &v| c_max(m, v));
    if max < rules.zero_below {
        return None;
    }

    let mut best = 0.0f32;
    let mut scale = max / (2 * K_MAX_Q - 1) as f32;
    // Grid point 0 is levels 0, what ggml's zeroed L holds until a candidate wins.
    let mut chosen = [0u16; 8];
    let mut on_grid = [rules.on_grid_before_search; 8];
    let mut ids = [0.0f32; MAX_TRIALS];
    let n = (2 * rules.steps + 1) as usize;
    for (id, is) in ids.iter_mut().zip(-rules.steps..=rules.steps) {
        *id = ((2 * K_MAX_Q - 1) as f32 + is as f32 * 0.2) / max;
    }
    let mut trials = Trials::<8>::new();
    S::trials(grid, &Q_IQ3, &xval, weight, &waux, &ids[..n], &mut trials);
    for (t, &(sumqx, sumq2)) in trials.sums[..n].iter().enumerate() {
        if sumq2 > 0.0 && sumqx * sumqx > best * sumq2 {
            scale = sumqx / sumq2;
            best = scale * sumqx;
            chosen = trials.index[t];
            on_grid = trials.on_grid[t];
        }
    }

    if on_grid.contains(&false) && scale > 0.0 {
        let id = 1.0 / scale;
        for k in 0..8 {
            if on_grid[k] && !rules.refine_on_grid {
                continue;
            }
            let g = 4 * k..4 * k + 4;
            chosen[k] = grid
                .snap::<S>(&xval[g.clone()], &waux[g], id, scale, &Q_IQ3)
                .0;
        }
        let (sumqx, sumq2) = grid.fit(weight, &xval, &chosen);
        if sumq2 > 0.0 {
            scale = sumqx / sumq2;
        }
    }
    if scale < 0.0 {
        // ggml: "should never happen" (it can, through iq3_xxs's flipped weight); the
        // scale is stored unsigned, so every sign is flipped instead.
        scale = -scale;
        let mask = if rules.even_signs { 127 } else { 255 };
        for s in &mut signs {
            *s = !*s & mask;
        }
    }
    Some(Iq3SubBlock {
        scale,
        grid: chosen,
        signs,
    })
}

/// One row as `quantize_iq3_xxs` does it, with or without importance weights (ggml's
/// `quantize_row_iq3_xxs_ref` is the same without them).
pub fn quantize_row(x: &[f32], imatrix: Option<&[f32]>, y: &mut [BlockIq3Xxs]) {
    quantize_row_with::<Serial>(x, imatrix, y)
}

/// [`quantize_row`] with the neighbour search `S`.
#[inline(always)]
pub(crate) fn quantize_row_with<S: IqSearch>(
    x: &[f32],
    imatrix: Option<&[f32]>,
    y: &mut [BlockIq3Xxs],
) {
    debug_assert_eq!(x.len(), y.len() * QK_K);
    for (ibl, (xbl, block)) in x.chunks_exact(QK_K).zip(y.iter_mut()).enumerate() {
        let qw = imatrix.map(|w| &w[ibl * QK_K..(ibl + 1) * QK_K]);
        let subs = search_super_block::<S>(&IQ3XXS_RULES, xbl, qw);
        *block = bytemuck::Zeroable::zeroed();
        let Some((d, codes)) = scale_codes(&subs) else {
            continue;
        };
        // ggml's "small improvement via this fudge factor".
        block.d = F16Le::from_f32(d * 1.0125);
        let (qs, scales_and_signs) = block.qs.split_at_mut(QK_K / 4);
        for (ib, ((sub, q8), word)) in subs
            .iter()
            .zip(qs.chunks_exact_mut(8))
            .zip(scales_and_signs.chunks_exact_mut(4))
            .enumerate()
        {
            let mut aux32 = (codes[ib] as u32) << 28;
            if let Some(sub) = sub {
                for (q, &j) in q8.iter_mut().zip(&sub.grid) {
                    *q = j as u8;
                }
                for (l, &s) in sub.signs.iter().enumerate() {
                    aux32 |= (s as u32) << (7 * l);
                }
            }
            word.copy_from_slice(&aux32.to_le_bytes());
        }
    }
}

/// The two 4-byte grid points `a` and `b` as one group of 8 bytes, `a` first.
#[inline(always)]
pub(super) fn grid_pair(a: u32, b: u32) -> [u8; 8] {
    (a as u64 | ((b as u64) << 32)).to_le_bytes()
}

/// `dequantize_row_iq3_xxs`: the first 64 bytes of `qs` are grid indices, 8 per sub-block;
/// the last 32 are one little-endian u32 per sub-block holding 4 x 7 sign bits and a 4-bit
/// scale `s` (top nibble), with sub-block scale `d * (0.5 + s) * 0.5`.
pub fn dequantize_row(x: &[BlockIq3Xxs], y: &mut [f32]) {
    dequantize_row_with::<Serial>(x, y)
}

/// [`dequantize_row`], each group of 8 values written by `W`.
#[inline(always)]
pub(crate) fn dequantize_row_with<W: IqWrite>(x: &[BlockIq3Xxs], y: &mut [f32]) {
    for (block, yb) in x.iter().zip(y.chunks_exact_mut(QK_K)) {
        let d = block.d.to_f32();
        let (qs, scales_and_signs) = block.qs.split_at(QK_K / 4);
        for ((q8, aux), ys) in qs
            .chunks_exact(8)
            .zip(scales_and_signs.chunks_exact(4))
            .zip(yb.chunks_exact_mut(32))
        {
            let aux32 = u32::from_le_bytes([aux[0], aux[1], aux[2], aux[3]]);
            let db = d * (0.5 + (aux32 >> 28) as f32) * 0.5;
            for (l, y8) in ys.chunks_exact_mut(8).enumerate() {
                let signs = KSIGNS_IQ2XS[((aux32 >> (7 * l)) & 127) as usize];
                let grid = grid_pair(
                    IQ3XXS_GRID[q8[2 * l] as usize],
                    IQ3XXS_GRID[q8[2 * l + 1] as usize],
                );
                W::signed(y8, db, grid, signs);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::iq_grid::IQ3S;
    use super::super::testing;
    use super::*;

    fn round_trip(x: &[f32], w: Option<&[f32]>) -> Vec<f32> {
        testing::round_trip(quantize_row, dequantize_row, x, w)
    }

    #[test]
    fn grid_point_zero_is_levels_zero() {
        // The search starts from grid index 0 where ggml starts from levels 0.
        assert_eq!(IQ3XXS.point(0), [1; 4]);
        assert_eq!(IQ3S.point(0), [1; 4]);
    }

    #[test]
    fn round_trip_error_is_bounded() {
        let x = testing::wave(4 * QK_K, 11);
        let w: Vec<f32> = testing::wave(x.len(), 5)
            .iter()
            .map(|v| v.abs() + 0.01)
            .collect();
        for y in [round_trip(&x, None), round_trip(&x, Some(&w))] {
            let rmse = testing::rmse(&x, &y);
            assert!(rmse < 0.2, "rmse {rmse}");
        }
    }

    #[test]
    fn zero_row_is_a_zero_block() {
        let mut y = [bytemuck::Zeroable::zeroed()];
        quantize_row(&[0.0; QK_K], None, &mut y);
        assert_eq!(y[0], bytemuck::Zeroable::zeroed());
        quantize_row(&[1e-9; QK_K], Some(&[1.0; QK_K]), &mut y);
        assert_eq!(y[0], bytemuck::Zeroable::zeroed());
    }

    #[test]
    fn odd_negatives_flip_the_least_important_weight() {
        // Three negatives in the first group of 8: the smallest |x| (element 5) is stored
        // with the wrong sign, so the 7 stored bits (elements 0 and 2) imply an even count.
        let mut x = [0.5f32; QK_K];
        x[0] = -1.0;
        x[2] = -0.75;
        x[5] = -0.125;
        let mut y = [bytemuck::Zeroable::zeroed()];
        quantize_row(&x, None, &mut y);
        let aux32 = u32::from_le_bytes([y[0].qs[64], y[0].qs[65], y[0].qs[66], y[0].qs[67]]);
        assert_eq!(aux32 & 127, 0b101);
        let mut back = [0.0f32; QK_K];
        dequantize_row(&y, &mut back);
        assert!(back[0] < 0.0 && back[2] < 0.0 && back[5] > 0.0);
    }

    #[test]
    fn huge_values_do_not_panic() {
        // ggml aborts here (no neighbour nearer than FLT_MAX); this keeps the first one.
        let x: Vec<f32> = testing::wave(QK_K, 3).iter().map(|v| v * 3e38).collect();
        for w in [None, Some(&[0.0; QK_K][..]), Some(&[1e4; QK_K][..])] {
            round_trip(&x, w);
        }
    }

    #[test]
    fn hand_built_block() {
        let mut block = BlockIq3Xxs {
            d: F16Le::from_f32(1.0),
            qs: [0; 96],
        };
        // Group 0 of sub-block 0: grids 255 (0x3e341c04: 4 28 52 62) and 1 (0x04040414:
        // 20 4 4 4), sign pattern 1 (elements 0 and 7 negative); scale nibble 1:
        // db = 1.5 * 0.5 = 0.75.
        block.qs[0] = 255;
        block.qs[1] = 1;
        block.qs[64..68].copy_from_slice(&(1u32 | (1 << 28)).to_le_bytes());
        let mut y = [0.0f32; QK_K];
        dequantize_row(&[block], &mut y);
        assert_eq!(y[..8], [-3.0, 21.0, 39.0, 46.5, 15.0, 3.0, 3.0, -3.0]);
        // Grid 0 is all 4s.
        assert!(y[8..32].iter().all(|&v| v == 3.0));
        // Scale nibble 0: db = 0.25.
        assert!(y[32..].iter().all(|&v| v == 1.0));
    }
}
