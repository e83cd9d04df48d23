//! The one place where failures become exit statuses: each error type's mapping to a
//! [`Status`] (a `*_status` function) and its conversion into a [`Failure`]. It sits above the
//! commands (it names their error types); the commands use only the vocabulary in `status.rs`,
//! so nothing here is imported back by them.
//!
//! 0 success · 1 gate not passed · 2 usage or input error · 3 integrity failure.

use crate::status::{Failure, Status};

/// Exit 3 when the library says the evidence itself is at fault, else exit 2.
fn classified(integrity: bool, message: String) -> Failure {
    Failure {
        status: if integrity {
            Status::Integrity
        } else {
            Status::Usage
        },
        message,
    }
}

impl From<eval_evidence::signing::SigningError> for Failure {
    fn from(e: eval_evidence::signing::SigningError) -> Self {
        classified(e.is_integrity(), e.to_string())
    }
}

impl From<eval_evidence::LedgerError> for Failure {
    fn from(e: eval_evidence::LedgerError) -> Self {
        classified(e.is_integrity(), e.to_string())
    }
}

impl From<eval_protocols::ProtocolError> for Failure {
    fn from(e: eval_protocols::ProtocolError) -> Self {
        classified(e.is_integrity(), e.to_string())
    }
}

impl From<eval_report::show::ViewError> for Failure {
    fn from(e: eval_report::show::ViewError) -> Self {
        use eval_report::show::ViewError as V;
        match e {
            V::NoRun { .. } | V::Usage(_) => Self::usage(e.to_string()),
            V::Integrity(message) => Failure {
                status: Status::Integrity,
                message,
            },
            V::Ledger(l) => l.into(),
        }
    }
}

impl From<eval_evidence::stats::StatsError> for Failure {
    fn from(e: eval_evidence::stats::StatsError) -> Self {
        Self::usage(e.to_string())
    }
}

/// Bytes that differ from what was frozen, or a container that differs from the policy, are
/// integrity failures; an engine that is down, a failed sweep or a missing static binary is an
/// environment problem the user fixes and reruns (2).
pub fn runtime_status(e: &eval_runtimes::RuntimeError) -> Status {
    use eval_core::fault::FaultCode;
    match e.fault() {
        Some(FaultCode::AttestationMismatch | FaultCode::PolicyViolation) => Status::Integrity,
        _ => Status::Usage,
    }
}

impl From<eval_runtimes::RuntimeError> for Failure {
    fn from(e: eval_runtimes::RuntimeError) -> Self {
        Self {
            status: runtime_status(&e),
            message: e.to_string(),
        }
    }
}

/// The status a failed run session exits with, by the kind of its error. Everything about the
/// run's evidence (an append, its replay, a checkpoint signature, a record the proxy or an
/// attempt could not make) is 3: what the ledger holds is not the whole run. The container
/// engine outside an attempt is the environment (see [`runtime_status`]).
pub fn run_status(e: &eval_engine::RunError) -> Status {
    use eval_engine::RunError;
    match e {
        RunError::Ledger(_) | RunError::Replay(_) | RunError::Signing(_) | RunError::Record(_) => {
            Status::Integrity
        }
        RunError::Runtime(e) => runtime_status(e),
    }
}

impl From<eval_engine::RunError> for Failure {
    fn from(e: eval_engine::RunError) -> Self {
        Self {
            status: run_status(&e),
            message: e.to_string(),
        }
    }
}

/// The status of a session that could not start or did not end normally (`eval run`, `eval
/// demo`). A key that is not there or not usable, an engine that is down, a proxy that cannot
/// bind: the user fixes the setup and reruns (2). Checkpoints that do not accept the key, and
/// anything the run itself could not record, are the evidence's (3).
pub fn session_status(e: &eval_engine::session::SessionError) -> Status {
    use eval_engine::session::SessionError as E;
    match e {
        E::SigningKeyMissing { .. }
        | E::NoAgentModel(_)
        | E::FixtureKey(_)
        | E::FixtureUpstream(_)
        | E::FixtureSecret(_)
        | E::NoApiKey(_)
        | E::ApiKey(_)
        | E::RunDir { .. }
        | E::Proxy(_)
        | E::Signals(_)
        | E::Artifacts(_) => Status::Usage,
        E::Setup(e) => setup_status(e),
        E::Ledger(e) => integrity_if(e.is_integrity()),
        E::Protocol(e) => integrity_if(e.is_integrity()),
        E::SigningKey(e) => integrity_if(e.is_integrity()),
        E::Checkpointer(_) => Status::Integrity,
        E::Engine(e) => runtime_status(e),
        E::Run(e) => run_status(e),
        E::Inputs(e) => integrity_if(e.is_integrity()),
    }
}

