//! iq2_xxs: 256 weights per super-block, 2.0625 bits each. Groups of 8 weights are one
//! point of [`IQ2XXS_GRID`] with 7 stored sign bits; each sub-block of 32 has a 4-bit scale.
//! Mirrors ggml's `quantize_iq2_xxs` (`quantize_row_iq2_xxs_impl`) and
//! `dequantize_row_iq2_xxs`, and holds the lattice search the three iq2 quantizers share
//! (`iq2_find_best_neighbour` and the rounding of a group of 8 onto the grid).

use super::iq_grid::{IQ2XXS, IqGrid, IqSearch, IqWrite, Lookup, Q_IQ2, Serial, Trials};
use super::kquant::{GROUP_MAX_EPS, importance_weights, sum_squares};
use super::tables::{IQ2XXS_GRID, KMASK_IQ2XS, KSIGNS_IQ2XS};
use crate::blocks::{BlockIq2Xxs, QK_K};
use crate::num::{F16Le, nearest_int};

/// ggml's `kMaxQ`: each coordinate of a grid point has one of 3 levels `l`, the
/// magnitudes `2l + 1` (1, 3, 5).
pub(super) const K_MAX_Q: i32 = 3;

/// C's `MAX(a, b)` on floats (`a > b ? a : b`: a NaN `b` wins, a NaN `a` loses).
#[inline(always)]
pub(super) fn c_max(a: f32, b: f32) -> f32 {
    if a > b { a } else { b }
}

/// `max = x[0]; for (i = 1; ...) max = MAX(max, x[i]);`
#[inline(always)]
pub(super) fn max_of(x: &[f32]) -> f32 {
    x[1..].iter().fold(x[0], |m, &v| c_max(m, v))
}

/// The magnitudes of a group of 8 (`xb`, weights `weight`) into `xval`, and their sign
/// bits. iq2_xxs and iq2_xs store only 7 sign bits, the eighth being the parity of the
/// other seven, so with an odd number of negatives the value of least `weight * x * x`
/// (the first such) has its sign bit toggled and its magnitude negated: the search then
/// fits `-|x|` there. Returns the low 7 sign bits.
pub(super) fn even_signs(xb: &[f32], weight: &[f32], xval: &mut [f32]) -> u8 {
    let mut signs = 0u8;
    for (i, (v, &x)) in xval[..8].iter_mut().zip(xb).enumerate() {
        if x >= 0.0 {
            *v = x;
        } else {
            *v = -x;
            signs |= 1 << i;
        }
    }
    if signs.count_ones() % 2 == 1 {
        let mut imin = 0;
        let mut min = weight[0] * xb[0] * xb[0];
        for i in 1..8 {
            let ax = weight[i] * xb[i] * xb[i];
            if ax < min {
                min = ax;
                imin = i;
            }
        }
        xval[imin] = -xval[imin];
        signs ^= 1 << imin;
    }
    signs & 127
}

/// One group of 8 magnitudes rounded at inverse scale `id` and put on the grid
/// ([`IqGrid::snap`]): the levels, and whether the rounded point was on the grid already
/// (if not, the levels are its best neighbour at `scale`, as `iq2_find_best_neighbour`
/// finds it).
#[inline(always)]
pub(super) fn snap_to_grid<S: IqSearch>(
    grid: &IqGrid<8>,
    x: &[f32],
    waux: &[f32],
    id: f32,
    scale: f32,
) -> ([i8; 8], bool) {
    let (j, on) = grid.snap::<S>(x, waux, id, scale, &Q_IQ2);
    (grid.point(j as usize).map(|c| (c - 1) / 2), on)
}

/// `(sumqx, sumq2)` of the weighted least-squares fit of `xval` by `scale * (2l + 1)`:
/// `sumqx += w*x*q; sumq2 += w*q*q;` in element order.
#[inline(always)]
pub(super) fn fit(weight: &[f32], xval: &[f32], l: &[i8]) -> (f32, f32) {
    let mut sumqx = 0.0f32;
    let mut sumq2 = 0.0f32;
    for ((&w, &x), &l) in weight.iter().zip(xval).zip(l) {
        let q = (2 * l as i32 + 1) as f32;
        sumqx += w * x * q;
        sumq2 += w * q * q;
    }
    (sumqx, sumq2)
}

