//! A project directory (`protocols/`, `matrix/`, `runtimes/`, task bundles) and the loading and
//! cross-validation of one protocol with its matrix and tasks.

use crate::error::ProtocolError;
use crate::protocol::{BUILTIN_METRICS, ModelContract, PROTOCOL_SCHEMA, Protocol};
use crate::task::{TaskBundle, TaskSpec};
use crate::tree::clean_relative;
use eval_matrix::{Matrix, valid_id};
use std::collections::{BTreeSet, HashSet};
use std::path::{Path, PathBuf};

/// The project root: every path in protocols and matrices is relative to it.
#[derive(Clone, Debug)]
pub struct Project {
    pub root: PathBuf,
}

/// A protocol with its matrix and task bundles, validated together.
#[derive(Clone, Debug)]
pub struct Loaded {
    pub protocol: Protocol,
    pub matrix: Matrix,
    pub tasks: Vec<TaskBundle>,
    /// Relative to the project root.
    pub protocol_file: String,
    pub matrix_file: String,
}

impl Loaded {
    pub fn arm(&self, id: &str) -> Option<&crate::protocol::Arm> {
        self.protocol.arms.iter().find(|a| a.id == id)
    }

    pub fn task(&self, suite: &str, id: &str) -> Option<&TaskBundle> {
        self.tasks.iter().find(|t| t.suite == suite && t.id == id)
    }
}

impl Project {
    pub fn open(root: impl Into<PathBuf>) -> Project {
        Project { root: root.into() }
    }

    pub fn protocol_file(name: &str) -> String {
        format!("protocols/{name}/protocol.toml")
    }

    pub fn matrix_file(name: &str) -> String {
        format!("matrix/{name}.toml")
    }

    /// Reads and validates `matrix/NAME.toml` on its own (enough for `eval plan`).
    pub fn load_matrix(&self, name: &str) -> Result<Matrix, ProtocolError> {
        check_name(name, "--matrix")?;
        Ok(Matrix::load(&self.root.join(Self::matrix_file(name)))?)
    }

    /// Reads and validates a protocol, its matrix and every task bundle the matrix names.
    pub fn load(&self, name: &str) -> Result<Loaded, ProtocolError> {
        check_name(name, "--protocol")?;
        let protocol_file = Self::protocol_file(name);
        let pfile = self.root.join(&protocol_file);
        let text = std::fs::read_to_string(&pfile).map_err(|e| ProtocolError::Input {
            file: pfile.clone(),
            message: format!("cannot read the protocol: {e}"),
        })?;
        let protocol: Protocol = toml::from_str(&text).map_err(|e| ProtocolError::Input {
            file: pfile.clone(),
            message: e.to_string().trim_end().to_owned(),
        })?;
        let matrix_file = Self::matrix_file(&protocol.matrix);
        if !valid_id(&protocol.matrix) {
            return Err(ProtocolError::field(&pfile, "matrix", "not a plain id"));
        }
        let mfile = self.root.join(&matrix_file);
        let matrix = Matrix::load(&mfile)?;
        let tasks = self.load_tasks(&matrix, &mfile)?;
        let loaded = Loaded {
            protocol,
            matrix,
            tasks,
            protocol_file,
            matrix_file,
        };
        self.validate(&loaded, name, &pfile, &mfile)?;
        Ok(loaded)
    }

