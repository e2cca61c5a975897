//! Helpers shared by the safetensors integration tests: owned tensors and a proptest
//! strategy for sets of them.
#![allow(dead_code)] // each test binary uses its own subset

use proptest::prelude::*;
use quantforge_formats::safetensors::{Dtype, TensorView};

/// A tensor that owns its name, shape and bytes.
#[derive(Clone, Debug)]
pub struct Owned {
    pub name: String,
    pub dtype: Dtype,
    pub shape: Vec<usize>,
    pub data: Vec<u8>,
}

impl Owned {
    /// A view of it, for the writer.
    pub fn view(&self) -> TensorView<'_> {
        TensorView::new(&self.name, self.dtype, self.shape.clone(), &self.data).unwrap()
    }
}

/// Sets of up to `max_count` tensors with distinct names from `names` (never
/// `__metadata__`), dtypes from `dtypes`, up to 3 axes of up to `max_dim - 1`, random
/// bytes. Sub-byte tensors always end on a byte boundary.
pub fn tensor_sets(
    names: impl Strategy<Value = String>,
    dtypes: Vec<Dtype>,
    max_dim: usize,
    max_count: usize,
) -> impl Strategy<Value = Vec<Owned>> {
    let one = (
        names,
        proptest::sample::select(dtypes),
        proptest::collection::vec(0..max_dim, 0..4),
    )
        .prop_filter("sub-byte tensors end on a byte", |(_, d, s)| {
            (s.iter().product::<usize>() * d.bit_size()).is_multiple_of(8)
        })
        .prop_flat_map(|(name, dtype, shape)| {
            let len = shape.iter().product::<usize>() * dtype.bit_size() / 8;
            proptest::collection::vec(any::<u8>(), len).prop_map(move |data| Owned {
                name: name.clone(),
                dtype,
                shape: shape.clone(),
                data,
            })
        });
    proptest::collection::vec(one, 0..max_count).prop_map(|mut v| {
        let mut seen = std::collections::HashSet::new();
        v.retain(|t| t.name != "__metadata__" && seen.insert(t.name.clone()));
        v
    })
}