fn integrity_if(integrity: bool) -> Status {
    if integrity {
        Status::Integrity
    } else {
        Status::Usage
    }
}

impl From<eval_engine::session::SessionError> for Failure {
    fn from(e: eval_engine::session::SessionError) -> Self {
        Self {
            status: session_status(&e),
            message: e.to_string(),
        }
    }
}

/// Admission: the project's files and the command line are input (2); a registry, freeze or
/// ledger that does not allow the run is integrity (3); a session that stopped early (Ctrl-C,
/// infrastructure out of attempts) is 2, rerun the same command.
pub fn admission_status(e: &eval_engine::session::AdmissionError) -> Status {
    use eval_engine::session::AdmissionError as E;
    match e {
        E::NoUpstream
        | E::Load(_)
        | E::WrongMatrix { .. }
        | E::OtherUpstream { .. }
        | E::AsyncRuntime(_)
        | E::Smoke { .. }
        | E::StateDisk { .. }
        | E::StoppedAtLook { .. }
        | E::Stopped { .. } => Status::Usage,
        E::Registry(_) | E::NotFrozen(_) | E::Refused { .. } => Status::Integrity,
        E::Protocol(e) => integrity_if(e.is_integrity()),
    }
}

impl From<eval_engine::session::AdmissionError> for Failure {
    fn from(e: eval_engine::session::AdmissionError) -> Self {
        Self {
            status: admission_status(&e),
            message: e.to_string(),
        }
    }
}

/// A report's own failures: input the report was asked to read or write is 2 (a run that is
/// not there, an unwritable `--out`), what the ledger or the run recorded is 3.
pub fn report_status(e: &crate::commands::report::ReportCmdError) -> Status {
    use crate::commands::report::ReportCmdError as E;
    use eval_report::data::ReportDataError as D;
    match e {
        E::Data(
            D::Ledger(_)
            | D::Registry(_)
            | D::AttemptStarted { .. }
            | D::Artifact { .. }
            | D::PublicKeyUnreadable { .. }
            | D::PublicKeyUnusable { .. }
            | D::SignaturesDoNotVerify { .. },
        )
        | E::DriverDigest(_)
        | E::LedgerChanged { .. } => Status::Integrity,
        E::Site(e) => site_status(e),
        E::Data(
            D::NoRun { .. }
            | D::NoRunStarted { .. }
            | D::Protocol(_)
            | D::RuntimeDef { .. }
            | D::NamedKeyNotPreregistered { .. },
        )
        | E::Build(_)
        | E::Serialise(_)
        | E::Write { .. } => Status::Usage,
    }
}

/// The site's own failures: its `--out` is input (2); a ledger or artifact that no longer holds
/// what the report verified is evidence (3).
pub fn site_status(e: &eval_report::site::SiteError) -> Status {
    use eval_report::site::SiteError as S;
    match e {
        S::NotASite(_) | S::NoOut | S::Write { .. } => Status::Usage,
        S::Ledger(_) | S::LedgerChanged { .. } | S::Artifact { .. } | S::WireLog { .. } => {
            Status::Integrity
        }
    }
}

impl From<crate::commands::report::ReportCmdError> for Failure {
    fn from(e: crate::commands::report::ReportCmdError) -> Self {
        Self {
            status: report_status(&e),
            message: e.to_string(),
        }
    }
}

/// The shared command failures: what the user named or asked for is 2; a run ledger that does
/// not verify or replay is 3.
pub fn command_status(e: &crate::commands::error::CommandError) -> Status {
    use crate::commands::error::CommandError as E;
    match e {
        E::Path { .. }
        | E::NotEmpty(_)
        | E::Encode { .. }
        | E::NoRun { .. }
        | E::ExpectHead(_)
        | E::EmptyNote
        | E::VerifyNeedsKey
        | E::AttestedReportMissing(_)
        | E::Pilot { .. } => Status::Usage,
        E::LedgerDoesNotVerify { .. }
        | E::Replay { .. }
        | E::LedgerBroken { .. }
        | E::Artifact { .. }
        | E::Attestation { .. } => Status::Integrity,
    }
}

impl From<crate::commands::error::CommandError> for Failure {
    fn from(e: crate::commands::error::CommandError) -> Self {
        Self {
            status: command_status(&e),
            message: e.to_string(),
        }
    }
}

