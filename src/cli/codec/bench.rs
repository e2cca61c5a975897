//! `quantforge codec bench`: throughput of each codec path, as a table.
//!
//! Each measurement repeats the operation until `--seconds` have passed and keeps the
//! fastest run (the least disturbed by other load). Rates are MB/s (10^6 bytes) of f32:
//! read for quantize, written for dequantize. The ratio column compares with ggml's
//! reference codec (`ggml_quantize_chunk` / `to_float`) measured in the same run when the
//! binary is built with `--features ggml`, else with quantforge's scalar path.

use anyhow::{Context, Result, bail};
use clap::Args;
use quantforge_kernels::{
    Codec, GgmlType, Isa, can_dequantize, can_quantize, requires_imatrix, uses_imatrix,
};
use std::hint::black_box;
use std::time::{Duration, Instant};

#[derive(Args, Debug)]
pub struct BenchArgs {
    /// Types to measure (repeatable; default q4_0 q5_0 q8_0 q8_K q2_K q3_K q4_K q5_K q6_K
    /// tq2_0 iq4_nl iq4_xs and the other i-quants quantforge quantizes).
    #[arg(long = "type", short = 't')]
    types: Vec<String>,
    /// Code paths to measure (repeatable; default every ISA this CPU has).
    #[arg(long)]
    isa: Vec<String>,
    /// Threads for quantforge's paths (rows split with rayon); ggml's reference gets the
    /// same number of threads over the same row split.
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// Size of the f32 buffer in MiB (64 exceeds the last-level cache).
    #[arg(long, default_value_t = 64)]
    mib: usize,
    /// Seconds spent on each measurement.
    #[arg(long, default_value_t = 1.0)]
    seconds: f64,
}

const N_PER_ROW: usize = 4096;

/// The types whose quantizers search a grid, which ggml prepares in `ggml_quantize_init`.
const GRID_TYPES: [GgmlType; 7] = [
    GgmlType::IQ2_XXS,
    GgmlType::IQ2_XS,
    GgmlType::IQ2_S,
    GgmlType::IQ3_XXS,
    GgmlType::IQ3_S,
    GgmlType::IQ1_S,
    GgmlType::IQ1_M,
];

/// One path to measure.
#[derive(Clone, Copy)]
enum Path {
    Memcpy,
    Quantforge(Isa),
    #[cfg(feature = "ggml")]
    GgmlRef,
    #[cfg(feature = "ggml")]
    GgmlCpu,
}

impl Path {
    fn name(self) -> String {
        match self {
            Path::Memcpy => "memcpy".into(),
            Path::Quantforge(isa) => isa.to_string(),
            #[cfg(feature = "ggml")]
            Path::GgmlRef => "ggml-ref".into(),
            #[cfg(feature = "ggml")]
            Path::GgmlCpu => "ggml-cpu".into(),
        }
    }
}

