//! `eval demo [--state DIR]`: the whole pipeline on the fixture runtime and the fixture upstream —
//! init → freeze → run the 96-attempt demo matrix → verify the ledger → write the report — then
//! print where everything is.

use crate::cli::{DemoArgs, FreezeArgs, InitArgs, ReportFormat, StateArg};
use crate::status::{CmdResult, Status};
use eval_engine::admission::{self, UpstreamChoice};
use eval_engine::session::AdmissionError;
use eval_protocols::Project;
use std::path::{Path, PathBuf};

/// The demo's own failures (each step's are its command's); each kind's exit status is decided
/// in `exit::demo_status`.
#[derive(Debug, thiserror::Error)]
pub enum DemoError {
    #[error("cannot read the current directory: {0}")]
    CurrentDir(std::io::Error),
    #[error("cd {path}: {source}")]
    Cd {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The ledger the demo just wrote does not verify.
    #[error("the demo ledger does not verify: {0:?}")]
    LedgerDoesNotVerify(Option<eval_core::chain::VerifyFailure>),
    /// The report of a ledger that just verified cannot be built: whatever fails there is the
    /// evidence's, whatever its kind would be for `eval report`.
    #[error("{0}")]
    Report(eval_report::data::ReportDataError),
}

fn absolute(p: &Path) -> Result<PathBuf, DemoError> {
    if p.is_absolute() {
        return Ok(p.to_path_buf());
    }
    std::env::current_dir()
        .map(|d| d.join(p))
        .map_err(DemoError::CurrentDir)
}

pub fn run(args: DemoArgs) -> CmdResult {
    let base = match &args.state {
        Some(dir) => absolute(dir)?,
        None => {
            let stamp = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_millis())
                .unwrap_or(0);
            std::env::temp_dir().join(format!("eval-demo-{}-{stamp}", std::process::id()))
        }
    };
    let project_dir = base.join("project");
    println!("eval demo: working in {}", base.display());
    println!("== eval init {}", project_dir.display());
    super::init::run(InitArgs {
        dir: project_dir.clone(),
    })?;
    // Every later step works from inside the project, exactly as a user would.
    std::env::set_current_dir(&project_dir).map_err(|source| DemoError::Cd {
        path: project_dir.clone(),
        source,
    })?;
    println!("== eval freeze --protocol demo");
    super::freeze::run(FreezeArgs {
        protocol: "demo".into(),
        state: StateArg {
            state: PathBuf::from("runs"),
        },
        pilot: None,
        replicates: 200,
    })?;
    println!("== eval run --matrix demo --upstream fixture");
    let project = Project::open(".");
    let state_rel = PathBuf::from("runs");
    let upstream = UpstreamChoice::Fixture;
    let admitted = eval_engine::session::gather(
        &project,
        &state_rel,
        "demo",
        None,
        &upstream,
        crate::driver::driver_digest(),
    )?;
    let refusals = admission::admit(&admitted.facts);
    if !refusals.is_empty() {
        return Err(AdmissionError::Refused {
            what: "the demo".into(),
            refusals: refusals.iter().map(|r| r.to_string()).collect(),
        }
        .into());
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(AdmissionError::AsyncRuntime)?;
    let t0 = std::time::Instant::now();
    let finished = runtime.block_on(eval_engine::session::run_admitted(
        &project,
        &state_rel,
        &admitted,
        upstream,
        eval_engine::session::SessionOptions::new(super::run::progress()),
    ))?;
    let wall = t0.elapsed().as_secs_f64();
    // Ending the runtime ends every task of the run, and with them the last ledger writer handle,
    // so the report below can take the ledger.
    drop(runtime);
    print!("{}", super::status::render_text(&finished.summary));
    if let Some(why) = &finished.end.stopped {
        return Err(AdmissionError::Stopped {
            what: "demo run",
            why: why.clone(),
        }
        .into());
    }
    let ledger_path = eval_runlog::layout::ledger_path(&state_rel, "demo");
    println!("== eval ledger verify {}", ledger_path.display());
    let v = eval_evidence::ledger::verify(&ledger_path, None)?;
    if !v.ok {
        return Err(DemoError::LedgerDoesNotVerify(v.error).into());
    }
    println!("ok: {} entries; head {}", v.entries, v.head);
    println!("== eval report --matrix demo");
    // The demo's own ledger just verified: whatever still fails here is the evidence's (3).
    let data = eval_report::data::build(
        Path::new("."),
        &state_rel,
        "demo",
        &crate::driver::running(),
    )
    .map_err(DemoError::Report)?;
    let run_dir = eval_runlog::layout::run_dir(&state_rel, "demo");
    let report = super::report::publish(&data, &state_rel, None)?;
    let mut verdict = Status::Ok;
    for (format, name) in [
        (ReportFormat::Md, "report.md"),
        (ReportFormat::Html, "report.html"),
    ] {
        verdict = super::report::write_rendered(&report, format, Some(&run_dir.join(name)))?;
    }
    let container: f64 = eval_report::data::container_seconds(&ledger_path);
    let attempts = finished.summary.attempts.max(1);
    println!();
    println!(
        "demo: {} attempts in {:.1}s wall ({:.2}s per attempt); time inside containers {:.1}s in total",
        finished.summary.attempts,
        wall,
        wall / attempts as f64,
        container
    );
    if let Some(t) = &finished.fixture {
        println!(
            "fixture upstream: {} calls served, {} prompt + {} completion tokens (its own count; the ledger's model_call entries add up to the same)",
            t.calls, t.prompt_tokens, t.completion_tokens
        );
    }
    println!("where everything is:");
    println!("  project   {}", project_dir.display());
    println!(
        "  freeze    {}",
        project_dir.join("runs/freezes/demo.json").display()
    );
    println!(
        "  registry  {}",
        project_dir.join("runs/registry.jsonl").display()
    );
    println!("  ledger    {}", project_dir.join(&ledger_path).display());
    println!(
        "  artifacts {}",
        project_dir
            .join(eval_runlog::layout::artifacts_dir(&state_rel, "demo"))
            .display()
    );
    for name in ["report.json", "report.md", "report.html"] {
        println!(
            "  report    {}",
            project_dir.join(&run_dir).join(name).display()
        );
    }
    println!(
        "the report's verdict is expected to be \"not allowed\": a fixture run is never evidence."
    );
    if args.state.is_none() {
        println!(
            "(a scratch directory: remove it with `rm -rf {}`)",
            base.display()
        );
    }
    // The demo succeeded when everything ran and verified; the verdict is the report's business.
    let _ = verdict;
    Ok(Status::Ok)
}
