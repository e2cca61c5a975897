//! The i-quant quantizers' search data: each grid's points as ggml's quantizer holds them,
//! the map from a lattice point to its grid index, and the neighbour lists of the points
//! off the grid, exactly as ggml's `iq2xs_init_impl` and `iq3xs_init_impl` build them.
//!
//! `build.rs` computes them from the dequantizers' grids in [`super::grids`] when the crate
//! is compiled, so the first row costs nothing extra (ggml spends 1.4 to 16 s per type
//! building the same lists in `ggml_quantize_init`).

use crate::blocks::QK_K;
use crate::num::nearest_int;

/// One grid of `D`-coordinate points and its search data.
pub struct IqGrid<const D: usize> {
    /// `D` bytes per point: each coordinate `2l + 1`, `l` its level.
    points: &'static [u8],
    /// One little-endian `i32` per lattice index (see [`IqGrid::lookup`]).
    map: &'static [u8],
    /// Per off-grid lattice point: a count, then that many grid indices (`u16` LE each),
    /// padded to a multiple of [`PAD`] by repeating the last.
    neighbours: &'static [u8],
    /// Parallel to `neighbours`: each candidate's lattice index (`u16` LE).
    codes: &'static [u8],
    /// Bits per coordinate in a lattice index.
    bits: u32,
}

/// Where a lattice point lies: on the grid, or off it with its candidates.
#[derive(Clone, Copy, Debug)]
pub enum Lookup {
    /// The grid index of the point.
    On(usize),
    /// The grid points ggml tries instead, in its order.
    Off(Neighbours),
}

/// Neighbour lists are stored padded to a multiple of this many entries (the last entry
/// repeated), so that a vector search reads whole vectors of up to 16 candidates.
pub const PAD: usize = 16;

/// A neighbour list: grid indices in ggml's order (by distance, then index).
#[derive(Clone, Copy, Debug)]
pub struct Neighbours {
    /// The grid indices, `u16` LE each, padded to a multiple of [`PAD`].
    indices: &'static [u8],
    /// The lattice index of each entry of `indices`, `u16` LE each.
    codes: &'static [u8],
    /// The entries before the padding.
    len: usize,
}

impl Neighbours {
    const EMPTY: Neighbours = Neighbours {
        indices: &[],
        codes: &[],
        len: 0,
    };

    /// How many grid points the list holds.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the list is empty (never, for a point a quantizer produces).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The grid indices in ggml's order.
    pub fn iter(&self) -> impl Iterator<Item = usize> + '_ {
        self.indices[..2 * self.len]
            .chunks_exact(2)
            .map(|b| u16::from_le_bytes([b[0], b[1]]) as usize)
    }

    /// Entry `k` of the padded list: entries from [`Neighbours::len`] on repeat the last.
    #[inline(always)]
    pub fn at(&self, k: usize) -> usize {
        u16::from_le_bytes([self.indices[2 * k], self.indices[2 * k + 1]]) as usize
    }

    /// The lattice indices of the padded list, two little-endian bytes each: a multiple of
    /// [`PAD`] entries, empty for an empty list.
    #[inline(always)]
    pub fn codes(&self) -> &'static [u8] {
        self.codes
    }
}

/// The i-quant searches the SIMD codecs run over vectors: picking the best of an off-grid
/// point's neighbours and iq1_s's and iq1_m's best splits. [`Serial`] is ggml's loops
/// (`iq2_find_best_neighbour`, `iq3_find_best_neighbour`, the first part of
/// `iq1_find_best_neighbour2`, the split loops of `quantize_row_iq1_s_impl` and
/// `quantize_row_iq1_m_impl`); the SIMD
/// codecs find the same results.
pub(crate) trait IqSearch {
    /// [`super::iq1_s::best_split`].
    fn iq1s_split(
        sumx: &[f32; 33],
        sumw: &[f32; 33],
        max: f32,
    ) -> (f32, Option<(usize, usize, i8)>);

    /// [`super::iq1_m::best_split`].
    fn iq1m_split(
        px: &[[f32; 17]; 2],
        pw: &[[f32; 17]; 2],
        max: f32,
    ) -> (f32, Option<(usize, usize, usize)>);

