//! Comparing two models tensor by tensor (`quantforge diff`): tensors are matched by
//! name; for each pair, whether the shapes, types and bytes are the same, and, with both
//! sides decoded to f32 a slab of rows at a time, the largest absolute difference (and
//! where), the RMSE and the NaN/infinite values met.
//!
//! Differences are taken in f64 (`|f64(a) - f64(b)|`). Elements where either side is NaN
//! or infinite are counted apart and left out of the error figures; two NaNs, or two
//! equal infinities, count as the same value. Shapes compare equal when they differ only
//! by leading axes of 1 (GGUF writers may or may not drop them).

use crate::error::Result;
use crate::model::{Encoding, Model, Tensor};
use crate::slab::{for_each_slab, tasks};
use rayon::prelude::*;
use std::collections::HashMap;

/// Error figures over a set of elements.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ErrorStats {
    /// Elements where both values are finite: the ones the error figures cover.
    pub compared: u64,
    /// Sum of the squared differences over them.
    pub sum_squares: f64,
    /// The largest absolute difference (0 when nothing was compared).
    pub max_abs: f64,
    /// Row-major index of the first element with the largest difference.
    pub max_index: Option<u64>,
    /// NaN or infinite values in A.
    pub non_finite_a: u64,
    /// NaN or infinite values in B.
    pub non_finite_b: u64,
    /// Elements where a side is NaN or infinite and the two are not the same value.
    pub non_finite_mismatches: u64,
}

impl ErrorStats {
    /// The figures of `a` against `b`, elements numbered from `first`.
    pub fn of(a: &[f32], b: &[f32], first: u64) -> ErrorStats {
        let mut s = ErrorStats::default();
        for (i, (&x, &y)) in (first..).zip(a.iter().zip(b)) {
            if x.is_finite() && y.is_finite() {
                let d = (f64::from(x) - f64::from(y)).abs();
                s.compared += 1;
                s.sum_squares += d * d;
                if s.max_index.is_none() || d > s.max_abs {
                    s.max_abs = d;
                    s.max_index = Some(i);
                }
            } else {
                s.non_finite_a += u64::from(!x.is_finite());
                s.non_finite_b += u64::from(!y.is_finite());
                let same = x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan());
                s.non_finite_mismatches += u64::from(!same);
            }
        }
        s
    }

    /// Adds the figures of elements that come after these (ties keep the earlier index).
    pub fn merge(&mut self, later: &ErrorStats) {
        if later.max_index.is_some() && (self.max_index.is_none() || later.max_abs > self.max_abs) {
            self.max_abs = later.max_abs;
            self.max_index = later.max_index;
        }
        self.compared += later.compared;
        self.sum_squares += later.sum_squares;
        self.non_finite_a += later.non_finite_a;
        self.non_finite_b += later.non_finite_b;
        self.non_finite_mismatches += later.non_finite_mismatches;
    }

    /// Root of the mean squared difference, when anything was compared.
    pub fn rmse(&self) -> Option<f64> {
        (self.compared > 0).then(|| (self.sum_squares / self.compared as f64).sqrt())
    }
}

/// One side of a compared tensor.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Side {
    /// How its elements are stored.
    pub encoding: Encoding,
    /// Its row-major shape.
    pub shape: Vec<u64>,
}

impl Side {
    fn of(t: &Tensor<'_>) -> Side {
        Side {
            encoding: t.encoding(),
            shape: t.shape().to_vec(),
        }
    }
}

/// A tensor present in one model only.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unmatched {
    /// Its name.
    pub name: String,
    /// Its type and shape.
    pub side: Side,
}

impl Unmatched {
    fn of(t: &Tensor<'_>) -> Unmatched {
        Unmatched {
            name: t.name().to_owned(),
            side: Side::of(t),
        }
    }
}

/// What the values of a tensor pair came to.
#[derive(Clone, Debug, PartialEq)]
pub enum Values {
    /// Both decoded and compared.
    Compared(ErrorStats),
    /// The shapes differ, so the values were not compared.
    ShapesDiffer,
    /// A side's type cannot be decoded to f32 (the first such side's encoding).
    CannotDecode(Encoding),
}

/// A tensor present in both models.
#[derive(Clone, Debug, PartialEq)]
pub struct TensorDiff {
    /// Its name.
    pub name: String,
    /// In A.
    pub a: Side,
    /// In B.
    pub b: Side,
    /// Same type, same shape, same bytes.
    pub identical_bytes: bool,
    /// The value comparison.
    pub values: Values,
}

impl TensorDiff {
    /// Whether the shapes are the same (leading axes of 1 aside).
    pub fn shapes_equal(&self) -> bool {
        same_shape(&self.a.shape, &self.b.shape)
    }
}

/// The comparison of two models.
#[derive(Clone, Debug, PartialEq)]
pub struct Report {
    /// Tensors in both, in A's order.
    pub both: Vec<TensorDiff>,
    /// Tensors only in A, in A's order.
    pub only_in_a: Vec<Unmatched>,
    /// Tensors only in B, in B's order.
    pub only_in_b: Vec<Unmatched>,
}

impl Report {
    /// Tensors in both with identical bytes.
    pub fn identical(&self) -> usize {
        self.both.iter().filter(|t| t.identical_bytes).count()
    }

    /// The error figures of every compared tensor together.
    pub fn overall(&self) -> ErrorStats {
        let mut all = ErrorStats::default();
        for t in &self.both {
            if let Values::Compared(stats) = &t.values {
                all.merge(stats);
            }
        }
        all
    }
}

