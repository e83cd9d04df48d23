//! Cross-validation of a loaded protocol with its matrix and tasks: one function per protocol
//! section, called in the order the sections appear in `protocol.toml`, so the first error a
//! user sees is the first one in their file.

use super::loaded::{Loaded, Project};
use crate::error::ProtocolError;
use crate::protocol::{ModelContract, PROTOCOL_SCHEMA, Protocol};
use eval_core::budget::BUILTIN_METRICS;
use eval_core::headers::never_forwarded;
use eval_matrix::valid_id;
use std::collections::{BTreeSet, HashSet};
use std::path::{Path, PathBuf};

/// Everything every section check needs: the project (for paths), what was loaded, and the
/// files errors name.
struct Check<'a> {
    project: &'a Project,
    l: &'a Loaded,
    p: &'a Protocol,
    pfile: &'a Path,
    mfile: &'a Path,
}

pub(super) fn validate(
    project: &Project,
    l: &Loaded,
    name: &str,
    pfile: &Path,
    mfile: &Path,
) -> Result<(), ProtocolError> {
    let c = Check {
        project,
        l,
        p: &l.protocol,
        pfile,
        mfile,
    };
    c.header(name)?;
    c.hypotheses()?;
    c.registration()?;
    c.models()?;
    c.budgets()?;
    c.arms()?;
    c.suites()?;
    c.tasks()?;
    c.controls()?;
    c.statistics()?;
    c.missing_data()?;
    c.reruns()?;
    c.preconditions()?;
    c.gates()
}