    /// `make_qp_quants(32, nmax, x, L, w)`'s returned scale for each sub-block of 32 of
    /// the super-block `x` (weights `w`), in order: iq2_xxs's start scales. The codes it
    /// also makes are not needed.
    #[inline(always)]
    fn qp_scales(x: &[f32; QK_K], w: &[f32; QK_K], nmax: i32) -> [f32; QK_K / 32] {
        let mut out = [0.0f32; QK_K / 32];
        let mut codes = [0u8; 32];
        for (o, (xb, wb)) in out
            .iter_mut()
            .zip(x.chunks_exact(32).zip(w.chunks_exact(32)))
        {
            *o = super::kquant::make_qp_quants(32, nmax, xb, &mut codes, wb);
        }
        out
    }

    /// The first grid point of `nb` with the least error
    /// `sum_i w[i] * (scale * q[l_i] - x[i])^2` (`l_i` the candidate's level at coordinate
    /// `i`; each term `(w * diff) * diff`, summed in coordinate order from 0), or `None`
    /// when no error is below `f32::MAX` (all NaN or overflowed).
    fn best<const D: usize>(
        grid: &IqGrid<D>,
        nb: Neighbours,
        x: &[f32],
        w: &[f32],
        scale: f32,
        q: &[f32],
    ) -> Option<usize>;

    /// Every candidate scale of a scale search at once: for trial `t`, each group of `D`
    /// magnitudes of `xval` rounded at inverse scale `ids[t]`
    /// (`clamp(nearest_int(0.5 * (id * x - 1)), 0, q.len() - 1)`), put on `grid` (its
    /// lattice point, or when that is off the grid the neighbour [`IqSearch::best`] picks
    /// at scale `1 / ids[t]` with the search weights `waux`), and the fit
    /// `(sum w*x*q, sum w*q*q)` of the trial's points with `weight`, each product
    /// `(w * x) * q` and `(w * q) * q`, summed in element order from 0. This is the loop body
    /// of ggml's scale searches (`quantize_row_iq2_*_impl`, `quantize_row_iq3_*_impl`)
    /// before its test of the fit, which depends on no earlier trial's result.
    #[inline(always)]
    fn trials<const D: usize, const G: usize>(
        grid: &IqGrid<D>,
        q: &[f32],
        xval: &[f32],
        weight: &[f32],
        waux: &[f32],
        ids: &[f32],
        out: &mut Trials<G>,
    ) {
        for (t, &id) in ids.iter().enumerate() {
            let this_scale = 1.0 / id;
            for k in 0..G {
                let g = D * k..D * k + D;
                (out.index[t][k], out.on_grid[t][k]) =
                    grid.snap::<Self>(&xval[g.clone()], &waux[g], id, this_scale, q);
            }
            out.sums[t] = grid.fit(weight, xval, &out.index[t]);
        }
    }
}

/// The most candidate scales any i-quant search tries (iq3_xxs: 31).
pub(crate) const MAX_TRIALS: usize = 32;

/// What [`IqSearch::trials`] finds for each trial of a scale search over `G` groups.
pub(crate) struct Trials<const G: usize> {
    /// The grid index of each group.
    pub index: [[u16; G]; MAX_TRIALS],
    /// Whether each group's rounded lattice point was on the grid.
    pub on_grid: [[bool; G]; MAX_TRIALS],
    /// `(sumqx, sumq2)` of the fit.
    pub sums: [(f32, f32); MAX_TRIALS],
}

impl<const G: usize> Trials<G> {
    /// Room for [`MAX_TRIALS`] trials.
    pub fn new() -> Self {
        Trials {
            index: [[0; G]; MAX_TRIALS],
            on_grid: [[false; G]; MAX_TRIALS],
            sums: [(0.0, 0.0); MAX_TRIALS],
        }
    }

    /// The levels `(c - 1) / 2` of trial `t`'s points, group after group.
    pub fn levels<const D: usize>(&self, grid: &IqGrid<D>, t: usize, out: &mut [i8]) {
        for (k, o) in out.chunks_exact_mut(D).enumerate() {
            let p = grid.point(self.index[t][k] as usize);
            for (l, c) in o.iter_mut().zip(p) {
                *l = (c - 1) / 2;
            }
        }
    }
}