/// The grid index of a group's final levels, formed as ggml forms it
/// (`u |= L[i] << 2*i` into a `uint16_t`).
///
/// # Panics
///
/// If the levels are off the grid (ggml aborts with "found point not on grid"). The
/// searches only ever leave grid points or their neighbours' levels here.
pub(super) fn grid_index(grid: &IqGrid<8>, l: &[i8]) -> usize {
    let u = l
        .iter()
        .enumerate()
        .fold(0u16, |u, (i, &v)| u | ((v as i32) << (2 * i)) as u16);
    match grid.lookup(u as usize) {
        Lookup::On(index) => index,
        Lookup::Off(_) => panic!("levels {l:?} are not a grid point"),
    }
}

/// The 4-bit code of sub-block scale `s` against the super-block's inverse scale `id`:
/// `MAX(0, MIN(15, nearest_int(0.5f * (id * s - 1))))`.
#[inline(always)]
pub(super) fn scale_code(id: f32, s: f32) -> u32 {
    nearest_int(0.5 * (id * s - 1.0)).clamp(0, 15) as u32
}

/// One row as `quantize_iq2_xxs` does it (`quantize_row_iq2_xxs_impl` per row).
///
/// # Panics
///
/// Without an importance matrix: ggml refuses to quantize iq2_xxs without one, and
/// [`crate::Codec::quantize`] returns an error before calling this.
pub fn quantize_row(x: &[f32], imatrix: Option<&[f32]>, y: &mut [BlockIq2Xxs]) {
    quantize_row_with::<Serial>(x, imatrix, y)
}

/// [`quantize_row`] with the neighbour search `S`.
#[inline(always)]
pub(crate) fn quantize_row_with<S: IqSearch>(
    x: &[f32],
    imatrix: Option<&[f32]>,
    y: &mut [BlockIq2Xxs],
) {
    let imatrix = imatrix.expect("iq2_xxs needs an importance matrix");
    for ((xbl, qw), block) in x.chunks_exact(QK_K).zip(imatrix.chunks_exact(QK_K)).zip(y) {
        quantize_block::<S>(xbl, qw, block);
    }
}

/// One super-block: each sub-block of 32 searched by itself, then the sub-block scales
/// coded in 4 bits against `d = max_scale / 31`.
#[inline(always)]
fn quantize_block<S: IqSearch>(xbl: &[f32], qw: &[f32], block: &mut BlockIq2Xxs) {
    // ggml's sigma2 is the mean square of this super-block (not of the row).
    let sigma2 = sum_squares(xbl) / QK_K as f32;
    // Per sub-block: the grid indices (one byte each), then 4 x 7 sign bits and the scale.
    let mut q2 = [0u32; QK_K / 16];
    let mut scales = [0.0f32; QK_K / 32];
    let mut max_scale = 0.0f32;
    // Every sub-block's weights, magnitudes and signs first, so that the start scales of
    // all eight are searched together (in lanes, for the SIMD codecs).
    let mut weight = [0.0f32; QK_K];
    let mut xval = [0.0f32; QK_K];
    let mut signs = [[0u8; 4]; QK_K / 32];
    for (ib, sub_signs) in signs.iter_mut().enumerate() {
        let r = 32 * ib..32 * ib + 32;
        importance_weights(
            &xbl[r.clone()],
            &qw[r.clone()],
            sigma2,
            &mut weight[r.clone()],
        );
        for (k, s) in sub_signs.iter_mut().enumerate() {
            let g = 32 * ib + 8 * k..32 * ib + 8 * k + 8;
            *s = even_signs(&xbl[g.clone()], &weight[g.clone()], &mut xval[g]);
        }
    }
    let starts = S::qp_scales(&xval, &weight, K_MAX_Q + 1);
    for ib in 0..QK_K / 32 {
        let r = 32 * ib..32 * ib + 32;
        let (xv, w) = (&xval[r.clone()], &weight[r]);
        let Some((scale, l, signs)) = quantize_sub_block::<S>(xv, w, signs[ib], starts[ib]) else {
            continue;
        };
        for (k, (lk, &s)) in l.chunks_exact(8).zip(&signs).enumerate() {
            q2[2 * ib] |= (grid_index(&IQ2XXS, lk) as u32) << (8 * k);
            q2[2 * ib + 1] |= (s as u32) << (7 * k);
        }
        scales[ib] = scale;
        max_scale = c_max(max_scale, scale);
    }
    block.d = F16Le::from_f32(0.0);
    if max_scale == 0.0 {
        block.qs = [[0; 2]; 32];
        return;
    }
    let d = max_scale / 31.0;
    block.d = F16Le::from_f32(d);
    let id = 1.0 / d;
    for (ib, &s) in scales.iter().enumerate() {
        q2[2 * ib + 1] |= scale_code(id, s) << 28;
    }
    for (q, &v) in block.qs.chunks_exact_mut(2).zip(&q2) {
        let b = v.to_le_bytes();
        q.copy_from_slice(&[[b[0], b[1]], [b[2], b[3]]]);
    }
}

