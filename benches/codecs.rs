//! Codec throughput: every quantforge path this CPU has beside ggml's reference
//! (`ggml_quantize_chunk`, `to_float`) and ggml-cpu's `from_float`, with a memcpy of the
//! same size as the physical limit. Throughput is f32 bytes in for quantize and f32 bytes
//! out for dequantize. ggml's columns need `--features ggml`.
//!
//! `QF_BENCH_MIB` sets the f32 buffer size (default 64, larger than the last-level cache);
//! `QF_BENCH_TYPES` a comma-separated list of types (default: every type with a SIMD path but f16/bf16).

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use quantforge::{Codec, GgmlType, Isa};
use std::hint::black_box;

const N_PER_ROW: usize = 4096;

fn settings() -> (usize, Vec<GgmlType>) {
    let mib: usize = std::env::var("QF_BENCH_MIB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(64);
    let types = std::env::var("QF_BENCH_TYPES")
        .unwrap_or_else(|_| {
            "q4_0,q5_0,q8_0,q8_K,q2_K,q3_K,q4_K,q5_K,q6_K,tq2_0,iq4_nl,iq4_xs".into()
        })
        .split(',')
        .map(|t| GgmlType::from_name(t.trim()).expect("a known type"))
        .collect();
    let n = (mib << 20) / 4 / N_PER_ROW * N_PER_ROW;
    (n, types)
}

/// Deterministic weights of a realistic spread.
fn input(n: usize) -> Vec<f32> {
    let mut s = 0x2545_F491_4F6C_DD1Du64;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 0.1
        })
        .collect()
}

fn codecs(ty: GgmlType) -> Vec<Codec> {
    let mut v: Vec<Codec> = Isa::ALL
        .iter()
        .filter_map(|&isa| Codec::new(ty, isa))
        .collect();
    v.dedup_by_key(|c| c.isa());
    v
}

fn quantize(c: &mut Criterion) {
    let (n, types) = settings();
    let x = input(n);
    let imatrix: Vec<f32> = (0..N_PER_ROW).map(|i| 1.0 + (i % 7) as f32).collect();
    let mut g = c.benchmark_group("quantize");
    g.sample_size(10);
    g.throughput(Throughput::Bytes((n * 4) as u64));
    let mut copy = vec![0f32; n];
    g.bench_function("memcpy", |b| b.iter(|| copy.copy_from_slice(black_box(&x))));
    for ty in types {
        let mut dst = vec![0u8; n / N_PER_ROW * ty.row_size(N_PER_ROW).unwrap()];
        for (tag, w) in [("", None), ("+imatrix", Some(&imatrix[..]))] {
            if w.is_some() && !quantforge::kernels::uses_imatrix(ty) {
                continue;
            }
            for codec in codecs(ty) {
                let id = BenchmarkId::new(format!("{ty}{tag}"), codec.isa());
                g.bench_function(id, |b| {
                    b.iter(|| {
                        codec
                            .quantize(black_box(&x), N_PER_ROW, w, &mut dst)
                            .unwrap()
                    })
                });
            }
            #[cfg(feature = "ggml")]
            {
                let id = BenchmarkId::new(format!("{ty}{tag}"), "ggml-ref");
                g.bench_function(id, |b| {
                    b.iter(|| {
                        ggml_ref::quantize_chunk_into(
                            ty.code(),
                            black_box(&x),
                            N_PER_ROW,
                            w,
                            &mut dst,
                        )
                    })
                });
                if w.is_none()
                    && ggml_ref::quantize_row_cpu_into(
                        ty.code(),
                        &x[..N_PER_ROW],
                        &mut dst[..ty.row_size(N_PER_ROW).unwrap()],
                    )
                {
                    let id = BenchmarkId::new(ty.to_string(), "ggml-cpu");
                    g.bench_function(id, |b| {
                        b.iter(|| {
                            ggml_ref::quantize_row_cpu_into(ty.code(), black_box(&x), &mut dst)
                        })
                    });
                }
            }
        }
    }
    g.finish();
}

fn dequantize(c: &mut Criterion) {
    let (n, types) = settings();
    let x = input(n);
    let mut g = c.benchmark_group("dequantize");
    g.sample_size(10);
    g.throughput(Throughput::Bytes((n * 4) as u64));
    let mut y = vec![0f32; n];
    g.bench_function("memcpy", |b| b.iter(|| y.copy_from_slice(black_box(&x))));
    for ty in types {
        let mut q = vec![0u8; n / N_PER_ROW * ty.row_size(N_PER_ROW).unwrap()];
        quantforge::quantize(ty, &x, N_PER_ROW, None, &mut q).unwrap();
        for codec in codecs(ty) {
            g.bench_function(BenchmarkId::new(ty.to_string(), codec.isa()), |b| {
                b.iter(|| codec.dequantize(black_box(&q), &mut y).unwrap())
            });
        }
        #[cfg(feature = "ggml")]
        g.bench_function(BenchmarkId::new(ty.to_string(), "ggml-ref"), |b| {
            b.iter(|| ggml_ref::dequantize_row_into(ty.code(), black_box(&q), &mut y))
        });
    }
    g.finish();
}

criterion_group!(benches, quantize, dequantize);
criterion_main!(benches);
