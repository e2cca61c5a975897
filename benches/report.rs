//! The quality report's measuring (`quantize --report`, [`ErrorStats::of_quantized_rows`]):
//! a pipeline task's rows (64K values, in the caches as they are after quantizing)
//! dequantized and measured against the values they were quantized from, per type and row
//! width. Throughput is values measured per second.
//!
//! `QF_BENCH_REPORT` lists `type:width` pairs (default: the types and widths of Gemma-3's
//! and llama's Q4_K_M tensors).

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use quantforge::GgmlType;
use quantforge::diff::ErrorStats;
use std::hint::black_box;

/// Values in a pipeline task.
const TASK: usize = 1 << 16;

fn cases() -> Vec<(GgmlType, usize)> {
    std::env::var("QF_BENCH_REPORT")
        .unwrap_or_else(|_| "q8_0:640,q5_0:640,q8_0:4096,q4_K:4096,q6_K:4096".into())
        .split(',')
        .map(|c| {
            let (ty, width) = c.split_once(':').expect("type:width");
            let ty = GgmlType::from_name(ty.trim()).expect("a known type");
            (ty, width.trim().parse().expect("a row width"))
        })
        .collect()
}

/// Deterministic values shaped like weights (a sum of uniforms, an outlier now and then).
fn values(n: usize) -> Vec<f32> {
    let mut s = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        (s >> 40) as f32 / (1u64 << 24) as f32 - 0.5
    };
    (0..n)
        .map(|i| {
            let v = (next() + next() + next()) * 0.05;
            if i % 997 == 0 { v * 8.0 } else { v }
        })
        .collect()
}

fn report(c: &mut Criterion) {
    let mut g = c.benchmark_group("report");
    for (ty, width) in cases() {
        let rows = TASK / width;
        let x = values(rows * width);
        let mut y = vec![0u8; ty.row_size(width).expect("a row size") * rows];
        quantforge::quantize(ty, &x, width, None, &mut y).expect("quantizes");
        let mut out = Vec::with_capacity(rows);
        g.throughput(Throughput::Elements(x.len() as u64));
        g.bench_function(BenchmarkId::new(ty.name(), width), |b| {
            b.iter(|| {
                out.clear();
                ErrorStats::of_quantized_rows(black_box(&x), ty, &y, width, 0, &mut out)
                    .expect("measures");
                black_box(&out);
            })
        });
    }
    g.finish();
}

criterion_group!(benches, report);
criterion_main!(benches);
