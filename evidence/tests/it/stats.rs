//! The statistics against SciPy, against brute force, against themselves (seeds and threads) and
//! on degenerate input.

use std::io::Write as _;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use eval_evidence::stats::csv_input::parse_observations;
use eval_evidence::stats::interval::{intervals, ndtr, ndtri};
use eval_evidence::stats::paired::{PairedConfig, paired_summary};
use eval_evidence::stats::quantile::type7_sorted;
use eval_evidence::stats::resample::{Distribution, resample};
use eval_evidence::stats::{ExactMode, PairedTasks, ResampleConfig, ResampleKind, StatsError};

fn python() -> PathBuf {
    if let Ok(p) = std::env::var("EVAL_TEST_PYTHON") {
        return PathBuf::from(p);
    }
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let out = Command::new(root.join("scripts/ensure-python.sh"))
        .output()
        .expect("EVAL_TEST_PYTHON is unset and scripts/ensure-python.sh could not run");
    assert!(
        out.status.success(),
        "ensure-python.sh failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
}

/// Deterministic, irregular values (no RNG crate involved).
fn series(n: usize, k: u64, scale: f64) -> Vec<f64> {
    (0..n as u64)
        .map(|i| {
            let x = (i * 2_654_435_761 + k * 40_503) % 1_000;
            (x as f64 / 10.0 * scale).round() / 1.0
        })
        .collect()
}

fn datasets() -> Vec<(&'static str, Vec<f64>, Vec<f64>)> {
    let b15 = series(15, 1, 1.0);
    let c15: Vec<f64> = b15
        .iter()
        .zip(series(15, 2, 0.3))
        .map(|(b, u)| b + u - 10.0)
        .collect();
    let b40 = series(40, 3, 1.0);
    let c40: Vec<f64> = b40
        .iter()
        .zip(series(40, 4, 0.5))
        .map(|(b, u)| b + u - 20.0)
        .collect();
    vec![
        ("n3", vec![50.0, 60.0, 70.0], vec![55.0, 58.0, 80.0]),
        (
            "n6",
            vec![40.0, 55.0, 20.0, 65.0, 30.0, 50.0],
            vec![52.0, 50.0, 35.0, 70.0, 28.0, 71.0],
        ),
        ("n15", b15, c15),
        ("n40", b40, c40),
        (
            "ties",
            vec![
                10.0, 20.0, 20.0, 30.0, 40.0, 40.0, 40.0, 50.0, 60.0, 70.0, 80.0, 90.0,
            ],
            vec![
                10.0, 20.0, 30.0, 30.0, 50.0, 40.0, 50.0, 50.0, 70.0, 70.0, 80.0, 100.0,
            ],
        ),
        (
            "constant",
            vec![10.0, 20.0, 30.0, 40.0],
            vec![15.0, 25.0, 35.0, 45.0],
        ),
    ]
}

#[test]
fn agrees_with_scipy_bootstrap() {
    const B: u64 = 100_000;
    let ds = datasets();
    let req = serde_json::json!({
        "resamples": B,
        "seed": 12345,
        "datasets": ds.iter().map(|(n, b, c)| serde_json::json!({"name": n, "baseline": b, "candidate": c})).collect::<Vec<_>>(),
    });
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/scipy_bootstrap.py");
    let mut child = Command::new(python())
        .arg(&script)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(req.to_string().as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let scipy_version = v["scipy"].as_str().unwrap();
    assert!(
        scipy_version.starts_with("1.")
            && scipy_version[2..]
                .split('.')
                .next()
                .unwrap()
                .parse::<u32>()
                .unwrap()
                >= 17,
        "{scipy_version}"
    );
    for (name, b, c) in &ds {
        let pt = PairedTasks::from_means(
            (0..b.len()).map(|i| format!("t{i}")).collect(),
            b.clone(),
            c.clone(),
        )
        .unwrap();
        let cfg = PairedConfig {
            resample: ResampleConfig {
                resamples: B,
                seed: 99,
                exact: ExactMode::Never,
                threads: 0,
            },
            confidence: 0.95,
            min_tasks: 0,
        };
        let s = paired_summary(&pt, "b", "c", "score", &cfg).unwrap();
        let r = &v["results"][name];
        // Monte Carlo tolerance in probability space: SciPy's bound must lie between our
        // quantiles at the same level ± δ (δ = 0.004 ≈ 5 Monte Carlo SEs of a tail level at
        // B = 100,000, plus the noise of z₀). Comparing values directly would fail at the jumps
        // of a small suite's discrete bootstrap distribution, where one SE moves a bound from one
        // atom to the next.
        let cols: [&[f64]; 3] = [&pt.baseline, &pt.candidate, &pt.differences()];
        let dist = resample(&cols, &cfg.resample).unwrap();
        let check = |stat: &dyn Fn(&[f64]) -> f64,
                     ci: &eval_evidence::stats::paired::CiOut,
                     key: &str| {
            let mut sorted: Vec<f64> = (0..dist.len()).map(|i| stat(dist.row(i))).collect();
            sorted.sort_by(f64::total_cmp);
            let (z0, a) = (ci.z0.unwrap(), ci.acceleration.unwrap());
            let za = ndtri(0.025);
            let lvl = |z: f64| ndtr(z0 + (z0 + z) / (1.0 - a * (z0 + z)));
            for (method, levels, ours) in [
                ("percentile", [0.025, 0.975], ci.percentile),
                ("bca", [lvl(za), lvl(-za)], ci.bca.unwrap()),
            ] {
                for i in 0..2 {
                    let theirs = r[format!("{key}_{method}")][i].as_f64().unwrap();
                    let lo = type7_sorted(&sorted, levels[i] - 0.004);
                    let hi = type7_sorted(&sorted, levels[i] + 0.004);
                    let slack = 1e-9 * (1.0 + theirs.abs());
                    assert!(
                        lo - slack <= theirs && theirs <= hi + slack,
                        "{name} {key} {method}[{i}]: SciPy {theirs} outside our [{lo}, {hi}] at level {} ± 0.004 (ours {})",
                        levels[i],
                        ours[i]
                    );
                    assert!(
                        lo - slack <= ours[i] && ours[i] <= hi + slack,
                        "{name} {key} {method}[{i}]: ours {} outside [{lo}, {hi}]",
                        ours[i]
                    );
                }
            }
        };
        if *name == "constant" {
            assert!(s.ci.degenerate);
            assert_eq!(s.ci.percentile, [5.0, 5.0]);
            assert_eq!(r["diff_percentile"], serde_json::json!([5.0, 5.0]));
            assert_eq!(
                s.ci.bca,
                Some([5.0, 5.0]),
                "a defined answer where SciPy gives NaN"
            );
            assert!(
                r["diff_bca"][0].is_null(),
                "SciPy's BCa is NaN on a degenerate distribution"
            );
            continue;
        }
        check(&|m: &[f64]| m[2], &s.ci, "diff");
        check(
            &|m: &[f64]| (m[1] - m[0]) / m[0],
            s.relative_ci.as_ref().unwrap(),
            "relative",
        );
        let bca = s.ci.bca.unwrap();
        println!(
            "{name}: percentile {:?} BCa {:?} (SciPy {} / {})",
            s.ci.percentile, bca, r["diff_percentile"], r["diff_bca"]
        );
    }
}

/// Every ordered resample, by brute force: nⁿ of them.
fn brute(x: &[f64]) -> Vec<f64> {
    let n = x.len();
    let total = n.pow(n as u32);
    (0..total)
        .map(|mut k| {
            let mut s = 0.0;
            for _ in 0..n {
                s += x[k % n];
                k /= n;
            }
            s / n as f64
        })
        .collect()
}

#[test]
fn exact_enumeration_matches_brute_force() {
    for x in [
        vec![3.0, -1.0, 2.5, 7.0, 0.0],
        vec![1.0, 1.0, 2.0, 4.0, 8.0, -3.0],
        vec![2.0, 9.0],
    ] {
        let n = x.len();
        let exact = resample(
            &[&x],
            &ResampleConfig {
                resamples: 1,
                seed: 0,
                exact: ExactMode::Always,
                threads: 1,
            },
        )
        .unwrap();
        assert_eq!(exact.kind, ResampleKind::Exact);
        assert_eq!(exact.total, n.pow(n as u32) as u128);
        let mut all = brute(&x);
        let as_sampled = Distribution {
            cols: 1,
            means: all.clone(),
            weights: None,
            total: all.len() as u128,
            kind: ResampleKind::Sampled,
        };
        let e = intervals(&[&x], &exact, &|m: &[f64]| m[0], 0.95).unwrap();
        let b = intervals(&[&x], &as_sampled, &|m: &[f64]| m[0], 0.95).unwrap();
        let close = |a: f64, b: f64| (a - b).abs() <= 1e-9 * (1.0 + a.abs());
        for i in 0..2 {
            assert!(
                close(e.percentile[i], b.percentile[i]),
                "{x:?}: {e:?} vs {b:?}"
            );
            assert!(close(e.bca[i], b.bca[i]), "{x:?}: {e:?} vs {b:?}");
        }
        assert!(close(e.z0, b.z0) || (e.z0.is_infinite() && e.z0 == b.z0));
        // And the quantiles of the brute-force list directly.
        all.sort_by(f64::total_cmp);
        assert!(close(e.percentile[0], type7_sorted(&all, 0.025)));
    }
}

#[test]
fn same_seed_same_bits_any_thread_count() {
    let b: Vec<f64> = (0..37).map(|i| (i * 7 % 11) as f64).collect();
    let c: Vec<f64> = (0..37).map(|i| (i * 5 % 13) as f64 + 0.5).collect();
    let run = |seed: u64, threads: usize| {
        resample(
            &[&b, &c],
            &ResampleConfig {
                resamples: 5_000,
                seed,
                exact: ExactMode::Never,
                threads,
            },
        )
        .unwrap()
        .means
    };
    let one = run(42, 1);
    for t in [2, 3, 8] {
        let other = run(42, t);
        assert!(
            one.iter()
                .zip(&other)
                .all(|(a, b)| a.to_bits() == b.to_bits()),
            "threads = {t}"
        );
    }
    assert_ne!(one, run(43, 1));
    // Pinned: ChaCha8 + Lemire on this data must never change across platforms or crate versions.
    assert_eq!(
        (one[0].to_bits(), one[1].to_bits(), one[9_999].to_bits()),
        PINNED,
        "the resampler's output changed: {:?}",
        (one[0], one[1], one[9_999])
    );
}

const PINNED: (u64, u64, u64) = (
    4618137120596324020,
    4619065227276288886,
    4620525854182463101,
);

fn summary(b: Vec<f64>, c: Vec<f64>) -> Result<eval_evidence::stats::PairedSummary, StatsError> {
    let pt = PairedTasks::from_means((0..b.len()).map(|i| format!("t{i}")).collect(), b, c)?;
    let cfg = PairedConfig {
        resample: ResampleConfig {
            resamples: 2_000,
            seed: 1,
            exact: ExactMode::Auto,
            threads: 0,
        },
        confidence: 0.95,
        min_tasks: 5,
    };
    paired_summary(&pt, "b", "c", "score", &cfg)
}

#[test]
fn degenerate_inputs_have_defined_answers() {
    // All differences equal.
    let s = summary(vec![1.0, 2.0, 3.0, 4.0], vec![3.0, 4.0, 5.0, 6.0]).unwrap();
    assert_eq!(s.ci.percentile, [2.0, 2.0]);
    assert_eq!(s.ci.bca, Some([2.0, 2.0]));
    assert!(s.ci.degenerate);
    assert!(s.notes.iter().any(|n| n.contains("zero width")));
    // A baseline mean of zero: relative improvement undefined, said so, no NaN anywhere.
    let s = summary(vec![0.0, 0.0, 0.0], vec![1.0, 0.0, 2.0]).unwrap();
    assert_eq!(s.relative_improvement, None);
    assert!(
        s.relative_improvement_note
            .as_ref()
            .unwrap()
            .contains("baseline mean is 0")
    );
    assert!(s.relative_ci.is_none());
    let json = serde_json::to_string(&s).unwrap();
    assert!(!json.contains("NaN"));
    // Some resamples have a zero baseline mean although the full sample does not.
    let s = summary(vec![0.0, 4.0, 0.0], vec![1.0, 5.0, 2.0]).unwrap();
    assert!(s.relative_improvement.is_some());
    assert!(s.relative_ci.is_none());
    assert!(s.relative_ci_note.as_ref().unwrap().contains("contrast"));
    // A single task.
    let s = summary(vec![3.0], vec![5.0]).unwrap();
    assert_eq!(s.n_tasks, 1);
    assert_eq!(s.ci.bca, Some([2.0, 2.0]));
    assert_eq!(s.method, ResampleKind::Exact);
    assert_eq!(s.sign_flip_p, 0.5);
    assert!(s.notes.iter().any(|n| n.contains("insufficient tasks")));
    assert!(s.notes.iter().any(|n| n.contains("robustness check")));
}

#[test]
fn csv_errors_name_file_line_and_column() {
    let err = |text: &str, metric: &str| {
        parse_observations(text, "in.csv", metric)
            .unwrap_err()
            .to_string()
    };
    let e = err("task,arm,rep,score\nt1,a,1,5\nt1,b,1,NaN\n", "score");
    assert!(
        e.contains("in.csv:3") && e.contains("\"score\"") && e.contains("finite"),
        "{e}"
    );
    let e = err("task,arm,rep,score\nt1,a,1,five\n", "score");
    assert!(e.contains("in.csv:2") && e.contains("not a number"), "{e}");
    let e = err("task,arm,rep,score\nt1,,1,5\n", "score");
    assert!(e.contains("in.csv:2") && e.contains("\"arm\""), "{e}");
    let e = err("task,arm,rep,score\n", "points");
    assert!(e.contains("no column \"points\""), "{e}");
    let e = err("task,arm,rep,score\nt1,a,1\n", "score");
    assert!(e.contains("in.csv:2") && e.contains("3 fields"), "{e}");
    // Missing arm and a task with one arm only.
    let obs = parse_observations(
        "task,arm,rep,score,note\nt1,a,1,5,x\nt1,b,1,6,\"y, z\"\nt2,a,1,5,\n",
        "in.csv",
        "score",
    )
    .unwrap();
    assert_eq!(obs.len(), 3);
    let e = PairedTasks::from_observations(&obs, "a", "c")
        .unwrap_err()
        .to_string();
    assert!(e.contains("arm \"c\" has no rows"), "{e}");
    let e = PairedTasks::from_observations(&obs, "a", "b")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("in.csv:4") && e.contains("t2") && e.contains("\"b\""),
        "{e}"
    );
    // Extra columns and --metric.
    let obs = parse_observations(
        "task,arm,rep,score,tokens\nt1,a,1,5,100\nt1,b,1,6,90\n",
        "in.csv",
        "tokens",
    )
    .unwrap();
    let p = PairedTasks::from_observations(&obs, "a", "b").unwrap();
    assert_eq!(p.differences(), vec![-10.0]);
}

/// RFC 4180 quoting, read by the `csv` crate: a quoted field holding a line break is one field
/// (a line-by-line reader called it unterminated), and rows after it keep their own line
/// numbers; text after a closing quote is refused, not joined into the field.
#[test]
fn csv_quoted_newlines_are_read_and_text_after_a_closing_quote_is_refused() {
    let obs = parse_observations(
        "task,arm,rep,score,note\nt1,a,1,5,\"two\nlines\"\nt1,b,1,6,\"say \"\"hi\"\"\"\n",
        "in.csv",
        "score",
    )
    .unwrap();
    assert_eq!(obs.len(), 2);
    assert_eq!(obs[1].origin, "in.csv:4");
    assert_eq!(obs[1].score, 6.0);
    let e = parse_observations("task,arm,rep,score\n\"t1\"x,a,1,5\n", "in.csv", "score")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("in.csv:2") && e.contains("after a closing quote"),
        "{e}"
    );
    let e = parse_observations("task,arm,rep,score\nt1,a,1,\"5\n", "in.csv", "score")
        .unwrap_err()
        .to_string();
    assert!(e.contains("in.csv:2") && e.contains("unterminated"), "{e}");
}