/// How the i-quant dequantizers write a group of 8 values: [`Serial`] one value at a
/// time (ggml's loops); the SIMD codecs in vectors, the same bits.
pub(crate) trait IqWrite {
    /// `y[j] = db * grid[j] * (signs & kmask_iq2xs[j] ? -1.f : 1.f)` for `j < 8`, in that
    /// order of operations, as every ggml iq2/iq3 dequantizer does.
    fn signed(y: &mut [f32], db: f32, grid: [u8; 8], signs: u8);
    /// `y[j] = dl * (grid[j] + delta)` for the 8 values of iq1 grid point `index`, its
    /// bytes read as `i8`: the inner loop of ggml's iq1_s and iq1_m dequantizers.
    fn shifted(y: &mut [f32; 8], dl: f32, index: usize, delta: f32);
}

/// ggml's search, one candidate after another.
pub(crate) struct Serial;

impl IqWrite for Serial {
    #[inline(always)]
    fn signed(y: &mut [f32], db: f32, grid: [u8; 8], signs: u8) {
        super::iq2_xxs::put_signed(y, db, grid, signs)
    }
    #[inline(always)]
    fn shifted(y: &mut [f32; 8], dl: f32, index: usize, delta: f32) {
        super::iq1_s::put_shifted(y, dl, index, delta)
    }
}

impl IqSearch for Serial {
    #[inline(always)]
    fn iq1s_split(
        sumx: &[f32; 33],
        sumw: &[f32; 33],
        max: f32,
    ) -> (f32, Option<(usize, usize, i8)>) {
        super::iq1_s::best_split(sumx, sumw, max)
    }

    #[inline(always)]
    fn iq1m_split(
        px: &[[f32; 17]; 2],
        pw: &[[f32; 17]; 2],
        max: f32,
    ) -> (f32, Option<(usize, usize, usize)>) {
        super::iq1_m::best_split(px, pw, max)
    }

    #[inline(always)]
    fn best<const D: usize>(
        grid: &IqGrid<D>,
        nb: Neighbours,
        x: &[f32],
        w: &[f32],
        scale: f32,
        q: &[f32],
    ) -> Option<usize> {
        let mut best_d2 = f32::MAX;
        let mut best = None;
        for j in nb.iter() {
            let d2 = grid.error(j, x, w, scale, q);
            if d2 < best_d2 {
                best_d2 = d2;
                best = Some(j);
            }
        }
        best
    }
}

/// The values of the iq2 grids' levels: coordinates `2l + 1`.
pub(crate) const Q_IQ2: [f32; 3] = [1.0, 3.0, 5.0];

/// The values of the iq3 grids' levels: coordinates `2l + 1`.
pub(crate) const Q_IQ3: [f32; 8] = [1.0, 3.0, 5.0, 7.0, 9.0, 11.0, 13.0, 15.0];

macro_rules! grid_files {
    ($name:literal) => {
        (
            include_bytes!(concat!(env!("OUT_DIR"), "/", $name, ".points")),
            include_bytes!(concat!(env!("OUT_DIR"), "/", $name, ".map")),
            include_bytes!(concat!(env!("OUT_DIR"), "/", $name, ".neighbours")),
            include_bytes!(concat!(env!("OUT_DIR"), "/", $name, ".codes")),
        )
    };
}

const fn grid<const D: usize>(
    files: (&'static [u8], &'static [u8], &'static [u8], &'static [u8]),
    bits: u32,
) -> IqGrid<D> {
    IqGrid {
        points: files.0,
        map: files.1,
        neighbours: files.2,
        codes: files.3,
        bits,
    }
}

/// IQ2_XXS: 256 points; neighbours at the 2 nearest distances.
pub static IQ2XXS: IqGrid<8> = grid(grid_files!("iq2xxs"), 2);
/// IQ2_XS: 512 points; neighbours at the 2 nearest distances.
pub static IQ2XS: IqGrid<8> = grid(grid_files!("iq2xs"), 2);
/// IQ2_S: 1024 points; neighbours at the nearest distance.
pub static IQ2S: IqGrid<8> = grid(grid_files!("iq2s"), 2);
/// IQ1_S and IQ1_M: 2048 points (levels -1, 0, 1 as 1, 3, 5); neighbours at the 3 nearest
/// distances.
pub static IQ1S: IqGrid<8> = grid(grid_files!("iq1s"), 2);
/// IQ3_XXS: 256 points; neighbours at the 2 nearest distances.
pub static IQ3XXS: IqGrid<4> = grid(grid_files!("iq3xxs"), 3);
/// IQ3_S: 512 points; neighbours at the 3 nearest distances.
pub static IQ3S: IqGrid<4> = grid(grid_files!("iq3s"), 3);