    fn load_tasks(&self, matrix: &Matrix, mfile: &Path) -> Result<Vec<TaskBundle>, ProtocolError> {
        let mut out = Vec::new();
        for (i, suite) in matrix.suites.iter().enumerate() {
            clean_relative(&suite.task_root).map_err(|e| {
                ProtocolError::field(mfile, format!("suites[{i}].task_root"), e.to_string())
            })?;
            for task in &suite.tasks {
                let dir = suite.task_dir(task);
                let field = format!("suites[{i}].tasks");
                let abs = self.root.join(&dir);
                let tfile = abs.join("task.toml");
                let text = std::fs::read_to_string(&tfile).map_err(|e| {
                    ProtocolError::field(
                        mfile,
                        &field,
                        format!("task {task:?}: no task bundle at {dir}/task.toml ({e})"),
                    )
                })?;
                let spec: TaskSpec = toml::from_str(&text).map_err(|e| ProtocolError::Input {
                    file: tfile.clone(),
                    message: e.to_string().trim_end().to_owned(),
                })?;
                if spec.id != *task {
                    return Err(ProtocolError::field(
                        &tfile,
                        "id",
                        format!("{:?} does not match the bundle directory {task:?}", spec.id),
                    ));
                }
                if spec.suite != suite.id {
                    return Err(ProtocolError::field(
                        &tfile,
                        "suite",
                        format!(
                            "{:?}, but the matrix runs it in suite {:?}",
                            spec.suite, suite.id
                        ),
                    ));
                }
                for (part, want_dir) in
                    [("prompt.md", false), ("workspace", true), ("hidden", true)]
                {
                    let p = abs.join(part);
                    let ok = std::fs::symlink_metadata(&p)
                        .map(|m| if want_dir { m.is_dir() } else { m.is_file() })
                        .unwrap_or(false);
                    if !ok {
                        return Err(ProtocolError::field(
                            mfile,
                            &field,
                            format!(
                                "task {task:?}: the bundle {dir} has no {part}{}",
                                if want_dir { "/ directory" } else { " file" }
                            ),
                        ));
                    }
                }
                validate_task(&spec, &tfile)?;
                out.push(TaskBundle {
                    suite: suite.id.clone(),
                    id: task.clone(),
                    dir,
                    spec,
                });
            }
        }
        Ok(out)
    }

