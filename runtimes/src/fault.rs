//! Typed failures of the runtime, each carrying the infrastructure fault code assigned where the
//! fault happens (never guessed from error text).

use eval_core::fault::FaultCode;

/// Errors of the container runtime. `fault()` says which infrastructure fault an error is;
/// `None` means an input error (a bad runtime definition, a missing static binary) that the
/// CLI reports with exit status 2.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// No engine answered at connect time (`container_runtime_failure`).
    #[error(
        "no Docker engine answers at {host}: {source} (start it, e.g. scripts/ensure-docker.sh, or set DOCKER_HOST)"
    )]
    EngineUnavailable {
        /// The engine address tried (`DOCKER_HOST` or the default socket).
        host: String,
        /// The client's error.
        #[source]
        source: bollard::errors::Error,
    },
    /// An engine call failed or timed out (`container_runtime_failure`).
    #[error("docker {op} failed: {source}")]
    Engine {
        /// The operation (`create`, `start`, `wait`, …).
        op: &'static str,
        /// The client's error.
        #[source]
        source: bollard::errors::Error,
    },
    #[error("docker {op} failed: no such container {id}")]
    /// The engine answered 404 for a container: it vanished under us (`container_runtime_failure`).
    NoSuchContainer {
        /// The operation that found it missing.
        op: &'static str,
        /// The container id.
        id: String,
    },
    #[error("image {reference} is not in the engine and has no local build recipe")]
    /// An image the engine lacks and this code cannot build (`image_missing`).
    ImageMissing {
        /// The image reference or id asked for.
        reference: String,
    },
    #[error("image {reference}: {detail}")]
    /// Building or loading an image failed; `fault` was assigned where it happened.
    ImageCreate {
        /// The image being built or loaded.
        reference: String,
        /// What went wrong.
        detail: String,
        /// The infrastructure fault this is (`image_missing` for an unusable base archive,
        /// otherwise `container_runtime_failure`).
        fault: FaultCode,
    },
    #[error("writing {path}: {source}")]
    /// A host-side file operation failed (`filesystem_capacity` when the disk or quota is full,
    /// otherwise `container_runtime_failure`).
    HostIo {
        /// The host path written.
        path: String,
        /// The operating system's error; its kind decides the fault.
        #[source]
        source: std::io::Error,
    },
    #[error("container {container} violates the policy: {field}: {detail}")]
    /// A created container differs from the policy; it was removed unstarted
    /// (`policy_violation`).
    PolicyViolation {
        /// The container id (`(not created)` when refused before creation).
        container: String,
        /// The policy aspect that differs (`caps`, `readonly`, `mounts`, …).
        field: &'static str,
        /// What was expected and what the engine reported.
        detail: String,
    },
    /// A bad runtime definition: an input error (exit 2), no fault.
    #[error(transparent)]
    Definition(#[from] crate::definition::DefinitionError),
    /// A static in-container binary is not built: an input error (exit 2), no fault.
    #[error(transparent)]
    StaticBinary(#[from] crate::static_bins::StaticBinaryError),
}

impl RuntimeError {
    /// The infrastructure fault this error is, or `None` for an input error (exit 2).
    pub fn fault(&self) -> Option<FaultCode> {
        match self {
            RuntimeError::EngineUnavailable { .. }
            | RuntimeError::Engine { .. }
            | RuntimeError::NoSuchContainer { .. } => Some(FaultCode::ContainerRuntimeFailure),
            RuntimeError::ImageMissing { .. } => Some(FaultCode::ImageMissing),
            RuntimeError::ImageCreate { fault, .. } => Some(*fault),
            RuntimeError::HostIo { source, .. } => Some(io_fault(source)),
            RuntimeError::PolicyViolation { .. } => Some(FaultCode::PolicyViolation),
            RuntimeError::Definition(_) | RuntimeError::StaticBinary(_) => None,
        }
    }

    /// Wraps an engine error for operation `op`, typing the cases the API itself distinguishes.
    pub(crate) fn engine(op: &'static str, id: &str, source: bollard::errors::Error) -> Self {
        match &source {
            bollard::errors::Error::DockerResponseServerError {
                status_code: 404, ..
            } => RuntimeError::NoSuchContainer {
                op,
                id: id.to_owned(),
            },
            _ => RuntimeError::Engine { op, source },
        }
    }
}

/// The fault of a host I/O error, by its kind.
pub fn io_fault(e: &std::io::Error) -> FaultCode {
    match e.kind() {
        std::io::ErrorKind::StorageFull | std::io::ErrorKind::QuotaExceeded => {
            FaultCode::FilesystemCapacity
        }
        _ => FaultCode::ContainerRuntimeFailure,
    }
}
