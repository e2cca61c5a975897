//! Builds the i-quant quantizers' search data at compile time: for each grid, the map from
//! a point of the quantization lattice to its grid index, and for every lattice point off
//! the grid the list of grid points ggml's `iq2xs_init_impl` / `iq3xs_init_impl` would give
//! it (all points at the `nwant` smallest distinct distances, by distance then index).
//! ggml builds these at run time, in 1.4 to 16 s per type; here they cost nothing at start-up.
//!
//! Output, one set of files per grid in `OUT_DIR`:
//! - `<name>.points`: `D` bytes per grid point, each coordinate `2l + 1` as ggml's quantizer
//!   holds it (`l` the level index);
//! - `<name>.map`: one little-endian `i32` per lattice index `u = sum(l_k << bits*k)`: the
//!   grid index when `u` is on the grid, `-(offset + 1)` when not (`offset` into the
//!   neighbour lists), `i32::MIN` for indices with a level the quantizers never produce;
//! - `<name>.neighbours`: little-endian `u16`s, per off-grid point its count, then the
//!   grid indices in ggml's order, padded to a multiple of [`PAD`] entries by repeating the
//!   last one (a repeat never wins a first-index search, so lane-parallel searches can
//!   read whole vectors of candidates);
//! - `<name>.codes`: parallel to `<name>.neighbours` (the same `u16` offsets), each
//!   candidate's lattice index `sum(l_k << bits*k)`, from which a vector search takes the
//!   candidates' levels (0 in the count slots).

use std::path::Path;

/// Neighbour lists are padded to a multiple of this many entries: the widest vector of
/// f32 lanes (AVX-512's 16).
const PAD: usize = 16;

#[allow(dead_code)]
mod grids {
    include!("src/scalar/grids.rs");
}

/// A grid and the search ggml does on it.
struct Spec {
    name: &'static str,
    /// Coordinates per point (8 or 4) and bits per coordinate in the lattice index.
    dims: usize,
    bits: usize,
    /// Each point's coordinate bytes as the dequantizer's grid stores them.
    bytes: Vec<Vec<u8>>,
    /// How many distinct distances the neighbour lists take in.
    nwant: usize,
}

fn u64_points(grid: &[u64]) -> Vec<Vec<u8>> {
    grid.iter().map(|g| g.to_le_bytes().to_vec()).collect()
}

fn u32_points(grid: &[u32]) -> Vec<Vec<u8>> {
    grid.iter().map(|g| g.to_le_bytes().to_vec()).collect()
}

fn main() {
    println!("cargo::rerun-if-changed=src/scalar/grids.rs");
    println!("cargo::rerun-if-changed=build.rs");
    let out = std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR");
    let specs = [
        Spec {
            name: "iq2xxs",
            dims: 8,
            bits: 2,
            bytes: u64_points(&grids::IQ2XXS_GRID),
            nwant: 2,
        },
        Spec {
            name: "iq2xs",
            dims: 8,
            bits: 2,
            bytes: u64_points(&grids::IQ2XS_GRID),
            nwant: 2,
        },
        Spec {
            name: "iq2s",
            dims: 8,
            bits: 2,
            bytes: u64_points(&grids::IQ2S_GRID),
            nwant: 1,
        },
        Spec {
            name: "iq1s",
            dims: 8,
            bits: 2,
            // Bytes are i8 -1, 0, 1: reorder so that the level follows the value.
            bytes: u64_points(&grids::IQ1S_GRID)
                .into_iter()
                .map(|p| p.into_iter().map(|b| b.wrapping_add(1)).collect())
                .collect(),
            nwant: 3,
        },
        Spec {
            name: "iq3xxs",
            dims: 4,
            bits: 3,
            bytes: u32_points(&grids::IQ3XXS_GRID),
            nwant: 2,
        },
        Spec {
            name: "iq3s",
            dims: 4,
            bits: 3,
            bytes: u32_points(&grids::IQ3S_GRID),
            nwant: 3,
        },
    ];
    for spec in &specs {
        build(spec, Path::new(&out));
    }
}

