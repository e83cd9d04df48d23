//! Prometheus text exposition for the admin listener.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Mutex;

use crate::record::CallRecord;

const BUCKETS_MS: [f64; 12] = [
    1.0,
    5.0,
    10.0,
    50.0,
    100.0,
    500.0,
    1_000.0,
    5_000.0,
    10_000.0,
    60_000.0,
    300_000.0,
    1_800_000.0,
];

#[derive(Default)]
struct Series {
    requests: BTreeMap<(String, &'static str), u64>,
    input_tokens: u64,
    output_tokens: u64,
    cached_input_tokens: u64,
    reasoning_tokens: u64,
    errors: u64,
    latency_buckets: [u64; BUCKETS_MS.len()],
    latency_count: u64,
    latency_sum_ms: f64,
}

#[derive(Default)]
pub(crate) struct Metrics {
    series: Mutex<BTreeMap<(String, String), Series>>,
}

impl Metrics {
    pub fn observe(&self, r: &CallRecord) {
        let key = (
            r.attempt_id.clone().unwrap_or_else(|| "unknown".into()),
            r.arm.clone().unwrap_or_default(),
        );
        let mut all = self.series.lock().unwrap_or_else(|p| p.into_inner());
        let s = all.entry(key).or_default();
        *s.requests
            .entry((r.role.as_str().to_owned(), r.outcome.as_str()))
            .or_default() += 1;
        if let Some(u) = &r.usage {
            s.input_tokens += u.input_tokens;
            s.output_tokens += u.output_tokens;
            s.cached_input_tokens += u.cached_input_tokens;
            s.reasoning_tokens += u.reasoning_tokens;
        }
        if r.status >= 400 {
            s.errors += 1;
        }
        for (i, b) in BUCKETS_MS.iter().enumerate() {
            if r.latency_ms <= *b {
                s.latency_buckets[i] += 1;
            }
        }
        s.latency_count += 1;
        s.latency_sum_ms += r.latency_ms;
    }

    pub fn render(&self) -> String {
        let all = self.series.lock().unwrap_or_else(|p| p.into_inner());
        let mut out = String::new();
        let _ = writeln!(
            out,
            "# HELP eval_proxy_requests_total Requests by role and outcome."
        );
        let _ = writeln!(out, "# TYPE eval_proxy_requests_total counter");
        for ((attempt, arm), s) in all.iter() {
            for ((role, outcome), n) in &s.requests {
                let _ = writeln!(
                    out,
                    "eval_proxy_requests_total{{attempt=\"{}\",arm=\"{}\",role=\"{role}\",outcome=\"{outcome}\"}} {n}",
                    esc(attempt),
                    esc(arm)
                );
            }
        }
        for (name, help, get) in [
            (
                "eval_proxy_input_tokens_total",
                "Prompt tokens reported by the upstream.",
                (|s: &Series| s.input_tokens) as fn(&Series) -> u64,
            ),
            (
                "eval_proxy_output_tokens_total",
                "Completion tokens reported by the upstream.",
                |s: &Series| s.output_tokens,
            ),
            (
                "eval_proxy_cached_input_tokens_total",
                "Prompt tokens served from cache.",
                |s: &Series| s.cached_input_tokens,
            ),
            (
                "eval_proxy_reasoning_tokens_total",
                "Reasoning tokens.",
                |s: &Series| s.reasoning_tokens,
            ),
            (
                "eval_proxy_errors_total",
                "Responses with status >= 400.",
                |s: &Series| s.errors,
            ),
        ] {
            let _ = writeln!(out, "# HELP {name} {help}");
            let _ = writeln!(out, "# TYPE {name} counter");
            for ((attempt, arm), s) in all.iter() {
                let _ = writeln!(
                    out,
                    "{name}{{attempt=\"{}\",arm=\"{}\"}} {}",
                    esc(attempt),
                    esc(arm),
                    get(s)
                );
            }
        }
        let _ = writeln!(
            out,
            "# HELP eval_proxy_latency_ms Call latency in milliseconds."
        );
        let _ = writeln!(out, "# TYPE eval_proxy_latency_ms histogram");
        for ((attempt, arm), s) in all.iter() {
            let labels = format!("attempt=\"{}\",arm=\"{}\"", esc(attempt), esc(arm));
            for (i, b) in BUCKETS_MS.iter().enumerate() {
                let _ = writeln!(
                    out,
                    "eval_proxy_latency_ms_bucket{{{labels},le=\"{b}\"}} {}",
                    s.latency_buckets[i]
                );
            }
            let _ = writeln!(
                out,
                "eval_proxy_latency_ms_bucket{{{labels},le=\"+Inf\"}} {}",
                s.latency_count
            );
            let _ = writeln!(
                out,
                "eval_proxy_latency_ms_sum{{{labels}}} {}",
                s.latency_sum_ms
            );
            let _ = writeln!(
                out,
                "eval_proxy_latency_ms_count{{{labels}}} {}",
                s.latency_count
            );
        }
        out
    }
}

fn esc(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}
