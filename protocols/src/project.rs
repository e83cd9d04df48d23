//! A project directory (`protocols/`, `matrix/`, `runtimes/`, task bundles) and the loading and
//! cross-validation of one protocol with its matrix and tasks.

use crate::error::ProtocolError;
use crate::protocol::Protocol;
use crate::task::{TaskBundle, TaskSpec};
use crate::tree::clean_relative;
use eval_matrix::{Matrix, valid_id};
use std::collections::HashSet;
use std::path::{Path, PathBuf};

mod validate;

/// The project root: every path in protocols and matrices is relative to it.
#[derive(Clone, Debug)]
pub struct Project {
    /// The project's root directory (holding `protocols/`, `matrix/`, runtimes and task bundles).
    pub root: PathBuf,
}

/// A protocol with its matrix and task bundles, validated together.
#[derive(Clone, Debug)]
pub struct Loaded {
    /// The parsed `protocols/NAME/protocol.toml`.
    pub protocol: Protocol,
    /// The matrix the protocol names, loaded and validated.
    pub matrix: Matrix,
    /// Every task bundle the matrix's suites list, in matrix order.
    pub tasks: Vec<TaskBundle>,
    /// Relative to the project root.
    pub protocol_file: String,
    /// The matrix file, relative to the project root (`matrix/NAME.toml`).
    pub matrix_file: String,
}

impl Loaded {
    /// The run's slots, each an attempt's worth of artifacts: the matrix's (infrastructure and
    /// statistical) and the control arms' (one per task per control arm).
    pub fn attempt_slots(&self) -> u64 {
        let controls: usize = self
            .matrix
            .suites
            .iter()
            .filter_map(|s| {
                let c = self.protocol.suites.get(&s.id)?.control_arms()?;
                Some(s.tasks.len() * c.arms.len())
            })
            .sum();
        (self.matrix.schedule().slots.len() + controls) as u64
    }

    /// Each attempt's artifact quota (`[budgets.artifacts]`, see
    /// [`crate::protocol::ArtifactBudget`]): `per_attempt_bytes`, by default `max_bytes`
    /// shared equally by [`Self::attempt_slots`].
    pub fn artifact_quota(&self) -> u64 {
        let a = &self.protocol.budgets.artifacts;
        a.per_attempt_bytes
            .unwrap_or(a.max_bytes / self.attempt_slots().max(1))
    }

    /// The protocol's arm with this id, if any.
    pub fn arm(&self, id: &str) -> Option<&crate::protocol::Arm> {
        self.protocol.arms.iter().find(|a| a.id == id)
    }

    /// The task bundle `id` of suite `suite`, if the matrix runs it.
    pub fn task(&self, suite: &str, id: &str) -> Option<&TaskBundle> {
        self.tasks.iter().find(|t| t.suite == suite && t.id == id)
    }
}

impl Project {
    /// A project rooted at `root`; reads nothing until a load.
    pub fn open(root: impl Into<PathBuf>) -> Project {
        Project { root: root.into() }
    }

    /// The project-relative path of protocol `name`'s definition.
    pub fn protocol_file(name: &str) -> String {
        format!("protocols/{name}/protocol.toml")
    }

    /// The project-relative path of matrix `name`.
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
        validate::validate(self, &loaded, name, &pfile, &mfile)?;
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
                let mut parts: Vec<(String, bool)> =
                    vec![("workspace".into(), true), ("hidden".into(), true)];
                if spec.is_multi_round() {
                    for k in 1..=spec.rounds.len().min(crate::task::MAX_ROUNDS) {
                        parts.push((crate::task::round_prompt(k), false));
                        parts.push((crate::task::round_hidden(k), true));
                    }
                } else {
                    parts.insert(0, ("prompt.md".into(), false));
                }
                for (part, want_dir) in &parts {
                    let p = abs.join(part);
                    let ok = std::fs::symlink_metadata(&p)
                        .map(|m| if *want_dir { m.is_dir() } else { m.is_file() })
                        .unwrap_or(false);
                    if !ok {
                        return Err(ProtocolError::field(
                            mfile,
                            &field,
                            format!(
                                "task {task:?}: the bundle {dir} has no {part}{}",
                                if *want_dir { "/ directory" } else { " file" }
                            ),
                        ));
                    }
                }
                validate_task(&spec, &tfile)?;
                if spec.is_multi_round() {
                    check_round_layout(&abs, &spec, &tfile)?;
                }
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
        validate_oracle(o, spec.is_multi_round(), tfile)?;
    }
    if spec.rounds.len() > crate::task::MAX_ROUNDS {
        return Err(bad(
            "rounds",
            format!(
                "{} rounds; at most {} are allowed",
                spec.rounds.len(),
                crate::task::MAX_ROUNDS
            ),
        ));
    }
    if spec.after_failed_round.is_some() && !spec.is_multi_round() {
        return Err(bad(
            "after_failed_round",
            "only a task with [[rounds]] has rounds to continue or stop".into(),
        ));
    }
    for (i, r) in spec.rounds.iter().enumerate() {
        let k = i + 1;
        if let Some(t) = r.timeout_seconds
            && (t == 0 || t > spec.timeout_seconds)
        {
            return Err(bad(
                &format!("rounds[{i}].timeout_seconds"),
                format!(
                    "round {k}: {t} must be positive and at most the task's timeout_seconds ({})",
                    spec.timeout_seconds
                ),
            ));
        }
        if r.max_tokens == Some(0) {
            return Err(bad(
                &format!("rounds[{i}].max_tokens"),
                format!("round {k}: must be positive"),
            ));
        }
    }
    Ok(())
}

