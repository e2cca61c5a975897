//! `quantforge codec quantize` against the live ggml on data drawn fresh each run (seeded
//! from the clock, the seed printed so a failure can be replayed with QF_SEED).
//! Needs `--features ggml`.
#![cfg(feature = "ggml")]

use std::process::Command;

#[test]
fn codec_quantize_equals_ggml_quantize_chunk_on_fresh_data() {
    let seed: u64 = std::env::var("QF_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
        });
    println!("QF_SEED={seed}");
    let mut state = seed | 1;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let dir = tempfile::tempdir().unwrap();
    let (rows, n) = (6usize, 1024usize);
    let x: Vec<f32> = (0..rows * n)
        .map(|_| {
            let u = (next() >> 40) as f32 / (1u64 << 24) as f32 - 0.5;
            u * 10f32.powi((next() % 7) as i32 - 3)
        })
        .collect();
    let w: Vec<f32> = (0..n).map(|_| (next() % 1000) as f32 / 100.0).collect();
    let bytes = |v: &[f32]| v.iter().flat_map(|f| f.to_le_bytes()).collect::<Vec<u8>>();
    std::fs::write(dir.path().join("x.f32"), bytes(&x)).unwrap();
    std::fs::write(dir.path().join("w.f32"), bytes(&w)).unwrap();
    let (mut checked, mut skipped) = (0, 0);
    for &ty in quantforge::GgmlType::ALL {
        if !quantforge::kernels::can_quantize(ty) {
            continue;
        }
        for imatrix in [false, true] {
            // ggml aborts on the rare rows for which its iq1 searches have no result.
            let w_used = imatrix.then_some(&w[..]);
            let quantizes = match ty {
                quantforge::GgmlType::IQ1_S => quantforge::kernels::scalar::iq1_s::ggml_quantizes,
                quantforge::GgmlType::IQ1_M => quantforge::kernels::scalar::iq1_m::ggml_quantizes,
                _ => |_: &[f32], _: Option<&[f32]>| true,
            };
            let refused = !imatrix && quantforge::kernels::requires_imatrix(ty);
            if !refused && !x.chunks_exact(n).all(|row| quantizes(row, w_used)) {
                skipped += 1;
                continue;
            }
            let out_path = dir.path().join(format!("{}-{imatrix}.bin", ty.name()));
            let mut cmd = Command::new(env!("CARGO_BIN_EXE_quantforge"));
            cmd.args([
                "codec",
                "quantize",
                "--type",
                ty.name(),
                "--row",
                &n.to_string(),
            ]);
            if imatrix {
                cmd.arg("--imatrix").arg(dir.path().join("w.f32"));
            }
            let out = cmd
                .arg(dir.path().join("x.f32"))
                .arg(&out_path)
                .output()
                .unwrap();
            if refused {
                // ggml refuses to run; so does quantforge, and says why.
                assert_eq!(out.status.code(), Some(2), "{ty}");
                let stderr = String::from_utf8_lossy(&out.stderr);
                assert!(
                    stderr.contains("needs an importance matrix"),
                    "{ty}: {stderr}"
                );
                assert!(!out_path.exists(), "{ty}");
                checked += 1;
                continue;
            }
            assert!(
                out.status.success(),
                "{ty}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            let expected = ggml_ref::quantize_chunk(ty.code(), &x, n, w_used);
            assert!(
                std::fs::read(&out_path).unwrap() == expected,
                "{ty} (imatrix {imatrix}) differs from ggml; QF_SEED={seed}"
            );
            checked += 1;
        }
    }
    // Every quantizable type, with and without imatrix (the types that need one refused
    // without it); at most the two iq1 runs with it skipped, and rarely.
    assert_eq!(checked + skipped, 60);
    assert!(skipped <= 2, "{skipped} runs skipped");
}