pub fn run(a: BenchArgs) -> Result<()> {
    let types: Vec<GgmlType> = if a.types.is_empty() {
        [
            "q4_0", "q5_0", "q8_0", "q8_K", "q2_K", "q3_K", "q4_K", "q5_K", "q6_K", "tq2_0",
            "iq4_nl", "iq4_xs", "iq2_xxs", "iq2_xs", "iq2_s", "iq3_xxs", "iq3_s", "iq1_s", "iq1_m",
        ]
        .iter()
        .map(|t| GgmlType::from_name(t).expect("known"))
        .filter(|&t| can_quantize(t) || can_dequantize(t))
        .collect()
    } else {
        a.types
            .iter()
            .map(|t| GgmlType::from_name(t))
            .collect::<Result<_, _>>()?
    };
    let isas: Vec<Isa> = if a.isa.is_empty() {
        // The portable lanes (a test of the generic code) only when asked for.
        Isa::ALL
            .iter()
            .copied()
            .filter(|i| i.is_supported() && i.is_auto())
            .collect()
    } else {
        let mut v = Vec::new();
        for name in &a.isa {
            let isa = Isa::from_name(name).with_context(|| format!("unknown ISA '{name}'"))?;
            if !isa.is_supported() {
                bail!("this CPU cannot run {isa} code");
            }
            v.push(isa);
        }
        v
    };
    if a.threads == 0 || a.mib == 0 || a.seconds.is_nan() || a.seconds <= 0.0 {
        bail!("--threads, --mib and --seconds must be positive");
    }
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(a.threads)
        .build()
        .context("cannot start the thread pool")?;
    let n = ((a.mib << 20) / 4 / N_PER_ROW).max(1) * N_PER_ROW;
    let x = input(n);
    let imatrix: Vec<f32> = (0..N_PER_ROW).map(|i| 1.0 + (i % 7) as f32).collect();
    let budget = Duration::from_secs_f64(a.seconds);
    let bytes = (n * 4) as f64;
    let reference = if cfg!(feature = "ggml") {
        "ggml-ref"
    } else {
        "scalar"
    };
    println!(
        "{} MiB of f32 in rows of {N_PER_ROW}, {} thread(s); ratio = rate / {reference} rate",
        (n * 4) >> 20,
        a.threads
    );
    println!(
        "{:<8} {:<10} {:<10} {:>11} {:>8}",
        "type", "op", "path", "MB/s", "ratio"
    );
    for ty in types {
        let row = ty.row_size(N_PER_ROW)?;
        let mut q = vec![0u8; n / N_PER_ROW * row];
        let mut y = vec![0f32; n];
        let mut paths = vec![Path::Memcpy];
        paths.extend(isas.iter().map(|&i| Path::Quantforge(i)));
        #[cfg(feature = "ggml")]
        paths.extend([Path::GgmlRef, Path::GgmlCpu]);
        if can_quantize(ty) && GRID_TYPES.contains(&ty) {
            startup(ty, &x, &imatrix)?;
        }
        for (op, w) in [
            ("quantize", None),
            ("quant+imx", Some(&imatrix[..])),
            ("dequantize", None),
        ] {
            if (op != "dequantize" && !can_quantize(ty))
                || (op == "dequantize" && !can_dequantize(ty))
                || (w.is_some() && !uses_imatrix(ty))
                || (op == "quantize" && requires_imatrix(ty))
            {
                continue;
            }
            if op == "dequantize" {
                let w = requires_imatrix(ty).then_some(&imatrix[..]);
                quantforge_kernels::quantize(ty, &x, N_PER_ROW, w, &mut q)?;
            }
            let mut rows: Vec<(String, f64)> = Vec::new();
            for &path in &paths {
                let Some(secs) =
                    pool.install(|| measure(path, ty, op, &x, w, &mut q, &mut y, budget))
                else {
                    continue;
                };
                rows.push((path.name(), bytes / secs / 1e6));
            }
            let base = rows.iter().find(|(p, _)| p == reference).map(|r| r.1);
            for (p, rate) in &rows {
                let ratio = base.map_or("-".into(), |b| format!("{:.2}x", rate / b));
                println!(
                    "{:<8} {:<10} {:<10} {:>11.1} {:>8}",
                    ty.name(),
                    op,
                    p,
                    rate,
                    ratio
                );
            }
        }
    }
    Ok(())
}

/// Prints what a type costs before its first row: quantforge's first row on the best
/// path (its tables are static data, so this is page faults and the row itself) and,
/// built with ggml, `ggml_quantize_init`, which builds the i-quants' search data and is
/// left out of ggml-ref's rate (the runs after the first find it built).
fn startup(ty: GgmlType, x: &[f32], imatrix: &[f32]) -> Result<()> {
    let codec = Codec::best(ty);
    let row = &x[..N_PER_ROW];
    let w = uses_imatrix(ty).then_some(imatrix);
    let mut q = vec![0u8; ty.row_size(N_PER_ROW)?];
    let t = Instant::now();
    codec.quantize(row, N_PER_ROW, w, &mut q)?;
    let first = t.elapsed();
    let t = Instant::now();
    codec.quantize(row, N_PER_ROW, w, &mut q)?;
    let second = t.elapsed();
    print!(
        "{}: quantforge first row {:.3} ms (then {:.3} ms)",
        ty.name(),
        first.as_secs_f64() * 1e3,
        second.as_secs_f64() * 1e3
    );
    #[cfg(feature = "ggml")]
    {
        let t = Instant::now();
        ggml_ref::quantize_init(ty.code());
        print!(
            "; ggml_quantize_init {:.3} s (not in ggml-ref's rate)",
            t.elapsed().as_secs_f64()
        );
    }
    println!();
    Ok(())
}