/// Setting up the executor: definitions, the work directory and static binaries are the
/// project's or the machine's (2); an arm whose files now build another image than the freeze
/// recorded is bytes that differ from what was frozen (3), and a build or attestation failure
/// is as [`runtime_status`] says.
pub fn setup_status(e: &eval_engine::attempt::SetupError) -> Status {
    use eval_engine::attempt::SetupError as E;
    match e {
        E::Definition { .. }
        | E::NotAdmitted(_)
        | E::NoAgentModel
        | E::StaticBinary(_)
        | E::WorkDir { .. }
        | E::Sockets(_) => Status::Usage,
        E::ArmImage { source, .. } => runtime_status(source),
        E::ImageDrift { .. } => Status::Integrity,
    }
}

/// Generates `From<E> for Failure` through the kind's status function.
macro_rules! failure_from {
    ($ty:ty, $status:path) => {
        impl From<$ty> for Failure {
            fn from(e: $ty) -> Self {
                Self {
                    status: $status(&e),
                    message: e.to_string(),
                }
            }
        }
    };
}

/// Keys: a key file that exists, is missing or does not parse is what the user named (2).
pub fn key_status(e: &crate::commands::keygen::KeyError) -> Status {
    use crate::commands::keygen::KeyError as E;
    match e {
        E::Exists(_) | E::NoSigningKey | E::PublicKeyArg { .. } | E::PublicKeyFile { .. } => {
            Status::Usage
        }
    }
}
failure_from!(crate::commands::keygen::KeyError, key_status);

/// Proofs: a receipt or a signed ledger that does not verify is the evidence's (3); the command
/// line and the encoding of its own output are 2.
pub fn proof_status(e: &crate::commands::proofs::ProofError) -> Status {
    use crate::commands::proofs::ProofError as E;
    match e {
        E::SeqZero | E::Encode { .. } | E::EncodeFile { .. } => Status::Usage,
        E::ReceiptDoesNotVerify { .. } | E::SignaturesDoNotVerify { .. } => Status::Integrity,
    }
}
failure_from!(crate::commands::proofs::ProofError, proof_status);

/// `eval stats`: everything it refuses is its input (2).
pub fn stats_cmd_status(e: &crate::commands::stats::StatsCmdError) -> Status {
    use crate::commands::stats::StatsCmdError as E;
    match e {
        E::Method(_)
        | E::V04NeedsSeedString
        | E::Confidence(_)
        | E::NoResamples
        | E::NoPairs
        | E::Encode(_) => Status::Usage,
    }
}
failure_from!(crate::commands::stats::StatsCmdError, stats_cmd_status);

/// `eval proxy` by hand records no evidence: every failure to start is the setup's (2).
pub fn proxy_cmd_status(e: &crate::commands::proxy::ProxyCmdError) -> Status {
    use crate::commands::proxy::ProxyCmdError as E;
    match e {
        E::ListenNoPath
        | E::ListenUnparsable(_)
        | E::ListenNotLoopback(_)
        | E::KeySource
        | E::Key(_)
        | E::TokenFile { .. }
        | E::Admin(_)
        | E::MeterOut(_)
        | E::AsyncRuntime(_)
        | E::Proxy(_) => Status::Usage,
    }
}
failure_from!(crate::commands::proxy::ProxyCmdError, proxy_cmd_status);

/// `eval demo`: the working directory is the environment (2); a ledger the demo just wrote that
/// does not verify, or whose report cannot be built, is the evidence's (3).
pub fn demo_status(e: &crate::commands::demo::DemoError) -> Status {
    use crate::commands::demo::DemoError as E;
    match e {
        E::CurrentDir(_) | E::Cd { .. } => Status::Usage,
        E::LedgerDoesNotVerify(_) | E::Report(_) => Status::Integrity,
    }
}
failure_from!(crate::commands::demo::DemoError, demo_status);

