//! `eval regrade`: a finished run's archived workspaces graded again by another grader runtime,
//! as a sensitivity analysis of its own identity and ledger.
//!
//! What it does, in order (every refusal before anything is written):
//! 1. takes the run's ledger writer (a live run is refused) and reads the ledger through it; the
//!    chain must verify and the run must be complete;
//! 2. checks the project against the run's freeze (drift is an integrity failure) and stages the
//!    task inputs (hidden files) verified against the freeze manifest, as a run does;
//! 3. hashes the grader runtime's directory and derives the regrade identity from it, the run's
//!    identity and ledger head, the driver and the task subset ([`identity_text`]), and writes
//!    `STATE/<M>.regrade/<hex>/regrade.json` (the same bytes on a resume, else exit 3);
//! 4. re-hashes every archived workspace it will use (an altered one: exit 3, nothing written);
//! 5. opens its own ledger (`STATE/<M>.regrade/<hex>/ledger.sqlite`), signed as a run is, whose
//!    first entry, `regrade_started`, names the run's head it is based on; then per attempt it
//!    extracts the workspace (hashing the bytes again as they stream into `tar`), runs the
//!    grader container exactly as a run does (`attempt::grade::run_grader_container`: no network,
//!    workspace and hidden files read-only) and records a `regrade_outcome`; `regrade_finished`
//!    ends it. A resumed regrade skips the attempts already recorded.
//!
//! The run's own ledger and artifacts are only read. [`sensitivity`] reads the regrades back for
//! `eval report`, which shows them beside the verdict and never lets them change it.

use crate::attempt::grade::{ScoreError, read_score, run_grader_container};
use eval_core::outcome::Outcome;
use eval_core::phase::Phase;
use eval_evidence::artifacts::ArtifactStore;
use eval_evidence::ledger::{self, Digest, Entry, LedgerReader, LedgerWriter, NewEntry};
use eval_evidence::report::LedgerHeadRef;
use eval_evidence::report::sensitivity::{RegradedAttempt, Sensitivity, compare};
use eval_protocols::Project;
use eval_runlog::events::{self, AttemptOutcome};
use eval_runlog::replay::RunState;
use eval_runtimes::policy::{AttemptFacts, RoleMounts};
use eval_runtimes::{ArmFiles, ImageSpec, Runtime, RuntimeDef, WaitOutcome};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

/// `regrade_started`: the first entry of a regrade ledger.
pub const REGRADE_STARTED: &str = "regrade_started";
/// `regrade_outcome`: one attempt graded again.
pub const REGRADE_OUTCOME: &str = "regrade_outcome";
/// `regrade_finished`: every chosen attempt was graded again.
pub const REGRADE_FINISHED: &str = "regrade_finished";

/// The directory of a matrix's regrades: `STATE/<matrix>.regrade/` (one directory per regrade
/// identity below it), beside the run's `STATE/<matrix>/`, so `eval gc` (which looks only at
/// `STATE/*/ledger.sqlite`) and the run share nothing with it.
pub fn regrades_dir(state: &Path, matrix: &str) -> PathBuf {
    state.join(format!("{matrix}.regrade"))
}

/// What `eval regrade` was asked.
pub struct RegradeSpec {
    pub matrix: String,
    /// The grader runtime definition, project-relative (`runtimes/NAME/runtime.toml`).
    pub grader: String,
    /// Tasks to regrade (empty: every task of the run).
    pub tasks: Vec<String>,
    pub signing_key: Option<PathBuf>,
    /// The running controller's driver digest (part of the regrade's identity).
    pub driver: eval_evidence::ledger::Digest,
}

