//! The i-quant quantizers' search data: each grid's points as ggml's quantizer holds them,
//! the map from a lattice point to its grid index, and the neighbour lists of the points
//! off the grid, exactly as ggml's `iq2xs_init_impl` and `iq3xs_init_impl` build them.
//!
//! `build.rs` computes them from the dequantizers' grids in [`super::grids`] when the crate
//! is compiled, so the first row costs nothing extra (ggml spends 1.4 to 16 s per type
//! building the same lists in `ggml_quantize_init`).

/// One grid of `D`-coordinate points and its search data.
pub struct IqGrid<const D: usize> {
    /// `D` bytes per point: each coordinate `2l + 1`, `l` its level.
    points: &'static [u8],
    /// One little-endian `i32` per lattice index (see [`IqGrid::lookup`]).
    map: &'static [u8],
    /// Per off-grid lattice point: a count, then that many grid indices (`u16` LE each).
    neighbours: &'static [u8],
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

/// A neighbour list: grid indices in ggml's order (by distance, then index).
#[derive(Clone, Copy, Debug)]
pub struct Neighbours(&'static [u8]);

impl Neighbours {
    /// How many grid points the list holds.
    pub fn len(&self) -> usize {
        self.0.len() / 2
    }

    /// Whether the list is empty (never, for a point a quantizer produces).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The grid indices in ggml's order.
    pub fn iter(&self) -> impl Iterator<Item = usize> + '_ {
        self.0
            .chunks_exact(2)
            .map(|b| u16::from_le_bytes([b[0], b[1]]) as usize)
    }
}

macro_rules! grid_files {
    ($name:literal) => {
        (
            include_bytes!(concat!(env!("OUT_DIR"), "/", $name, ".points")),
            include_bytes!(concat!(env!("OUT_DIR"), "/", $name, ".map")),
            include_bytes!(concat!(env!("OUT_DIR"), "/", $name, ".neighbours")),
        )
    };
}

const fn grid<const D: usize>(
    files: (&'static [u8], &'static [u8], &'static [u8]),
    bits: u32,
) -> IqGrid<D> {
    IqGrid {
        points: files.0,
        map: files.1,
        neighbours: files.2,
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
            return Lookup::Off(Neighbours(&[]));
        }
        let start = 2 * (-(v + 1)) as usize;
        let n = u16::from_le_bytes([self.neighbours[start], self.neighbours[start + 1]]) as usize;
        Lookup::Off(Neighbours(&self.neighbours[start + 2..start + 2 + 2 * n]))
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
