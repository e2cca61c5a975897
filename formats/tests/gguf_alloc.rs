//! Allocation bounds of the GGUF parser, measured with a counting global allocator: the
//! peak heap use of parsing any input stays under [`parse_allocation_bound`] of its
//! length. Checked on the worst shapes a file can take (the most elements per byte of
//! each kind), on hostile headers that claim huge sizes, and on thousands of random
//! corruptions of valid files.

mod gguf_common;

use gguf_common::counting_alloc::{Counting, peak_during};
use gguf_common::{Raw, repo_root, small_gguf};
use quantforge_formats::gguf::{GgufFile, GgufHeader, parse_allocation_bound};

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Peak bytes allocated (above what was live before) while parsing `bytes` in place.
fn parse_peak(bytes: &[u8]) -> usize {
    peak_during(|| drop(GgufHeader::parse(bytes)))
}

fn check(label: &str, bytes: &[u8]) -> f64 {
    let peak = parse_peak(bytes);
    let bound = parse_allocation_bound(bytes.len());
    assert!(
        peak <= bound,
        "{label}: {peak} bytes allocated parsing {} bytes, bound {bound}",
        bytes.len()
    );
    peak as f64 / bytes.len().max(1) as f64
}

/// Files packing the most parsed items into the fewest bytes.
fn dense_files() -> Vec<(&'static str, Vec<u8>)> {
    const N: u64 = 20_000;
    let mut out = Vec::new();
    let mut r = Raw::header(3, 0, N);
    for i in 0..N {
        r = r.str(&format!("{i:x}")).u32(0).bytes(&[0]); // u8 values, short keys
    }
    out.push(("many tiny keys", r.0));
    let mut r = Raw::header(3, 0, 1).array_kv("k", 8, N);
    for _ in 0..N {
        r = r.u64(0); // empty strings
    }
    out.push(("many empty strings", r.0));
    let mut r = Raw::header(3, 0, 1).array_kv("k", 9, N);
    for _ in 0..N {
        r = r.u32(0).u64(0); // empty inner arrays
    }
    out.push(("many empty inner arrays", r.0));
    let mut r = Raw::header(3, 0, 1).array_kv("k", 7, N);
    r = r.bytes(&vec![1; N as usize]);
    out.push(("many bools", r.0));
    let mut r = Raw::header(3, N, 0);
    for i in 0..N {
        r = r.str(&format!("{i:x}")).u32(0).u32(0).u64(0); // 0-dim f32 scalars
    }
    // Offsets are wrong after the first: parsing fails at the layout check, after
    // every entry was allocated, which is the peak we want.
    out.push(("many tiny tensors", r.0));
    out
}

/// Hostile headers that claim huge sizes.
fn hostile_files() -> Vec<(&'static str, Vec<u8>)> {
    let filler = [0u8; 256];
    let deep = Raw::header(3, 0, 1).nested_kv("deep", 100_000);
    vec![
        ("2^60 tensors", Raw::header(3, 1 << 60, 0).bytes(&filler).0),
        ("2^60 keys", Raw::header(3, 0, 1 << 60).bytes(&filler).0),
        (
            "2^60 strings",
            Raw::header(3, 0, 1)
                .array_kv("k", 8, 1 << 60)
                .bytes(&filler)
                .0,
        ),
        (
            "4 GiB string",
            Raw::header(3, 0, 1)
                .str("k")
                .u32(8)
                .u64(1 << 32)
                .bytes(&filler)
                .0,
        ),
        ("deep nesting", deep.0),
        (
            "inner arrays claiming the whole file each",
            Raw::header(3, 0, 1)
                .str("k")
                .u32(9)
                .u32(9)
                .u64(20)
                .u32(9)
                .u64(20)
                .u32(9)
                .u64(20)
                .bytes(&filler)
                .0,
        ),
    ]
}

#[test]
fn parsing_allocates_within_the_bound() {
    let mut worst = (0.0, "");
    for (label, bytes) in dense_files().iter().chain(&hostile_files()) {
        let ratio = check(label, bytes);
        eprintln!(
            "{label}: {} bytes in, {ratio:.1} bytes allocated per byte",
            bytes.len()
        );
        if ratio > worst.0 {
            worst = (ratio, label);
        }
    }
    eprintln!("worst: {:.1} bytes per input byte ({})", worst.0, worst.1);

    // Random corruptions of valid files: flipped bytes, overwritten words, cuts.
    let seeds = [
        small_gguf(),
        std::fs::read(repo_root().join("golden/gguf/small.gguf")).unwrap(),
    ];
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for seed in &seeds {
        for _ in 0..5000 {
            let mut bytes = seed.clone();
            for _ in 0..1 + next() % 4 {
                let at = (next() % bytes.len() as u64) as usize;
                match next() % 3 {
                    0 => bytes[at] ^= 1 << (next() % 8),
                    1 => {
                        let word = next().to_le_bytes();
                        let n = (bytes.len() - at).min(8);
                        bytes[at..at + n].copy_from_slice(&word[..n]);
                    }
                    _ => bytes.truncate(at),
                }
                if bytes.is_empty() {
                    break;
                }
            }
            check("corrupted file", &bytes);
            // And through the owning API, which must agree.
            let _ = GgufFile::from_bytes(bytes);
        }
    }
}