/// The search of one sub-block of 32 (magnitudes `xval` as [`even_signs`] leaves them,
/// weights `weight`, sign bits `signs`): `(scale, levels, 7-bit signs per group)`, or
/// `None` when it is stored as all zeros (its largest magnitude below `GROUP_MAX_EPS`, or
/// no positive start scale).
///
/// The start scale `start` is `make_qp_quants`' over 5 levels; 13 inverse scales around
/// it are tried, each group rounded onto the grid; the best fit's scale is refined once
/// with every group re-rounded at it.
#[inline(always)]
fn quantize_sub_block<S: IqSearch>(
    xval: &[f32],
    weight: &[f32],
    mut signs: [u8; 4],
    start: f32,
) -> Option<(f32, [i8; 32], [u8; 4])> {
    let waux: [f32; 32] = std::array::from_fn(|i| weight[i].sqrt());
    if max_of(xval) < GROUP_MAX_EPS {
        return None;
    }
    let mut scale = start;
    let eff_max = scale * K_MAX_Q as f32;
    // ggml skips the sub-block when `eff_max <= 0`. A NaN start scale (weights that
    // overflowed to infinity) goes on there, finds no better fit and ends in one of its
    // asserts; it is skipped here too.
    if eff_max <= 0.0 || eff_max.is_nan() {
        return None;
    }
    // ggml's L keeps make_qp_quants' codes until a trial wins; they are never stored
    // (with no winner the refinement below replaces them, the scale being positive).
    let ids: [f32; 13] =
        std::array::from_fn(|n| ((2 * K_MAX_Q - 1) as f32 + (n as i32 - 6) as f32 * 0.1) / eff_max);
    let mut trials = Trials::<4>::new();
    S::trials(&IQ2XXS, &Q_IQ2, xval, weight, &waux, &ids, &mut trials);
    let mut l = [0i8; 32];
    let mut best = 0.0f32;
    let mut winner = None;
    for (t, &(sumqx, sumq2)) in trials.sums[..ids.len()].iter().enumerate() {
        if sumq2 > 0.0 && sumqx * sumqx > best * sumq2 {
            scale = sumqx / sumq2;
            best = scale * sumqx;
            winner = Some(t);
        }
    }
    if let Some(t) = winner {
        trials.levels(&IQ2XXS, t, &mut l);
    }
    if scale > 0.0 {
        let id = 1.0 / scale;
        for (lk, (xv, wa)) in l
            .chunks_exact_mut(8)
            .zip(xval.chunks_exact(8).zip(waux.chunks_exact(8)))
        {
            lk.copy_from_slice(&snap_to_grid::<S>(&IQ2XXS, xv, wa, id, scale).0);
        }
        let (sumqx, sumq2) = fit(weight, xval, &l);
        if sumq2 > 0.0 {
            scale = sumqx / sumq2;
        }
    }
    if scale < 0.0 {
        // ggml: "should never happen"; the scale is stored unsigned, so every sign flips.
        scale = -scale;
        for s in &mut signs {
            *s = !*s & 127;
        }
    }
    // ggml asserts `scale >= 0`: a NaN scale (weights that overflowed to infinity) aborts
    // it. Such a sub-block is stored as all zeros instead.
    if scale.is_nan() {
        return None;
    }
    Some((scale, l, signs))
}

