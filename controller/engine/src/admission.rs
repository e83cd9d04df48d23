//! Admission: every reason `eval run` refuses to start, checked together so the user sees all of
//! them at once. No flag skips any of them; the only difference a fixture upstream makes is that
//! preconditions are not required (a fixture run can never be evidence). The model-free upstream
//! needs no key, but its preconditions hold (it is evidence for a model-free protocol).

use std::fmt;

/// What the ledger of this matrix looks like before the run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LedgerCheck {
    Absent,
    Verified { identity: Option<String> },
    Broken(String),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PreconditionState {
    pub name: String,
    pub passed: bool,
    pub why: String,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum UpstreamChoice {
    Fixture,
    /// The built-in model-free upstream (`--upstream model-free`): a plain stop to every request.
    ModelFree,
    Remote {
        url: String,
        key_available: bool,
    },
}

/// Everything admission looks at, gathered by the caller from the freeze, the registry, the
/// ledger and the command line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AdmissionFacts {
    pub protocol: String,
    /// The frozen identity, when the protocol is frozen.
    pub identity: Option<String>,
    /// Drifted, missing or added paths found by verify.
    pub drift: Vec<String>,
    /// The retire reason, when retired.
    pub retired: Option<String>,
    pub frozen_driver: Option<String>,
    pub running_driver: String,
    pub ledger: LedgerCheck,
    pub preconditions: Vec<PreconditionState>,
    pub upstream: UpstreamChoice,
}

/// One reason to refuse.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    NotFrozen {
        protocol: String,
    },
    Drift {
        protocol: String,
        paths: Vec<String>,
    },
    Retired {
        protocol: String,
        reason: String,
    },
    DriverMismatch {
        frozen: String,
        running: String,
    },
    LedgerBroken(String),
    LedgerOfOtherIdentity {
        ledger: String,
        frozen: String,
    },
    PreconditionNotPassed {
        name: String,
        why: String,
    },
    NoKey {
        url: String,
    },
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::NotFrozen { protocol } => write!(
                f,
                "protocol {protocol:?} is not frozen: run `eval freeze --protocol {protocol}` first"
            ),
            Refusal::Drift { protocol, paths } => write!(
                f,
                "protocol {protocol:?} has drifted since it was frozen ({}); `eval verify --protocol {protocol}` lists the paths",
                paths.join(", ")
            ),
            Refusal::Retired { protocol, reason } => write!(
                f,
                "protocol {protocol:?} is retired ({reason}) and can never run again"
            ),
            Refusal::DriverMismatch { frozen, running } => write!(
                f,
                "this eval binary's driver digest {running} differs from the frozen one {frozen}: run the controller the protocol was frozen with"
            ),
            Refusal::LedgerBroken(why) => write!(f, "the run ledger does not verify: {why}"),
            Refusal::LedgerOfOtherIdentity { ledger, frozen } => write!(
                f,
                "the run ledger belongs to identity {ledger}, but the protocol is frozen as {frozen}"
            ),
            Refusal::PreconditionNotPassed { name, why } => write!(
                f,
                "precondition {name:?} has not passed ({why}): a paid run may not start (a run with --upstream fixture may, since it is never evidence)"
            ),
            Refusal::NoKey { url } => write!(
                f,
                "no API key for upstream {url}: give --api-key-env VAR or --api-key-file PATH"
            ),
        }
    }
}

/// Checks every rule; returns all refusals (empty = admitted).
pub fn admit(f: &AdmissionFacts) -> Vec<Refusal> {
    let mut out = Vec::new();
    match &f.identity {
        None => out.push(Refusal::NotFrozen {
            protocol: f.protocol.clone(),
        }),
        Some(identity) => {
            if !f.drift.is_empty() {
                out.push(Refusal::Drift {
                    protocol: f.protocol.clone(),
                    paths: f.drift.clone(),
                });
            }
            if let LedgerCheck::Verified {
                identity: Some(ledger),
            } = &f.ledger
                && ledger != identity
            {
                out.push(Refusal::LedgerOfOtherIdentity {
                    ledger: ledger.clone(),
                    frozen: identity.clone(),
                });
            }
        }
    }
    if let Some(reason) = &f.retired {
        out.push(Refusal::Retired {
            protocol: f.protocol.clone(),
            reason: reason.clone(),
        });
    }
    if let Some(frozen) = &f.frozen_driver
        && *frozen != f.running_driver
    {
        out.push(Refusal::DriverMismatch {
            frozen: frozen.clone(),
            running: f.running_driver.clone(),
        });
    }
    if let LedgerCheck::Broken(why) = &f.ledger {
        out.push(Refusal::LedgerBroken(why.clone()));
    }
    // A model-free run spends nothing, but a model-free protocol may release on it: it is
    // evidence, so its preconditions hold as for a paid run. Only the fixture is exempt.
    if f.upstream != UpstreamChoice::Fixture {
        for p in f.preconditions.iter().filter(|p| !p.passed) {
            out.push(Refusal::PreconditionNotPassed {
                name: p.name.clone(),
                why: p.why.clone(),
            });
        }
    }
    if let UpstreamChoice::Remote { url, key_available } = &f.upstream
        && !key_available
    {
        out.push(Refusal::NoKey { url: url.clone() });
    }
    out
}

/// What the state directory's file system must hold free for a run: each of `concurrency`
/// attempts at once takes its own filesystem (`workspace_bytes`, preallocated) and, while it is
/// archived, up to as much again in the artifact store's temporary file
/// ([`ARCHIVE_HEADROOM_PER_WORKSPACE`]), and the reserve (`FREE_BYTES_RESERVE`) stays free
/// beside them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StateDisk {
    pub free_bytes: u64,
    pub concurrency: u64,
    pub workspace_bytes: u64,
}