/// Compares `a` with `b` (see the module docs), on the current rayon pool.
pub fn diff(a: &Model, b: &Model) -> Result<Report> {
    let tensors_a = a.tensors()?;
    let tensors_b = b.tensors()?;
    let in_b: HashMap<&str, &Tensor<'_>> = tensors_b.iter().map(|t| (t.name(), t)).collect();
    let mut report = Report {
        both: Vec::new(),
        only_in_a: Vec::new(),
        only_in_b: Vec::new(),
    };
    for ta in &tensors_a {
        match in_b.get(ta.name()) {
            Some(tb) => report.both.push(compare(ta, tb)?),
            None => report.only_in_a.push(Unmatched::of(ta)),
        }
    }
    let in_a: HashMap<&str, ()> = tensors_a.iter().map(|t| (t.name(), ())).collect();
    for tb in tensors_b.iter().filter(|t| !in_a.contains_key(t.name())) {
        report.only_in_b.push(Unmatched::of(tb));
    }
    Ok(report)
}

/// One tensor pair: bytes compared and values decoded slab by slab.
fn compare(a: &Tensor<'_>, b: &Tensor<'_>) -> Result<TensorDiff> {
    let mut diff = TensorDiff {
        name: a.name().to_owned(),
        a: Side::of(a),
        b: Side::of(b),
        identical_bytes: false,
        values: Values::ShapesDiffer,
    };
    let same_layout = diff.shapes_equal() && a.encoding() == b.encoding();
    if !diff.shapes_equal() {
        return Ok(diff);
    }
    if let Some(t) = [a, b].into_iter().find(|t| !t.encoding().can_decode()) {
        diff.identical_bytes = same_layout && a.data() == b.data();
        diff.values = Values::CannotDecode(t.encoding());
        return Ok(diff);
    }
    let (row_a, row_b) = (a.row_bytes()?, b.row_bytes()?);
    let (row_len, task_rows) = (a.row_len() as u64, a.task_rows());
    let mut identical = same_layout;
    let mut stats = ErrorStats::default();
    for_each_slab(&[a, b], 0, |rows| {
        let bytes_a = &a.data()[rows.start * row_a..rows.end * row_a];
        identical = identical && bytes_a == &b.data()[rows.start * row_b..rows.end * row_b];
        let parts = tasks(rows, task_rows)
            .into_par_iter()
            .map_init(
                || (Vec::new(), Vec::new()),
                |(x, y), rows| {
                    let first = rows.start as u64 * row_len;
                    let x = a.decode_rows(rows.clone(), x)?;
                    let y = b.decode_rows(rows, y)?;
                    Ok(ErrorStats::of(x, y, first))
                },
            )
            .collect::<Result<Vec<_>>>()?;
        parts.iter().for_each(|p| stats.merge(p));
        Ok(())
    })?;
    diff.identical_bytes = identical;
    diff.values = Values::Compared(stats);
    Ok(diff)
}

/// Shapes equal once leading axes of 1 are dropped.
fn same_shape(a: &[u64], b: &[u64]) -> bool {
    let trim = |s: &[u64]| s.iter().position(|&d| d != 1).map_or(0, |i| s.len() - i);
    let (a, b) = (&a[a.len() - trim(a)..], &b[b.len() - trim(b)..]);
    a == b
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stats_cover_finite_pairs_and_count_the_rest() {
        let a = [1.0f32, 2.0, f32::NAN, f32::INFINITY, 5.0, -1.0];
        let b = [1.0f32, 2.5, f32::NAN, 3.0, 4.5, f32::NEG_INFINITY];
        let s = ErrorStats::of(&a, &b, 10);
        assert_eq!(s.compared, 3);
        assert_eq!(s.max_abs, 0.5);
        assert_eq!(s.max_index, Some(11), "the first of the tied maxima");
        assert_eq!(s.sum_squares, 0.5);
        assert_eq!((s.non_finite_a, s.non_finite_b), (2, 2));
        assert_eq!(s.non_finite_mismatches, 2);
        assert_eq!(s.rmse(), Some((0.5f64 / 3.0).sqrt()));
    }

    #[test]
    fn merging_in_order_equals_one_pass() {
        let a: Vec<f32> = (0..100).map(|i| (i as f32 * 0.37).sin()).collect();
        let b: Vec<f32> = (0..100).map(|i| (i as f32 * 0.37).cos()).collect();
        let whole = ErrorStats::of(&a, &b, 0);
        let mut parts = ErrorStats::default();
        for k in (0..100).step_by(7) {
            let end = (k + 7).min(100);
            parts.merge(&ErrorStats::of(&a[k..end], &b[k..end], k as u64));
        }
        assert_eq!(parts.max_index, whole.max_index);
        assert_eq!(parts.max_abs, whole.max_abs);
        assert_eq!(parts.compared, 100);
        assert!((parts.sum_squares - whole.sum_squares).abs() < 1e-9);
        assert_eq!(ErrorStats::default().rmse(), None);
    }

    #[test]
    fn shapes_ignore_leading_ones_only() {
        assert!(same_shape(&[1, 256], &[256]));
        assert!(same_shape(&[1, 1, 4, 8], &[4, 8]));
        assert!(same_shape(&[], &[1]));
        assert!(!same_shape(&[256, 1], &[256]));
        assert!(!same_shape(&[4, 8], &[8, 4]));
    }
}
