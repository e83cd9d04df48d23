//! `eval stats paired` and `eval stats calibrate`: the statistics on data from anywhere.

use eval_evidence::stats::calibrate::{CalibrateConfig, calibrate};
use eval_evidence::stats::csv_input::read_observations;
use eval_evidence::stats::paired::{CiOut, PairedConfig, PairedSummary, paired_summary};
use eval_evidence::stats::v04::{V04_SAMPLES, pair_differences, v04_interval};
use eval_evidence::stats::{ExactMode, PairedTasks, ResampleConfig, ResampleKind};

/// `println!` that ignores a closed stdout (e.g. `| head`) instead of panicking.
macro_rules! out {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout().lock(), $($t)*);
    }};
}

use crate::cli::{ExactMode as CliExact, StatsCalibrateArgs, StatsCommand, StatsPairedArgs};
use crate::status::{CmdResult, Status};

/// The command line's own mistakes (the statistics' are `StatsError`); each kind's exit status is
/// decided in `exit::stats_status`.
#[derive(Debug, thiserror::Error)]
pub enum StatsCmdError {
    #[error("--method {0:?}: use `bootstrap` (percentile and BCa) or `v04-percentile`")]
    Method(String),
    #[error("--method v04-percentile needs --seed-string S")]
    V04NeedsSeedString,
    #[error("--confidence {0} must lie strictly between 0 and 1")]
    Confidence(f64),
    #[error("--resamples must be at least 1")]
    NoResamples,
    #[error("no pairs")]
    NoPairs,
    /// Serialising the summary for `--json`.
    #[error("{0}")]
    Encode(#[from] serde_json::Error),
}

pub fn run(cmd: StatsCommand) -> CmdResult {
    match cmd {
        StatsCommand::Paired(a) => paired(a),
        StatsCommand::Calibrate(a) => calibrate_cmd(a),
    }
}

fn paired(a: StatsPairedArgs) -> CmdResult {
    let metric = a.metric.clone().unwrap_or_else(|| "score".into());
    let v04 = match a.method.as_str() {
        "bootstrap" | "bca" | "percentile" => false,
        "v04-percentile" => true,
        other => {
            return Err(StatsCmdError::Method(other.to_owned()).into());
        }
    };
    if v04 && a.seed_string.is_none() {
        return Err(StatsCmdError::V04NeedsSeedString.into());
    }
    if !(a.confidence > 0.0 && a.confidence < 1.0) {
        return Err(StatsCmdError::Confidence(a.confidence).into());
    }
    if a.resamples == 0 {
        return Err(StatsCmdError::NoResamples.into());
    }
    let obs = read_observations(&a.input, &metric)?;
    let data = PairedTasks::from_observations(&obs, &a.baseline, &a.candidate)?;
    let cfg = PairedConfig {
        resample: ResampleConfig {
            resamples: a.resamples,
            seed: a.seed,
            exact: match a.exact {
                CliExact::Auto => ExactMode::Auto,
                CliExact::Always => ExactMode::Always,
                CliExact::Never => ExactMode::Never,
            },
            threads: 0,
        },
        confidence: a.confidence,
        min_tasks: 0,
    };
    let mut s = if v04 {
        let mut cfg = cfg;
        cfg.resample.exact = ExactMode::Never;
        paired_summary(&data, &a.baseline, &a.candidate, &metric, &cfg)?
    } else {
        paired_summary(&data, &a.baseline, &a.candidate, &metric, &cfg)?
    };
    if let Some(seed) = a.seed_string.as_deref().filter(|_| v04) {
        let (diffs, tasks) = pair_differences(&obs, &a.baseline, &a.candidate)?;
        let clusters: Vec<&str> = tasks.iter().map(String::as_str).collect();
        let r = v04_interval(&diffs, &clusters, seed, a.confidence, V04_SAMPLES)
            .ok_or(StatsCmdError::NoPairs)?;
        s.ci = CiOut {
            level: a.confidence,
            percentile: [r.lower, r.upper],
            bca: None,
            z0: None,
            acceleration: None,
            degenerate: false,
        };
        s.relative_ci = None;
        s.relative_ci_note = Some("v04-percentile gives the mean-difference interval only".into());
        s.interval_method = "v04-percentile".into();
        s.method = ResampleKind::Sampled;
        s.resamples = V04_SAMPLES;
        s.ordered_resamples = None;
        s.seed = serde_json::Value::from(seed);
    }
    if a.json {
        out!(
            "{}",
            serde_json::to_string_pretty(&s).map_err(StatsCmdError::from)?
        );
    } else {
        print_summary(&s);
    }
    Ok(Status::Ok)
}

fn print_summary(s: &PairedSummary) {
    out!(
        "{} tasks, {} vs {} on {}",
        s.n_tasks,
        s.candidate,
        s.baseline,
        s.metric
    );
    out!(
        "mean {}: {}   mean {}: {}   mean difference: {}",
        s.baseline,
        s.mean_baseline,
        s.candidate,
        s.mean_candidate,
        s.mean_diff
    );
    match s.relative_improvement {
        Some(r) => out!("relative improvement: {r}"),
        None => out!(
            "relative improvement: undefined ({})",
            s.relative_improvement_note.as_deref().unwrap_or("")
        ),
    }
    let how = match (s.interval_method.as_str(), s.method) {
        ("v04-percentile", _) => {
            format!("v04-percentile, {} resamples, seed {}", s.resamples, s.seed)
        }
        (_, ResampleKind::Exact) => format!("exact enumeration of {} multisets", s.resamples),
        _ => format!("{} resamples, seed {}", s.resamples, s.seed),
    };
    out!(
        "{}% intervals of the mean difference ({how}):",
        s.ci.level * 100.0
    );
    out!(
        "  percentile [{}, {}]",
        s.ci.percentile[0],
        s.ci.percentile[1]
    );
    if let Some(b) = s.ci.bca {
        out!("  BCa        [{}, {}]", b[0], b[1]);
    }
    match &s.relative_ci {
        Some(r) => out!(
            "relative improvement: percentile [{}, {}]{}",
            r.percentile[0],
            r.percentile[1],
            r.bca
                .map(|b| format!(", BCa [{}, {}]", b[0], b[1]))
                .unwrap_or_default()
        ),
        None => out!(
            "relative improvement interval: undefined ({})",
            s.relative_ci_note.as_deref().unwrap_or("")
        ),
    }
    out!(
        "sign-flip p (one-sided): {} ({}, {} sign vectors; smallest attainable {})",
        s.sign_flip_p,
        s.sign_flip.method,
        s.sign_flip.flips,
        s.sign_flip.min_attainable_p
    );
    for n in &s.notes {
        out!("note: {n}");
    }
}

fn calibrate_cmd(a: StatsCalibrateArgs) -> CmdResult {
    let methods = a
        .method
        .as_deref()
        .map(|m| m.split(',').map(|x| x.trim().to_string()).collect())
        .unwrap_or_default();
    let c = calibrate(&CalibrateConfig {
        n: a.n,
        methods,
        confidence: a.confidence,
        reps: a.reps,
        effect: a.effect,
        seed: a.seed,
        resamples: 1_000,
        threads: 0,
    })?;
    if a.json {
        out!(
            "{}",
            serde_json::to_string_pretty(&c).map_err(StatsCmdError::from)?
        );
        return Ok(Status::Ok);
    }
    out!(
        "n = {} tasks, {} simulated suites per column, confidence {}, bootstrap {}",
        c.n,
        c.reps,
        c.confidence,
        c.bootstrap
    );
    out!(
        "{:<16} {:>8} {:>12} {:>8} {:>10}",
        "method",
        "nominal",
        "false pass",
        "ratio",
        format!("power@{}", c.effect)
    );
    for r in &c.rows {
        out!(
            "{:<16} {:>8.4} {:>12.4} {:>8.2} {:>10.3}{}",
            r.method,
            r.nominal,
            r.false_pass_rate,
            r.false_pass_ratio,
            r.power,
            if r.warn {
                "  WARNING: over twice the nominal rate"
            } else {
                ""
            }
        );
    }
    Ok(Status::Ok)
}