/// `eval import`: everything it refuses is its input (2): the files of `--from DIR`, the command
/// line, and the project it would write into. A package whose bytes differ from the digest
/// `SHA256SUMS` pins is 2 as well: nothing has been frozen or recorded yet, so no evidence is at
/// fault; the user fetches the right package and reruns.
pub fn import_status(e: &eval_import::ImportError) -> Status {
    use eval_import::ImportError as E;
    match e {
        E::ProtocolName(_)
        | E::ImageId { .. }
        | E::RouterIdentity(_)
        | E::PublicKey(_)
        | E::Upstream { .. }
        | E::Read { .. }
        | E::NotRegular { .. }
        | E::TooLarge { .. }
        | E::Unpinned { .. }
        | E::SumsNotUtf8(_)
        | E::SumsLine { .. }
        | E::NotListed { .. }
        | E::DigestMismatch { .. }
        | E::TasksJson { .. }
        | E::SchemaVersion { .. }
        | E::TaskJson { .. }
        | E::TaskIdNotPlain { .. }
        | E::TaskIdTwice { .. }
        | E::EmptyField { .. }
        | E::UnsafePath { .. }
        | E::BeneathFile { .. }
        | E::NoTasks(_)
        | E::UnknownTask { .. }
        | E::TaskTwice(_)
        | E::BuiltinRuntime
        | E::EncodeTask { .. }
        | E::Exists(_)
        | E::Target { .. }
        | E::Write { .. }
        | E::Solution { .. }
        | E::ImageFlag(..)
        | E::MissingImage { .. }
        | E::Compose(_)
        | E::Corpus { .. }
        | E::Harbor { .. }
        | E::TasksUnpinned(_)
        | E::ArchiveUnpinned { .. }
        | E::Icae { .. }
        | E::IcaeUnpinned(_) => Status::Usage,
    }
}
failure_from!(eval_import::ImportError, import_status);

/// `eval regrade`: a run that is not there, not finished, a smoke run or live, a grader or task
/// the command line names badly, the engine or the host are 2; a run ledger or regrade ledger
/// that does not verify, drift from the run's freeze, an archived workspace that does not hash to
/// its digest, a regrade frozen with other bytes are 3.
pub fn regrade_status(e: &eval_engine::regrade::RegradeError) -> Status {
    use eval_engine::regrade::RegradeError as E;
    use eval_evidence::artifacts::ArtifactError as A;
    match e {
        E::NoRun { .. }
        | E::Smoke { .. }
        | E::InUse { .. }
        | E::Unfinished { .. }
        | E::UnknownTask(_)
        | E::Grader { .. }
        | E::Io { .. }
        | E::Extract { .. }
        | E::Serialise(_) => Status::Usage,
        E::Broken { .. }
        | E::Drift { .. }
        | E::FreezeMismatch { .. }
        | E::OtherLedger { .. }
        | E::Tampered { .. }
        | E::Replay(_) => Status::Integrity,
        E::Ledger(e) => integrity_if(e.is_integrity()),
        E::Admission(e) => admission_status(e),
        E::Session(e) => session_status(e),
        E::Signing(e) => integrity_if(e.is_integrity()),
        E::Inputs(e) => integrity_if(e.is_integrity()),
        E::Artifacts(A::Missing { .. } | A::Corrupt { .. }) => Status::Integrity,
        E::Artifacts(
            A::Io { .. } | A::Unsupported { .. } | A::OverBudget { .. } | A::Leftover { .. },
        ) => Status::Usage,
        E::Engine(e) => runtime_status(e),
    }
}

