//! `eval-runtimes`: arm-identified containers.
//!
//! Owns: the `Runtime` trait and its Docker backend (bollard, API negotiated down to 1.41); the
//! container policy (`policy::container_spec` builds every container, `policy::check` refuses
//! one that differs); runtime definitions (`runtimes/<name>/runtime.toml`); content-addressed
//! images written in the `docker save` layout (`image::image_id` needs no engine); finding the
//! static in-container binaries; the fixture model (re-exported from `eval-fixture-core`).
//! Errors carry their infrastructure fault code (`FaultCode`, from eval-core), assigned where they occur.
//!
//! Must never: give a container network access, capabilities, a writable root filesystem, a
//! mount the policy does not list, or any credential; offer `exec` into a container; classify a
//! fault by matching error text; depend on the proxy or the evidence crate.
#![deny(missing_docs)]
#![cfg_attr(not(test), warn(clippy::disallowed_methods))] // clippy.toml: production code only

pub mod base;
pub mod definition;
pub mod docker;
mod docker_build;
pub mod fault;
pub mod host;
pub mod image;
pub mod image_config;
mod image_id;
pub mod policy;
pub mod runtime;
pub mod static_bins;
mod tar;

/// The deterministic fixture model (a chat request → the assistant's answer + honest usage).
pub mod fixture_model {
    pub use eval_fixture_core::model::*;
}

/// The fixture formats (profile, task block, answer, checks, metrics).
pub use eval_fixture_core as fixture;

pub use base::BaseImage;
pub use definition::{LoadedDef, RuntimeDef};
pub use docker::DockerRuntime;
pub use fault::RuntimeError;
pub use image::{ArmFiles, ImageId, ImageSpec, image_id};
pub use image_config::ImageConfig;
pub use policy::{AttemptFacts, Role, RoleMounts, container_spec};
pub use runtime::{ContainerId, RunEnd, Runtime, WaitOutcome, create_checked, run_to_end};

use eval_core::fault::FaultCode;

/// Exit status of `eval-shim` when the controller refused the attestation (the harness never ran).
pub const SHIM_EXIT_ATTESTATION_REFUSED: i64 = 86;
/// Exit status of `eval-shim` when the attempt's socket could not be reached.
pub const SHIM_EXIT_SOCKET_UNREACHABLE: i64 = 87;
/// Exit status of `eval-shim` for its own failures (bad arguments, port busy, harness missing).
pub const SHIM_EXIT_FAILURE: i64 = 88;

/// The infrastructure fault an `eval-shim` exit status stands for, if any. Only corroboration:
/// a harness can exit with any status, so the controller records `attestation_mismatch` from its
/// own refusal of `/_eval/attest`, and uses this to tell "refused, never started" apart.
pub fn shim_fault(exit_code: i64) -> Option<FaultCode> {
    match exit_code {
        SHIM_EXIT_ATTESTATION_REFUSED => Some(FaultCode::AttestationMismatch),
        SHIM_EXIT_SOCKET_UNREACHABLE | SHIM_EXIT_FAILURE => {
            Some(FaultCode::ContainerRuntimeFailure)
        }
        _ => None,
    }
}
