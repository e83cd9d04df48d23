//! Infrastructure fault codes: why an attempt ended as `infra_fault`, one vocabulary for the
//! runtime that assigns most of them, the controller that records them, the protocol whose
//! `[reruns] codes` lists those that may be rerun, and the report that counts them.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::name::UnknownName;

/// A cause the agent cannot produce. Whether an attempt with a code may be rerun is the
/// protocol's decision, never this type's. Serialized as its snake_case name (the ledger's
/// `infra_fault`, the protocol's `reruns.codes`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FaultCode {
    /// The engine did not answer, refused an operation, or lost a container.
    ContainerRuntimeFailure,
    /// The image the definition names is not in the engine (and cannot be built here).
    ImageMissing,
    /// The host's storage failed a write (full, over quota, broken).
    FilesystemCapacity,
    /// The shim's digests differ from the frozen ones; the agent never started.
    AttestationMismatch,
    /// A created container differs from the policy; it was never started.
    PolicyViolation,
    /// A controller-side failure no rerun can fix (a bug or a misconfiguration).
    ControllerError,
    /// The upstream never answered the agent (transport errors, 5xx/429 after retries).
    HostNetworkOutage,
    /// The oracle model failed an in-bounds clarifying question.
    OracleServiceUnavailable,
    /// The model proxy could not take the attempt (registration failed).
    ProxyFailure,
    /// The controller stopped before the attempt made a model call (rerun by rule).
    InterruptedBeforeModelCall,
    /// v0.4's code for its benchmark service failing; listed by v0.4-derived protocols, never
    /// assigned by this controller.
    BenchmarkServiceUnavailable,
    /// v0.4's code for its runner crashing before a model call; listed by v0.4-derived
    /// protocols, never assigned by this controller (it records
    /// [`FaultCode::InterruptedBeforeModelCall`]).
    RunnerCrashBeforeModelCall,
    /// Written by controllers before a grader's failures were classified (an engine failure
    /// now carries the engine's code, an unscorable workspace is the agent's outcome); never
    /// assigned any more, kept so that their ledgers still read.
    GraderFailure,
    /// The upstream refused the run's API key (401/403) or its account is out of balance (402):
    /// nothing an agent does, and nothing another attempt could change, so the run stops; the
    /// attempts it stopped are rerun by rule once the account is fixed.
    UpstreamAccountRefused,
    /// The provider failed the agent's call and the harness gave up on it: 429/5xx past the
    /// harness's retries, `finish_reason: insufficient_system_resource`, a stream of keep-alive
    /// comments closed without data, a stall (no data for the idle timeout). Rerunnable when
    /// the protocol lists it.
    ProviderUnavailable,
}

/// Preparation failures (no container, no model call) a slot may have, each retried without
/// using a rerun, before the last one is final: bounded so that an image that never loads ends
/// the slot instead of looping.
pub const MAX_PREPARATION_FAILURES: u32 = 3;

impl FaultCode {
    /// Every code, in declaration order.
    pub const ALL: [FaultCode; 15] = [
        FaultCode::ContainerRuntimeFailure,
        FaultCode::ImageMissing,
        FaultCode::FilesystemCapacity,
        FaultCode::AttestationMismatch,
        FaultCode::PolicyViolation,
        FaultCode::ControllerError,
        FaultCode::HostNetworkOutage,
        FaultCode::OracleServiceUnavailable,
        FaultCode::ProxyFailure,
        FaultCode::InterruptedBeforeModelCall,
        FaultCode::BenchmarkServiceUnavailable,
        FaultCode::RunnerCrashBeforeModelCall,
        FaultCode::GraderFailure,
        FaultCode::UpstreamAccountRefused,
        FaultCode::ProviderUnavailable,
    ];

    /// Whether a fault of this code that happened before any container of the attempt existed
    /// is retried without using one of the slot's reruns: the agent never ran. An attestation
    /// mismatch or a policy refusal says the run's inputs or container config are wrong, which a
    /// retry would only repeat.
    pub fn retried_before_container(self) -> bool {
        !matches!(
            self,
            FaultCode::AttestationMismatch | FaultCode::PolicyViolation
        )
    }

    /// The snake_case name the ledger and protocols write.
    pub fn as_str(self) -> &'static str {
        match self {
            FaultCode::ContainerRuntimeFailure => "container_runtime_failure",
            FaultCode::ImageMissing => "image_missing",
            FaultCode::FilesystemCapacity => "filesystem_capacity",
            FaultCode::AttestationMismatch => "attestation_mismatch",
            FaultCode::PolicyViolation => "policy_violation",
            FaultCode::ControllerError => "controller_error",
            FaultCode::HostNetworkOutage => "host_network_outage",
            FaultCode::OracleServiceUnavailable => "oracle_service_unavailable",
            FaultCode::ProxyFailure => "proxy_failure",
            FaultCode::InterruptedBeforeModelCall => "interrupted_before_model_call",
            FaultCode::BenchmarkServiceUnavailable => "benchmark_service_unavailable",
            FaultCode::RunnerCrashBeforeModelCall => "runner_crash_before_model_call",
            FaultCode::GraderFailure => "grader_failure",
            FaultCode::UpstreamAccountRefused => "upstream_account_refused",
            FaultCode::ProviderUnavailable => "provider_unavailable",
        }
    }
}

impl fmt::Display for FaultCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for FaultCode {
    type Err = UnknownName;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        crate::name::parse("fault code", s, &Self::ALL, Self::as_str)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    #[test]
    fn text_serde_and_parse_agree_for_every_code() {
        let mut names = BTreeSet::new();
        for c in FaultCode::ALL {
            let json = serde_json::to_value(c).unwrap();
            assert_eq!(json, serde_json::Value::String(c.to_string()));
            assert_eq!(c.as_str().parse::<FaultCode>().unwrap(), c);
            assert_eq!(serde_json::from_value::<FaultCode>(json).unwrap(), c);
            assert!(names.insert(c.as_str()), "{c:?} shares its name");
        }
    }

    #[test]
    fn every_code_of_the_frozen_v04_protocol_parses() {
        for c in [
            "benchmark_service_unavailable",
            "container_runtime_failure",
            "filesystem_capacity",
            "host_network_outage",
            "oracle_service_unavailable",
            "runner_crash_before_model_call",
        ] {
            assert_eq!(c.parse::<FaultCode>().unwrap().as_str(), c);
        }
    }

    #[test]
    fn every_code_a_controller_ever_wrote_reads_back() {
        for c in [
            "container_runtime_failure",
            "image_missing",
            "filesystem_capacity",
            "attestation_mismatch",
            "policy_violation",
            "controller_error",
            "host_network_outage",
            "oracle_service_unavailable",
            "proxy_failure",
            "interrupted_before_model_call",
            "grader_failure",
        ] {
            let parsed: FaultCode = serde_json::from_value(serde_json::json!(c)).unwrap();
            assert_eq!(parsed.as_str(), c);
        }
    }

    #[test]
    fn unknown_code_is_refused_naming_the_value() {
        let e = "disk_full".parse::<FaultCode>().unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains("fault code \"disk_full\""), "{msg}");
        assert!(msg.contains("filesystem_capacity"), "{msg}");
        assert!("Container_Runtime_Failure".parse::<FaultCode>().is_err());
        assert!("".parse::<FaultCode>().is_err());
    }
}
