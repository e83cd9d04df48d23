//! `eval report`: statistics, gates and the release verdict of a run.
//!
//! The only input is [`RunData`], built from the run's verified ledger by [`load_run_data`]
//! (the one function that reads the ledger for reports; it reads it once and runs every check on
//! that snapshot). Exit 0 when release is allowed, 1 when
//! not, 3 on an integrity failure (ledger, freeze drift, retired identity). With a preregistered
//! public key the signed evidence and every referenced artifact are verified before anything is
//! computed; a failure there exits 3 with nothing written, appended or recorded.

use std::path::Path;

use eval_evidence::ledger::{Digest, LedgerError, LedgerWriter, NewEntry};
use eval_evidence::report::{Format, Report, RunData, build_report, render, report_entry_payload};

use crate::cli::{ReportArgs, ReportFormat};
use crate::status::{CmdResult, Failure, Status};

/// Why a report could not be built, recorded or rendered; each kind has its status in
/// `exit::report_status`.
#[derive(Debug, thiserror::Error)]
pub enum ReportCmdError {
    #[error(transparent)]
    Data(#[from] eval_report::data::ReportDataError),
    #[error("{0}")]
    Build(#[source] eval_evidence::report::ReportError),
    #[error("cannot serialise the report: {0}")]
    Serialise(#[source] serde_json::Error),
    #[error("cannot write {path}: {source}")]
    Write {
        path: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Site(#[from] eval_report::site::SiteError),
    #[error("the run recorded a malformed driver digest {0:?}")]
    DriverDigest(String),
    #[error(
        "{path}: the ledger changed while the report was computed (verified head {verified}, now {found}); nothing was recorded"
    )]
    LedgerChanged {
        path: std::path::PathBuf,
        verified: String,
        found: String,
    },
}

/// Builds the report input from the state directory's ledger for `args.matrix`: verifies the
/// ledger, reads the freeze, the registry and every attempt. Filled in by the run issue.
pub fn load_run_data(args: &ReportArgs) -> Result<RunData, Failure> {
    use eval_report::data::build_with_key;
    let named = match args.public_key.as_deref() {
        Some(k) => Some(super::keygen::parse_public_key(k)?),
        None => None,
    };
    let mut data = build_with_key(
        Path::new("."),
        &args.state.state,
        &args.matrix,
        named.as_ref(),
        &crate::driver::running(),
    )
    .map_err(ReportCmdError::Data)?;
    data.allow_unsigned = args.allow_unsigned;
    Ok(data)
}

pub fn run(args: ReportArgs) -> CmdResult {
    if let Some(file) = &args.verify {
        return super::attest::verify_report_attestation(file, args.public_key.as_deref());
    }
    let state = &args.state.state;
    // Checked before anything is computed or recorded: a site needs a directory to go to.
    if args.format == ReportFormat::Site && args.out.is_none() {
        return Err(ReportCmdError::Site(eval_report::site::SiteError::NoOut).into());
    }
    if eval_runlog::layout::is_smoke_run(state, &args.matrix) {
        return Err(Failure {
            status: Status::GateNotPassed,
            message: format!(
                "{}: smoke run: a smoke run is never evidence; nothing was reported or recorded",
                eval_runlog::layout::ledger_path(state, &args.matrix).display()
            ),
        });
    }
    if eval_runlog::layout::is_aa_run(state, &args.matrix) {
        return Err(Failure {
            status: Status::GateNotPassed,
            message: format!(
                "{}: A/A calibration run: never evidence for a release (its candidate arms ran copies of their baselines); nothing was reported or recorded; calibrate with eval plan --calibrate --pilot {}",
                eval_runlog::layout::ledger_path(state, &args.matrix).display(),
                eval_runlog::layout::ledger_path(state, &args.matrix).display()
            ),
        });
    }
    let mut data = load_run_data(&args)?;
    if let Some(n) = args.look {
        super::report_look::take(state, &mut data, n, args.signing_key_file.as_deref())?;
    }
    // The key is checked against the preregistered one before anything is written.
    let key = match args.signing_key_file.as_deref() {
        Some(path) => {
            let key = super::keygen::load_signing_key(Some(path))?;
            if let Some(expected) = eval_protocols::frozen_public_key(state, &data.protocol)? {
                key.ensure_public_matches(&expected)?;
            }
            Some(key)
        }
        None => None,
    };
    let report = publish(&data, state, key)?;
    if let (ReportFormat::Site, Some(out)) = (args.format, args.out.as_deref()) {
        return write_site(state, &data, &report, out);
    }
    write_rendered(&report, args.format, args.out.as_deref())
}

/// Writes the site of the report just recorded (see `crate::site`) and returns the verdict's
/// exit status, as every other format does.
pub fn write_site(state: &Path, data: &RunData, report: &Report, out: &Path) -> CmdResult {
    let s = eval_report::site::write(state, data, report, out).map_err(ReportCmdError::Site)?;
    println!(
        "{}: {} ({} pages, {} attempts, {} bytes)",
        out.display(),
        report.verdict_line(),
        s.pages,
        s.attempts,
        s.bytes
    );
    Ok(exit_of(report))
}

fn exit_of(report: &Report) -> Status {
    match report.exit_status() {
        0 => Status::Ok,
        3 => Status::Integrity,
        _ => Status::GateNotPassed,
    }
}

/// Records a report as evidence: `report.json` (canonical) in the run directory, a `report`
/// entry in the run's ledger (the JSON report's digest and the head it was computed from), the
/// verdict in the identity registry (what other protocols' preconditions read; never for a
/// fixture run), and — with a signing key — a signed checkpoint covering the `report` entry and
/// `report.intoto.json` attesting the report.
pub fn publish(
    data: &RunData,
    state: &Path,
    key: Option<eval_evidence::signing::SigningKeyPair>,
) -> Result<Report, Failure> {
    let mut report = build_report(data).map_err(ReportCmdError::Build)?;
    let run_dir = eval_runlog::layout::run_dir(state, &data.matrix);
    let ledger_path = eval_runlog::layout::ledger_path(state, &data.matrix);
    let writer = LedgerWriter::open(&ledger_path)?;
    // With a key, the signer attaches to this writer and reads the writer's own file (never the
    // path again); the head compared below is the writer's, and the `report` entry is signed in
    // the transaction that records it, so a file renamed over the path after this point is
    // refused by the writer instead of being signed.
    let key = key.map(std::sync::Arc::new);
    let _checkpointer = match &key {
        Some(key) => {
            let origin = eval_evidence::signing::origin_for_identity(&data.identity)?;
            Some(eval_evidence::signing::Checkpointer::open(
                key.clone(),
                &origin,
                &writer,
            )?)
        }
        None => None,
    };
    // The report entry must extend the ledger the report verified, not a file put in its place
    // since (a broken chain's report exits 3 anyway and says so; its head is the verified prefix).
    if data.ledger_verified {
        let found = writer.head_blocking()?;
        if found.seq != data.ledger_head.seq || found.hash.to_string() != data.ledger_head.hash {
            return Err(ReportCmdError::LedgerChanged {
                path: ledger_path,
                verified: format!("{}:{}", data.ledger_head.seq, data.ledger_head.hash),
                found: found.to_string(),
            }
            .into());
        }
    }
    // `eval regrade`'s sensitivity analyses, attached after the verdict was decided: shown in
    // every format, never a reason or an exit status.
    // (The ledger is read again only when a regrade exists, to check each one's base.)
    if eval_engine::regrade::regrades_dir(state, &data.matrix).is_dir() {
        report.sensitivity =
            eval_engine::regrade::sensitivity(state, &data.matrix, &writer.entries_blocking()?);
    }
    let json = eval_evidence::canonical::to_vec(&report).map_err(ReportCmdError::Serialise)?;
    let payload = report_entry_payload(&report).map_err(ReportCmdError::Build)?;
    swap_point_before_sign(&ledger_path);
    // The entry first: a writer that refuses (its file was replaced) leaves no report.json.
    let entry = NewEntry::new("report", &payload).map_err(LedgerError::from)?;
    let (_, checkpoint) = if key.is_some() {
        writer.append_signed_blocking(vec![entry])?
    } else {
        (vec![writer.append_blocking(entry)?], None)
    };
    let json_path = run_dir.join("report.json");
    // Never through a link planted at the name (the report may run as root).
    eval_protocols::statefs::replace_file(&json_path, &json).map_err(|source| {
        ReportCmdError::Write {
            path: json_path.clone(),
            source,
        }
    })?;
    let attestation = match (key, checkpoint) {
        (Some(key), Some(checkpoint)) => {
            let driver = Digest::parse(&data.driver_digest)
                .ok_or_else(|| ReportCmdError::DriverDigest(data.driver_digest.clone()))?;
            let verdict = serde_json::json!({
                "release_allowed": report.release_allowed,
                "verdict": report.verdict_line(),
                "reasons": report.reasons,
                "anomalies": report.anomalies,
                "exit_status": report.exit_status(),
            });
            let envelope = super::attest::write_report_attestation(
                &json,
                &data.identity,
                &driver,
                &checkpoint,
                &verdict,
                &key,
                &run_dir.join("report.intoto.json"),
            )?;
            // Registered only when signed with the key the freeze preregistered (a key the caller
            // named, or none, proves nothing to a precondition).
            let preregistered = eval_protocols::frozen_public_key(state, &data.protocol)?
                .is_some_and(|k| k.bytes() == key.public().bytes());
            preregistered
                .then(|| serde_json::from_slice::<serde_json::Value>(&envelope).ok())
                .flatten()
        }
        _ => None,
    };
    // Evidence that may release nothing is kept out of the registry that preconditions read:
    // the fixture's, and the model-free upstream's for a protocol that is not model-free; a pass
    // is registered only with its signed attestation, which a precondition verifies.
    if !data.fixture_upstream && eval_evidence::report::model_free_refusal(data).is_none() {
        let mut registered = payload.clone();
        match (attestation, report.release_allowed) {
            (Some(a), _) => registered["attestation"] = a,
            (None, true) => {
                registered["release_allowed"] = serde_json::Value::Bool(false);
                registered["not_registered_as_passed"] = serde_json::Value::String(
                    "no attestation signed with the preregistered key".into(),
                );
            }
            (None, false) => {}
        }
        eval_protocols::record_report(state, &registered)?;
    }
    writer.close();
    Ok(report)
}

/// A swap point for the custody tests: `EVAL_TEST_SWAP_BEFORE_SIGN=<file>` renames `<file>` over
/// the ledger (moving its `-wal`/`-shm` aside) after the head check and right before the `report`
/// entry is appended and signed — the window an operator without the key would use. Only debug
/// builds read the variable.
fn swap_point_before_sign(ledger: &Path) {
    if !cfg!(debug_assertions) {
        return;
    }
    if let Some(from) = std::env::var_os("EVAL_TEST_SWAP_BEFORE_SIGN") {
        for suffix in ["-wal", "-shm"] {
            let side = format!("{}{suffix}", ledger.display());
            let _ = std::fs::rename(&side, format!("{side}.aside"));
        }
        let _ = std::fs::rename(from, ledger);
    }
}

/// Renders `report` to `out` (or standard output) and returns the exit status.
pub fn write_rendered(report: &Report, format: ReportFormat, out: Option<&Path>) -> CmdResult {
    let format = match format {
        ReportFormat::Text => Format::Text,
        ReportFormat::Json => Format::Json,
        ReportFormat::Md => Format::Md,
        ReportFormat::Html => Format::Html,
        // A site is a directory, written by `write_site`; here (no `--out`) it falls back to the
        // one-page HTML report.
        ReportFormat::Site => Format::Html,
    };
    let body = render(report, format).map_err(ReportCmdError::Build)?;
    match out {
        Some(path) => {
            std::fs::write(path, body).map_err(|source| ReportCmdError::Write {
                path: path.to_path_buf(),
                source,
            })?;
            // "every check passed" only when nothing at all is flagged: an unsigned run or one
            // whose candidate never made a model call must not read as clean.
            let summary = match (report.reasons.len(), report.anomalies.len()) {
                (0, 0) => "every check passed".to_string(),
                (r, a) => format!("{r} reasons, {a} anomalies"),
            };
            println!("{}: {} ({summary})", path.display(), report.verdict_line());
        }
        None => print!("{body}"),
    }
    Ok(exit_of(report))
}