impl<const D: usize> IqGrid<D> {
    /// A group of `D` magnitudes `x` rounded at inverse scale `id` to the lattice
    /// (`clamp(nearest_int(0.5 * (id * x - 1)), 0, q.len() - 1)` per coordinate) and put on
    /// the grid: the point's grid index and `true` if it is on the grid, else the neighbour
    /// `S::best` picks at `scale` with weights `w` and `false`. ggml asserts (aborting the
    /// process) when no neighbour's error is below `FLT_MAX`, which happens only when the
    /// errors overflow or are NaN (inputs or weights beyond about 1e12); the first
    /// neighbour is kept then.
    #[inline(always)]
    pub(crate) fn snap<S: IqSearch + ?Sized>(
        &self,
        x: &[f32],
        w: &[f32],
        id: f32,
        scale: f32,
        q: &[f32],
    ) -> (u16, bool) {
        let top = q.len() as i32 - 1;
        let levels: [i8; D] =
            std::array::from_fn(|i| nearest_int(0.5 * (id * x[i] - 1.0)).clamp(0, top) as i8);
        match self.lookup(self.index(&levels)) {
            Lookup::On(j) => (j as u16, true),
            Lookup::Off(nb) => {
                let j = S::best(self, nb, x, w, scale, q).unwrap_or_else(|| nb.at(0));
                (j as u16, false)
            }
        }
    }

    /// `(sum w * x * q, sum w * q * q)` of the weighted least-squares fit of `xval` by the
    /// coordinates `q` (`2l + 1`) of the grid points `chosen`, one per group of `D`, each
    /// product `(w * x) * q` and `(w * q) * q`, summed in element order from 0.
    #[inline(always)]
    pub(crate) fn fit(&self, weight: &[f32], xval: &[f32], chosen: &[u16]) -> (f32, f32) {
        let mut sumqx = 0.0f32;
        let mut sumq2 = 0.0f32;
        for (k, &j) in chosen.iter().enumerate() {
            let p = self.point(j as usize);
            for i in 0..D {
                let w = weight[D * k + i];
                let q = p[i] as f32;
                sumqx += w * xval[D * k + i] * q;
                sumq2 += w * q * q;
            }
        }
        (sumqx, sumq2)
    }

    /// The search error of grid point `j` for the magnitudes `x`, weights `w`, at `scale`
    /// with level values `q`: `sum_i (w[i] * diff) * diff`, `diff = scale * q[l_i] - x[i]`,
    /// summed in coordinate order from 0, as every ggml neighbour search scores a
    /// candidate.
    #[inline(always)]
    pub(crate) fn error(&self, j: usize, x: &[f32], w: &[f32], scale: f32, q: &[f32]) -> f32 {
        let p = self.point(j);
        let mut d2 = 0.0f32;
        for i in 0..D {
            let diff = scale * q[((p[i] - 1) / 2) as usize] - x[i];
            d2 += w[i] * diff * diff;
        }
        d2
    }

    /// The number of grid points.
    pub fn len(&self) -> usize {
        self.points.len() / D
    }

    /// Always false: every grid has points.
    pub fn is_empty(&self) -> bool {
        self.points.is_empty()
    }

    /// Point `j`: its coordinates `2l + 1`, as ggml's `kgrid_q2xs` / `kgrid_q3xs` bytes.
    #[inline]
    pub fn point(&self, j: usize) -> [i8; D] {
        let p = &self.points[j * D..(j + 1) * D];
        std::array::from_fn(|i| p[i] as i8)
    }

    /// The lattice index of levels `l` (`sum(l[k] << bits*k)`), as ggml forms `u`.
    #[inline]
    pub fn index(&self, l: &[i8; D]) -> usize {
        l.iter()
            .enumerate()
            .map(|(k, &v)| (v as usize) << (self.bits as usize * k))
            .sum()
    }

