//! The accounting cross-check of the harness's own metrics against the proxy's meter.
//!
//! A runtime that declares a metrics file (`metrics_path`) promises the cross-check, so a file
//! that is missing, not a regular file, larger than [`MAX_METRICS_BYTES`] or not the expected
//! JSON fails it (`metrics_missing` / `metrics_unreadable`), and a completed attempt becomes
//! `accounting_mismatch` — it is never silently `harness: null`.

use super::classify::Accounting;
use super::{DockerExecutor, Seen};
use crate::run::AttemptReport;
use crate::run::events::HarnessAccount;
use eval_evidence::leftovers::{Beneath, LeftoverError};
use eval_runtimes::RuntimeDef;
use serde_json::Value;
use std::path::{Component, Path};

/// The largest harness metrics file read.
pub const MAX_METRICS_BYTES: u64 = 1024 * 1024;

impl DockerExecutor {
    /// Reads the declared metrics file from the workspace (never following a link out of it),
    /// stores it, cross-checks it, then removes the harness's bookkeeping so neither the grader
    /// nor the archive sees it.
    pub(super) fn cross_check(
        &self,
        def: &RuntimeDef,
        ws: &Beneath,
        seen: &mut Seen,
        report: &mut AttemptReport,
    ) {
        let Some(rel) = &def.metrics_path else {
            seen.obs.accounting = Accounting::NotDeclared;
            report.accounting = Some(seen.obs.accounting.as_str().to_owned());
            return;
        };
        let read = ws.read_file(rel, MAX_METRICS_BYTES);
        if let Ok(bytes) = &read {
            report.artifacts.agent_metrics = self.store_bytes("the harness's metrics", bytes, seen);
        }
        if let Err(e) = &read
            && e.is_host_fault()
        {
            seen.leftover("the harness's metrics", e);
        }
        let proxy = (report.model_turns, report.tokens.total());
        let (accounting, harness) = account(read, proxy);
        seen.obs.accounting = accounting;
        report.accounting = Some(seen.obs.accounting.as_str().to_owned());
        report.harness = harness;
        if let Some(top) = bookkeeping_root(rel)
            && let Err(e) = ws.remove(&top)
        {
            seen.leftover("removing the harness's bookkeeping", &e);
        }
    }
}

/// The cross-check of what was read against the proxy's (turns, tokens).
pub(super) fn account(
    read: Result<Vec<u8>, LeftoverError>,
    proxy: (u64, u64),
) -> (Accounting, Option<HarnessAccount>) {
    let bytes = match read {
        Ok(b) => b,
        Err(LeftoverError::NotFound { .. }) => return (Accounting::MetricsMissing, None),
        Err(e) => return (Accounting::MetricsUnreadable(e.to_string()), None),
    };
    let v: Value = match serde_json::from_slice(&bytes) {
        Ok(v) => v,
        Err(e) => {
            return (
                Accounting::MetricsUnreadable(format!("not JSON: {e}")),
                None,
            );
        }
    };
    let count = |field: &str| {
        v.get(field)
            .and_then(Value::as_u64)
            .ok_or_else(|| format!("{field} is not a count"))
    };
    let (turns, total) = match (count("model_turns"), count("total_tokens")) {
        (Ok(t), Ok(n)) => (t, n),
        (Err(e), _) | (_, Err(e)) => return (Accounting::MetricsUnreadable(e), None),
    };
    let harness = HarnessAccount {
        model_turns: turns,
        total_tokens: total,
    };
    match accounting_mismatch((turns, total), proxy) {
        Some(why) => (Accounting::Mismatch(why), Some(harness)),
        None => (Accounting::Matched, Some(harness)),
    }
}

/// The top directory (or file) of the metrics path: the harness's bookkeeping, removed before
/// grading. `None` for a path that is not a plain relative one (nothing is removed then).
fn bookkeeping_root(rel: &str) -> Option<String> {
    match Path::new(rel).components().next() {
        Some(Component::Normal(c)) => c.to_str().map(str::to_owned),
        _ => None,
    }
}

/// The accounting cross-check: the harness's own (turns, tokens) must equal the proxy's meter.
pub fn accounting_mismatch(harness: (u64, u64), proxy: (u64, u64)) -> Option<String> {
    (harness != proxy).then(|| {
        format!(
            "the harness reports {} model turns and {} tokens, the proxy metered {} and {}",
            harness.0, harness.1, proxy.0, proxy.1
        )
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn accounting_must_match_exactly() {
        assert_eq!(accounting_mismatch((3, 1200), (3, 1200)), None);
        let why = accounting_mismatch((3, 1200), (4, 1200)).unwrap();
        assert!(
            why.contains("3 model turns") && why.contains("metered 4"),
            "{why}"
        );
        assert!(accounting_mismatch((3, 1199), (3, 1200)).is_some());
    }

    #[test]
    fn a_declared_metrics_file_must_be_there_and_well_formed() {
        let ok = br#"{"model_turns": 2, "total_tokens": 30}"#.to_vec();
        let (a, h) = account(Ok(ok.clone()), (2, 30));
        assert_eq!(a, Accounting::Matched);
        assert_eq!(h.map(|h| (h.model_turns, h.total_tokens)), Some((2, 30)));
        let (a, _) = account(Ok(ok), (3, 30));
        assert!(matches!(a, Accounting::Mismatch(_)), "{a:?}");
        let missing = LeftoverError::NotFound { path: "m".into() };
        assert_eq!(account(Err(missing), (0, 0)).0, Accounting::MetricsMissing);
        let fifo = LeftoverError::NotRegular {
            path: "m".into(),
            kind: "fifo",
        };
        let (a, h) = account(Err(fifo), (0, 0));
        assert_eq!(a.as_str(), "metrics_unreadable");
        assert!(h.is_none());
        // Absent counts are not zeros: they fail the cross-check even when the proxy saw none.
        let (a, _) = account(Ok(br#"{"model_turns": 0}"#.to_vec()), (0, 0));
        assert_eq!(a.as_str(), "metrics_unreadable", "{a:?}");
        let (a, _) = account(Ok(b"not json".to_vec()), (0, 0));
        assert_eq!(a.as_str(), "metrics_unreadable");
    }

    #[test]
    fn only_a_plain_relative_top_is_removed() {
        assert_eq!(
            bookkeeping_root(".eval-agent/metrics.json").as_deref(),
            Some(".eval-agent")
        );
        assert_eq!(bookkeeping_root("../x"), None);
        assert_eq!(bookkeeping_root("/etc/x"), None);
    }
}