/// Why a regrade was refused or failed; each kind's status is in `exit::regrade_status`.
#[derive(Debug, thiserror::Error)]
pub enum RegradeError {
    #[error("{path}: no run of matrix {matrix} to regrade")]
    NoRun { matrix: String, path: PathBuf },
    #[error("{path}: a smoke run is never evidence and is not regraded")]
    Smoke { path: PathBuf },
    #[error("{path}: the run's ledger is in use (a run is going): regrade a finished run")]
    InUse { path: PathBuf },
    #[error(
        "{path}: the run is not finished ({done}/{total} statistical slots resolved): finish it with eval run, then regrade"
    )]
    Unfinished {
        path: PathBuf,
        done: u64,
        total: u64,
    },
    #[error("{path}: the run's ledger does not verify: {why}")]
    Broken { path: PathBuf, why: String },
    #[error("--tasks {0:?}: no statistical slot of the run has this task")]
    UnknownTask(String),
    #[error("--grader {path}: {why}")]
    Grader { path: String, why: String },
    #[error(
        "the project no longer matches the run's freeze ({identity}): {drift}; a regrade reads the frozen task files only"
    )]
    Drift { identity: String, drift: String },
    #[error(
        "{path}: the regrade {identity} was frozen with other bytes (its regrade.json differs)"
    )]
    FreezeMismatch { path: PathBuf, identity: String },
    #[error("{path}: this ledger is not the regrade {identity}'s")]
    OtherLedger { path: PathBuf, identity: String },
    #[error(
        "attempt {attempt}: its archived workspace {digest} does not verify: {why}; nothing was regraded"
    )]
    Tampered {
        attempt: String,
        digest: String,
        why: String,
    },
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("extracting attempt {attempt}'s workspace: {why}")]
    Extract { attempt: String, why: String },
    #[error(transparent)]
    Ledger(#[from] eval_evidence::LedgerError),
    #[error("{0}")]
    Replay(#[from] eval_runlog::replay::ReplayError),
    #[error(transparent)]
    Admission(#[from] crate::session::AdmissionError),
    #[error(transparent)]
    Session(#[from] crate::session::SessionError),
    #[error(transparent)]
    Signing(#[from] eval_evidence::signing::SigningError),
    #[error(transparent)]
    Inputs(#[from] crate::inputs::InputsError),
    #[error(transparent)]
    Artifacts(#[from] eval_evidence::artifacts::ArtifactError),
    #[error(transparent)]
    Engine(#[from] eval_runtimes::RuntimeError),
    #[error("cannot serialise {0}")]
    Serialise(#[from] serde_json::Error),
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> RegradeError + '_ {
    move |source| RegradeError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// The grader's bytes as the regrade freezes them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GraderRecord {
    /// The runtime definition, project-relative.
    pub runtime: String,
    /// The digest of its directory's `eval-tree-manifest v1`.
    pub tree: String,
    /// The image its `[build]` makes (`None`: an image the engine resolves, recorded per
    /// attempt).
    pub image: Option<String>,
}

/// `regrade_started`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RegradeStarted {
    pub schema: u32,
    pub identity: String,
    pub identity_text: String,
    pub matrix: String,
    pub protocol: String,
    /// The run's frozen identity.
    pub run_identity: String,
    /// The run's ledger head this regrade is based on: its chain continues that one.
    pub based_on: LedgerHeadRef,
    pub grader: GraderRecord,
    pub tasks: Vec<String>,
    /// The attempts it regrades, in schedule order.
    pub attempts: Vec<String>,
    pub started_at: String,
}

/// `regrade_outcome`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RegradeOutcome {
    pub schema: u32,
    pub attempt: String,
    pub slot: String,
    pub suite: String,
    pub task: String,
    pub arm: String,
    /// The archived workspace graded (in the run's artifact store, not the regrade's).
    pub workspace: Option<String>,
    /// The run's outcome of the attempt.
    pub original_outcome: Outcome,
    /// The run's metrics of the attempt (the preregistered grader's).
    pub original_metrics: BTreeMap<String, f64>,
    /// `scored`, `unscorable`, `not_run` (the engine could not run the grader) or
    /// `no_workspace` (the run archived none).
    pub graded: String,
    pub detail: Option<String>,
    pub metrics: BTreeMap<String, f64>,
    /// The image the grader ran in.
    pub image: Option<String>,
    /// In the regrade's own store: `grader_output`, `grader_log`.
    pub artifacts: BTreeMap<String, String>,
    pub container_seconds: f64,
}

/// The regrade identity's text; its SHA-256 is the identity.
pub fn identity_text(
    matrix: &str,
    run_identity: &str,
    based_on: &LedgerHeadRef,
    grader: &GraderRecord,
    tasks: &[String],
    driver: &eval_evidence::ledger::Digest,
) -> String {
    let mut t = format!(
        "eval-regrade v1\nmatrix {matrix}\nrun {run_identity}\nbased_on {}:{}\ngrader {} {}\nimage {}\ndriver {}\n",
        based_on.seq,
        based_on.hash,
        grader.runtime,
        grader.tree,
        grader.image.as_deref().unwrap_or("none"),
        driver
    );
    for task in tasks {
        t.push_str(&format!("task {task}\n"));
    }
    t
}

/// One attempt to regrade: the final non-infrastructure attempt of a statistical slot.
struct Chosen {
    suite: String,
    task: String,
    outcome: AttemptOutcome,
}

/// The attempts of a finished run a regrade of `tasks` grades again, in schedule order.
fn choose(st: &RunState, tasks: &[String]) -> Vec<Chosen> {
    let mut out = Vec::new();
    for slot in st.slots.iter().filter(|s| s.phase == Phase::Statistical) {
        if !tasks.is_empty() && !tasks.contains(&slot.task) {
            continue;
        }
        let last = st.attempts.get(&slot.id).and_then(|v| {
            v.iter()
                .rev()
                .filter_map(|a| a.outcome.as_ref())
                .find(|o| o.outcome != Outcome::InfraFault)
        });
        if let Some(o) = last {
            out.push(Chosen {
                suite: slot.suite.clone(),
                task: slot.task.clone(),
                outcome: o.clone(),
            });
        }
    }
    out
}

/// What a finished regrade did, for the command's summary.
pub struct Regraded {
    pub identity: String,
    pub dir: PathBuf,
    pub ledger: PathBuf,
    pub based_on: LedgerHeadRef,
    pub attempts: Vec<RegradedAttempt>,
    /// The regrade was already finished: nothing was graded now.
    pub already: bool,
}

fn hex_of(identity: &str) -> &str {
    identity.strip_prefix("sha256:").unwrap_or(identity)
}

/// Runs `eval regrade` (see the module's steps). The ledger writers are driven from this thread
/// (their blocking calls); only the engine's calls run on a runtime of their own.
pub fn regrade(
    project: &Project,
    state: &Path,
    spec: &RegradeSpec,
) -> Result<Regraded, RegradeError> {
    let FinishedRun {
        path,
        writer: run_writer,
        entries,
        st,
        started,
        based_on,
    } = open_finished_run(state, spec)?;
    let admitted = admit_frozen(project, state, spec, &started)?;

    let (grader_def, grader) = grader_record(&project.root, &spec.grader)?;
    let tasks = regrade_tasks(spec, &st);
    let text = identity_text(
        &spec.matrix,
        &started.identity,
        &based_on,
        &grader,
        &tasks,
        &spec.driver,
    );
    let identity = Digest::of(text.as_bytes()).to_string();
    let dir = regrades_dir(state, &spec.matrix).join(hex_of(&identity));
    std::fs::create_dir_all(&dir).map_err(io(&dir))?;
    write_freeze(&dir, &identity, &text, &grader_def)?;

    // Every workspace to be used is re-hashed before anything is recorded.
    let chosen = choose(&st, &tasks);
    let questions = run_questions(&entries, &path)?;
    let run_store = ArtifactStore::open(&eval_runlog::layout::artifacts_dir(state, &spec.matrix))?;
    verify_workspaces(&run_store, &chosen)?;

    let ledger_path = dir.join("ledger.sqlite");
    let writer = LedgerWriter::open(&ledger_path)?;
    let _checkpointer = checkpointer(state, spec, &started, &identity, &writer)?;
    let signed = _checkpointer.is_some();
    let append = |kind: &str, payload: &dyn erased::Payload| -> Result<(), RegradeError> {
        let e = NewEntry::new(kind, &payload.value()?).map_err(ledger::LedgerError::from)?;
        if signed {
            writer.append_signed_blocking(vec![e])?;
        } else {
            writer.append_blocking(e)?;
        }
        Ok(())
    };
    let mine = writer.entries_blocking()?;
    let (mut done, finished) = match mine.first() {
        None => {
            let payload = regrade_started(
                (&identity, &text),
                spec,
                &started,
                (&based_on, &grader),
                &tasks,
                &chosen,
            );
            append(REGRADE_STARTED, &payload)?;
            (BTreeMap::new(), false)
        }
        Some(first) => resumed(first, &mine, &ledger_path, &identity)?,
    };
    let already = finished;
    if !finished {
        let remaining = Remaining {
            project,
            spec,
            admitted: &admitted,
            started: &started,
            identity: &identity,
            dir: &dir,
            grader_def: &grader_def,
            chosen: &chosen,
            questions: &questions,
            run_store: &run_store,
        };
        grade_remaining(&remaining, &mut done, &append)?;
    }
    writer.close();
    drop(run_writer);
    let attempts = chosen
        .iter()
        .filter_map(|c| done.get(&c.outcome.attempt))
        .map(regraded_attempt)
        .collect();
    Ok(Regraded {
        identity,
        dir,
        ledger: ledger_path,
        based_on,
        attempts,
        already,
    })
}

/// The regrade ledger's checkpointer when the protocol signs (a regrade is signed as its run
/// is); kept alive by the caller for as long as it appends.
fn checkpointer(
    state: &Path,
    spec: &RegradeSpec,
    started: &events::RunStarted,
    identity: &str,
    writer: &LedgerWriter,
) -> Result<Option<eval_evidence::signing::Checkpointer>, RegradeError> {
    let signing =
        crate::session::signing_key(state, &started.protocol, spec.signing_key.as_deref())?;
    Ok(match signing {
        Some(key) => {
            use eval_evidence::signing::{Checkpointer, origin_for_identity};
            let origin = origin_for_identity(identity)?;
            Some(
                Checkpointer::open(std::sync::Arc::new(key), &origin, writer)
                    .map_err(crate::session::SessionError::Checkpointer)?,
            )
        }
        None => None,
    })
}

/// Step 4: every archived workspace the regrade will use re-hashed, before anything is recorded.
fn verify_workspaces(run_store: &ArtifactStore, chosen: &[Chosen]) -> Result<(), RegradeError> {
    for c in chosen {
        if let Some(w) = &c.outcome.artifacts.workspace {
            verify_workspace(run_store, &c.outcome.attempt, w)?;
        }
    }
    Ok(())
}

/// The first entry of a new regrade ledger, stamped now.
fn regrade_started(
    (identity, text): (&str, &str),
    spec: &RegradeSpec,
    started: &events::RunStarted,
    (based_on, grader): (&LedgerHeadRef, &GraderRecord),
    tasks: &[String],
    chosen: &[Chosen],
) -> RegradeStarted {
    RegradeStarted {
        schema: events::SCHEMA,
        identity: identity.to_owned(),
        identity_text: text.to_owned(),
        matrix: spec.matrix.clone(),
        protocol: started.protocol.clone(),
        run_identity: started.identity.clone(),
        based_on: based_on.clone(),
        grader: grader.clone(),
        tasks: tasks.to_vec(),
        attempts: chosen.iter().map(|c| c.outcome.attempt.clone()).collect(),
        started_at: events::now_rfc3339(),
    }
}

/// The finished run a regrade is based on, with its ledger's writer held.
struct FinishedRun {
    path: PathBuf,
    /// Held to the end: no session can append to the run (so its head stays the one this
    /// regrade is based on), and a live run is refused here.
    writer: LedgerWriter,
    entries: Vec<Entry>,
    st: RunState,
    started: events::RunStarted,
    based_on: LedgerHeadRef,
}

/// Step 1: the run's ledger taken (a live run refused) and read through its writer; its chain
/// verified, the run complete, every `--tasks` name one of its statistical slots'.
fn open_finished_run(state: &Path, spec: &RegradeSpec) -> Result<FinishedRun, RegradeError> {
    let path = eval_runlog::layout::ledger_path(state, &spec.matrix);
    if !path.is_file() {
        return Err(RegradeError::NoRun {
            matrix: spec.matrix.clone(),
            path,
        });
    }
    if eval_runlog::layout::is_smoke_run(state, &spec.matrix)
        || eval_runlog::layout::is_aa_run(state, &spec.matrix)
    {
        return Err(RegradeError::Smoke { path });
    }
    let run_writer = LedgerWriter::open(&path).map_err(|e| match e {
        e if e.is_integrity() => RegradeError::Ledger(e),
        _ => RegradeError::InUse { path: path.clone() },
    })?;
    let entries = run_writer.entries_blocking()?;
    let verified = ledger::verify_entries(&entries, None);
    if !verified.ok {
        return Err(RegradeError::Broken {
            path,
            why: verified
                .error
                .map(|e| e.to_string())
                .unwrap_or_else(|| "unknown".into()),
        });
    }
    let st = RunState::replay(&entries)?;
    let summary = st.summary();
    let Some(started) = st.started.clone() else {
        return Err(RegradeError::Unfinished {
            path,
            done: 0,
            total: 0,
        });
    };
    if !summary.complete {
        return Err(RegradeError::Unfinished {
            path,
            done: summary.done,
            total: summary.total,
        });
    }
    for t in &spec.tasks {
        if !st
            .slots
            .iter()
            .any(|s| s.phase == Phase::Statistical && &s.task == t)
        {
            return Err(RegradeError::UnknownTask(t.clone()));
        }
    }
    let based_on = LedgerHeadRef {
        seq: verified.head.seq,
        hash: verified.head.hash.to_string(),
    };
    Ok(FinishedRun {
        path,
        writer: run_writer,
        entries,
        st,
        started,
        based_on,
    })
}

/// Step 2: the frozen project: the same admission facts a run gathers, drift refused.
fn admit_frozen(
    project: &Project,
    state: &Path,
    spec: &RegradeSpec,
    started: &events::RunStarted,
) -> Result<crate::session::Admitted, RegradeError> {
    let admitted = crate::session::gather(
        project,
        state,
        &spec.matrix,
        Some(&started.protocol),
        &crate::admission::UpstreamChoice::Fixture,
        spec.driver,
    )?;
    if admitted.facts.identity.as_deref() != Some(started.identity.as_str())
        || !admitted.facts.drift.is_empty()
    {
        return Err(RegradeError::Drift {
            identity: started.identity.clone(),
            drift: if admitted.facts.drift.is_empty() {
                format!(
                    "the protocol is now frozen as {}",
                    admitted.facts.identity.as_deref().unwrap_or("nothing")
                )
            } else {
                admitted.facts.drift.join(", ")
            },
        });
    }
    Ok(admitted)
}

/// The tasks the regrade covers, sorted and unique: `--tasks`, or every statistical slot's.
fn regrade_tasks(spec: &RegradeSpec, st: &RunState) -> Vec<String> {
    let mut tasks: Vec<String> = if spec.tasks.is_empty() {
        let mut t: Vec<String> = st
            .slots
            .iter()
            .filter(|s| s.phase == Phase::Statistical)
            .map(|s| s.task.clone())
            .collect();
        t.sort();
        t.dedup();
        t
    } else {
        spec.tasks.clone()
    };
    tasks.sort();
    tasks.dedup();
    tasks
}

/// Each attempt's questions as the run recorded them (its oracle record, for a grader that
/// reads one), in ledger order; an entry that does not parse is a broken ledger at `path`.
fn run_questions(
    entries: &[Entry],
    path: &Path,
) -> Result<BTreeMap<String, Vec<events::Clarification>>, RegradeError> {
    let mut questions: BTreeMap<String, Vec<events::Clarification>> = BTreeMap::new();
    for e in entries.iter().filter(|e| e.kind == events::CLARIFICATION) {
        let q: events::Clarification =
            serde_json::from_slice(&e.payload).map_err(|e| RegradeError::Broken {
                path: path.to_path_buf(),
                why: format!("a clarification entry does not parse: {e}"),
            })?;
        questions.entry(q.attempt.clone()).or_default().push(q);
    }
    Ok(questions)
}

/// A resumed regrade's ledger (`mine`, whose first entry is `first`): it must be this
/// identity's; returns the attempts already regraded and whether it finished.
fn resumed(
    first: &Entry,
    mine: &[Entry],
    ledger_path: &Path,
    identity: &str,
) -> Result<(BTreeMap<String, RegradeOutcome>, bool), RegradeError> {
    let ok = first.kind == REGRADE_STARTED
        && serde_json::from_slice::<RegradeStarted>(&first.payload)
            .is_ok_and(|s| s.identity == identity);
    if !ok {
        return Err(RegradeError::OtherLedger {
            path: ledger_path.to_path_buf(),
            identity: identity.to_owned(),
        });
    }
    let mut done = BTreeMap::new();
    let mut finished = false;
    for e in mine {
        if e.kind == REGRADE_OUTCOME
            && let Ok(o) = serde_json::from_slice::<RegradeOutcome>(&e.payload)
        {
            done.insert(o.attempt.clone(), o);
        }
        finished |= e.kind == REGRADE_FINISHED;
    }
    Ok((done, finished))
}

/// What grading the remaining attempts reads: kept together so [`grade_remaining`] takes one.
struct Remaining<'a> {
    project: &'a Project,
    spec: &'a RegradeSpec,
    admitted: &'a crate::session::Admitted,
    started: &'a events::RunStarted,
    identity: &'a str,
    dir: &'a Path,
    grader_def: &'a eval_runtimes::LoadedDef,
    chosen: &'a [Chosen],
    questions: &'a BTreeMap<String, Vec<events::Clarification>>,
    run_store: &'a ArtifactStore,
}

/// Step 5 for an unfinished regrade: the task inputs staged, the engine connected, every chosen
/// attempt not yet in `done` graded and appended, then `regrade_finished`.
fn grade_remaining(
    r: &Remaining<'_>,
    done: &mut BTreeMap<String, RegradeOutcome>,
    append: &dyn Fn(&str, &dyn erased::Payload) -> Result<(), RegradeError>,
) -> Result<(), RegradeError> {
    let (spec, dir, grader_def) = (r.spec, r.dir, r.grader_def);
    let inputs = crate::inputs::stage(
        &r.project.root,
        dir,
        &r.admitted.loaded.tasks,
        r.admitted.frozen_manifest.as_ref().ok_or_else(|| {
            crate::inputs::InputsError::Mismatch {
                task: spec.matrix.clone(),
                detail: "the freeze holds no readable manifest".into(),
            }
        })?,
    )?;
    let store = ArtifactStore::open(&dir.join("artifacts"))?;
    let engine = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(io(dir))?;
    let docker = engine.block_on(eval_runtimes::DockerRuntime::connect())?;
    let image_spec = ImageSpec {
        def: grader_def.clone(),
        arm: ArmFiles::default(),
        labels: BTreeMap::new(),
    };
    let mut image = None;
    let work = dir.join("work");
    for c in r.chosen {
        if done.contains_key(&c.outcome.attempt) {
            continue;
        }
        let o = engine.block_on(grade_one(GradeOne {
            rt: &docker,
            def: &grader_def.def,
            image_spec: &image_spec,
            image: &mut image,
            run_store: r.run_store,
            store: &store,
            inputs: &inputs,
            loaded: &r.admitted.loaded,
            chosen: c,
            questions: r
                .questions
                .get(&c.outcome.attempt)
                .map_or(&[][..], Vec::as_slice),
            work: &work,
            facts: AttemptFacts {
                protocol: r.started.protocol.clone(),
                identity: r.started.identity.clone(),
                arm: c.outcome.arm.clone(),
                attempt: format!("{}/regrade", c.outcome.attempt),
                extra_labels: [("eval.regrade".to_owned(), r.identity.to_owned())].into(),
            },
        }))?;
        append(REGRADE_OUTCOME, &o)?;
        done.insert(o.attempt.clone(), o);
    }
    let scored = done.values().filter(|o| o.graded == "scored").count();
    append(
        REGRADE_FINISHED,
        &serde_json::json!({
            "schema": events::SCHEMA,
            "regraded": done.len(),
            "scored": scored,
            "finished_at": events::now_rfc3339(),
        }),
    )?;
    let _ = std::fs::remove_dir_all(&work);
    Ok(())
}

/// Payloads of different types through one closure.
mod erased {
    pub trait Payload {
        fn value(&self) -> Result<serde_json::Value, serde_json::Error>;
    }
    impl<T: serde::Serialize> Payload for T {
        fn value(&self) -> Result<serde_json::Value, serde_json::Error> {
            serde_json::to_value(self)
        }
    }
}

fn regraded_attempt(o: &RegradeOutcome) -> RegradedAttempt {
    RegradedAttempt {
        attempt: o.attempt.clone(),
        suite: o.suite.clone(),
        task: o.task.clone(),
        arm: o.arm.clone(),
        graded: o.graded.clone(),
        detail: o.detail.clone(),
        original: o.original_metrics.clone(),
        regraded: o.metrics.clone(),
    }
}

/// The grader runtime definition and its record: it must load and have a `[grader] command`.
fn grader_record(
    root: &Path,
    rel: &str,
) -> Result<(eval_runtimes::LoadedDef, GraderRecord), RegradeError> {
    let bad = |why: String| RegradeError::Grader {
        path: rel.to_owned(),
        why,
    };
    if rel.is_empty() || Path::new(rel).is_absolute() || rel.split('/').any(|c| c == "..") {
        return Err(bad(
            "name the grader's runtime.toml by its project-relative path".into(),
        ));
    }
    let def = RuntimeDef::load(&root.join(rel)).map_err(|e| bad(e.to_string()))?;
    if def.def.grader.is_none() {
        return Err(bad("the runtime definition has no [grader] command".into()));
    }
    let tree = eval_protocols::hash_tree(&def.dir).map_err(|e| bad(e.to_string()))?;
    let image = if def.def.build.is_some() {
        let spec = ImageSpec {
            def: def.clone(),
            arm: ArmFiles::default(),
            labels: BTreeMap::new(),
        };
        Some(
            eval_runtimes::image_id(&spec)
                .map_err(|e| bad(e.to_string()))?
                .to_string(),
        )
    } else {
        def.def.image.id.clone()
    };
    let rec = GraderRecord {
        runtime: rel.to_owned(),
        tree: tree.digest().to_string(),
        image,
    };
    let _ = tree;
    Ok((def, rec))
}

/// `regrade.json`: the regrade's freeze (identity, its text, the grader directory's manifest).
/// Written once; a resume must find the same bytes.
fn write_freeze(
    dir: &Path,
    identity: &str,
    text: &str,
    grader: &eval_runtimes::LoadedDef,
) -> Result<(), RegradeError> {
    let manifest = eval_protocols::hash_tree(&grader.dir)
        .map_err(|e| RegradeError::Grader {
            path: grader.path.display().to_string(),
            why: e.to_string(),
        })?
        .text();
    let doc = serde_json::json!({
        "format": "eval-regrade",
        "version": 1,
        "identity": identity,
        "identity_text": text,
        "grader_manifest": manifest,
    });
    let bytes = eval_evidence::canonical::to_vec(&doc)?;
    let path = dir.join("regrade.json");
    match std::fs::read(&path) {
        Ok(old) if old == bytes => Ok(()),
        Ok(_) => Err(RegradeError::FreezeMismatch {
            path,
            identity: identity.to_owned(),
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            eval_protocols::statefs::replace_file(&path, &bytes).map_err(io(&path))
        }
        Err(e) => Err(io(&path)(e)),
    }
}

/// An archived workspace that is not what the run recorded.
fn tampered(attempt: &str, digest: &str, why: String) -> RegradeError {
    RegradeError::Tampered {
        attempt: attempt.to_owned(),
        digest: digest.to_owned(),
        why,
    }
}

fn verify_workspace(
    store: &ArtifactStore,
    attempt: &str,
    digest: &str,
) -> Result<(), RegradeError> {
    let tampered = |why: String| tampered(attempt, digest, why);
    let d = Digest::parse(digest).ok_or_else(|| tampered("not a sha256 digest".into()))?;
    store.verify(&d).map_err(|e| tampered(e.to_string()))
}

/// Streams the artifact `digest` into `tar -x` in `into`, hashing the bytes as they go: what is
/// extracted is what was hashed (a file swapped after [`verify_workspace`] is caught here).
fn extract_verified(
    store: &ArtifactStore,
    attempt: &str,
    digest: &str,
    into: &Path,
) -> Result<(), RegradeError> {
    use sha2::Digest as _;
    let tampered = |why: String| tampered(attempt, digest, why);
    let d = Digest::parse(digest).ok_or_else(|| tampered("not a sha256 digest".into()))?;
    let src = store.path_of(&d);
    let mut file = std::fs::File::open(&src).map_err(|e| tampered(e.to_string()))?;
    let extract = |why: String| RegradeError::Extract {
        attempt: attempt.to_owned(),
        why,
    };
    let mut child = std::process::Command::new("tar")
        .args(["-x", "-f", "-", "--no-same-owner", "-C"])
        .arg(into)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| extract(format!("cannot start tar: {e}")))?;
    let mut hasher = sha2::Sha256::new();
    let mut copy = || -> std::io::Result<()> {
        let Some(mut stdin) = child.stdin.take() else {
            return Err(std::io::Error::other("no stdin"));
        };
        let mut buf = vec![0u8; 1 << 16];
        loop {
            let n = file.read(&mut buf)?;
            if n == 0 {
                return Ok(());
            }
            hasher.update(&buf[..n]);
            stdin.write_all(&buf[..n])?;
        }
    };
    let copied = copy();
    let out = child
        .wait_with_output()
        .map_err(|e| extract(e.to_string()))?;
    let actual = format!("sha256:{}", hex::encode(hasher.finalize()));
    if actual != d.to_string() {
        return Err(tampered(format!("its bytes now hash to {actual}")));
    }
    copied.map_err(|e| extract(e.to_string()))?;
    if !out.status.success() {
        return Err(extract(format!(
            "tar: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(())
}

struct GradeOne<'a> {
    rt: &'a eval_runtimes::DockerRuntime,
    def: &'a RuntimeDef,
    image_spec: &'a ImageSpec,
    image: &'a mut Option<eval_runtimes::ImageId>,
    run_store: &'a ArtifactStore,
    store: &'a ArtifactStore,
    inputs: &'a crate::inputs::TaskInputs,
    loaded: &'a eval_protocols::Loaded,
    chosen: &'a Chosen,
    /// The attempt's `clarification` entries in the run's ledger, in order (its oracle record).
    questions: &'a [events::Clarification],
    work: &'a Path,
    facts: AttemptFacts,
}

/// Grades one archived workspace again: extracted (hashed again), the grader container as in a
/// run, the score read as a run reads it.
async fn grade_one(g: GradeOne<'_>) -> Result<RegradeOutcome, RegradeError> {
    let c = g.chosen;
    let mut out = RegradeOutcome {
        schema: events::SCHEMA,
        attempt: c.outcome.attempt.clone(),
        slot: c.outcome.slot.clone(),
        suite: c.suite.clone(),
        task: c.task.clone(),
        arm: c.outcome.arm.clone(),
        workspace: c.outcome.artifacts.workspace.clone(),
        original_outcome: c.outcome.outcome,
        original_metrics: c.outcome.metrics.clone(),
        graded: "no_workspace".into(),
        detail: None,
        metrics: BTreeMap::new(),
        image: None,
        artifacts: BTreeMap::new(),
        container_seconds: 0.0,
    };
    let Some(workspace_digest) = &c.outcome.artifacts.workspace else {
        out.detail = Some("the run archived no workspace for this attempt".into());
        return Ok(out);
    };
    let not_staged = || crate::inputs::InputsError::Mismatch {
        task: c.task.clone(),
        detail: "not staged".into(),
    };
    let bundle = g
        .loaded
        .tasks
        .iter()
        .find(|t| t.suite == c.suite && t.id == c.task)
        .ok_or_else(not_staged)?;
    let task_dir = g
        .inputs
        .dir(&bundle.dir)
        .map(Path::to_path_buf)
        .ok_or_else(not_staged)?;
    let _ = std::fs::remove_dir_all(g.work);
    let workspace = g.work.join("workspace");
    let scratch = g.work.join("out");
    for d in [&workspace, &scratch] {
        std::fs::create_dir_all(d).map_err(io(d))?;
    }
    let work = std::fs::canonicalize(g.work).map_err(io(g.work))?;
    let (workspace, scratch) = (work.join("workspace"), work.join("out"));
    extract_verified(
        g.run_store,
        &c.outcome.attempt,
        workspace_digest,
        &workspace,
    )?;
    let image = match g.image {
        Some(i) => i.clone(),
        None => {
            let i = g.rt.ensure_image(g.image_spec).await?;
            *g.image = Some(i.clone());
            i
        }
    };
    out.image = Some(image.to_string());
    // A grader that reads the attempt's oracle record gets it as the original grading did:
    // rebuilt from the run's ledger by the run's own function, beside (never in) the workspace.
    let oracle = match crate::attempt::regrade_record(bundle, &task_dir, g.questions) {
        Ok(None) => None,
        Ok(Some(record)) => {
            Some(crate::attempt::write_oracle_record(&work, &record).map_err(io(&work))?)
        }
        Err(why) => {
            return Err(RegradeError::Io {
                path: task_dir.clone(),
                source: std::io::Error::other(why),
            });
        }
    };
    let mounts = RoleMounts::Grader {
        workspace,
        hidden: task_dir.join("hidden"),
        out: scratch.clone(),
        oracle,
    };
    let ran = run_grader_container(g.rt, g.def, &image, &g.facts, mounts).await;
    record_grader_end(&mut out, ran, &scratch, g.store)?;
    let _ = std::fs::remove_dir_all(&work);
    Ok(out)
}

/// What the grader container's end makes of the regraded attempt: `not_run` when the engine
/// could not run it, `unscorable` when it failed or its score does not read, else `scored`;
/// its log and score are put in the regrade's store. Only a store failure is an error.
fn record_grader_end(
    out: &mut RegradeOutcome,
    ran: Result<eval_runtimes::RunEnd, crate::attempt::classify::EngineFault>,
    scratch: &Path,
    store: &ArtifactStore,
) -> Result<(), RegradeError> {
    match ran {
        Err(f) => {
            out.graded = "not_run".into();
            out.detail = Some(format!("{}: {}", f.code.as_str(), f.detail));
        }
        Ok(end) => {
            out.container_seconds = end.elapsed.as_secs_f64();
            out.artifacts
                .insert("grader_log".into(), store.put_bytes(&end.logs)?.to_string());
            if end.outcome != (WaitOutcome::Exited { code: 0 }) {
                let log = String::from_utf8_lossy(&end.logs);
                let tail: String = log.chars().take(400).collect();
                out.graded = "unscorable".into();
                out.detail = Some(format!("it ended with {:?}: {tail}", end.outcome));
            } else {
                match read_score(scratch) {
                    Ok((score, metrics)) => {
                        out.artifacts
                            .insert("grader_output".into(), store.put_bytes(&score)?.to_string());
                        out.graded = "scored".into();
                        out.metrics = metrics;
                    }
                    Err(ScoreError::Leftover(e)) => {
                        out.graded = "unscorable".into();
                        out.detail = Some(format!("score.json: {e}"));
                    }
                    Err(ScoreError::Malformed { score, why }) => {
                        out.artifacts
                            .insert("grader_output".into(), store.put_bytes(&score)?.to_string());
                        out.graded = "unscorable".into();
                        out.detail = Some(format!("score.json: {why}"));
                    }
                }
            }
        }
    }
    Ok(())
}

/// Every regrade of `matrix` in `state`, read back for the report of the run whose verified
/// ledger is `run_entries`: each regrade ledger's chain is verified and its base must be an
/// entry of this ledger; what does not hold is a problem shown with it, never an error of the
/// report (a regrade never changes the report's verdict or exit status).
pub fn sensitivity(state: &Path, matrix: &str, run_entries: &[Entry]) -> Vec<Sensitivity> {
    let mut out = Vec::new();
    let Ok(rd) = std::fs::read_dir(regrades_dir(state, matrix)) else {
        return out;
    };
    let mut dirs: Vec<PathBuf> = rd.flatten().map(|e| e.path()).collect();
    dirs.sort();
    for dir in dirs {
        let path = dir.join("ledger.sqlite");
        if !path.is_file() {
            continue;
        }
        if let Some(s) = read_one(&path, run_entries) {
            out.push(s);
        }
    }
    out
}

fn read_one(path: &Path, run_entries: &[Entry]) -> Option<Sensitivity> {
    let entries = LedgerReader::open(path).and_then(|r| r.entries()).ok()?;
    let verified = ledger::verify_entries(&entries, None);
    let mut problems = Vec::new();
    if !verified.ok {
        problems.push(format!(
            "{}: the regrade ledger does not verify: {}",
            path.display(),
            verified
                .error
                .map(|e| e.to_string())
                .unwrap_or_else(|| "unknown".into())
        ));
    }
    let entries = &entries[..entries.len().min(verified.entries as usize)];
    let started: RegradeStarted = entries
        .first()
        .filter(|e| e.kind == REGRADE_STARTED)
        .and_then(|e| serde_json::from_slice(&e.payload).ok())?;
    let base_ok = started.based_on.seq >= 1
        && run_entries
            .get(started.based_on.seq as usize - 1)
            .is_some_and(|e| e.hash.to_string() == started.based_on.hash);
    if !base_ok {
        problems.push(format!(
            "it is based on ledger head {}:{}, which is not an entry of this run's ledger",
            started.based_on.seq, started.based_on.hash
        ));
    }
    let attempts: Vec<RegradedAttempt> = entries
        .iter()
        .filter(|e| e.kind == REGRADE_OUTCOME)
        .filter_map(|e| serde_json::from_slice::<RegradeOutcome>(&e.payload).ok())
        .map(|o| regraded_attempt(&o))
        .collect();
    let head = entries.last().map_or(
        LedgerHeadRef {
            seq: 0,
            hash: Digest::ZERO.to_string(),
        },
        |e| LedgerHeadRef {
            seq: e.seq,
            hash: e.hash.to_string(),
        },
    );
    Some(Sensitivity {
        identity: started.identity,
        grader: started.grader.runtime,
        grader_tree: started.grader.tree,
        based_on: started.based_on,
        ledger_head: head,
        tasks: started.tasks,
        finished: entries.iter().any(|e| e.kind == REGRADE_FINISHED),
        problems,
        arms: compare(&attempts),
        attempts,
    })
}