/// A multi-round bundle has exactly its rounds: no top-level `prompt.md` (whose round would be
/// ambiguous) and nothing in `rounds/` or `hidden/rounds/` but `1`..`N` (a file there would be
/// frozen yet read by no round).
fn check_round_layout(bundle: &Path, spec: &TaskSpec, tfile: &Path) -> Result<(), ProtocolError> {
    if std::fs::symlink_metadata(bundle.join("prompt.md")).is_ok() {
        return Err(ProtocolError::field(
            tfile,
            "rounds",
            "a multi-round task has no prompt.md: round k's prompt is rounds/<k>/prompt.md",
        ));
    }
    let n = spec.rounds.len();
    for sub in ["rounds", "hidden/rounds"] {
        let entries = std::fs::read_dir(bundle.join(sub)).map_err(|e| {
            ProtocolError::field(tfile, "rounds", format!("{sub}/ cannot be listed: {e}"))
        })?;
        for entry in entries {
            let entry = entry.map_err(|e| {
                ProtocolError::field(tfile, "rounds", format!("{sub}/ cannot be listed: {e}"))
            })?;
            let name = entry.file_name();
            let k = name
                .to_str()
                .filter(|t| !t.starts_with('0') && !t.starts_with('+'))
                .and_then(|t| t.parse::<usize>().ok());
            if !matches!(k, Some(k) if (1..=n).contains(&k)) {
                return Err(ProtocolError::field(
                    tfile,
                    "rounds",
                    format!(
                        "{sub}/{} is not one of the {n} declared rounds (1..={n})",
                        name.to_string_lossy()
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// `[oracle]`: its files under `hidden/`, each mode with exactly its own fields, and a
/// constraints list the brief really has.
fn validate_oracle(
    o: &crate::task::Oracle,
    multi_round: bool,
    tfile: &Path,
) -> Result<(), ProtocolError> {
    use crate::task::{OracleAnswerer, ReplyFormat};
    let bad = |field: &str, message: String| ProtocolError::field(tfile, field, message);
    let hidden = |field: &str, rel: &str| -> Result<String, ProtocolError> {
        let clean = clean_relative(rel).map_err(|e| bad(field, e.to_string()))?;
        if clean.starts_with("hidden/") {
            Ok(clean)
        } else {
            Err(bad(
                field,
                format!("{rel:?} must be under hidden/ (the agent must never see it)"),
            ))
        }
    };
    let answers = hidden("oracle.answers", &o.answers)?;
    if multi_round && answers.starts_with("hidden/rounds/") {
        return Err(bad(
            "oracle.answers",
            "must not be under hidden/rounds/ (a round's graders' files)".into(),
        ));
    }
    if o.catch_all.is_some() && o.answered_by != OracleAnswerer::Scripted {
        return Err(bad(
            "oracle.catch_all",
            "only a scripted oracle has a catch-all answer (a model answers every question)".into(),
        ));
    }
    match (&o.stateful, o.answered_by) {
        (None, OracleAnswerer::Stateful) => {
            return Err(bad(
                "oracle.stateful",
                "answered_by = \"stateful\" needs an [oracle.stateful] table".into(),
            ));
        }
        (Some(_), a) if a != OracleAnswerer::Stateful => {
            return Err(bad(
                "oracle.stateful",
                "[oracle.stateful] needs answered_by = \"stateful\"".into(),
            ));
        }
        (Some(st), _) => {
            hidden("oracle.stateful.system_prompt", &st.system_prompt)?;
            if st.fallback_answer.trim().is_empty() {
                return Err(bad(
                    "oracle.stateful.fallback_answer",
                    "must not be empty".into(),
                ));
            }
            if st.max_tokens == Some(0) {
                return Err(bad("oracle.stateful.max_tokens", "must be positive".into()));
            }
            let fields = [
                ("oracle.stateful.reply_field", &st.reply_field),
                ("oracle.stateful.record_field", &st.record_field),
            ];
            match st.reply {
                ReplyFormat::Json if st.reply_field.is_none() => {
                    return Err(bad(
                        "oracle.stateful.reply_field",
                        "reply = \"json\" needs the field passed back to the agent".into(),
                    ));
                }
                ReplyFormat::Text => {
                    if let Some((f, _)) = fields.iter().find(|(_, v)| v.is_some()) {
                        return Err(bad(f, "only a reply = \"json\" has fields".into()));
                    }
                }
                ReplyFormat::Json => {}
            }
            for (f, v) in fields {
                if let Some(path) = v
                    && path.split('.').any(str::is_empty)
                {
                    return Err(bad(
                        f,
                        format!("{path:?} is not a dotted path (a.b.c, no empty part)"),
                    ));
                }
            }
        }
        (None, _) => {}
    }
    if let Some(c) = &o.constraints {
        if o.stateful
            .as_ref()
            .is_none_or(|st| st.record_field.is_none())
        {
            return Err(bad(
                "oracle.constraints",
                "the constraint metrics read what each question recorded: they need answered_by = \"stateful\" with a record_field".into(),
            ));
        }
        let dir = tfile.parent().unwrap_or(Path::new("."));
        let brief = std::fs::read_to_string(dir.join(&answers))
            .map_err(|e| bad("oracle.answers", format!("{answers}: {e}")))?;
        c.ids(&brief)
            .map_err(|e| bad("oracle.constraints", format!("{answers}: {e}")))?;
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
