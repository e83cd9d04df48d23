//! `eval run`: admission, then the orchestrated, resumable run (`eval_engine::session`), with
//! progress drawn here (`Progress`, handed to the session as its sink).

use crate::cli::RunArgs;
use crate::status::{CmdResult, Status};
use eval_engine::ProgressSink;
use eval_engine::admission::{self, UpstreamChoice};
use eval_engine::session::{
    AdmissionError, Admitted, SessionOptions, SmokeSpec, aa, gather, run_admitted, smoke,
    state_disk,
};
use eval_protocols::Project;
use eval_runlog::events::AttemptOutcome;
use eval_runlog::layout::{aa_run_name, smoke_run_name};
use eval_runlog::replay::StatusSummary;
use std::io::IsTerminal as _;
use std::path::Path;
use std::sync::Arc;

fn key_available(args: &RunArgs) -> bool {
    if let Some(var) = &args.key.api_key_env {
        return std::env::var_os(var).is_some_and(|v| !v.is_empty());
    }
    if let Some(file) = &args.key.api_key_file {
        return std::fs::metadata(file).is_ok_and(|m| m.len() > 0);
    }
    false
}

pub fn run(args: RunArgs) -> CmdResult {
    let upstream = match args.upstream.as_deref() {
        Some("fixture") => UpstreamChoice::Fixture,
        Some("model-free") => UpstreamChoice::ModelFree,
        Some(url) => UpstreamChoice::Remote {
            url: url.to_owned(),
            key_available: key_available(&args),
        },
        None => return Err(AdmissionError::NoUpstream.into()),
    };
    let project = Project::open(".");
    let state = args.state.state.clone();
    let mut admitted = gather(
        &project,
        &state,
        &args.matrix,
        args.protocol.as_deref(),
        &upstream,
        crate::driver::driver_digest(),
    )?;
    if args.smoke {
        admitted = smoke(
            admitted,
            &state,
            SmokeSpec {
                tasks: args.tasks.clone(),
                arms: args.arms.clone(),
                limit: args.limit,
            },
        )?;
    }
    if args.aa {
        admitted = aa(admitted, &state)?;
    }
    // Each session sweeps the identity's containers as stale (it holds the only writer of its
    // ledger): the real run, its smoke run and its A/A run must never run beside one another.
    let own = admitted.run_name();
    for (other, what) in [
        (args.matrix.clone(), "a run"),
        (smoke_run_name(&args.matrix), "a smoke run"),
        (aa_run_name(&args.matrix), "an A/A calibration run"),
    ] {
        if other == own {
            continue;
        }
        let path = eval_runlog::layout::ledger_path(&state, &other);
        if path.exists() && eval_evidence::ledger::LedgerWriter::open(&path).is_err() {
            return Err(AdmissionError::Smoke {
                what: format!("the run {own}"),
                refusals: vec![format!(
                    "the ledger {} is in use ({what} is going): runs of the same identity must not run beside one another; wait for it to end",
                    path.display()
                )],
            }
            .into());
        }
    }
    // A run stopped at an interim look stays stopped: nothing more is recorded in it.
    if admitted.smoke.is_none() && admitted.aa.is_none() {
        let path = eval_runlog::layout::ledger_path(&state, &args.matrix);
        if let Some(t) = eval_runlog::looks::stopped_at_look(&path) {
            return Err(AdmissionError::StoppedAtLook {
                path,
                line: eval_evidence::report::looks::look_line(&t),
            }
            .into());
        }
    }
    if let (UpstreamChoice::Remote { url, .. }, Some(pre)) =
        (&upstream, &admitted.loaded.protocol.upstream)
        && !pre.matches(url)
    {
        return Err(AdmissionError::OtherUpstream {
            protocol: admitted.loaded.protocol.name.clone(),
            preregistered: pre.url.clone(),
            given: url.clone(),
        }
        .into());
    }
    let refusals = admission::admit(&admitted.facts);
    if !refusals.is_empty() {
        return Err(AdmissionError::Refused {
            what: format!("matrix {}", args.matrix),
            refusals: refusals.iter().map(|r| r.to_string()).collect(),
        }
        .into());
    }
    // Before anything is recorded: a state disk that cannot hold the attempts at this
    // concurrency would fail every one of them.
    let disk = state_disk(&project, &state, &admitted, args.concurrency);
    if let Some(why) = disk.refusal() {
        return Err(AdmissionError::StateDisk {
            path: state.clone(),
            why,
        }
        .into());
    }
    // A paid upstream is checked (key, model, balance, worst case) before the ledger is opened.
    if let UpstreamChoice::Remote { url, .. } = &upstream {
        crate::commands::preflight::before_run(
            url,
            &args.key,
            &args.matrix,
            &admitted.loaded.protocol,
            args.no_balance_check,
        )?;
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(AdmissionError::AsyncRuntime)?;
    runtime.block_on(execute(&args, &project, &state, &admitted, upstream))
}

async fn execute(
    args: &RunArgs,
    project: &Project,
    state: &Path,
    admitted: &Admitted,
    upstream: UpstreamChoice,
) -> CmdResult {
    let finished = run_admitted(
        project,
        state,
        admitted,
        upstream,
        SessionOptions {
            progress: progress(),
            api_key_env: args.key.api_key_env.clone(),
            api_key_file: args.key.api_key_file.clone(),
            concurrency: args.concurrency,
            signing_key: args.signing_key_file.clone(),
            extra_labels: match (&admitted.smoke, &admitted.aa) {
                (Some(_), _) => [("eval.smoke".to_owned(), "1".to_owned())].into(),
                (None, Some(_)) => [("eval.aa".to_owned(), "1".to_owned())].into(),
                (None, None) => std::collections::BTreeMap::new(),
            },
        },
    )
    .await?;
    print!(
        "{}",
        crate::commands::status::render_text(&finished.summary)
    );
    println!(
        "ledger: {}",
        eval_runlog::layout::ledger_path(state, &admitted.run_name()).display()
    );
    if admitted.smoke.is_some() {
        println!(
            "smoke run: never evidence (eval report --matrix {} exits 1)",
            admitted.run_name()
        );
    }
    if let Some(copies) = &admitted.aa {
        for c in copies {
            println!(
                "A/A: suite {}: candidate arm {} ran a copy of baseline arm {}",
                c.suite, c.arm, c.copies
            );
        }
        println!(
            "A/A calibration run: never evidence for a release (eval report --matrix {} exits 1); calibrate with: eval plan --matrix {} --calibrate --pilot {}",
            admitted.run_name(),
            admitted.loaded.matrix.name,
            eval_runlog::layout::ledger_path(state, &admitted.run_name()).display()
        );
    }
    match &finished.end.stopped {
        None if finished.end.complete => Ok(Status::Ok),
        None => Ok(Status::Ok),
        Some(why) => Err(AdmissionError::Stopped {
            what: "run",
            why: why.clone(),
        }
        .into()),
    }
}

/// The session's progress: drawn by [`Progress`] once the session knows its size and budget.
pub fn progress() -> eval_engine::session::ProgressFactory {
    Arc::new(|total, budget| Arc::new(Progress::with_budget(total, budget)))
}

/// Progress on a terminal (indicatif) or as plain log lines.
pub struct Progress {
    bar: Option<indicatif::ProgressBar>,
    budget: Option<eval_core::budget::RunBudget>,
}

/// The live line's message: running attempts, infrastructure faults, reruns, and tokens and
/// spend (USD, every recorded call as the proxy priced it) against the run budget when there is
/// one.
pub fn status_line(s: &StatusSummary, budget: Option<&eval_core::budget::RunBudget>) -> String {
    let tokens = match budget {
        Some(b) if b.max_tokens > 0 => format!(
            "tokens {}/{} ({:.0}%)",
            s.tokens.total(),
            b.max_tokens,
            100.0 * s.tokens.total() as f64 / b.max_tokens as f64
        ),
        _ => format!("tokens {}", s.tokens.total()),
    };
    let spend = match budget {
        Some(b) if b.max_spend_usd > 0.0 => format!(
            "spend ${:.2}/${:.2} ({:.0}%)",
            s.spend_usd,
            b.max_spend_usd,
            100.0 * s.spend_usd / b.max_spend_usd
        ),
        _ => format!("spend ${:.2}", s.spend_usd),
    };
    format!(
        "running {} · infra faults {} · reruns {} · {tokens} · {spend}",
        s.running.len(),
        s.infra_faults,
        s.reruns
    )
}

impl Progress {
    /// On a terminal one live line (done/total, running, infrastructure faults, tokens against
    /// `budget`, a rough time left from the pace so far); plain lines otherwise.
    pub fn with_budget(total: u64, budget: Option<eval_core::budget::RunBudget>) -> Self {
        let bar = std::io::stderr().is_terminal().then(|| {
            let bar = indicatif::ProgressBar::new(total);
            bar.set_style(
                indicatif::ProgressStyle::with_template(
                    "{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} · ~{eta} left · {msg}",
                )
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
            );
            bar
        });
        Self { bar, budget }
    }

    fn line(&self, text: &str) {
        match &self.bar {
            Some(bar) => bar.println(text),
            None => {
                #[allow(clippy::print_stderr)]
                {
                    eprintln!("{text}");
                }
            }
        }
    }

    fn update(&self, s: &StatusSummary) {
        if let Some(bar) = &self.bar {
            bar.set_position(s.done);
            bar.set_message(status_line(s, self.budget.as_ref()));
        }
    }
}

impl ProgressSink for Progress {
    fn session_started(&self, s: &StatusSummary) {
        self.line(&format!(
            "eval run: matrix {} session {}: {}/{} statistical slots done, {}/{} infrastructure slots completed",
            s.matrix, s.sessions, s.done, s.total, s.infra_completed, s.infra_total
        ));
        self.update(s);
    }

    fn attempt_started(&self, attempt: &str) {
        if self.bar.is_none() {
            self.line(&format!("start  {attempt}"));
        }
    }

    fn attempt_finished(&self, attempt: &str, o: &AttemptOutcome, s: &StatusSummary) {
        let code = o.infra_fault.map(|c| format!("({c})")).unwrap_or_default();
        self.line(&format!(
            "done   {attempt}: {}{code} · turns {} · tokens {} · {:.1}s  [{}/{} done]",
            o.outcome.as_str(),
            o.model_turns,
            o.tokens.total(),
            o.duration_seconds,
            s.done,
            s.total
        ));
        self.update(s);
    }

    fn rerun(&self, attempt: &str, code: &str) {
        self.line(&format!("rerun  {attempt} after {code}"));
    }

    fn error(&self, message: &str) {
        self.line(&format!("error  {message}"));
    }

    fn session_finished(&self, s: &StatusSummary) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
        self.line(&format!(
            "eval run: {}/{} done, infra faults {}, reruns {}, tokens {}{}",
            s.done,
            s.total,
            s.infra_faults,
            s.reruns,
            s.tokens.total(),
            if s.complete { " — complete" } else { "" }
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The live line names running attempts, infrastructure faults, and tokens and spend
    /// against the budget (and only the amounts when there is no budget).
    #[test]
    fn the_status_line_shows_tokens_and_spend_against_the_budget() {
        let mut s = StatusSummary {
            infra_faults: 2,
            running: vec!["a#1".into(), "b#1".into()],
            ..StatusSummary::default()
        };
        s.tokens.input = 150;
        s.tokens.output = 50;
        s.spend_usd = 1.25;
        let b = eval_core::budget::RunBudget {
            max_tokens: 1000,
            max_spend_usd: 5.0,
        };
        let line = status_line(&s, Some(&b));
        assert!(line.contains("running 2"), "{line}");
        assert!(line.contains("infra faults 2"), "{line}");
        assert!(line.contains("tokens 200/1000 (20%)"), "{line}");
        assert!(line.contains("spend $1.25/$5.00 (25%)"), "{line}");
        assert!(
            status_line(&s, None).ends_with("tokens 200 · spend $1.25"),
            "{}",
            status_line(&s, None)
        );
    }
}
