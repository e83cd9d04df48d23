//! Power at freeze (`eval_evidence::stats::power`) against independent computations: the
//! normal-theory closed form for a large suite, and SciPy's percentile bootstrap at v0.4's n.

use eval_evidence::stats::power::{mde, null_lower_bounds, power_at};
use std::path::PathBuf;
use std::process::Command;

fn python() -> PathBuf {
    if let Ok(p) = std::env::var("EVAL_TEST_PYTHON") {
        return PathBuf::from(p);
    }
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let out = Command::new(root.join("scripts/ensure-python.sh"))
        .output()
        .expect("EVAL_TEST_PYTHON is unset and scripts/ensure-python.sh could not run");
    assert!(out.status.success());
    PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
}

/// Φ by the complementary error function's Abramowitz–Stegun 7.1.26 form (error < 1.5e-7).
fn phi(x: f64) -> f64 {
    let z = x.abs() / std::f64::consts::SQRT_2;
    let t = 1.0 / (1.0 + 0.3275911 * z);
    let poly = t
        * (0.254829592
            + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))));
    let erfc = poly * (-z * z).exp();
    if x >= 0.0 {
        1.0 - erfc / 2.0
    } else {
        erfc / 2.0
    }
}

/// n = 40: the percentile bootstrap's lower bound is x̄ − z·σ̂/√n to O(1/n), so its power at an
/// effect e (sd 1, threshold 0) is Φ(e√n − z₀.₉₇₅) within simulation error (SE ≤ 0.016 at 1,000
/// replicates) plus that O(1/n) term: tolerance 0.05.
#[test]
fn percentile_power_at_a_large_n_matches_the_normal_closed_form() {
    let n = 40;
    let lower = null_lower_bounds(n, "percentile", 0.95, 1_000, 11, 400).unwrap();
    for e in [0.3, 0.45, 0.6] {
        let ours = power_at(&lower, e, 1.0, 0.0);
        let closed = phi(e * (n as f64).sqrt() - 1.959_964);
        assert!((ours - closed).abs() < 0.05, "e {e}: {ours} vs {closed}");
    }
    // And the MDE at 80 %: (z₀.₉₇₅ + z₀.₈) / √n.
    let closed = (1.959_964 + 0.841_621) / (n as f64).sqrt();
    let ours = mde(&lower, 0.8, 1.0, 0.0);
    assert!((ours - closed).abs() < 0.05, "{ours} vs {closed}");
}

/// n = 6 (v0.4's ICAE): ours (the exact percentile bootstrap, ChaCha8 draws) against SciPy
/// (`scipy.stats.bootstrap`, percentile, 2,000 resamples, NumPy's own draws), 1,000 replicates
/// each: power at three effects within 0.05 (two independent SEs of ≤ 0.016 each, ×2.2) and the
/// 80 % MDE within 0.1 sd (the 20 % quantile's SE is ≈ 0.03 sd for each).
#[test]
fn percentile_power_at_n6_matches_scipy() {
    let n = 6;
    let lower = null_lower_bounds(n, "percentile", 0.95, 1_000, 3, 1_000).unwrap();
    let script = r#"
import json, numpy as np, scipy.stats as st
rng = np.random.default_rng(20260801)
lows = []
for r in range(1000):
    z = rng.standard_normal(6)
    res = st.bootstrap((z,), np.mean, confidence_level=0.95, method='percentile', n_resamples=2000, random_state=rng)
    lows.append(float(res.confidence_interval.low))
lows = np.sort(np.array(lows))
print(json.dumps({'power': {str(e): float(np.mean(lows + e > 0)) for e in (0.5, 1.0, 1.5)}, 'mde': float(-lows[1000 - 800])}))
"#;
    let out = Command::new(python())
        .arg("-c")
        .arg(script)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    for e in [0.5, 1.0, 1.5] {
        let ours = power_at(&lower, e, 1.0, 0.0);
        let theirs = v["power"][format!("{e:.1}")].as_f64().unwrap();
        assert!(
            (ours - theirs).abs() < 0.05,
            "e {e}: ours {ours}, SciPy {theirs}"
        );
    }
    let ours = mde(&lower, 0.8, 1.0, 0.0);
    let theirs = v["mde"].as_f64().unwrap();
    assert!(
        (ours - theirs).abs() < 0.1,
        "MDE: ours {ours}, SciPy {theirs}"
    );
    eprintln!("n=6 percentile MDE80: ours {ours:.3} sd, SciPy {theirs:.3} sd");
}

/// Units: the declared sd scales the MDE and a threshold shifts it (location-scale equivariance).
#[test]
fn the_declared_sd_and_threshold_carry_into_metric_units() {
    let lower = null_lower_bounds(6, "bca", 0.95, 300, 5, 500).unwrap();
    let unit = mde(&lower, 0.8, 1.0, 0.0);
    assert!((mde(&lower, 0.8, 12.0, 0.0) - 12.0 * unit).abs() < 1e-9);
    assert!((mde(&lower, 0.8, 12.0, 15.0) - (15.0 + 12.0 * unit)).abs() < 1e-9);
    assert_eq!(
        power_at(&lower, 12.0 * unit + 1e-9, 12.0, 0.0),
        power_at(&lower, unit + 1e-9, 1.0, 0.0)
    );
}