/// The archive headroom of an attempt, in workspaces: a workspace's archive (a tar of what the
/// agent left) is at most its filesystem's size plus headers, written beside the filesystem.
pub const ARCHIVE_HEADROOM_PER_WORKSPACE: u64 = 1;

impl StateDisk {
    /// The bytes the run needs free.
    pub fn needed(&self) -> u64 {
        self.concurrency
            .saturating_mul(
                self.workspace_bytes
                    .saturating_mul(1 + ARCHIVE_HEADROOM_PER_WORKSPACE),
            )
            .saturating_add(crate::attempt::prepare::FREE_BYTES_RESERVE)
    }

    /// Why a run must not start on this disk, if it must not. Before, a disk too small made
    /// every attempt fail its preallocation as `filesystem_capacity`, retried until the slots
    /// were out of attempts, and the run ended "complete" with nothing done.
    pub fn refusal(&self) -> Option<String> {
        let needed = self.needed();
        (self.free_bytes < needed).then(|| {
            format!(
                "{} bytes free, but {} attempts at once need {needed}: {} × ({} bytes of workspace + as much for its archive) + the reserve of {} bytes; free space or run with a lower --concurrency",
                self.free_bytes,
                self.concurrency,
                self.concurrency,
                self.workspace_bytes,
                crate::attempt::prepare::FREE_BYTES_RESERVE
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_state_disk_below_what_the_concurrency_needs_is_refused() {
        let d = StateDisk {
            free_bytes: 1 << 30,
            concurrency: 2,
            workspace_bytes: 1 << 30,
        };
        assert_eq!(
            d.needed(),
            2 * (2 << 30) + crate::attempt::prepare::FREE_BYTES_RESERVE
        );
        let why = d.refusal().unwrap();
        assert!(why.contains("--concurrency"), "{why}");
        let enough = StateDisk {
            free_bytes: d.needed(),
            ..d
        };
        assert_eq!(enough.refusal(), None);
        let one = StateDisk {
            concurrency: 1,
            free_bytes: d.needed() / 2 + (1 << 30),
            ..d
        };
        assert_eq!(one.refusal(), None);
    }

    fn ok_facts() -> AdmissionFacts {
        AdmissionFacts {
            protocol: "v0.4".into(),
            identity: Some("sha256:aa".into()),
            drift: vec![],
            retired: None,
            frozen_driver: Some("sha256:dd".into()),
            running_driver: "sha256:dd".into(),
            ledger: LedgerCheck::Absent,
            preconditions: vec![PreconditionState {
                name: "router".into(),
                passed: true,
                why: "passed".into(),
            }],
            upstream: UpstreamChoice::Remote {
                url: "https://api.example".into(),
                key_available: true,
            },
        }
    }

    fn only(f: &AdmissionFacts) -> Refusal {
        let r = admit(f);
        assert_eq!(r.len(), 1, "{r:?}");
        r.into_iter().next().unwrap()
    }

    #[test]
    fn a_clean_paid_run_is_admitted() {
        assert!(admit(&ok_facts()).is_empty());
    }

    #[test]
    fn each_reason_refuses_on_its_own() {
        let mut f = ok_facts();
        f.identity = None;
        assert!(matches!(only(&f), Refusal::NotFrozen { .. }));

        let mut f = ok_facts();
        f.drift = vec!["tasks/x/prompt.md".into()];
        let r = only(&f);
        assert!(r.to_string().contains("tasks/x/prompt.md"));

        let mut f = ok_facts();
        f.retired = Some("gate failed".into());
        assert!(matches!(only(&f), Refusal::Retired { .. }));

        let mut f = ok_facts();
        f.running_driver = "sha256:ee".into();
        assert!(matches!(only(&f), Refusal::DriverMismatch { .. }));

        let mut f = ok_facts();
        f.ledger = LedgerCheck::Broken("seq 3: hash mismatch".into());
        assert!(only(&f).to_string().contains("seq 3"));

        let mut f = ok_facts();
        f.ledger = LedgerCheck::Verified {
            identity: Some("sha256:bb".into()),
        };
        assert!(matches!(only(&f), Refusal::LedgerOfOtherIdentity { .. }));

        let mut f = ok_facts();
        f.preconditions[0].passed = false;
        f.preconditions[0].why = "releaseGatePassed: false".into();
        let r = only(&f);
        assert!(r.to_string().contains("has not passed"), "{r}");

        let mut f = ok_facts();
        f.upstream = UpstreamChoice::Remote {
            url: "https://api.example".into(),
            key_available: false,
        };
        assert!(matches!(only(&f), Refusal::NoKey { .. }));
    }

    #[test]
    fn the_fixture_upstream_needs_no_precondition_and_no_key_but_everything_else() {
        let mut f = ok_facts();
        f.upstream = UpstreamChoice::Fixture;
        f.preconditions[0].passed = false;
        assert!(admit(&f).is_empty());
        f.retired = Some("x".into());
        assert!(matches!(only(&f), Refusal::Retired { .. }));
    }

    #[test]
    fn the_model_free_upstream_needs_no_key_but_its_preconditions() {
        let mut f = ok_facts();
        f.upstream = UpstreamChoice::ModelFree;
        assert!(admit(&f).is_empty(), "no key is asked for");
        f.preconditions[0].passed = false;
        assert!(matches!(only(&f), Refusal::PreconditionNotPassed { .. }));
    }
}