fn build(spec: &Spec, out: &Path) {
    // The levels are the distinct coordinate bytes in increasing order.
    let mut values: Vec<u8> = spec.bytes.iter().flatten().copied().collect();
    values.sort_unstable();
    values.dedup();
    let levels = values.len();
    assert!(levels <= 1 << spec.bits, "{}: {levels} levels", spec.name);
    let points: Vec<Vec<u8>> = spec
        .bytes
        .iter()
        .map(|p| {
            assert_eq!(p.len(), spec.dims);
            p.iter()
                .map(|b| values.binary_search(b).unwrap() as u8)
                .collect()
        })
        .collect();

    let map_len = 1usize << (spec.bits * spec.dims);
    let mut map = vec![i32::MIN; map_len];
    for (j, p) in points.iter().enumerate() {
        map[index(p, spec.bits)] = j as i32;
    }

    let mut neighbours: Vec<u16> = Vec::new();
    let mut dist = vec![0u32; points.len()];
    let mut l = vec![0u8; spec.dims];
    for (u, entry) in map.iter_mut().enumerate() {
        if *entry != i32::MIN {
            continue; // on the grid
        }
        let mut in_range = true;
        for (k, lk) in l.iter_mut().enumerate() {
            *lk = ((u >> (spec.bits * k)) & ((1 << spec.bits) - 1)) as u8;
            in_range &= (*lk as usize) < levels;
        }
        if !in_range {
            continue;
        }
        // ggml's squared distance between 2l+1 coordinates is 4x this one: same order.
        for (d, p) in dist.iter_mut().zip(&points) {
            *d = p
                .iter()
                .zip(&l)
                .map(|(&a, &b)| (a as i32 - b as i32).pow(2) as u32)
                .sum();
        }
        let mut distinct: Vec<u32> = dist.clone();
        distinct.sort_unstable();
        distinct.dedup();
        distinct.truncate(spec.nwant);
        let start = neighbours.len();
        *entry = -(start as i32 + 1);
        neighbours.push(0);
        for &want in &distinct {
            neighbours.extend(
                dist.iter()
                    .enumerate()
                    .filter(|&(_, &d)| d == want)
                    .map(|(j, _)| j as u16),
            );
        }
        let count = neighbours.len() - start - 1;
        neighbours[start] = u16::try_from(count).unwrap();
        let last = *neighbours.last().unwrap();
        while !(neighbours.len() - start - 1).is_multiple_of(PAD) {
            neighbours.push(last);
        }
    }
    let mut codes: Vec<u16> = neighbours
        .iter()
        .map(|&j| {
            points
                .get(j as usize)
                .map_or(0, |p| u16::try_from(index(p, spec.bits)).unwrap())
        })
        .collect();
    for &entry in &map {
        if entry < 0 && entry != i32::MIN {
            codes[-(entry + 1) as usize] = 0;
        }
    }

    let point_bytes: Vec<u8> = points
        .iter()
        .flat_map(|p| p.iter().map(|&l| 2 * l + 1))
        .collect();
    let map_bytes: Vec<u8> = map.iter().flat_map(|v| v.to_le_bytes()).collect();
    let neighbour_bytes: Vec<u8> = neighbours.iter().flat_map(|v| v.to_le_bytes()).collect();
    write(out, spec.name, "points", &point_bytes);
    write(out, spec.name, "map", &map_bytes);
    let code_bytes: Vec<u8> = codes.iter().flat_map(|v| v.to_le_bytes()).collect();
    write(out, spec.name, "neighbours", &neighbour_bytes);
    write(out, spec.name, "codes", &code_bytes);
}

fn index(levels: &[u8], bits: usize) -> usize {
    levels
        .iter()
        .enumerate()
        .map(|(k, &l)| (l as usize) << (bits * k))
        .sum()
}

fn write(out: &Path, name: &str, what: &str, bytes: &[u8]) {
    let path = out.join(format!("{name}.{what}"));
    // Rewriting an unchanged file would make cargo recompile the crate for nothing.
    if std::fs::read(&path).is_ok_and(|old| old == bytes) {
        return;
    }
    std::fs::write(&path, bytes).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
}