impl Check<'_> {
    /// An error in the protocol file.
    fn bad(&self, field: &str, message: impl Into<String>) -> ProtocolError {
        ProtocolError::field(self.pfile, field, message)
    }

    fn task_file(&self, t: &crate::task::TaskBundle) -> PathBuf {
        self.project.root.join(&t.dir).join("task.toml")
    }

    /// Schema, name, matrix back-reference, title, signing key and upstream.
    fn header(&self, name: &str) -> Result<(), ProtocolError> {
        let p = self.p;
        if p.schema != PROTOCOL_SCHEMA {
            return Err(self.bad(
                "schema",
                format!(
                    "{} is not a schema this eval knows (it knows {PROTOCOL_SCHEMA})",
                    p.schema
                ),
            ));
        }
        if p.name != name {
            return Err(self.bad(
                "name",
                format!("{:?} does not match the directory protocols/{name}", p.name),
            ));
        }
        if self.l.matrix.protocol != p.name {
            return Err(ProtocolError::field(
                self.mfile,
                "protocol",
                format!(
                    "{:?}, but protocol {:?} names this matrix",
                    self.l.matrix.protocol, p.name
                ),
            ));
        }
        if p.title.trim().is_empty() {
            return Err(self.bad("title", "must not be empty"));
        }
        p.signing_public_key()
            .map_err(|m| self.bad("signing.public_key", m))?;
        if let Some(u) = &p.upstream {
            u.check().map_err(|(field, m)| self.bad(field, m))?;
        }
        Ok(())
    }

    fn hypotheses(&self) -> Result<(), ProtocolError> {
        if self.p.hypotheses.is_empty() {
            return Err(self.bad("hypotheses", "state at least one hypothesis"));
        }
        let mut ids = HashSet::new();
        for (i, h) in self.p.hypotheses.iter().enumerate() {
            if !ids.insert(&h.id) || h.text.trim().is_empty() {
                return Err(self.bad(
                    &format!("hypotheses[{i}]"),
                    format!("hypothesis {:?} is duplicated or empty", h.id),
                ));
            }
        }
        Ok(())
    }

    fn registration(&self) -> Result<(), ProtocolError> {
        let r = &self.p.registration;
        for (field, text) in [
            (
                "registration.sample_size_rationale",
                &r.sample_size_rationale,
            ),
            ("registration.stopping_rule", &r.stopping_rule),
        ] {
            if text.trim().is_empty() {
                return Err(self.bad(field, "must not be empty"));
            }
        }
        if let Some(s) = &r.supersedes {
            if !valid_id(&s.name) || s.name == self.p.name {
                return Err(self.bad(
                    "registration.supersedes.name",
                    format!("{:?} must name another protocol", s.name),
                ));
            }
            if s.reason.trim().is_empty() {
                return Err(self.bad("registration.supersedes.reason", "must not be empty"));
            }
        }
        Ok(())
    }

    /// A contract for the agent; per role a model, allow-lists and finite parameter bounds.
    fn models(&self) -> Result<(), ProtocolError> {
        if !self.p.models.contains_key("agent") {
            return Err(self.bad("models", "a contract for role `agent` is required"));
        }
        for (role, m) in &self.p.models {
            if m.model.trim().is_empty() {
                return Err(self.bad(&format!("models.{role}.model"), "must not be empty"));
            }
            validate_allow_lists(self.pfile, role, m)?;
            for (param, b) in &m.params {
                let f = format!("models.{role}.params.{param}");
                let vals = [b.equals, b.min, b.max];
                if vals.iter().flatten().any(|v| !v.is_finite()) {
                    return Err(self.bad(&f, "bounds must be finite"));
                }
                if vals.iter().all(Option::is_none) && !b.required {
                    return Err(self.bad(&f, "give equals, min/max or required"));
                }
                if let (Some(lo), Some(hi)) = (b.min, b.max)
                    && lo > hi
                {
                    return Err(self.bad(&f, format!("min {lo} > max {hi}")));
                }
            }
        }
        Ok(())
    }

    fn budgets(&self) -> Result<(), ProtocolError> {
        let b = &self.p.budgets;
        if b.attempt.wall_seconds == 0 || b.attempt.max_requests == 0 || b.attempt.max_tokens == 0 {
            return Err(self.bad("budgets.attempt", "every limit must be positive"));
        }
        if b.run.max_tokens == 0 || !(b.run.max_spend_usd.is_finite() && b.run.max_spend_usd >= 0.0)
        {
            return Err(self.bad("budgets.run", "limits must be positive and finite"));
        }
        if b.artifacts.max_bytes == 0 {
            return Err(self.bad("budgets.artifacts.max_bytes", "must be positive"));
        }
        // Every slot's quota must fit at once: no attempt's share is then ever another's.
        if let Some(q) = b.artifacts.per_attempt_bytes {
            let slots = self.l.attempt_slots();
            if q == 0 {
                return Err(self.bad("budgets.artifacts.per_attempt_bytes", "must be positive"));
            }
            if slots
                .checked_mul(q)
                .is_none_or(|t| t > b.artifacts.max_bytes)
            {
                return Err(self.bad(
                    "budgets.artifacts.per_attempt_bytes",
                    format!(
                        "{slots} slots × {q} bytes is more than budgets.artifacts.max_bytes ({})",
                        b.artifacts.max_bytes
                    ),
                ));
            }
        }
        for (i, price) in b.prices.iter().enumerate() {
            let vals = [
                Some(price.input_usd_per_mtok),
                Some(price.output_usd_per_mtok),
                price.cached_input_usd_per_mtok,
                price.cache_write_usd_per_mtok,
            ];
            if vals.iter().flatten().any(|v| !v.is_finite() || *v < 0.0) {
                return Err(self.bad(&format!("budgets.prices[{i}]"), "prices must be ≥ 0"));
            }
        }
        Ok(())
    }

    /// Arms: defined once, each used by some suite, each suite's arms defined.
    fn arms(&self) -> Result<(), ProtocolError> {
        let (p, l) = (self.p, self.l);
        let mut arm_ids = HashSet::new();
        for (i, a) in p.arms.iter().enumerate() {
            let f = |x: &str| format!("arms[{i}].{x}");
            if !valid_id(&a.id) {
                return Err(self.bad(&f("id"), format!("{:?} is not a plain id", a.id)));
            }
            if !arm_ids.insert(a.id.as_str()) {
                return Err(self.bad(&f("id"), format!("arm {:?} is defined twice", a.id)));
            }
            self.project
                .check_path(self.pfile, &f("runtime"), &a.runtime, false)?;
            self.project
                .check_path(self.pfile, &f("profile"), &a.profile, false)?;
            if let Some(pkg) = &a.package {
                self.project
                    .check_path(self.pfile, &f("package"), pkg, true)?;
            }
        }
        for (i, s) in l.matrix.suites.iter().enumerate() {
            for a in &s.arms {
                if !arm_ids.contains(a.as_str()) {
                    return Err(ProtocolError::field(
                        self.mfile,
                        format!("suites[{i}].arms"),
                        format!(
                            "arm {a:?} is not defined in {} ([[arms]] has: {})",
                            l.protocol_file,
                            p.arms
                                .iter()
                                .map(|a| a.id.as_str())
                                .collect::<Vec<_>>()
                                .join(", ")
                        ),
                    ));
                }
            }
        }
        let used: BTreeSet<&str> = l.matrix.arm_ids().into_iter().collect();
        for (i, a) in p.arms.iter().enumerate() {
            if !used.contains(a.id.as_str()) {
                return Err(self.bad(
                    &format!("arms[{i}].id"),
                    format!(
                        "arm {:?} is defined but no suite of matrix {} runs it",
                        a.id, l.matrix.name
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Suites and metrics: one table per matrix suite, and every metric built in or emitted by
    /// every task of the suite.
    fn suites(&self) -> Result<(), ProtocolError> {
        let (p, l) = (self.p, self.l);
        let matrix_suites: BTreeSet<&str> = l.matrix.suites.iter().map(|s| s.id.as_str()).collect();
        for key in p.suites.keys() {
            if !matrix_suites.contains(key.as_str()) {
                return Err(self.bad(
                    &format!("suites.{key}"),
                    format!("matrix {} has no suite {key:?}", l.matrix.name),
                ));
            }
        }
        for s in &matrix_suites {
            let Some(spec) = p.suites.get(*s) else {
                return Err(self.bad(
                    "suites",
                    format!("suite {s:?} of the matrix has no [suites.{s}] table"),
                ));
            };
            if spec.metrics.is_empty() {
                return Err(self.bad(&format!("suites.{s}.metrics"), "list at least one metric"));
            }
            let overlap = spec.oracle_guard.max_brief_overlap;
            if !(0.0..=1.0).contains(&overlap) {
                return Err(self.bad(
                    &format!("suites.{s}.oracle_guard.max_brief_overlap"),
                    format!("{overlap} is not a share between 0 and 1"),
                ));
            }
            // A model-free protocol's evidence comes from an upstream that answers nothing: a
            // metric that reads the answer (a grader's, the meter's tokens and turns, the clock,
            // the oracle) would measure the stand-in, not the harness.
            if p.model_free
                && let Some(m) = spec
                    .metrics
                    .iter()
                    .find(|m| !eval_core::budget::WIRE_METRICS.contains(&m.as_str()))
            {
                return Err(self.bad(
                    &format!("suites.{s}.metrics"),
                    format!(
                        "metric {m:?} reads what the upstream answers, but the protocol declares model_free = true: only the wire metrics ({}) are allowed",
                        eval_core::budget::WIRE_METRICS.join(", ")
                    ),
                ));
            }
            for m in &spec.metrics {
                if BUILTIN_METRICS.contains(&m.as_str()) {
                    continue;
                }
                if eval_core::budget::ORACLE_METRICS.contains(&m.as_str()) {
                    if let Some(t) = l.tasks.iter().find(|t| {
                        t.suite == *s
                            && t.spec
                                .oracle
                                .as_ref()
                                .is_none_or(|o| o.constraints.is_none())
                    }) {
                        return Err(self.bad(
                            &format!("suites.{s}.metrics"),
                            format!(
                                "metric {m:?} is computed from the oracle's records and needs every task of the suite to declare [oracle.constraints]; task {} does not",
                                t.id
                            ),
                        ));
                    }
                    continue;
                }
                if eval_core::budget::WIRE_METRICS.contains(&m.as_str()) {
                    if m == "wire_route_matches"
                        && let Some(t) = l
                            .tasks
                            .iter()
                            .find(|t| t.suite == *s && t.spec.wire.is_none())
                    {
                        return Err(self.bad(
                            &format!("suites.{s}.metrics"),
                            format!(
                                "metric \"wire_route_matches\" needs every task of the suite to declare [wire] expected_route; task {} does not",
                                t.id
                            ),
                        ));
                    }
                    continue;
                }
                for t in l.tasks.iter().filter(|t| t.suite == *s) {
                    if !t.spec.metrics.contains(m) {
                        return Err(self.bad(
                            &format!("suites.{s}.metrics"),
                            format!(
                                "metric {m:?} is neither built in ({}) nor emitted by task {} (its task.toml lists: {})",
                                BUILTIN_METRICS.join(", "),
                                t.id,
                                t.spec.metrics.join(", ")
                            ),
                        ));
                    }
                }
            }
        }
        Ok(())
    }

    /// Each task against the protocol: its timeout within the attempt budget, its oracle within
    /// the suite's limit, its grader runtime present.
    fn tasks(&self) -> Result<(), ProtocolError> {
        let p = self.p;
        let wall = p.budgets.attempt.wall_seconds;
        for t in &self.l.tasks {
            let tfile = self.task_file(t);
            if let Some(w) = &t.spec.wire {
                if !eval_core::budget::WIRE_ROUTES.contains(&w.expected_route.as_str()) {
                    return Err(ProtocolError::field(
                        &tfile,
                        "wire.expected_route",
                        format!(
                            "{:?} is not a route ({})",
                            w.expected_route,
                            eval_core::budget::WIRE_ROUTES.join(", ")
                        ),
                    ));
                }
                if let Some(c) = &w.expected_clarification
                    && !eval_core::budget::WIRE_CLARIFICATIONS.contains(&c.as_str())
                {
                    return Err(ProtocolError::field(
                        &tfile,
                        "wire.expected_clarification",
                        format!(
                            "{c:?} is not a clarification policy ({})",
                            eval_core::budget::WIRE_CLARIFICATIONS.join(", ")
                        ),
                    ));
                }
            }
            if t.spec.timeout_seconds > wall {
                return Err(ProtocolError::field(
                    &tfile,
                    "timeout_seconds",
                    format!(
                        "{} exceeds the protocol's budgets.attempt.wall_seconds ({wall})",
                        t.spec.timeout_seconds
                    ),
                ));
            }
            for (i, r) in t.spec.rounds.iter().enumerate() {
                if let Some(m) = r.max_tokens
                    && m > p.budgets.attempt.max_tokens
                {
                    return Err(ProtocolError::field(
                        &tfile,
                        format!("rounds[{i}].max_tokens"),
                        format!(
                            "{m} exceeds the protocol's budgets.attempt.max_tokens ({})",
                            p.budgets.attempt.max_tokens
                        ),
                    ));
                }
            }
            if let Some(o) = &t.spec.oracle {
                let limit = p
                    .suites
                    .get(&t.suite)
                    .map(|s| s.max_oracle_calls)
                    .unwrap_or(0);
                if o.answered_by != crate::task::OracleAnswerer::Scripted
                    && !p.models.contains_key("oracle")
                {
                    return Err(ProtocolError::field(
                        &tfile,
                        "oracle.answered_by",
                        format!(
                            "\"{}\" needs the protocol's [models.oracle]",
                            if o.answered_by == crate::task::OracleAnswerer::Model {
                                "model"
                            } else {
                                "stateful"
                            }
                        ),
                    ));
                }
                if o.max_questions > limit {
                    return Err(ProtocolError::field(
                        &tfile,
                        "oracle.max_questions",
                        format!(
                            "{} exceeds suites.{}.max_oracle_calls ({limit})",
                            o.max_questions, t.suite
                        ),
                    ));
                }
            }
            self.project
                .check_path(&tfile, "grader.runtime", &t.spec.grader.runtime, false)?;
        }
        Ok(())
    }

    /// The statistical plan: unit, repetitions, resamples, confidence, methods, seed, exactness.
    fn statistics(&self) -> Result<(), ProtocolError> {
        let st = &self.p.statistics;
        if st.unit != "task" {
            return Err(self.bad(
                "statistics.unit",
                format!("{:?}: only \"task\" is supported", st.unit),
            ));
        }
        if st.repetitions != "mean" {
            return Err(self.bad(
                "statistics.repetitions",
                format!(
                    "{:?}: only \"mean\" (averaged within task) is supported",
                    st.repetitions
                ),
            ));
        }
        if st.resamples == 0 {
            return Err(self.bad("statistics.resamples", "must be positive"));
        }
        if !(st.confidence > 0.0 && st.confidence < 1.0) {
            return Err(self.bad("statistics.confidence", "must be strictly between 0 and 1"));
        }
        if st.false_fail_bound.is_some_and(|b| !(b > 0.0 && b < 1.0)) {
            return Err(self.bad(
                "statistics.false_fail_bound",
                "must be strictly between 0 and 1",
            ));
        }
        for (field, m) in std::iter::once(("statistics.method", &st.method)).chain(
            st.report_methods
                .iter()
                .map(|m| ("statistics.report_methods", m)),
        ) {
            if !matches!(m.as_str(), "v04-percentile" | "percentile" | "bca") {
                return Err(self.bad(
                    field,
                    format!("unknown method {m:?} (v04-percentile, percentile, bca)"),
                ));
            }
        }
        let uses_v04 = st.method == "v04-percentile"
            || self
                .p
                .gates
                .iter()
                .flat_map(|g| &g.rules)
                .any(|r| r.method.as_deref() == Some("v04-percentile"));
        if uses_v04
            && st
                .seed_string
                .as_deref()
                .is_none_or(|s| s.trim().is_empty())
        {
            return Err(self.bad(
                "statistics.seed_string",
                "v04-percentile needs a seed string",
            ));
        }
        if !matches!(st.exact.as_str(), "auto" | "always" | "never") {
            return Err(self.bad(
                "statistics.exact",
                format!("{:?}: auto, always or never", st.exact),
            ));
        }
        Ok(())
    }

    /// Control arms: known forms, each once; an oracle only where every task has a `solution/`
    /// directory; exploits beside a nop; the deciding metric one the suite lists; the protocol's
    /// own exploits directories inside the project; and `grader_valid` declared exactly when some
    /// suite has controls (controls nobody gates on would be decoration, a gate on none a no-op).
    fn controls(&self) -> Result<(), ProtocolError> {
        use eval_core::controls::{ControlArm, is_library_exploit, valid_exploit_name};
        let (p, l) = (self.p, self.l);
        let mut any = false;
        for (sid, spec) in &p.suites {
            if spec.pass_mark.is_some_and(|m| !m.is_finite()) {
                return Err(self.bad(&format!("suites.{sid}.pass_mark"), "must be finite"));
            }
            let Some(c) = &spec.controls else { continue };
            let f = |x: &str| format!("suites.{sid}.controls.{x}");
            if let Some(why) = &c.off {
                if why.trim().is_empty() {
                    return Err(self.bad(
                        &f("off"),
                        "state why the suite runs without control arms (a non-empty reason; the report discloses it)",
                    ));
                }
                let other = [
                    ("arms", !c.arms.is_empty()),
                    ("metric", !c.metric.is_empty()),
                    ("pass_at_least", c.pass_at_least.is_some()),
                    ("also_report", !c.also_report.is_empty()),
                    ("exploits", !c.exploits.is_empty()),
                ]
                .into_iter()
                .filter(|(_, set)| *set)
                .map(|(n, _)| n)
                .collect::<Vec<_>>();
                if !other.is_empty() {
                    return Err(self.bad(
                        &f("off"),
                        format!(
                            "`off` says the suite has no control arms, but the table also sets {}: remove `off` or them",
                            other.join(", ")
                        ),
                    ));
                }
                continue;
            }
            any = true;
            if c.arms.is_empty() {
                return Err(self.bad(
                    &f("arms"),
                    "list at least one control arm (or only `off = \"<why>\"` to run the suite knowingly without them)",
                ));
            }
            let Some(pass_at_least) = c.pass_at_least else {
                return Err(self.bad(
                    &f("pass_at_least"),
                    "required with control arms: the score at least which a control passes",
                ));
            };
            if !spec.metrics.contains(&c.metric) {
                return Err(self.bad(
                    &f("metric"),
                    format!(
                        "{:?} is not one of the suite's metrics ({})",
                        c.metric,
                        spec.metrics.join(", ")
                    ),
                ));
            }
            for m in &c.also_report {
                if !spec.metrics.contains(m) || *m == c.metric {
                    return Err(self.bad(
                        &f("also_report"),
                        format!("{m:?} is not another of the suite's metrics"),
                    ));
                }
            }
            if !pass_at_least.is_finite() {
                return Err(self.bad(&f("pass_at_least"), "must be finite"));
            }
            for (name, dir) in &c.exploits {
                if !valid_exploit_name(name) || is_library_exploit(name) {
                    return Err(self.bad(
                        &f(&format!("exploits.{name}")),
                        "an exploit name is letters, digits, `-`, `_` and not one of the library's",
                    ));
                }
                self.project
                    .check_path(self.pfile, &f(&format!("exploits.{name}")), dir, true)?;
            }
            let mut seen = BTreeSet::new();
            let mut has_nop = false;
            let mut has_exploit = false;
            for (i, text) in c.arms.iter().enumerate() {
                let field = f(&format!("arms[{i}]"));
                let arm: ControlArm = text.parse().map_err(|e| self.bad(&field, format!("{e}")))?;
                if !seen.insert(arm.clone()) {
                    return Err(self.bad(&field, format!("{text:?} is listed twice")));
                }
                match &arm {
                    ControlArm::Nop => has_nop = true,
                    ControlArm::Exploit(n) => {
                        has_exploit = true;
                        if !is_library_exploit(n) && !c.exploits.contains_key(n) {
                            return Err(self.bad(
                                &field,
                                format!(
                                    "exploit {n:?} is neither in eval's library ({}) nor declared in [suites.{sid}.controls.exploits]",
                                    eval_core::controls::LIBRARY_EXPLOITS
                                        .iter()
                                        .map(|(n, _)| *n)
                                        .collect::<Vec<_>>()
                                        .join(", ")
                                ),
                            ));
                        }
                    }
                    ControlArm::Oracle => {
                        for t in l.tasks.iter().filter(|t| t.suite == *sid) {
                            // A multi-round task's oracle runs each round's reference
                            // solve.sh (controller `run/controls.rs`, `oracle_round_hidden`).
                            let wanted: Vec<String> = if t.spec.rounds.is_empty() {
                                vec!["solution".to_owned()]
                            } else {
                                (1..=t.spec.rounds.len())
                                    .map(|k| format!("{}/solution", crate::task::round_hidden(k)))
                                    .collect()
                            };
                            for rel in wanted {
                                let sol = self.project.root.join(&t.dir).join(&rel);
                                let ok = if t.spec.rounds.is_empty() {
                                    std::fs::symlink_metadata(&sol).is_ok_and(|m| m.is_dir())
                                } else {
                                    std::fs::symlink_metadata(sol.join("solve.sh"))
                                        .is_ok_and(|m| m.is_file())
                                };
                                if !ok {
                                    let what = if t.spec.rounds.is_empty() {
                                        format!("{}/{rel} is not a directory", t.dir)
                                    } else {
                                        format!("{}/{rel}/solve.sh is not a file", t.dir)
                                    };
                                    return Err(self.bad(
                                        &field,
                                        format!(
                                            "the oracle needs the task's reference solution, and {what}"
                                        ),
                                    ));
                                }
                            }
                        }
                    }
                }
            }
            if has_exploit && !has_nop {
                return Err(self.bad(
                    &f("arms"),
                    "an exploit is judged against its task's nop: add \"nop\"",
                ));
            }
        }
        let gated = p.gates.iter().any(|g| {
            g.rules
                .iter()
                .any(|r| r.statistic == eval_core::gates::Statistic::GraderValid)
        });
        if any && !gated {
            return Err(self.bad(
                "gates",
                "control arms are declared but no integrity gate has a `grader_valid` rule",
            ));
        }
        if gated && !any {
            return Err(self.bad(
                "gates",
                "a `grader_valid` rule needs control arms ([suites.<id>.controls])",
            ));
        }
        Ok(())
    }

    /// Missing data: a stated rule; values for known metrics only, finite.
    fn missing_data(&self) -> Result<(), ProtocolError> {
        let p = self.p;
        if p.missing_data.rule.trim().is_empty() {
            return Err(self.bad("missing_data.rule", "state the rule"));
        }
        let all_metrics: BTreeSet<&str> = p
            .suites
            .values()
            .flat_map(|s| s.metrics.iter().map(String::as_str))
            .collect();
        for (m, v) in &p.missing_data.values {
            let f = format!("missing_data.values.{m}");
            if !all_metrics.contains(m.as_str()) {
                return Err(self.bad(&f, "no suite lists this metric"));
            }
            if !v.is_finite() {
                return Err(self.bad(&f, "must be finite"));
            }
        }
        Ok(())
    }

    fn reruns(&self) -> Result<(), ProtocolError> {
        let r = &self.p.reruns;
        let mut codes = HashSet::new();
        for (i, c) in r.codes.iter().enumerate() {
            if !codes.insert(c) {
                return Err(self.bad(
                    &format!("reruns.codes[{i}]"),
                    format!("\"{c}\" is listed twice"),
                ));
            }
        }
        if r.max_infra_attempts == 0 {
            return Err(self.bad("reruns.max_infra_attempts", "must be at least 1"));
        }
        Ok(())
    }

    fn preconditions(&self) -> Result<(), ProtocolError> {
        for (i, pre) in self.p.preconditions.iter().enumerate() {
            let f = format!("preconditions[{i}]");
            if !valid_id(&pre.protocol) || pre.protocol == self.p.name {
                return Err(self.bad(
                    &format!("{f}.protocol"),
                    format!("{:?} must name another protocol", pre.protocol),
                ));
            }
            if let Some(id) = &pre.identity
                && eval_core::Digest::parse(id).is_none()
            {
                return Err(self.bad(
                    &format!("{f}.identity"),
                    format!("{id:?} is not a sha256:<hex> digest"),
                ));
            }
        }
        Ok(())
    }

    /// Release gates: at least one, ids and rule ids distinct, each valid against its suite's
    /// metrics.
    fn gates(&self) -> Result<(), ProtocolError> {
        let p = self.p;
        let mut gate_ids = HashSet::new();
        for (i, g) in p.gates.iter().enumerate() {
            let f = format!("gates[{i}]");
            if !gate_ids.insert(&g.id) {
                return Err(self.bad(
                    &format!("{f}.id"),
                    format!("gate {:?} is declared twice", g.id),
                ));
            }
            let metrics = match &g.suite {
                Some(s) => match p.suites.get(s) {
                    Some(spec) => Some(spec.metrics.as_slice()),
                    None => {
                        return Err(self.bad(
                            &format!("{f}.suite"),
                            format!("no suite {s:?} in this protocol"),
                        ));
                    }
                },
                None => None,
            };
            let mut rule_ids = HashSet::new();
            for (j, rule) in g.rules.iter().enumerate() {
                if !rule_ids.insert(&rule.id) {
                    return Err(self.bad(
                        &format!("{f}.rules[{j}].id"),
                        format!("rule {:?} is declared twice", rule.id),
                    ));
                }
            }
            g.validate(metrics)
                .map_err(|e| self.bad(&f, e.to_string()))?;
        }
        if p.gates.is_empty() {
            return Err(self.bad("gates", "declare at least one release gate"));
        }
        for (gate, spec) in &p.power {
            let f = format!("power.{gate}");
            let interval = p.gates.iter().find(|g| g.id == *gate).is_some_and(|g| {
                g.rules.iter().any(|r| {
                    matches!(
                        r.statistic,
                        eval_core::gates::Statistic::BootstrapLower
                            | eval_core::gates::Statistic::ContrastLower
                    )
                })
            });
            if !interval {
                return Err(self.bad(
                    &f,
                    format!("{gate:?} is not a gate with a bootstrap_lower or contrast_lower rule"),
                ));
            }
            if !spec.effect.is_finite() {
                return Err(self.bad(&format!("{f}.effect"), "must be finite"));
            }
            if !(spec.sd.is_finite() && spec.sd > 0.0) {
                return Err(self.bad(&format!("{f}.sd"), "must be positive"));
            }
        }
        if let Some(seq) = &p.sequential {
            let watched = p
                .gates
                .iter()
                .find(|g| g.id == seq.gate)
                .filter(|g| g.suite.is_some())
                .and_then(|g| {
                    g.rules.iter().find(|r| {
                        matches!(
                            r.statistic,
                            eval_core::gates::Statistic::BootstrapLower
                                | eval_core::gates::Statistic::ContrastLower
                                | eval_core::gates::Statistic::SignFlipP
                        )
                    })
                })
                .is_some_and(|r| r.metric.is_some());
            if !watched {
                return Err(self.bad(
                    "sequential.gate",
                    format!(
                        "{:?} is not a suite gate with a bootstrap_lower, contrast_lower or sign_flip_p rule on a metric",
                        seq.gate
                    ),
                ));
            }
            eval_core::sequential::check_looks(&seq.looks)
                .map_err(|e| self.bad("sequential.looks", e))?;
            if seq.futility_z.is_some_and(|z| !z.is_finite()) {
                return Err(self.bad("sequential.futility_z", "must be finite"));
            }
        }
        Ok(())
    }
}

/// `allowed_params` and `allowed_headers`: plain, distinct names; no header the proxy would
/// drop anyway (listing one would promise something the proxy does not do).
fn validate_allow_lists(pfile: &Path, role: &str, m: &ModelContract) -> Result<(), ProtocolError> {
    let bad = |field: &str, message: String| ProtocolError::field(pfile, field, message);
    if let Some(list) = &m.allowed_params {
        let f = format!("models.{role}.allowed_params");
        let mut seen = HashSet::new();
        for name in list {
            let plain = !name.is_empty()
                && name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-' || b == b'.');
            if !plain {
                return Err(bad(&f, format!("{name:?} is not a parameter name")));
            }
            if !seen.insert(name.as_str()) {
                return Err(bad(&f, format!("{name:?} is listed twice")));
            }
        }
    }
    if let Some(list) = &m.allowed_headers {
        let f = format!("models.{role}.allowed_headers");
        let mut seen = HashSet::new();
        for name in list {
            let lower = name.to_ascii_lowercase();
            let token = !lower.is_empty()
                && lower
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
            if !token {
                return Err(bad(&f, format!("{name:?} is not a header name")));
            }
            if never_forwarded(&lower) {
                return Err(bad(
                    &f,
                    format!(
                        "{name:?} is a credential or hop-by-hop header the proxy never forwards"
                    ),
                ));
            }
            if !seen.insert(lower) {
                return Err(bad(&f, format!("{name:?} is listed twice")));
            }
        }
    }
    Ok(())
}
