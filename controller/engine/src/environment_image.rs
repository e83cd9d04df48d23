//! A task's environment image built by the engine (`eval import harbor`: Harbor's
//! `environment/Dockerfile`). The engine is the one crate that connects to Docker
//! (ARCHITECTURE.md, "Code map"); the build call itself is the runtimes crate's
//! (`DockerRuntime::build_context`), beside every other bollard call. Nothing is pulled: each
//! base the Dockerfile names must already be in the engine, else the build is not started.

use eval_runtimes::docker::DockerRuntime;
use std::collections::HashMap;
use std::time::Duration;

/// Why an environment image was not built.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// No engine answered, or it failed outside the build.
    #[error("{0}")]
    Engine(String),
    /// A `FROM` image the engine does not hold (nothing can be pulled).
    #[error("FROM {0}: the engine has no such image, and eval pulls nothing")]
    MissingBase(String),
    /// The build itself failed (a `RUN` that exits non-zero, a `COPY` of a missing file, …).
    #[error("the build failed: {0}")]
    Build(String),
}

/// The label every environment image carries, with the task's id as its value.
pub const TASK_LABEL: &str = "eval.harbor.task";

/// Builds `files` (the build context, `Dockerfile` at its root) after checking that the engine
/// holds every image of `bases`; returns the image id. Blocking: it runs on a thread of its own,
/// so it works inside and outside an async runtime.
pub fn build_blocking(
    files: Vec<(String, Vec<u8>, u32)>,
    bases: Vec<String>,
    task: &str,
    limit: Duration,
) -> Result<String, BuildError> {
    let labels = HashMap::from([(TASK_LABEL.to_owned(), task.to_owned())]);
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| BuildError::Engine(format!("cannot start an async runtime: {e}")))?;
        rt.block_on(async {
            let d = DockerRuntime::connect()
                .await
                .map_err(|e| BuildError::Engine(e.to_string()))?;
            for base in &bases {
                match d.inspect_base(base).await {
                    Ok(Some(_)) => {}
                    Ok(None) => return Err(BuildError::MissingBase(base.clone())),
                    Err(e) => return Err(BuildError::Engine(e.to_string())),
                }
            }
            d.build_context(&files, labels, limit)
                .await
                .map_err(|e| BuildError::Build(e.to_string()))
        })
    })
    .join()
    .unwrap_or_else(|_| Err(BuildError::Engine("the engine call failed".into())))
}