/// The fastest of repeated runs of one path, in seconds, or `None` when the path does
/// not apply (a path without this type or direction).
#[allow(clippy::too_many_arguments)]
fn measure(
    path: Path,
    ty: GgmlType,
    op: &str,
    x: &[f32],
    w: Option<&[f32]>,
    q: &mut [u8],
    y: &mut [f32],
    budget: Duration,
) -> Option<f64> {
    let quantize = op != "dequantize";
    let mut run: Box<dyn FnMut() + '_> = match path {
        Path::Memcpy => Box::new(move || y.copy_from_slice(black_box(x))),
        Path::Quantforge(isa) => {
            let codec = Codec::new(ty, isa)?;
            if codec.isa() != isa {
                return None; // no path of its own: it would measure scalar again
            }
            if quantize {
                Box::new(move || {
                    codec
                        .quantize_par(black_box(x), N_PER_ROW, w, q)
                        .expect("valid input");
                })
            } else {
                Box::new(move || codec.dequantize_par(black_box(q), y).expect("valid input"))
            }
        }
        #[cfg(feature = "ggml")]
        Path::GgmlRef => ggml::reference(ty, quantize, x, w, q, y)?,
        #[cfg(feature = "ggml")]
        Path::GgmlCpu => ggml::cpu(ty, quantize, w, x, q)?,
    };
    let start = Instant::now();
    let mut best = f64::INFINITY;
    while start.elapsed() < budget || best.is_infinite() {
        let t = Instant::now();
        run();
        best = best.min(t.elapsed().as_secs_f64());
    }
    Some(best)
}

/// ggml's codecs over the same row split as quantforge's parallel paths.
#[cfg(feature = "ggml")]
mod ggml {
    use super::N_PER_ROW;
    use quantforge_kernels::GgmlType;
    use rayon::prelude::*;

    type Run<'a> = Box<dyn FnMut() + 'a>;

    pub fn reference<'a>(
        ty: GgmlType,
        quantize: bool,
        x: &'a [f32],
        w: Option<&'a [f32]>,
        q: &'a mut [u8],
        y: &'a mut [f32],
    ) -> Option<Run<'a>> {
        let row = ty.row_size(N_PER_ROW).ok()?;
        let rows = 16;
        if quantize {
            Some(Box::new(move || {
                x.par_chunks(rows * N_PER_ROW)
                    .zip(q.par_chunks_mut(rows * row))
                    .for_each(|(x, q)| {
                        ggml_ref::quantize_chunk_into(ty.code(), x, N_PER_ROW, w, q)
                    });
            }))
        } else {
            ggml_ref::dequantize_row(ty.code(), &q[..row])?;
            Some(Box::new(move || {
                q.par_chunks(rows * row)
                    .zip(y.par_chunks_mut(rows * N_PER_ROW))
                    .for_each(|(q, y)| {
                        ggml_ref::dequantize_row_into(ty.code(), q, y);
                    });
            }))
        }
    }

    pub fn cpu<'a>(
        ty: GgmlType,
        quantize: bool,
        w: Option<&[f32]>,
        x: &'a [f32],
        q: &'a mut [u8],
    ) -> Option<Run<'a>> {
        if !quantize || w.is_some() {
            return None;
        }
        let row = ty.row_size(N_PER_ROW).ok()?;
        if !ggml_ref::quantize_row_cpu_into(ty.code(), &x[..N_PER_ROW], &mut q[..row]) {
            return None;
        }
        let rows = 16;
        Some(Box::new(move || {
            x.par_chunks(rows * N_PER_ROW)
                .zip(q.par_chunks_mut(rows * row))
                .for_each(|(x, q)| {
                    ggml_ref::quantize_row_cpu_into(ty.code(), x, q);
                });
        }))
    }
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