impl From<eval_engine::regrade::RegradeError> for Failure {
    fn from(e: eval_engine::regrade::RegradeError) -> Self {
        Self {
            status: regrade_status(&e),
            message: e.to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use eval_engine::RunError;
    use eval_evidence::LedgerError;
    use eval_evidence::signing::SigningError;
    use eval_runlog::replay::ReplayError;
    use eval_runtimes::RuntimeError;

    fn io(kind: std::io::ErrorKind) -> std::io::Error {
        std::io::Error::new(kind, "x")
    }

    /// `eval regrade`: what the user fixes and reruns is 2, evidence that does not hold is 3.
    #[test]
    fn every_regrade_refusal_has_its_status() {
        use eval_engine::regrade::RegradeError as E;
        let cases: Vec<(E, Status)> = vec![
            (
                E::NoRun {
                    matrix: "m".into(),
                    path: "p".into(),
                },
                Status::Usage,
            ),
            (E::Smoke { path: "p".into() }, Status::Usage),
            (E::InUse { path: "p".into() }, Status::Usage),
            (
                E::Unfinished {
                    path: "p".into(),
                    done: 1,
                    total: 2,
                },
                Status::Usage,
            ),
            (E::UnknownTask("t".into()), Status::Usage),
            (
                E::Grader {
                    path: "g".into(),
                    why: "w".into(),
                },
                Status::Usage,
            ),
            (
                E::Broken {
                    path: "p".into(),
                    why: "w".into(),
                },
                Status::Integrity,
            ),
            (
                E::Drift {
                    identity: "i".into(),
                    drift: "d".into(),
                },
                Status::Integrity,
            ),
            (
                E::FreezeMismatch {
                    path: "p".into(),
                    identity: "i".into(),
                },
                Status::Integrity,
            ),
            (
                E::Tampered {
                    attempt: "a#1".into(),
                    digest: "sha256:00".into(),
                    why: "w".into(),
                },
                Status::Integrity,
            ),
        ];
        for (e, want) in cases {
            let message = e.to_string();
            assert_eq!(Failure::from(e).status, want, "{message}");
        }
    }

    /// One value of every `RunError` kind and the status it must give. A signing failure that is
    /// not itself an integrity error (a key file the OS cannot read) still leaves the run
    /// unsigned: 3, unlike the same error from `eval keygen` (2).
    #[test]
    fn every_run_error_kind_has_its_status() {
        let cases: Vec<(RunError, Status)> = vec![
            (
                LedgerError::WriterGone("the writer thread ended".into()).into(),
                Status::Integrity,
            ),
            (
                LedgerError::InvalidKind("Bad Kind".into()).into(),
                Status::Integrity,
            ),
            (
                ReplayError::Malformed {
                    seq: 4,
                    kind: "run_started".into(),
                    reason: "r".into(),
                }
                .into(),
                Status::Integrity,
            ),
            (
                SigningError::Io {
                    path: "k".into(),
                    source: io(std::io::ErrorKind::PermissionDenied),
                }
                .into(),
                Status::Integrity,
            ),
            (RunError::Record("disk full".into()), Status::Integrity),
            (
                RuntimeError::HostIo {
                    path: "/w".into(),
                    source: io(std::io::ErrorKind::StorageFull),
                }
                .into(),
                Status::Usage,
            ),
            (
                RuntimeError::NoSuchContainer {
                    op: "remove",
                    id: "c".into(),
                }
                .into(),
                Status::Usage,
            ),
            (
                RuntimeError::PolicyViolation {
                    container: "c".into(),
                    field: "network",
                    detail: "bridge".into(),
                }
                .into(),
                Status::Integrity,
            ),
        ];
        for (e, want) in cases {
            let shown = e.to_string();
            assert_eq!(run_status(&e), want, "{shown}");
            let f = Failure::from(e);
            assert_eq!((f.status, f.message), (want, shown));
        }
    }

    fn input_error() -> eval_protocols::ProtocolError {
        eval_protocols::ProtocolError::Input {
            file: "matrix/demo.toml".into(),
            message: "bad".into(),
        }
    }

    /// Every admission kind: the same input error is 2 as the project's files and 3 as the
    /// registry's (a registry that cannot be read cannot be trusted to say "not retired").
    #[test]
    fn every_admission_error_kind_has_its_status() {
        use eval_engine::session::AdmissionError as E;
        let cases: Vec<(E, Status)> = vec![
            (E::NoUpstream, Status::Usage),
            (E::Load(input_error()), Status::Usage),
            (
                E::WrongMatrix {
                    protocol: "p".into(),
                    runs: "a".into(),
                    asked: "b".into(),
                },
                Status::Usage,
            ),
            (E::Registry(input_error()), Status::Integrity),
            (E::NotFrozen("p".into()), Status::Integrity),
            (E::Protocol(input_error()), Status::Usage),
            (
                E::Protocol(eval_protocols::ProtocolError::Integrity("x".into())),
                Status::Integrity,
            ),
            (
                E::Refused {
                    what: "matrix demo".into(),
                    refusals: vec!["drift".into()],
                },
                Status::Integrity,
            ),
            (
                E::AsyncRuntime(io(std::io::ErrorKind::OutOfMemory)),
                Status::Usage,
            ),
            (
                E::Stopped {
                    what: "run",
                    why: "Ctrl-C".into(),
                },
                Status::Usage,
            ),
        ];
        for (e, want) in cases {
            assert_eq!(admission_status(&e), want, "{e}");
        }
        let refused = E::Refused {
            what: "matrix demo".into(),
            refusals: vec!["a".into(), "b".into()],
        };
        assert_eq!(
            refused.to_string(),
            "refusing to run matrix demo:\n  - a\n  - b"
        );
    }

    #[test]
    fn command_errors_map_by_kind() {
        use crate::commands::error::CommandError as E;
        let cases: Vec<(E, Status)> = vec![
            (
                E::path(std::path::Path::new("d"))(io(std::io::ErrorKind::PermissionDenied)),
                Status::Usage,
            ),
            (E::NotEmpty("d".into()), Status::Usage),
            (
                E::NoRun {
                    matrix: "m".into(),
                    state: "runs".into(),
                    path: "runs/m/ledger.sqlite".into(),
                },
                Status::Usage,
            ),
            (
                E::LedgerDoesNotVerify {
                    path: "l".into(),
                    why: "seq 2: hash mismatch".into(),
                },
                Status::Integrity,
            ),
            (
                E::Replay {
                    path: "l".into(),
                    source: ReplayError::Malformed {
                        seq: 1,
                        kind: "run_started".into(),
                        reason: "r".into(),
                    },
                },
                Status::Integrity,
            ),
        ];
        for (e, want) in cases {
            assert_eq!(command_status(&e), want, "{e}");
        }
    }

    #[test]
    fn report_errors_map_by_kind() {
        use crate::commands::report::ReportCmdError as E;
        use eval_report::data::ReportDataError as D;
        let cases: Vec<(E, Status)> = vec![
            (
                E::Data(D::Artifact {
                    seq: 3,
                    message: "seq 3".into(),
                }),
                Status::Integrity,
            ),
            (
                E::Data(D::Ledger(LedgerError::WriterGone("w".into()))),
                Status::Integrity,
            ),
            // The same protocol error is input as the project's files and evidence as the
            // registry's or the freeze's.
            (E::Data(D::Protocol(input_error())), Status::Usage),
            (E::Data(D::Registry(input_error())), Status::Integrity),
            (
                E::Data(D::PublicKeyUnreadable {
                    protocol: "p".into(),
                    source: input_error(),
                }),
                Status::Integrity,
            ),
            (E::Data(D::NoRunStarted { path: "l".into() }), Status::Usage),
            (
                E::Data(D::SignaturesDoNotVerify {
                    path: "l".into(),
                    key: "k".into(),
                    message: "m".into(),
                    reason: "signature",
                }),
                Status::Integrity,
            ),
            (
                E::Data(D::NoRun {
                    matrix: "m".into(),
                    state: "runs".into(),
                    path: "runs/m/ledger.sqlite".into(),
                }),
                Status::Usage,
            ),
            (E::DriverDigest("sha256:zz".into()), Status::Integrity),
            (
                E::LedgerChanged {
                    path: "runs/m/ledger.sqlite".into(),
                    verified: "9:sha256:aa".into(),
                    found: "9:sha256:bb".into(),
                },
                Status::Integrity,
            ),
            (
                E::Write {
                    path: "out.md".into(),
                    source: io(std::io::ErrorKind::PermissionDenied),
                },
                Status::Usage,
            ),
        ];
        for (e, want) in cases {
            assert_eq!(report_status(&e), want, "{e}");
        }
    }

    /// The session kinds whose status is not simply "the library says": the environment is 2,
    /// the checkpoints refusing the key are 3 even when the signing error alone would be 2.
    #[test]
    fn session_errors_map_by_kind() {
        use eval_engine::session::SessionError as E;
        let cases: Vec<(E, Status)> = vec![
            (E::NoAgentModel("p".into()), Status::Usage),
            (E::NoApiKey("https://u".into()), Status::Usage),
            (
                E::FixtureUpstream(io(std::io::ErrorKind::AddrInUse)),
                Status::Usage,
            ),
            (
                E::Checkpointer(SigningError::Origin("o".into())),
                Status::Integrity,
            ),
            (
                E::SigningKey(SigningError::Origin("o".into())),
                Status::Usage,
            ),
            (
                E::Engine(RuntimeError::NoSuchContainer {
                    op: "remove",
                    id: "c".into(),
                }),
                Status::Usage,
            ),
            (
                E::Run(RunError::Record("disk full".into())),
                Status::Integrity,
            ),
            (
                E::Ledger(LedgerError::AppendRefused {
                    path: "l".into(),
                    reason: "r".into(),
                }),
                Status::Integrity,
            ),
        ];
        for (e, want) in cases {
            assert_eq!(session_status(&e), want, "{e}");
        }
    }

    #[test]
    fn setup_errors_map_by_kind() {
        use eval_engine::attempt::SetupError as E;
        use eval_engine::session::SessionError;
        let cases: Vec<(E, Status, &str)> = vec![
            (
                E::NoAgentModel,
                Status::Usage,
                "the protocol has no [models.agent]",
            ),
            (
                E::NotAdmitted("a".into()),
                Status::Usage,
                "arm a was not admitted (no frozen image)",
            ),
            (
                E::WorkDir {
                    path: "w".into(),
                    source: io(std::io::ErrorKind::PermissionDenied),
                },
                Status::Usage,
                "w: x",
            ),
            (
                E::ImageDrift {
                    arm: "a".into(),
                    built: "sha256:1".into(),
                    frozen: "sha256:2".into(),
                },
                Status::Integrity,
                "arm a: its files build image sha256:1, the freeze recorded sha256:2",
            ),
            (
                E::ArmImage {
                    arm: "a".into(),
                    source: Box::new(RuntimeError::PolicyViolation {
                        container: "c".into(),
                        field: "network",
                        detail: "bridge".into(),
                    }),
                },
                Status::Integrity,
                "arm a: ",
            ),
            (
                E::ArmImage {
                    arm: "a".into(),
                    source: Box::new(RuntimeError::HostIo {
                        path: "/w".into(),
                        source: io(std::io::ErrorKind::StorageFull),
                    }),
                },
                Status::Usage,
                "arm a: ",
            ),
        ];
        for (e, want, message) in cases {
            assert_eq!(setup_status(&e), want, "{e}");
            let f = Failure::from(SessionError::Setup(e));
            assert_eq!(f.status, want, "{}", f.message);
            assert!(
                f.message.contains(message),
                "{:?} vs {message:?}",
                f.message
            );
        }
    }

    /// The commands' own kinds, each with its status, and the message a user (and the CLI tests
    /// that grep it) sees: the typed errors must print what the ad-hoc strings printed.
    #[test]
    fn keygen_proof_stats_proxy_and_demo_errors_map_by_kind() {
        use crate::commands::demo::DemoError;
        use crate::commands::keygen::KeyError;
        use crate::commands::proofs::ProofError;
        use crate::commands::proxy::ProxyCmdError;
        use crate::commands::stats::StatsCmdError;
        use eval_report::data::ReportDataError;
        let cases: Vec<(Failure, Status, &str)> = vec![
            (
                KeyError::Exists("k".into()).into(),
                Status::Usage,
                "k: already exists; refusing to overwrite a key",
            ),
            (
                KeyError::NoSigningKey.into(),
                Status::Usage,
                "no signing key: pass --signing-key-file FILE or set EVAL_SIGNING_KEY_FILE (make one with `eval keygen --out FILE`)",
            ),
            (
                KeyError::PublicKeyFile {
                    path: "k.pub".into(),
                    source: SigningError::Origin("o".into()),
                }
                .into(),
                Status::Usage,
                "--public-key k.pub: ",
            ),
            (
                ProofError::SeqZero.into(),
                Status::Usage,
                "--seq: entries are numbered from 1",
            ),
            (
                // A receipt refused for a reason that alone would be a usage error is still not
                // evidence: 3.
                ProofError::ReceiptDoesNotVerify {
                    path: "r.json".into(),
                    source: SigningError::Origin("o".into()),
                }
                .into(),
                Status::Integrity,
                "r.json: ",
            ),
            (
                ProofError::SignaturesDoNotVerify {
                    path: "l".into(),
                    message: "bad signature".into(),
                    reason: "signature",
                    entries: 4,
                    checkpoints: 1,
                }
                .into(),
                Status::Integrity,
                "l: bad signature (signature; 4 entries and 1 checkpoints verified before it)",
            ),
            (
                StatsCmdError::Method("x".into()).into(),
                Status::Usage,
                "--method \"x\": use `bootstrap` (percentile and BCa) or `v04-percentile`",
            ),
            (
                StatsCmdError::Confidence(1.5).into(),
                Status::Usage,
                "--confidence 1.5 must lie strictly between 0 and 1",
            ),
            (
                ProxyCmdError::ListenNotLoopback("10.0.0.1:80".parse().expect("addr")).into(),
                Status::Usage,
                "--listen 10.0.0.1:80 is not a loopback address; the proxy only listens on 127.0.0.1 or ::1",
            ),
            (
                ProxyCmdError::TokenFile {
                    path: "t".into(),
                    source: io(std::io::ErrorKind::AlreadyExists),
                }
                .into(),
                Status::Usage,
                "cannot write --token-file t: x",
            ),
            (
                DemoError::Cd {
                    path: "p".into(),
                    source: io(std::io::ErrorKind::NotFound),
                }
                .into(),
                Status::Usage,
                "cd p: x",
            ),
            (
                DemoError::LedgerDoesNotVerify(None).into(),
                Status::Integrity,
                "the demo ledger does not verify: None",
            ),
            (
                // `eval report` would call this input (2); in the demo the ledger just verified.
                DemoError::Report(ReportDataError::Protocol(input_error())).into(),
                Status::Integrity,
                "matrix/demo.toml",
            ),
        ];
        for (f, want, message) in cases {
            assert_eq!(f.status, want, "{}", f.message);
            assert!(
                f.message.starts_with(message),
                "{:?} vs {message:?}",
                f.message
            );
        }
    }

    /// Every import refusal is 2, and prints what the ad-hoc strings printed (the CLI tests and
    /// users grep them): the file, task, key or flag at fault.
    #[test]
    fn import_errors_map_by_kind_with_their_messages() {
        use eval_import::ImportError as E;
        let cases: Vec<(E, &str)> = vec![
            (
                E::ProtocolName("-x".into()),
                "--protocol \"-x\": a protocol name is letters, digits, `-`, `_` and `.` (not first)",
            ),
            (
                E::ImageId {
                    flag: "--dsh-image",
                    id: "sha256:12".into(),
                },
                "--dsh-image \"sha256:12\": not an image id (sha256:<64 hex>, as the image's build.sh prints it)",
            ),
            (
                E::Read {
                    path: "up/simple-grader.mjs".into(),
                    source: io(std::io::ErrorKind::NotFound),
                },
                "up/simple-grader.mjs: x",
            ),
            (
                E::SumsLine {
                    file: "up/SHA256SUMS".into(),
                    line: 3,
                },
                "up/SHA256SUMS: line 3: not `<sha256 hex>  <file>`",
            ),
            (
                E::NotListed {
                    package: "up/p.tgz".into(),
                    sums: "up/SHA256SUMS".into(),
                },
                "up/p.tgz: not listed in up/SHA256SUMS",
            ),
            (
                // Bytes that differ from the pinned digest are still the user's input: nothing
                // is frozen or recorded yet.
                E::DigestMismatch {
                    package: "up/p.tgz".into(),
                    got: "aa".into(),
                    sums: "up/SHA256SUMS".into(),
                    want: "bb".into(),
                },
                "up/p.tgz: sha256 aa, but up/SHA256SUMS says bb",
            ),
            (
                E::SchemaVersion {
                    file: "up/simple-tasks.json".into(),
                    version: 2,
                },
                "up/simple-tasks.json: schemaVersion 2 (this importer reads 1)",
            ),
            (
                E::TaskIdTwice {
                    file: "t.json".into(),
                    id: "a".into(),
                },
                "t.json: task \"a\": not a plain id (letters, digits, `-`, `_`, `.`), or listed twice",
            ),
            (
                E::EmptyField {
                    file: "t.json".into(),
                    id: "a".into(),
                    field: "graderAssertions",
                },
                "t.json: task \"a\": field graderAssertions is empty",
            ),
            (
                E::UnsafePath {
                    file: "t.json".into(),
                    id: "a".into(),
                    key: "../x".into(),
                    why: "contains `..`",
                },
                "t.json: task \"a\": initialFiles key \"../x\" contains `..`",
            ),
            (
                E::BeneathFile {
                    file: "t.json".into(),
                    id: "a".into(),
                    key: "src/x".into(),
                    parent: "src".into(),
                },
                "t.json: task \"a\": initialFiles key \"src/x\" lies beneath the file \"src\"",
            ),
            (E::NoTasks("t.json".into()), "t.json: no tasks"),
            (
                E::UnknownTask {
                    id: "nope".into(),
                    known: vec!["a".into(), "b".into()],
                },
                "--tasks: unknown task \"nope\" (known: a, b)",
            ),
            (E::TaskTwice("a".into()), "--tasks: \"a\" listed twice"),
            (
                E::BuiltinRuntime,
                "a runtime definition built into eval (runtimes/dsh/poly.toml or runtime.toml) lacks its image placeholder (@DSH_POLY_IMAGE_ID@ or @DSH_IMAGE_ID@)",
            ),
            (
                E::Exists("matrix/m.toml".into()),
                "matrix/m.toml: exists; `eval import` never overwrites (choose another --protocol, or move it away)",
            ),
            (
                E::Write {
                    path: "protocols/m/protocol.toml".into(),
                    source: io(std::io::ErrorKind::PermissionDenied),
                },
                "protocols/m/protocol.toml: x",
            ),
        ];
        for (e, message) in cases {
            assert_eq!(import_status(&e), Status::Usage, "{e}");
            let f = Failure::from(e);
            assert_eq!((f.status, f.message.as_str()), (Status::Usage, message));
        }
    }
}
