//! Lookup tables of ggml's i-quants and non-linear 4-bit formats, transcribed from
//! `ggml-common.h` (ggml 0.26.0).
//!
//! The grids are stored as the integers ggml declares (`uint64_t`/`uint32_t`); ggml reads
//! them through byte pointers on a little-endian machine, so byte `j` of a grid point is
//! `entry.to_le_bytes()[j]`.

/// `kmask_iq2xs`: the bit mask selecting the sign of element `j` of a group of 8.
pub const KMASK_IQ2XS: [u8; 8] = [1, 2, 4, 8, 16, 32, 64, 128];

/// `ksigns_iq2xs`: 7 stored sign bits to 8 (the eighth makes the count of set bits even).
pub const KSIGNS_IQ2XS: [u8; 128] = [
    0, 129, 130, 3, 132, 5, 6, 135, 136, 9, 10, 139, 12, 141, 142, 15, 144, 17, 18, 147, 20, 149,
    150, 23, 24, 153, 154, 27, 156, 29, 30, 159, 160, 33, 34, 163, 36, 165, 166, 39, 40, 169, 170,
    43, 172, 45, 46, 175, 48, 177, 178, 51, 180, 53, 54, 183, 184, 57, 58, 187, 60, 189, 190, 63,
    192, 65, 66, 195, 68, 197, 198, 71, 72, 201, 202, 75, 204, 77, 78, 207, 80, 209, 210, 83, 212,
    85, 86, 215, 216, 89, 90, 219, 92, 221, 222, 95, 96, 225, 226, 99, 228, 101, 102, 231, 232,
    105, 106, 235, 108, 237, 238, 111, 240, 113, 114, 243, 116, 245, 246, 119, 120, 249, 250, 123,
    252, 125, 126, 255,
];

pub use super::grids::*;

/// The points of a grid of `u64` entries as their 8 bytes (`to_le_bytes`), for the
/// dequantizers: read from memory as bytes a point widens straight into vector lanes,
/// where from the `u64` the compiler took it apart byte by byte (measured: iq1_s's
/// dequantizer ran at less than half the rate; iq2's `put_signed` runs slower this way,
/// so its grids stay `u64`).
const fn point_bytes<const N: usize>(grid: &[u64; N]) -> [[u8; 8]; N] {
    let mut points = [[0u8; 8]; N];
    let mut k = 0;
    while k < N {
        points[k] = grid[k].to_le_bytes();
        k += 1;
    }
    points
}

/// [`IQ1S_GRID`] as bytes ([`point_bytes`]); ggml reads them as `i8`.
pub static IQ1S_POINTS: [[u8; 8]; NGRID_IQ1S] = point_bytes(&IQ1S_GRID);

/// `kvalues_iq4nl`: the 16 non-linear levels of IQ4_NL and IQ4_XS.
pub const KVALUES_IQ4NL: [i8; 16] = [
    -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
];

/// `kvalues_mxfp4` (`kvalues_fp4`): the E2M1 values, doubled, shared by MXFP4 and NVFP4.
pub const KVALUES_MXFP4: [i8; 16] = [0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12];

/// `IQ1S_DELTA`: the shift added to (or subtracted from) every grid value. ggml's IQ1_M
/// dequantizer uses it too (its `IQ1M_DELTA` has the same value).
pub const IQ1S_DELTA: f32 = 0.125;

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes_in<const N: usize>(points: impl Iterator<Item = [u8; N]>, allowed: &[u8]) {
        for p in points {
            assert!(p.iter().all(|b| allowed.contains(b)), "{p:?}");
        }
    }

    fn all_distinct<T: Ord + Copy>(v: &[T]) -> bool {
        let mut s = v.to_vec();
        s.sort();
        s.windows(2).all(|w| w[0] != w[1])
    }

    #[test]
    fn sign_tables() {
        for (j, &m) in KMASK_IQ2XS.iter().enumerate() {
            assert_eq!(m, 1 << j);
        }
        for (i, &s) in KSIGNS_IQ2XS.iter().enumerate() {
            assert_eq!(s & 127, i as u8);
            assert_eq!(s.count_ones() % 2, 0);
        }
    }

    #[test]
    fn grids_hold_their_magnitudes() {
        bytes_in(IQ2XXS_GRID.iter().map(|g| g.to_le_bytes()), &[8, 25, 43]);
        bytes_in(IQ2XS_GRID.iter().map(|g| g.to_le_bytes()), &[8, 25, 43]);
        bytes_in(IQ2S_GRID.iter().map(|g| g.to_le_bytes()), &[8, 25, 43]);
        bytes_in(
            IQ3XXS_GRID.iter().map(|g| g.to_le_bytes()),
            &[4, 12, 20, 28, 36, 44, 52, 62],
        );
        bytes_in(
            IQ3S_GRID.iter().map(|g| g.to_le_bytes()),
            &[1, 3, 5, 7, 9, 11, 13, 15],
        );
        bytes_in(IQ1S_GRID.iter().map(|g| g.to_le_bytes()), &[0, 1, 0xff]);
        assert!(all_distinct(&IQ2XXS_GRID));
        assert!(all_distinct(&IQ2XS_GRID));
        assert!(all_distinct(&IQ2S_GRID));
        assert!(all_distinct(&IQ3XXS_GRID));
        assert!(all_distinct(&IQ3S_GRID));
        assert!(all_distinct(&IQ1S_GRID));
        // First and last entries as ggml-common.h has them.
        assert_eq!(IQ2XXS_GRID[0], 0x0808_0808_0808_0808);
        assert_eq!(IQ2XXS_GRID[255], 0x2b2b_2b19_0808_1908);
        assert_eq!(IQ2XS_GRID[511], 0x2b2b_2b2b_2b2b_2b2b);
        assert_eq!(IQ2S_GRID[1023], 0x2b2b_2b2b_2b2b_2b2b);
        assert_eq!(IQ3XXS_GRID[255], 0x3e34_1c04);
        assert_eq!(IQ3S_GRID[511], 0x0f0f_0101);
        assert_eq!(IQ1S_GRID[2047], 0x0101_0101_0101_0101);
    }

    #[test]
    fn kvalues() {
        assert!(KVALUES_IQ4NL.windows(2).all(|w| w[0] < w[1]));
        assert_eq!((KVALUES_IQ4NL[0], KVALUES_IQ4NL[15]), (-127, 113));
        for i in 0..8 {
            assert_eq!(KVALUES_MXFP4[i + 8], -KVALUES_MXFP4[i]);
        }
        assert_eq!(KVALUES_MXFP4[..8], [0, 1, 2, 3, 4, 6, 8, 12]);
    }
}
