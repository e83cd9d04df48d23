//! Building an image from a Dockerfile and its build context (a task's `environment/`, as
//! `eval import harbor` reads it), with the classic builder and never pulling: a base the engine
//! does not hold is the caller's to refuse first (`DockerRuntime::inspect_base`), and anything
//! the build would fetch fails the build.

use std::collections::HashMap;
use std::time::Duration;

use bollard::errors::Error as BollardError;
use bollard::query_parameters::BuildImageOptionsBuilder;
use futures_util::StreamExt;

use crate::docker::DockerRuntime;
use crate::fault::RuntimeError;
use crate::tar;

impl DockerRuntime {
    /// Builds the context `files` (relative path, bytes, mode; `Dockerfile` at its root) and
    /// returns the image id (`sha256:…`); `labels` mark the image; `limit` bounds the whole build.
    pub async fn build_context(
        &self,
        files: &[(String, Vec<u8>, u32)],
        labels: HashMap<String, String>,
        limit: Duration,
    ) -> Result<String, RuntimeError> {
        let mut context = Vec::new();
        for (path, bytes, mode) in files {
            tar::append(&mut context, path, &tar::Body::File { bytes, mode: *mode }).map_err(
                |e| RuntimeError::Engine {
                    op: "build image",
                    source: BollardError::DockerStreamError {
                        error: e.to_string(),
                    },
                },
            )?;
        }
        tar::finish(&mut context);
        let opts = BuildImageOptionsBuilder::new()
            .dockerfile("Dockerfile")
            .pull("false")
            .rm(true)
            .forcerm(true)
            .labels(&labels)
            .build();
        let engine = |source| RuntimeError::Engine {
            op: "build image",
            source,
        };
        let build = async {
            let mut stream =
                self.docker()
                    .build_image(opts, None, Some(bollard::body_full(context.into())));
            let mut id = None;
            while let Some(item) = stream.next().await {
                let info = item.map_err(engine)?;
                if let Some(aux) = info.aux
                    && let Some(i) = aux.id
                {
                    id = Some(i);
                }
            }
            id.ok_or_else(|| {
                engine(BollardError::DockerStreamError {
                    error: "the build reported no image id".into(),
                })
            })
        };
        match tokio::time::timeout(limit, build).await {
            Ok(r) => r,
            Err(_) => Err(engine(BollardError::RequestTimeoutError)),
        }
    }
}