    /// ggml's `kmap` lookup of lattice index `u`. Every level a quantizer produces is
    /// below the grid's level count; an index outside that range has an empty list.
    #[inline]
    pub fn lookup(&self, u: usize) -> Lookup {
        let m = &self.map[4 * u..4 * u + 4];
        let v = i32::from_le_bytes([m[0], m[1], m[2], m[3]]);
        if v >= 0 {
            return Lookup::On(v as usize);
        }
        if v == i32::MIN {
            return Lookup::Off(Neighbours::EMPTY);
        }
        let start = 2 * (-(v + 1)) as usize;
        let n = u16::from_le_bytes([self.neighbours[start], self.neighbours[start + 1]]) as usize;
        let range = start + 2..start + 2 + 2 * n.next_multiple_of(PAD);
        Lookup::Off(Neighbours {
            indices: &self.neighbours[range.clone()],
            codes: &self.codes[range],
            len: n,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Brute force: the neighbour list of `l` as ggml's init builds it (sort every grid
    /// point by squared distance of the 2l+1 coordinates, then index; keep those at the
    /// `nwant` smallest distances).
    fn reference<const D: usize>(g: &IqGrid<D>, l: &[i8; D], nwant: usize) -> Vec<usize> {
        let mut d: Vec<(i32, usize)> = (0..g.len())
            .map(|j| {
                let p = g.point(j);
                let d2 = (0..D)
                    .map(|k| (p[k] as i32 - (2 * l[k] as i32 + 1)).pow(2))
                    .sum();
                (d2, j)
            })
            .collect();
        d.sort();
        let mut out = Vec::new();
        let mut have = 1;
        let mut last = d[0].0;
        for &(d2, j) in &d {
            if d2 > last {
                if have == nwant {
                    break;
                }
                last = d2;
                have += 1;
            }
            out.push(j);
        }
        out
    }

    fn check<const D: usize>(g: &IqGrid<D>, levels: i8, nwant: usize, stride: usize) {
        let mut on = 0;
        let total = (levels as usize).pow(D as u32);
        for n in (0..total).step_by(stride) {
            let mut r = n;
            let l: [i8; D] = std::array::from_fn(|_| {
                let v = (r % levels as usize) as i8;
                r /= levels as usize;
                v
            });
            match g.lookup(g.index(&l)) {
                Lookup::On(j) => {
                    on += 1;
                    let p = g.point(j);
                    assert!((0..D).all(|k| p[k] == 2 * l[k] + 1), "{l:?} -> {j}");
                }
                Lookup::Off(nb) => {
                    assert_eq!(
                        nb.iter().collect::<Vec<_>>(),
                        reference(g, &l, nwant),
                        "{l:?}"
                    );
                    // The padded list repeats the last entry; the codes follow the points.
                    let padded = nb.len().next_multiple_of(PAD);
                    assert_eq!(nb.codes().len(), 2 * padded);
                    for k in 0..padded {
                        let j = nb.at(k);
                        if k >= nb.len() {
                            assert_eq!(j, nb.at(nb.len() - 1));
                        }
                        let levels = g.point(j).map(|c| (c - 1) / 2);
                        let code = u16::from_le_bytes([nb.codes()[2 * k], nb.codes()[2 * k + 1]]);
                        assert_eq!(code as usize, g.index(&levels), "{l:?} entry {k}");
                    }
                }
            }
        }
        if stride == 1 {
            assert_eq!(on, g.len(), "every grid point is on the map");
        }
    }

    #[test]
    fn neighbour_lists_match_ggml_construction() {
        check(&IQ2XXS, 3, 2, 1);
        check(&IQ2XS, 3, 2, 1);
        check(&IQ2S, 3, 1, 1);
        check(&IQ1S, 3, 3, 7);
        check(&IQ3XXS, 8, 2, 1);
        check(&IQ3S, 8, 3, 1);
    }

    #[test]
    fn points_follow_the_dequantizer_grids() {
        // ggml's kgrid_2bit_256[1] = 2, kgrid_256[1] = 2 and kgrid_1bit_2048[1] = 2: the
        // first coordinate at level 2, the rest at level 0.
        for p in [
            IQ2XXS.point(1),
            IQ2XS.point(1),
            IQ2S.point(1),
            IQ1S.point(1),
        ] {
            assert_eq!(p, [5, 1, 1, 1, 1, 1, 1, 1]);
        }
        assert_eq!(IQ3XXS.point(1), [5, 1, 1, 1]);
        assert_eq!(IQ1S.len(), 2048);
        assert_eq!(IQ3S.len(), 512);
    }
}
