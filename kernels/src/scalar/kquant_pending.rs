//! TEMPORARY until kquant.rs lands.
#![allow(clippy::too_many_arguments, missing_docs)]
pub fn make_qx_quants(
    _n: usize,
    _nmax: i32,
    _x: &[f32],
    _l: &mut [i8],
    _rmse: i32,
    _qw: Option<&[f32]>,
) -> f32 {
    todo!()
}
pub fn make_qkx3_quants(
    _n: usize,
    _nmax: i32,
    _x: &[f32],
    _w: Option<&[f32]>,
    _l: &mut [u8],
    _laux: &mut [u8],
    _rmin: f32,
    _rdelta: f32,
    _nstep: i32,
    _use_mad: bool,
) -> (f32, f32) {
    todo!()
}
