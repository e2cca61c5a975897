//! `--prune-layers`: whole layers left out of the output and the layers after them
//! renumbered, as llama.cpp's quantizer does it (`remap_layer` in `llama-quant.cpp`).

use super::{PlanError, TensorSpec};
use std::collections::HashMap;

/// The tensor names after pruning, by position in the tensor list (`None`: left out),
/// and the layer count written to `{arch}.block_count`.
pub(super) struct Pruned {
    pub names: Vec<Option<String>>,
    pub block_count: u32,
}

/// Where a name holds `blk.N.` as llama.cpp's `std::regex_search` with `blk\.(\d+)\.`
/// finds it: the leftmost `blk.` followed by digits and a dot, anywhere in the name. The
/// byte range of the digits.
fn layer_digits(name: &str) -> Option<std::ops::Range<usize>> {
    let bytes = name.as_bytes();
    (0..bytes.len()).find_map(|start| {
        let rest = bytes[start..].strip_prefix(b"blk.")?;
        let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
        (digits > 0 && rest.get(digits) == Some(&b'.')).then(|| start + 4..start + 4 + digits)
    })
}

/// Renames the tensors in load order (`load_order`, positions into `tensors`) as
/// `remap_layer` does: a layer in `prune` is dropped; one below `prune[0]` keeps its
/// number; any other takes the next number after the last one given. Every name that
/// carries a layer is rewritten with the number printed in decimal. `prune` is used as
/// given (llama-quantize sorts it and drops duplicates); it must not be empty.
pub(super) fn prune(
    tensors: &[TensorSpec],
    load_order: &[usize],
    prune: &[u32],
) -> Result<Pruned, PlanError> {
    let front = i64::from(prune[0]);
    // Per layer its new number, `None` for a dropped layer: `remap_layer`'s `mapped`.
    let mut mapped: HashMap<i64, Option<i64>> = HashMap::new();
    let mut next_id: i64 = 0;
    let mut names = vec![None; tensors.len()];
    for &index in load_order {
        let name = &tensors[index].name;
        let Some(digits) = layer_digits(name) else {
            names[index] = Some(name.clone());
            continue;
        };
        // std::stoi: a number beyond int throws, and llama.cpp's quantizer fails.
        let blk = name[digits.clone()]
            .parse::<i32>()
            .map(i64::from)
            .map_err(|_| PlanError::BadLayerNumber(name.clone()))?;
        let new = *mapped.entry(blk).or_insert_with(|| {
            if prune.iter().any(|&p| i64::from(p) == blk) {
                None
            } else if blk < front {
                next_id = blk + 1;
                Some(blk)
            } else {
                next_id += 1;
                Some(next_id - 1)
            }
        });
        names[index] = new.map(|n| format!("{}{n}{}", &name[..digits.start], &name[digits.end..]));
    }
    Ok(Pruned {
        names,
        block_count: u32::try_from(next_id)
            .map_err(|_| PlanError::Metadata("pruned block count out of range".into()))?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use quantforge_kernels::GgmlType;

    fn specs(names: &[&str]) -> Vec<TensorSpec> {
        names
            .iter()
            .map(|n| TensorSpec::new(*n, [32, 1, 1, 1], GgmlType::F32))
            .collect()
    }

    fn run(names: &[&str], list: &[u32]) -> (Vec<Option<String>>, u32) {
        let t = specs(names);
        let order: Vec<usize> = (0..t.len()).collect();
        let p = prune(&t, &order, list).unwrap();
        (p.names, p.block_count)
    }

    #[test]
    fn finds_the_layer_anywhere() {
        assert_eq!(layer_digits("blk.12.attn_q.weight"), Some(4..6));
        assert_eq!(layer_digits("enc.blk.3.x"), Some(8..9));
        assert_eq!(layer_digits("blk.x.blk.7.y"), Some(10..11));
        assert_eq!(layer_digits("blk.12"), None);
        assert_eq!(layer_digits("token_embd.weight"), None);
    }

    #[test]
    fn drops_and_renumbers() {
        let names = [
            "token_embd.weight",
            "blk.0.a",
            "blk.1.a",
            "blk.1.b",
            "blk.2.a",
            "blk.3.a",
            "blk.4.a",
            "output.weight",
        ];
        let (n, count) = run(&names, &[1, 3]);
        let n: Vec<Option<&str>> = n.iter().map(|s| s.as_deref()).collect();
        assert_eq!(
            n,
            [
                Some("token_embd.weight"),
                Some("blk.0.a"),
                None,
                None,
                Some("blk.1.a"),
                None,
                Some("blk.2.a"),
                Some("output.weight"),
            ]
        );
        assert_eq!(count, 3);
    }

    #[test]
    fn layers_beyond_the_model_change_nothing() {
        let (n, count) = run(&["blk.0.a", "blk.1.a"], &[5]);
        assert_eq!(n[1].as_deref(), Some("blk.1.a"));
        assert_eq!(count, 2);
        // Pruning layer 0 renumbers from 0; pruning everything leaves 0 layers.
        let (n, count) = run(&["blk.0.a", "blk.1.a"], &[0]);
        assert_eq!(n, [None, Some("blk.0.a".to_string())]);
        assert_eq!(count, 1);
        assert_eq!(run(&["blk.0.a", "blk.1.a"], &[0, 1]).1, 0);
    }

    #[test]
    fn numbers_are_rewritten_in_decimal_and_checked() {
        let (n, _) = run(&["blk.01.a"], &[4]);
        assert_eq!(n[0].as_deref(), Some("blk.1.a"));
        let t = specs(&["blk.99999999999.a"]);
        assert!(matches!(
            prune(&t, &[0], &[1]),
            Err(PlanError::BadLayerNumber(_))
        ));
    }
}
