//! The rate of the 512-bit operations the k-quant searches are made of, on this CPU: twelve
//! independent chains of one operation (or of a mix), so that only the execution units
//! limit them. Throughput is operations per second; the time per operation, with the
//! operation count per value of a search, bounds how fast an exact search can run here
//! (see docs/benchmarks-history.md). x86-64 with AVX-512 only; elsewhere it measures nothing.

use criterion::{Criterion, criterion_group, criterion_main};

/// Iterations per call of a kernel (12 operations each).
const ITERS: u64 = 1 << 16;

/// A kernel: runs its iterations.
#[cfg(target_arch = "x86_64")]
type Kernel = unsafe fn(u64);

#[cfg(target_arch = "x86_64")]
mod kernels {
    use std::arch::asm;

    /// Generates a function running `ITERS` iterations of its 512-bit operations (up to
    /// seventeen: one on each of zmm0..zmm11 and zmm14..zmm18), each reading its own result
    /// of the iteration before, so that only the execution units limit them. zmm12 holds 1
    /// and zmm13 a tiny value, as operands.
    macro_rules! chains {
        ($name:ident, $($op:literal),+ $(,)?) => {
            /// # Safety
            /// The CPU must have AVX-512F.
            #[target_feature(enable = "avx512f")]
            pub unsafe fn $name(iters: u64) {
                // SAFETY: register-only operations on registers declared clobbered.
                unsafe {
                    asm!(
                        "vbroadcastss zmm12, [{one}]",
                        "vbroadcastss zmm13, [{tiny}]",
                        "vmovaps zmm0, zmm12", "vmovaps zmm1, zmm12", "vmovaps zmm2, zmm12",
                        "vmovaps zmm3, zmm12", "vmovaps zmm4, zmm12", "vmovaps zmm5, zmm12",
                        "vmovaps zmm6, zmm12", "vmovaps zmm7, zmm12", "vmovaps zmm8, zmm12",
                        "vmovaps zmm9, zmm12", "vmovaps zmm10, zmm12", "vmovaps zmm11, zmm12",
                        "vmovaps zmm14, zmm12", "vmovaps zmm15, zmm12", "vmovaps zmm16, zmm12",
                        "vmovaps zmm17, zmm12", "vmovaps zmm18, zmm12",
                        "2:",
                        $($op,)+
                        "dec {n}",
                        "jnz 2b",
                        one = in(reg) &1.0f32,
                        tiny = in(reg) &1e-7f32,
                        n = inout(reg) iters => _,
                        out("zmm0") _, out("zmm1") _, out("zmm2") _, out("zmm3") _,
                        out("zmm4") _, out("zmm5") _, out("zmm6") _, out("zmm7") _,
                        out("zmm8") _, out("zmm9") _, out("zmm10") _, out("zmm11") _,
                        out("zmm12") _, out("zmm13") _, out("zmm14") _, out("zmm15") _,
                        out("zmm16") _, out("zmm17") _, out("zmm18") _,
                        options(nostack),
                    );
                }
            }
        };
    }