/// Writes the 8 values `db * grid[j] * (signs & kmask_iq2xs[j] ? -1.f : 1.f)`, in that
/// order of operations, as every ggml iq2/iq3 dequantizer does. The product with -1 is
/// written as the negation the compilers make of it (ggml's flips a NaN's sign too;
/// a true product would keep it).
#[inline(always)]
pub(super) fn put_signed(y: &mut [f32], db: f32, grid: [u8; 8], signs: u8) {
    for ((out, &g), &mask) in y[..8].iter_mut().zip(&grid).zip(&KMASK_IQ2XS) {
        let v = db * g as f32;
        *out = if signs & mask != 0 { -v } else { v };
    }
}

/// `dequantize_row_iq2_xxs`: per sub-block of 32, eight bytes read as two little-endian
/// u32: the first holds 4 grid indices, the second 4 x 7 sign bits and a 4-bit scale `s`
/// (top nibble), with sub-block scale `d * (0.5 + s) * 0.25`.
pub fn dequantize_row(x: &[BlockIq2Xxs], y: &mut [f32]) {
    dequantize_row_with::<Serial>(x, y)
}

/// [`dequantize_row`], each group of 8 values written by `W`.
#[inline(always)]
pub(crate) fn dequantize_row_with<W: IqWrite>(x: &[BlockIq2Xxs], y: &mut [f32]) {
    for (block, yb) in x.iter().zip(y.chunks_exact_mut(QK_K)) {
        let d = block.d.to_f32();
        for (aux, ys) in block.qs.chunks_exact(4).zip(yb.chunks_exact_mut(32)) {
            let aux8 = aux.as_flattened();
            let aux1 = u32::from_le_bytes([aux8[4], aux8[5], aux8[6], aux8[7]]);
            let db = d * (0.5 + (aux1 >> 28) as f32) * 0.25;
            for (l, y8) in ys.chunks_exact_mut(8).enumerate() {
                let grid = IQ2XXS_GRID[aux8[l] as usize].to_le_bytes();
                let signs = KSIGNS_IQ2XS[((aux1 >> (7 * l)) & 127) as usize];
                W::signed(y8, db, grid, signs);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scalar::testing;

    /// Weights in [0.1, 1.1].
    fn weights(n: usize, seed: u32) -> Vec<f32> {
        testing::wave(n, seed)
            .iter()
            .map(|v| v.abs() + 0.1)
            .collect()
    }

    #[test]
    fn odd_negatives_toggle_the_least_weighted_sign() {
        let xb = [1.0f32, -2.0, 3.0, 0.5, -4.0, 1.5, -0.25, 2.0];
        let mut weight = [1.0f32; 8];
        // 0.25^2 is the smallest w*x*x, but element 3 (0.5^2 * 0.1) is smaller still.
        weight[3] = 0.1;
        let mut xval = [0.0f32; 8];
        let signs = even_signs(&xb, &weight, &mut xval);
        assert_eq!(xval, [1.0, 2.0, 3.0, -0.5, 4.0, 1.5, 0.25, 2.0]);
        // Bits 1, 4, 6 negative, bit 3 toggled on: four sign bits, an even count.
        assert_eq!(signs, 0b0101_1010);
        // An even count is kept as is.
        let xb = [-1.0f32, -2.0, 3.0, 0.5, 4.0, 1.5, 0.25, 2.0];
        assert_eq!(even_signs(&xb, &weight, &mut xval), 0b11);
        assert_eq!(xval[..2], [1.0, 2.0]);
    }

    #[test]
    fn grid_points_snap_to_themselves() {
        let grid = &IQ2XXS;
        for j in [0, 1, 100, grid.len() - 1] {
            let p = grid.point(j);
            let x: Vec<f32> = p.iter().map(|&c| c as f32 * 0.5).collect();
            let (l, on) = snap_to_grid::<Serial>(grid, &x, &[1.0; 8], 2.0, 0.5);
            assert!(on);
            assert_eq!(grid_index(grid, &l), j);
        }
    }

    #[test]
    fn off_grid_points_take_their_best_neighbour() {
        // Every level 2 (magnitude 5) is not an iq2_xxs point; the nearest ones are.
        let grid = &IQ2XXS;
        let x = [5.0f32; 8];
        let (l, on) = snap_to_grid::<Serial>(grid, &x, &[1.0; 8], 1.0, 1.0);
        assert!(!on);
        let best = grid_index(grid, &l);
        let d2 = |j: usize| -> f32 {
            grid.point(j)
                .iter()
                .map(|&c| (c as f32 - 5.0).powi(2))
                .sum()
        };
        assert!((0..grid.len()).all(|j| d2(j) >= d2(best)));
    }

    #[test]
    fn zero_row_gives_an_empty_block() {
        let x = [0.0f32; QK_K];
        let mut y = [bytemuck::Zeroable::zeroed()];
        quantize_row(&x, Some(&[1.0; QK_K]), &mut y);
        let block: BlockIq2Xxs = y[0];
        assert_eq!(block.d.bits(), 0);
        assert_eq!(block.qs, [[0; 2]; 32]);
    }

    #[test]
    fn round_trip_error_is_bounded() {
        let x = testing::wave(4 * QK_K, 21);
        let w = weights(x.len(), 5);
        let y = testing::round_trip(quantize_row, dequantize_row, &x, Some(&w));
        let rmse = testing::rmse(&x, &y);
        // About 2 bits for values spread over [-1, 1]: rms 0.58 if all were dropped.
        assert!(rmse < 0.3, "rmse {rmse}");
    }

    #[test]
    #[should_panic(expected = "importance matrix")]
    fn needs_an_importance_matrix() {
        let mut y = [bytemuck::Zeroable::zeroed()];
        quantize_row(&[1.0; QK_K], None, &mut y);
    }

    #[test]
    fn hand_built_block() {
        use crate::num::F16Le;
        let mut block = BlockIq2Xxs {
            d: F16Le::from_f32(1.0),
            qs: [[0; 2]; 32],
        };
        // Sub-block 0: grid indices 0, 1, 0, 0; group 0 has sign pattern 1 (ksigns -> 129:
        // elements 0 and 7 negative), group 1 sign pattern 0; scale nibble 1:
        // db = (0.5 + 1) * 0.25 = 0.375.
        block.qs[0] = [0, 1];
        block.qs[2] = [1, 0];
        block.qs[3] = [0, 0x10];
        let mut y = [0.0f32; QK_K];
        dequantize_row(&[block], &mut y);
        // Grid 0 is all 8s: 0.375 * 8 = 3.
        assert_eq!(y[..8], [-3.0, 3.0, 3.0, 3.0, 3.0, 3.0, 3.0, -3.0]);
        // Grid 1 is 43 then seven 8s: 0.375 * 43 = 16.125.
        assert_eq!(y[8..16], [16.125, 3.0, 3.0, 3.0, 3.0, 3.0, 3.0, 3.0]);
        assert!(y[16..32].iter().all(|&v| v == 3.0));
        // Other sub-blocks: scale nibble 0 -> db = 0.125, grid 0 -> 1.0.
        assert!(y[32..].iter().all(|&v| v == 1.0));
    }
}
