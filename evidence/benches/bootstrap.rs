#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stdout,
    clippy::print_stderr
)]
//! Paired BCa bootstrap against `scipy.stats.bootstrap(..., paired=True, method='BCa')` on the
//! same data in the same run: n = 15 and 1,000 tasks, B = 10,000 and 100,000. Prints medians.
//!
//! `cargo bench -p eval-evidence --bench bootstrap` (needs `.venv`: scripts/ensure-python.sh).

use std::io::Write as _;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Instant;

use eval_evidence::stats::interval::intervals;
use eval_evidence::stats::paired::{PairedConfig, paired_summary};
use eval_evidence::stats::resample::resample;
use eval_evidence::stats::{ExactMode, PairedTasks, ResampleConfig};

fn data(n: usize) -> (Vec<f64>, Vec<f64>) {
    let b: Vec<f64> = (0..n as u64)
        .map(|i| ((i * 2_654_435_761) % 1000) as f64 / 10.0)
        .collect();
    let c: Vec<f64> = b
        .iter()
        .enumerate()
        .map(|(i, x)| x + ((i as u64 * 40_503) % 300) as f64 / 10.0 - 10.0)
        .collect();
    (b, c)
}

fn median_ms(reps: usize, mut f: impl FnMut()) -> f64 {
    let mut t: Vec<f64> = (0..reps)
        .map(|_| {
            let s = Instant::now();
            f();
            s.elapsed().as_secs_f64() * 1000.0
        })
        .collect();
    t.sort_by(f64::total_cmp);
    t[reps / 2]
}

fn python() -> PathBuf {
    if let Ok(p) = std::env::var("EVAL_TEST_PYTHON") {
        return PathBuf::from(p);
    }
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let out = Command::new(root.join("scripts/ensure-python.sh"))
        .output()
        .unwrap();
    PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
}

fn main() {
    let cases = [
        (15usize, 10_000u64, 15usize, 7usize),
        (15, 100_000, 9, 5),
        (1_000, 10_000, 5, 3),
        (1_000, 100_000, 3, 1),
    ];
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut ours = Vec::new();
    for &(n, b, reps, _) in &cases {
        let (base, cand) = data(n);
        let cfg = ResampleConfig {
            resamples: b,
            seed: 1,
            exact: ExactMode::Never,
            threads: 0,
        };
        // The interval SciPy computes: resample tasks, mean(c) − mean(b) (= the mean of the task
        // differences), percentile and BCa (with its jackknife).
        let diffs: Vec<f64> = cand.iter().zip(&base).map(|(c, b)| c - b).collect();
        let core = median_ms(reps, || {
            let d = resample(&[&diffs], &cfg).unwrap();
            let i = intervals(&[&diffs], &d, &|m: &[f64]| m[0], 0.95).unwrap();
            std::hint::black_box(i);
        });
        // Everything `eval stats paired` computes (three columns, relative CI, sign-flip test).
        let pt = PairedTasks::from_means(
            (0..n).map(|i| format!("t{i}")).collect(),
            base.clone(),
            cand.clone(),
        )
        .unwrap();
        let pc = PairedConfig {
            resample: cfg,
            confidence: 0.95,
            min_tasks: 0,
        };
        let full = median_ms(reps, || {
            std::hint::black_box(paired_summary(&pt, "b", "c", "score", &pc).unwrap());
        });
        ours.push((core, full));
    }
    // Raw generator and bounded-draw cost, one thread.
    let words = 20_000_000u32;
    let gen_ns = median_ms(3, || {
        let mut r = eval_evidence::stats::rng::ChaChaStream::new(1, 0, 0);
        let mut x = 0u32;
        for _ in 0..words {
            x ^= r.next_u32();
        }
        std::hint::black_box(x);
    }) * 1e6
        / f64::from(words);
    let draw_ns = median_ms(3, || {
        let mut r = eval_evidence::stats::rng::ChaChaStream::new(1, 0, 0);
        let mut d = eval_evidence::stats::rng::BoundedDraw::new(15);
        let mut buf = vec![0u32; 1000];
        for _ in 0..words / 1000 {
            d.draw_into(&mut r, &mut buf);
            std::hint::black_box(&buf);
        }
    }) * 1e6
        / f64::from(words);
    // Where the time goes at n = 15, B = 100,000.
    let (b15, c15) = data(15);
    let d15: Vec<f64> = c15.iter().zip(&b15).map(|(c, b)| c - b).collect();
    let cfg15 = ResampleConfig {
        resamples: 100_000,
        seed: 1,
        exact: ExactMode::Never,
        threads: 0,
    };
    let dist15 = resample(&[&d15], &cfg15).unwrap();
    let split_resample = median_ms(9, || {
        std::hint::black_box(resample(&[&d15], &cfg15).unwrap());
    });
    let split_interval = median_ms(9, || {
        std::hint::black_box(intervals(&[&d15], &dist15, &|m: &[f64]| m[0], 0.95).unwrap());
    });
    // Exact enumeration at the auto limit (n = 12: 1,352,078 multisets), everything included.
    let (b12, c12) = data(12);
    let pt12 =
        PairedTasks::from_means((0..12).map(|i| format!("t{i}")).collect(), b12, c12).unwrap();
    let pc12 = PairedConfig {
        resample: ResampleConfig {
            resamples: 10_000,
            seed: 1,
            exact: ExactMode::Auto,
            threads: 0,
        },
        confidence: 0.95,
        min_tasks: 0,
    };
    let exact12 = median_ms(3, || {
        std::hint::black_box(paired_summary(&pt12, "b", "c", "score", &pc12).unwrap());
    });
    let req = serde_json::json!({"runs": cases.iter().map(|&(n, b, _, sreps)| {
        let (base, cand) = data(n);
        serde_json::json!({"n": n, "B": b, "reps": sreps, "baseline": base, "candidate": cand})
    }).collect::<Vec<_>>()});
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("benches/bootstrap_scipy.py");
    let mut child = Command::new(python())
        .arg(&script)
        .env_remove("OPENBLAS_CORETYPE")
        .env_remove("OPENBLAS_L2_SIZE")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(req.to_string().as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    println!(
        "paired BCa bootstrap, medians; {threads} threads; SciPy {}",
        v["scipy"]
    );
    println!(
        "{:>6} {:>8} {:>12} {:>14} {:>12} {:>8}",
        "n", "B", "eval (ms)", "eval full (ms)", "SciPy (ms)", "speedup"
    );
    for (i, &(n, b, _, _)) in cases.iter().enumerate() {
        let s = v["medians_ms"][i].as_f64().unwrap();
        let (core, full) = ours[i];
        println!(
            "{n:>6} {b:>8} {core:>12.2} {full:>14.2} {s:>12.1} {:>7.1}x",
            s / core
        );
    }
    println!("ChaCha8 word: {gen_ns:.2} ns; bounded draw (n = 15, 8-bit lanes): {draw_ns:.2} ns");
    println!("exact enumeration, n = 12 (1,352,078 multisets), full summary: {exact12:.1} ms");
    println!(
        "n = 15, B = 100,000 split: resampling {split_resample:.2} ms, intervals {split_interval:.2} ms"
    );
}