    chains!(
        add_mul,
        "vaddps zmm0, zmm0, zmm13",
        "vmulps zmm1, zmm1, zmm12",
        "vaddps zmm2, zmm2, zmm13",
        "vmulps zmm3, zmm3, zmm12",
        "vaddps zmm4, zmm4, zmm13",
        "vmulps zmm5, zmm5, zmm12",
        "vaddps zmm6, zmm6, zmm13",
        "vmulps zmm7, zmm7, zmm12",
        "vaddps zmm8, zmm8, zmm13",
        "vmulps zmm9, zmm9, zmm12",
        "vaddps zmm10, zmm10, zmm13",
        "vmulps zmm11, zmm11, zmm12",
    );
    chains!(
        round,
        "vrndscaleps zmm0, zmm0, 8",
        "vrndscaleps zmm1, zmm1, 8",
        "vrndscaleps zmm2, zmm2, 8",
        "vrndscaleps zmm3, zmm3, 8",
        "vrndscaleps zmm4, zmm4, 8",
        "vrndscaleps zmm5, zmm5, 8",
        "vrndscaleps zmm6, zmm6, 8",
        "vrndscaleps zmm7, zmm7, 8",
        "vrndscaleps zmm8, zmm8, 8",
        "vrndscaleps zmm9, zmm9, 8",
        "vrndscaleps zmm10, zmm10, 8",
        "vrndscaleps zmm11, zmm11, 8",
    );
    chains!(
        max,
        "vmaxps zmm0, zmm0, zmm13",
        "vmaxps zmm1, zmm1, zmm13",
        "vmaxps zmm2, zmm2, zmm13",
        "vmaxps zmm3, zmm3, zmm13",
        "vmaxps zmm4, zmm4, zmm13",
        "vmaxps zmm5, zmm5, zmm13",
        "vmaxps zmm6, zmm6, zmm13",
        "vmaxps zmm7, zmm7, zmm13",
        "vmaxps zmm8, zmm8, zmm13",
        "vmaxps zmm9, zmm9, zmm13",
        "vmaxps zmm10, zmm10, zmm13",
        "vmaxps zmm11, zmm11, zmm13",
    );
    // The whole of a q4_K trial per vector of values, as the kernel runs it: 8 adds,
    // subtractions and roundings, 7 multiplies, and the two bounds of the codes' clamp,
    // as float maximum and minimum or as signed-integer ones on the bits.
    chains!(
        trial_float_clamp,
        "vsubps zmm0, zmm0, zmm13",
        "vmulps zmm1, zmm1, zmm12",
        "vrndscaleps zmm2, zmm2, 8",
        "vmaxps zmm3, zmm3, zmm13",
        "vminps zmm4, zmm4, zmm12",
        "vmulps zmm5, zmm5, zmm12",
        "vaddps zmm6, zmm6, zmm13",
        "vmulps zmm7, zmm7, zmm12",
        "vaddps zmm8, zmm8, zmm13",
        "vmulps zmm9, zmm9, zmm12",
        "vaddps zmm10, zmm10, zmm13",
        "vmulps zmm11, zmm11, zmm12",
        "vaddps zmm14, zmm14, zmm13",
        "vsubps zmm15, zmm15, zmm13",
        "vmulps zmm16, zmm16, zmm12",
        "vmulps zmm17, zmm17, zmm12",
        "vaddps zmm18, zmm18, zmm13",
    );
    chains!(
        trial_int_clamp,
        "vsubps zmm0, zmm0, zmm13",
        "vmulps zmm1, zmm1, zmm12",
        "vrndscaleps zmm2, zmm2, 8",
        "vpmaxsd zmm3, zmm3, zmm13",
        "vpminsd zmm4, zmm4, zmm12",
        "vmulps zmm5, zmm5, zmm12",
        "vaddps zmm6, zmm6, zmm13",
        "vmulps zmm7, zmm7, zmm12",
        "vaddps zmm8, zmm8, zmm13",
        "vmulps zmm9, zmm9, zmm12",
        "vaddps zmm10, zmm10, zmm13",
        "vmulps zmm11, zmm11, zmm12",
        "vaddps zmm14, zmm14, zmm13",
        "vsubps zmm15, zmm15, zmm13",
        "vmulps zmm16, zmm16, zmm12",
        "vmulps zmm17, zmm17, zmm12",
        "vaddps zmm18, zmm18, zmm13",
    );

    // A q4_K trial's step, per vector of values: the sums' subtraction, multiplies and
    // adds, one rounding and one maximum (the codes), and two of the error step's adds
    // and multiplies.
    chains!(
        search_mix,
        "vsubps zmm0, zmm0, zmm13",
        "vmulps zmm1, zmm1, zmm12",
        "vrndscaleps zmm2, zmm2, 8",
        "vmaxps zmm3, zmm3, zmm13",
        "vmulps zmm4, zmm4, zmm12",
        "vaddps zmm5, zmm5, zmm13",
        "vmulps zmm6, zmm6, zmm12",
        "vaddps zmm7, zmm7, zmm13",
        "vmulps zmm8, zmm8, zmm12",
        "vaddps zmm9, zmm9, zmm13",
        "vmulps zmm10, zmm10, zmm12",
        "vaddps zmm11, zmm11, zmm13",
    );
}

fn lane_ops(c: &mut Criterion) {
    #[cfg(target_arch = "x86_64")]
    {
        if !std::arch::is_x86_feature_detected!("avx512f") {
            eprintln!("lane_ops: skipped, this CPU has no AVX-512F");
            return;
        }
        let mut group = c.benchmark_group("zmm operations");
        group.throughput(criterion::Throughput::Elements(12 * ITERS));
        let cases: [(&str, Kernel); 4] = [
            ("add and mul", kernels::add_mul),
            ("round (vrndscaleps)", kernels::round),
            ("max (vmaxps)", kernels::max),
            ("a search step's mix", kernels::search_mix),
        ];
        for (name, f) in cases {
            // SAFETY: AVX-512F was detected above.
            group.bench_function(name, |b| b.iter(|| unsafe { f(ITERS) }));
        }
        group.finish();
        let mut group = c.benchmark_group("q4_K trial (17 zmm operations)");
        group.throughput(criterion::Throughput::Elements(17 * ITERS));
        let cases: [(&str, Kernel); 2] = [
            (
                "clamp in float (vmaxps, vminps)",
                kernels::trial_float_clamp,
            ),
            (
                "clamp on the bits (vpmaxsd, vpminsd)",
                kernels::trial_int_clamp,
            ),
        ];
        for (name, f) in cases {
            // SAFETY: AVX-512F was detected above.
            group.bench_function(name, |b| b.iter(|| unsafe { f(ITERS) }));
        }
        group.finish();
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (c, ITERS);
        eprintln!("lane_ops: skipped, not x86-64");
    }
}

criterion_group!(benches, lane_ops);
criterion_main!(benches);
