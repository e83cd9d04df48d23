//! Typed failures of the runtime, each carrying the infrastructure fault code assigned where the
//! fault happens (never guessed from error text).

use eval_core::fault::FaultCode;

/// Errors of the container runtime. `fault()` says which infrastructure fault an error is;
/// `None` means an input error (a bad runtime definition, a missing static binary) that the
/// CLI reports with exit status 2.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    #[error(
        "no Docker engine answers at {host}: {source} (start it, e.g. scripts/ensure-docker.sh, or set DOCKER_HOST)"
    )]
    EngineUnavailable {
        host: String,
        #[source]
        source: bollard::errors::Error,
    },
    #[error("docker {op} failed: {source}")]
    Engine {
        op: &'static str,
        #[source]
        source: bollard::errors::Error,
    },
    #[error("docker {op} failed: no such container {id}")]
    NoSuchContainer { op: &'static str, id: String },
    #[error("image {reference} is not in the engine and has no local build recipe")]
    ImageMissing { reference: String },
    #[error("image {reference}: {detail}")]
    ImageCreate {
        reference: String,
        detail: String,
        fault: FaultCode,
    },
    #[error("writing {path}: {source}")]
    HostIo {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("container {container} violates the policy: {field}: {detail}")]
    PolicyViolation {
        container: String,
        field: &'static str,
        detail: String,
    },
    #[error(transparent)]
    Definition(#[from] crate::definition::DefinitionError),
    #[error(transparent)]
    StaticBinary(#[from] crate::static_bins::StaticBinaryError),
}

impl RuntimeError {
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