    fn validate(
        &self,
        l: &Loaded,
        name: &str,
        pfile: &Path,
        mfile: &Path,
    ) -> Result<(), ProtocolError> {
        let p = &l.protocol;
        let bad = |field: &str, message: String| ProtocolError::field(pfile, field, message);
        if p.schema != PROTOCOL_SCHEMA {
            return Err(bad(
                "schema",
                format!(
                    "{} is not a schema this eval knows (it knows {PROTOCOL_SCHEMA})",
                    p.schema
                ),
            ));
        }
        if p.name != name {
            return Err(bad(
                "name",
                format!("{:?} does not match the directory protocols/{name}", p.name),
            ));
        }
        if l.matrix.protocol != p.name {
            return Err(ProtocolError::field(
                mfile,
                "protocol",
                format!(
                    "{:?}, but protocol {:?} names this matrix",
                    l.matrix.protocol, p.name
                ),
            ));
        }
        if p.title.trim().is_empty() {
            return Err(bad("title", "must not be empty".into()));
        }
        p.signing_public_key()
            .map_err(|m| bad("signing.public_key", m))?;
        if p.hypotheses.is_empty() {
            return Err(bad("hypotheses", "state at least one hypothesis".into()));
        }
        let mut ids = HashSet::new();
        for (i, h) in p.hypotheses.iter().enumerate() {
            if !ids.insert(&h.id) || h.text.trim().is_empty() {
                return Err(bad(
                    &format!("hypotheses[{i}]"),
                    format!("hypothesis {:?} is duplicated or empty", h.id),
                ));
            }
        }
        let r = &p.registration;
        for (field, text) in [
            (
                "registration.sample_size_rationale",
                &r.sample_size_rationale,
            ),
            ("registration.stopping_rule", &r.stopping_rule),
        ] {
            if text.trim().is_empty() {
                return Err(bad(field, "must not be empty".into()));
            }
        }
        if let Some(s) = &r.supersedes {
            if !valid_id(&s.name) || s.name == p.name {
                return Err(bad(
                    "registration.supersedes.name",
                    format!("{:?} must name another protocol", s.name),
                ));
            }
            if s.reason.trim().is_empty() {
                return Err(bad(
                    "registration.supersedes.reason",
                    "must not be empty".into(),
                ));
            }
        }
        if !p.models.contains_key("agent") {
            return Err(bad(
                "models",
                "a contract for role `agent` is required".into(),
            ));
        }
        for (role, m) in &p.models {
            if m.model.trim().is_empty() {
                return Err(bad(
                    &format!("models.{role}.model"),
                    "must not be empty".into(),
                ));
            }
            validate_allow_lists(pfile, role, m)?;
            for (param, b) in &m.params {
                let f = format!("models.{role}.params.{param}");
                let vals = [b.equals, b.min, b.max];
                if vals.iter().flatten().any(|v| !v.is_finite()) {
                    return Err(bad(&f, "bounds must be finite".into()));
                }
                if vals.iter().all(Option::is_none) && !b.required {
                    return Err(bad(&f, "give equals, min/max or required".into()));
                }
                if let (Some(lo), Some(hi)) = (b.min, b.max)
                    && lo > hi
                {
                    return Err(bad(&f, format!("min {lo} > max {hi}")));
                }
            }
        }
        let b = &p.budgets;
        if b.attempt.wall_seconds == 0 || b.attempt.max_requests == 0 || b.attempt.max_tokens == 0 {
            return Err(bad(
                "budgets.attempt",
                "every limit must be positive".into(),
            ));
        }
        if b.run.max_tokens == 0 || !(b.run.max_spend_usd.is_finite() && b.run.max_spend_usd >= 0.0)
        {
            return Err(bad(
                "budgets.run",
                "limits must be positive and finite".into(),
            ));
        }
        for (i, price) in b.prices.iter().enumerate() {
            let vals = [
                Some(price.input_usd_per_mtok),
                Some(price.output_usd_per_mtok),
                price.cached_input_usd_per_mtok,
                price.cache_write_usd_per_mtok,
            ];
            if vals.iter().flatten().any(|v| !v.is_finite() || *v < 0.0) {
                return Err(bad(
                    &format!("budgets.prices[{i}]"),
                    "prices must be ≥ 0".into(),
                ));
            }
        }

        // Arms: defined once, each used by some suite, each suite's arms defined.
        let mut arm_ids = HashSet::new();
        for (i, a) in p.arms.iter().enumerate() {
            let f = |x: &str| format!("arms[{i}].{x}");
            if !valid_id(&a.id) {
                return Err(bad(&f("id"), format!("{:?} is not a plain id", a.id)));
            }
            if !arm_ids.insert(a.id.as_str()) {
                return Err(bad(&f("id"), format!("arm {:?} is defined twice", a.id)));
            }
            self.check_path(pfile, &f("runtime"), &a.runtime, false)?;
            self.check_path(pfile, &f("profile"), &a.profile, false)?;
            if let Some(pkg) = &a.package {
                self.check_path(pfile, &f("package"), pkg, true)?;
            }
        }
        let used: BTreeSet<&str> = l.matrix.arm_ids().into_iter().collect();
        for (i, s) in l.matrix.suites.iter().enumerate() {
            for a in &s.arms {
                if !arm_ids.contains(a.as_str()) {
                    return Err(ProtocolError::field(
                        mfile,
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
        for (i, a) in p.arms.iter().enumerate() {
            if !used.contains(a.id.as_str()) {
                return Err(bad(
                    &format!("arms[{i}].id"),
                    format!(
                        "arm {:?} is defined but no suite of matrix {} runs it",
                        a.id, l.matrix.name
                    ),
                ));
            }
        }

        // Suites and metrics.
        let matrix_suites: BTreeSet<&str> = l.matrix.suites.iter().map(|s| s.id.as_str()).collect();
        for key in p.suites.keys() {
            if !matrix_suites.contains(key.as_str()) {
                return Err(bad(
                    &format!("suites.{key}"),
                    format!("matrix {} has no suite {key:?}", l.matrix.name),
                ));
            }
        }
        for s in &matrix_suites {
            let Some(spec) = p.suites.get(*s) else {
                return Err(bad(
                    "suites",
                    format!("suite {s:?} of the matrix has no [suites.{s}] table"),
                ));
            };
            if spec.metrics.is_empty() {
                return Err(bad(
                    &format!("suites.{s}.metrics"),
                    "list at least one metric".into(),
                ));
            }
            for m in &spec.metrics {
                if BUILTIN_METRICS.contains(&m.as_str()) {
                    continue;
                }
                for t in l.tasks.iter().filter(|t| t.suite == *s) {
                    if !t.spec.metrics.contains(m) {
                        return Err(bad(
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
        for t in &l.tasks {
            if t.spec.timeout_seconds > b.attempt.wall_seconds {
                return Err(ProtocolError::field(
                    self.root.join(&t.dir).join("task.toml"),
                    "timeout_seconds",
                    format!(
                        "{} exceeds the protocol's budgets.attempt.wall_seconds ({})",
                        t.spec.timeout_seconds, b.attempt.wall_seconds
                    ),
                ));
            }
            if let Some(o) = &t.spec.oracle {
                let limit = p
                    .suites
                    .get(&t.suite)
                    .map(|s| s.max_oracle_calls)
                    .unwrap_or(0);
                if o.answered_by == crate::task::OracleAnswerer::Model
                    && !p.models.contains_key("oracle")
                {
                    return Err(ProtocolError::field(
                        self.root.join(&t.dir).join("task.toml"),
                        "oracle.answered_by",
                        "\"model\" needs the protocol's [models.oracle]".to_owned(),
                    ));
                }
                if o.max_questions > limit {
                    return Err(ProtocolError::field(
                        self.root.join(&t.dir).join("task.toml"),
                        "oracle.max_questions",
                        format!(
                            "{} exceeds suites.{}.max_oracle_calls ({limit})",
                            o.max_questions, t.suite
                        ),
                    ));
                }
            }
            self.check_path(
                &self.root.join(&t.dir).join("task.toml"),
                "grader.runtime",
                &t.spec.grader.runtime,
                false,
            )?;
        }

        // Statistical plan.
        let st = &p.statistics;
        if st.unit != "task" {
            return Err(bad(
                "statistics.unit",
                format!("{:?}: only \"task\" is supported", st.unit),
            ));
        }
        if st.repetitions != "mean" {
            return Err(bad(
                "statistics.repetitions",
                format!(
                    "{:?}: only \"mean\" (averaged within task) is supported",
                    st.repetitions
                ),
            ));
        }
        if st.resamples == 0 {
            return Err(bad("statistics.resamples", "must be positive".into()));
        }
        if !(st.confidence > 0.0 && st.confidence < 1.0) {
            return Err(bad(
                "statistics.confidence",
                "must be strictly between 0 and 1".into(),
            ));
        }
        for (field, m) in std::iter::once(("statistics.method", &st.method)).chain(
            st.report_methods
                .iter()
                .map(|m| ("statistics.report_methods", m)),
        ) {
            if !matches!(m.as_str(), "v04-percentile" | "percentile" | "bca") {
                return Err(bad(
                    field,
                    format!("unknown method {m:?} (v04-percentile, percentile, bca)"),
                ));
            }
        }
        let uses_v04 = st.method == "v04-percentile"
            || p.gates
                .iter()
                .flat_map(|g| &g.rules)
                .any(|r| r.method.as_deref() == Some("v04-percentile"));
        if uses_v04
            && st
                .seed_string
                .as_deref()
                .is_none_or(|s| s.trim().is_empty())
        {
            return Err(bad(
                "statistics.seed_string",
                "v04-percentile needs a seed string".into(),
            ));
        }
        if !matches!(st.exact.as_str(), "auto" | "always" | "never") {
            return Err(bad(
                "statistics.exact",
                format!("{:?}: auto, always or never", st.exact),
            ));
        }

        // Missing data: values for known metrics only, finite.
        if p.missing_data.rule.trim().is_empty() {
            return Err(bad("missing_data.rule", "state the rule".into()));
        }
        let all_metrics: BTreeSet<&str> = p
            .suites
            .values()
            .flat_map(|s| s.metrics.iter().map(String::as_str))
            .collect();
        for (m, v) in &p.missing_data.values {
            if !all_metrics.contains(m.as_str()) {
                return Err(bad(
                    &format!("missing_data.values.{m}"),
                    "no suite lists this metric".into(),
                ));
            }
            if !v.is_finite() {
                return Err(bad(
                    &format!("missing_data.values.{m}"),
                    "must be finite".into(),
                ));
            }
        }

        // Reruns.
        let mut codes = HashSet::new();
        for (i, c) in p.reruns.codes.iter().enumerate() {
            if !codes.insert(c) {
                return Err(bad(
                    &format!("reruns.codes[{i}]"),
                    format!("\"{c}\" is listed twice"),
                ));
            }
        }
        if p.reruns.max_infra_attempts == 0 {
            return Err(bad(
                "reruns.max_infra_attempts",
                "must be at least 1".into(),
            ));
        }

        // Preconditions.
        for (i, pre) in p.preconditions.iter().enumerate() {
            let f = format!("preconditions[{i}]");
            if !valid_id(&pre.protocol) || pre.protocol == p.name {
                return Err(bad(
                    &format!("{f}.protocol"),
                    format!("{:?} must name another protocol", pre.protocol),
                ));
            }
            if let Some(id) = &pre.identity
                && eval_evidence::ledger::Digest::parse(id).is_none()
            {
                return Err(bad(
                    &format!("{f}.identity"),
                    format!("{id:?} is not a sha256:<hex> digest"),
                ));
            }
        }

        // Gates.
        let mut gate_ids = HashSet::new();
        for (i, g) in p.gates.iter().enumerate() {
            let f = format!("gates[{i}]");
            if !gate_ids.insert(&g.id) {
                return Err(bad(
                    &format!("{f}.id"),
                    format!("gate {:?} is declared twice", g.id),
                ));
            }
            let metrics = match &g.suite {
                Some(s) => match p.suites.get(s) {
                    Some(spec) => Some(spec.metrics.as_slice()),
                    None => {
                        return Err(bad(
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
                    return Err(bad(
                        &format!("{f}.rules[{j}].id"),
                        format!("rule {:?} is declared twice", rule.id),
                    ));
                }
            }
            g.validate(metrics).map_err(|e| bad(&f, e.to_string()))?;
        }
        if p.gates.is_empty() {
            return Err(bad("gates", "declare at least one release gate".into()));
        }
        Ok(())
    }

    /// A configured path must be plain, relative, and exist (a directory only where allowed).
    fn check_path(
        &self,
        file: &Path,
        field: &str,
        rel: &str,
        dir_ok: bool,
    ) -> Result<(), ProtocolError> {
        let clean =
            clean_relative(rel).map_err(|e| ProtocolError::field(file, field, e.to_string()))?;
        let md = std::fs::symlink_metadata(self.root.join(&clean)).map_err(|_| {
            ProtocolError::field(file, field, format!("{rel}: no such file in the project"))
        })?;
        if !(md.is_file() || (dir_ok && md.is_dir())) {
            return Err(ProtocolError::field(
                file,
                field,
                format!(
                    "{rel}: must be a regular file{}",
                    if dir_ok { " or a directory" } else { "" }
                ),
            ));
        }
        Ok(())
    }
}

/// Headers the proxy never forwards whatever a contract says: credentials (it injects its own)
/// and hop-by-hop headers.
const NEVER_FORWARDED: [&str; 15] = [
    "authorization",
    "x-api-key",
    "api-key",
    "proxy-authorization",
    "cookie",
    "host",
    "content-length",
    "transfer-encoding",
    "connection",
    "keep-alive",
    "te",
    "trailer",
    "upgrade",
    "accept-encoding",
    "forwarded",
];

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
            if NEVER_FORWARDED.contains(&lower.as_str())
                || lower.starts_with("proxy-")
                || lower.starts_with("x-forwarded-")
            {
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

fn validate_task(spec: &TaskSpec, tfile: &Path) -> Result<(), ProtocolError> {
    let bad = |field: &str, message: String| ProtocolError::field(tfile, field, message);
    if spec.timeout_seconds == 0 {
        return Err(bad("timeout_seconds", "must be positive".into()));
    }
    let mut seen = HashSet::new();
    for m in &spec.metrics {
        if m.is_empty() || !seen.insert(m) {
            return Err(bad(
                "metrics",
                format!("metric {m:?} is empty or listed twice"),
            ));
        }
    }
    if spec.grader.command.is_empty() {
        return Err(bad("grader.command", "must not be empty".into()));
    }
    if let Some(o) = &spec.oracle {
        let clean = clean_relative(&o.answers).map_err(|e| bad("oracle.answers", e.to_string()))?;
        if !clean.starts_with("hidden/") {
            return Err(bad(
                "oracle.answers",
                "must be under hidden/ (the agent must never see it)".into(),
            ));
        }
    }
    Ok(())
}

fn check_name(name: &str, flag: &str) -> Result<(), ProtocolError> {
    if valid_id(name) {
        Ok(())
    } else {
        Err(ProtocolError::State(format!(
            "{flag} {name:?}: not a plain name ([A-Za-z0-9._-])"
        )))
    }
}
