//! `DockerRuntime`: the `Runtime` trait on bollard, API negotiated down to the engine's (1.41
//! for Docker 20.10).

use std::collections::HashMap;
use std::time::Duration;

use bollard::Docker;
use bollard::errors::Error as BollardError;
use bollard::models::ContainerInspectResponse;
use bollard::query_parameters::{
    CreateContainerOptions, ImportImageOptionsBuilder, KillContainerOptionsBuilder,
    ListContainersOptionsBuilder, LogsOptionsBuilder, RemoveContainerOptionsBuilder,
    WaitContainerOptionsBuilder,
};
use futures_util::StreamExt;

use crate::fault::{FaultCode, RuntimeError};
use crate::image::{ImageId, ImageSpec, build};
use crate::image_config::ImageConfig;
use crate::policy::ContainerSpec;
use crate::runtime::{ContainerId, RtFuture, Runtime, WaitOutcome};

/// Bound on every engine call except `wait` (whose bound is the caller's timeout).
const OP_TIMEOUT: Duration = Duration::from_secs(120);
/// The client's own request timeout; long so that `wait` is bounded by the caller instead.
const CLIENT_TIMEOUT_SECS: u64 = 24 * 3600;
const DEFAULT_HOST: &str = "unix:///var/run/docker.sock";

#[derive(Debug, Clone)]
pub struct DockerRuntime {
    docker: Docker,
    host: String,
}

async fn bounded<T>(
    op: &'static str,
    id: &str,
    f: impl std::future::Future<Output = Result<T, BollardError>>,
) -> Result<T, RuntimeError> {
    match tokio::time::timeout(OP_TIMEOUT, f).await {
        Ok(r) => r.map_err(|e| RuntimeError::engine(op, id, e)),
        Err(_) => Err(RuntimeError::Engine {
            op,
            source: BollardError::RequestTimeoutError,
        }),
    }
}

fn status(e: &BollardError) -> Option<u16> {
    match e {
        BollardError::DockerResponseServerError { status_code, .. } => Some(*status_code),
        _ => None,
    }
}

impl DockerRuntime {
    /// Connects from `DOCKER_HOST` (unix:// or tcp://) or the default socket and negotiates the
    /// API version; fails with `EngineUnavailable` when no engine answers.
    pub async fn connect() -> Result<Self, RuntimeError> {
        let host = std::env::var("DOCKER_HOST")
            .ok()
            .filter(|h| !h.is_empty())
            .unwrap_or_else(|| DEFAULT_HOST.to_owned());
        Self::connect_to(&host).await
    }

    pub async fn connect_to(host: &str) -> Result<Self, RuntimeError> {
        let unavailable = |source| RuntimeError::EngineUnavailable {
            host: host.to_owned(),
            source,
        };
        let docker = if let Some(path) = host.strip_prefix("unix://") {
            Docker::connect_with_unix(path, CLIENT_TIMEOUT_SECS, bollard::API_DEFAULT_VERSION)
        } else if host.starts_with("tcp://") || host.starts_with("http://") {
            Docker::connect_with_http(host, CLIENT_TIMEOUT_SECS, bollard::API_DEFAULT_VERSION)
        } else {
            Err(BollardError::UnsupportedURISchemeError {
                uri: host.to_owned(),
            })
        }
        .map_err(unavailable)?;
        let docker =
            match tokio::time::timeout(Duration::from_secs(15), docker.negotiate_version()).await {
                Ok(r) => r.map_err(unavailable)?,
                Err(_) => return Err(unavailable(BollardError::RequestTimeoutError)),
            };
        Ok(DockerRuntime {
            docker,
            host: host.to_owned(),
        })
    }

    pub fn host(&self) -> &str {
        &self.host
    }

    /// The negotiated API version, e.g. `1.41`.
    pub fn api_version(&self) -> String {
        self.docker.client_version().to_string()
    }

    pub fn docker(&self) -> &Docker {
        &self.docker
    }

    /// Whether the engine has an image with this id.
    pub async fn has_image(&self, id: &ImageId) -> Result<bool, RuntimeError> {
        match tokio::time::timeout(OP_TIMEOUT, self.docker.inspect_image(&id.0)).await {
            Ok(Ok(_)) => Ok(true),
            Ok(Err(e)) if status(&e) == Some(404) => Ok(false),
            Ok(Err(source)) => Err(RuntimeError::Engine {
                op: "inspect image",
                source,
            }),
            Err(_) => Err(RuntimeError::Engine {
                op: "inspect image",
                source: BollardError::RequestTimeoutError,
            }),
        }
    }

    /// Removes an image by id (tests; the controller keeps images as a cache).
    pub async fn remove_image(&self, id: &ImageId) -> Result<(), RuntimeError> {
        let opts = bollard::query_parameters::RemoveImageOptionsBuilder::new()
            .force(true)
            .build();
        match self.docker.remove_image(&id.0, Some(opts), None).await {
            Ok(_) => Ok(()),
            Err(e) if status(&e) == Some(404) => Ok(()),
            Err(source) => Err(RuntimeError::Engine {
                op: "remove image",
                source,
            }),
        }
    }

    /// Removes the images this crate built that carry `label` (`eval.runtime` for all of them,
    /// `eval.runtime=fixture`, or a caller's own image label) except `keep`; images still used by
    /// a container are left alone. Returns how many were removed.
    pub async fn prune_images(&self, label: &str, keep: &[ImageId]) -> Result<usize, RuntimeError> {
        let mut filters = HashMap::new();
        filters.insert("label", vec![label]);
        let opts = bollard::query_parameters::ListImagesOptionsBuilder::new()
            .filters(&filters)
            .build();
        let list = bounded("list images", "", self.docker.list_images(Some(opts))).await?;
        let mut n = 0;
        for image in list {
            if keep.iter().any(|k| k.0 == image.id) {
                continue;
            }
            let opts = bollard::query_parameters::RemoveImageOptionsBuilder::new()
                .force(false)
                .build();
            match self.docker.remove_image(&image.id, Some(opts), None).await {
                Ok(_) => n += 1,
                Err(e) if matches!(status(&e), Some(404 | 409)) => {}
                Err(source) => {
                    return Err(RuntimeError::Engine {
                        op: "remove image",
                        source,
                    });
                }
            }
        }
        Ok(n)
    }

    async fn ensure_image_impl(&self, spec: &ImageSpec) -> Result<ImageId, RuntimeError> {
        let def = &spec.def.def;
        if def.build.is_none() {
            // A referenced image: it must be there, with the pinned digest if one is given.
            let r =
                tokio::time::timeout(OP_TIMEOUT, self.docker.inspect_image(&def.image.reference))
                    .await;
            let inspect = match r {
                Ok(Ok(i)) => i,
                Ok(Err(e)) if status(&e) == Some(404) => {
                    return Err(RuntimeError::ImageMissing {
                        reference: def.image.reference.clone(),
                    });
                }
                Ok(Err(source)) => {
                    return Err(RuntimeError::Engine {
                        op: "inspect image",
                        source,
                    });
                }
                Err(_) => {
                    return Err(RuntimeError::Engine {
                        op: "inspect image",
                        source: BollardError::RequestTimeoutError,
                    });
                }
            };
            let id = ImageId(inspect.id.unwrap_or_default());
            if let Some(pin) = &def.image.digest
                && pin != &id.0
            {
                return Err(RuntimeError::ImageMissing {
                    reference: format!("{}@{pin} (the engine has {id})", def.image.reference),
                });
            }
            return Ok(id);
        }
        let built = build(spec)?;
        if let Some(pin) = &def.image.digest
            && pin != &built.id.0
        {
            return Err(RuntimeError::ImageCreate {
                reference: def.image.reference.clone(),
                detail: format!(
                    "the recipe builds {} but the definition pins {pin}",
                    built.id
                ),
                fault: FaultCode::AttestationMismatch,
            });
        }
        if self.has_image(&built.id).await? {
            return Ok(built.id);
        }
        let archive = built.archive()?;
        let opts = ImportImageOptionsBuilder::new().quiet(true).build();
        let mut stream = self
            .docker
            .import_image(opts, bollard::body_full(archive.into()), None);
        while let Some(item) = stream.next().await {
            item.map_err(|source| RuntimeError::ImageCreate {
                reference: built.tag.clone(),
                detail: format!("loading the image archive failed: {source}"),
                fault: FaultCode::ContainerRuntimeFailure,
            })?;
        }
        if !self.has_image(&built.id).await? {
            return Err(RuntimeError::ImageCreate {
                reference: built.tag.clone(),
                detail: format!(
                    "the engine did not register image {} after loading it",
                    built.id
                ),
                fault: FaultCode::ContainerRuntimeFailure,
            });
        }
        Ok(built.id)
    }
}

impl Runtime for DockerRuntime {
    fn ensure_image<'a>(&'a self, spec: &'a ImageSpec) -> RtFuture<'a, ImageId> {
        Box::pin(self.ensure_image_impl(spec))
    }

    fn create<'a>(&'a self, spec: &'a ContainerSpec) -> RtFuture<'a, ContainerId> {
        Box::pin(async move {
            let image = spec.expected.image.0.as_str();
            let r = tokio::time::timeout(
                OP_TIMEOUT,
                self.docker
                    .create_container(None::<CreateContainerOptions>, spec.body.clone()),
            )
            .await;
            match r {
                Ok(Ok(resp)) => Ok(ContainerId(resp.id)),
                Ok(Err(e)) if status(&e) == Some(404) => Err(RuntimeError::ImageMissing {
                    reference: image.to_owned(),
                }),
                Ok(Err(source)) => Err(RuntimeError::Engine {
                    op: "create container",
                    source,
                }),
                Err(_) => Err(RuntimeError::Engine {
                    op: "create container",
                    source: BollardError::RequestTimeoutError,
                }),
            }
        })
    }

    fn start<'a>(&'a self, id: &'a ContainerId) -> RtFuture<'a, ()> {
        Box::pin(bounded(
            "start container",
            &id.0,
            self.docker.start_container(&id.0, None),
        ))
    }

    fn wait<'a>(&'a self, id: &'a ContainerId, timeout: Duration) -> RtFuture<'a, WaitOutcome> {
        Box::pin(async move {
            let opts = WaitContainerOptionsBuilder::new()
                .condition("not-running")
                .build();
            let mut stream = self.docker.wait_container(&id.0, Some(opts));
            match tokio::time::timeout(timeout, stream.next()).await {
                Err(_) => Ok(WaitOutcome::TimedOut),
                Ok(Some(Ok(r))) => Ok(WaitOutcome::Exited {
                    code: r.status_code,
                }),
                Ok(Some(Err(BollardError::DockerContainerWaitError { code, .. }))) => {
                    Ok(WaitOutcome::Exited { code })
                }
                Ok(Some(Err(e))) => Err(RuntimeError::engine("wait container", &id.0, e)),
                Ok(None) => Err(RuntimeError::NoSuchContainer {
                    op: "wait container",
                    id: id.0.clone(),
                }),
            }
        })
    }

    fn kill<'a>(&'a self, id: &'a ContainerId) -> RtFuture<'a, ()> {
        Box::pin(async move {
            let opts = KillContainerOptionsBuilder::new().signal("SIGKILL").build();
            match tokio::time::timeout(OP_TIMEOUT, self.docker.kill_container(&id.0, Some(opts)))
                .await
            {
                Ok(Ok(())) => Ok(()),
                // 409: not running (it exited meanwhile) — the goal is reached.
                Ok(Err(e)) if status(&e) == Some(409) => Ok(()),
                Ok(Err(e)) => Err(RuntimeError::engine("kill container", &id.0, e)),
                Err(_) => Err(RuntimeError::Engine {
                    op: "kill container",
                    source: BollardError::RequestTimeoutError,
                }),
            }
        })
    }

    fn logs<'a>(&'a self, id: &'a ContainerId, max_bytes: usize) -> RtFuture<'a, Vec<u8>> {
        Box::pin(async move {
            let opts = LogsOptionsBuilder::new()
                .stdout(true)
                .stderr(true)
                .follow(false)
                .build();
            let mut stream = self.docker.logs(&id.0, Some(opts));
            let mut out = Vec::new();
            let collect = async {
                while let Some(item) = stream.next().await {
                    let item =
                        item.map_err(|e| RuntimeError::engine("container logs", &id.0, e))?;
                    let bytes = item.into_bytes();
                    let room = max_bytes.saturating_sub(out.len());
                    out.extend_from_slice(&bytes[..bytes.len().min(room)]);
                    if out.len() >= max_bytes {
                        break;
                    }
                }
                Ok::<_, RuntimeError>(())
            };
            match tokio::time::timeout(OP_TIMEOUT, collect).await {
                Ok(r) => r?,
                Err(_) => {
                    return Err(RuntimeError::Engine {
                        op: "container logs",
                        source: BollardError::RequestTimeoutError,
                    });
                }
            }
            Ok(out)
        })
    }

    fn inspect<'a>(&'a self, id: &'a ContainerId) -> RtFuture<'a, ContainerInspectResponse> {
        Box::pin(bounded(
            "inspect container",
            &id.0,
            self.docker.inspect_container(&id.0, None),
        ))
    }

    fn remove<'a>(&'a self, id: &'a ContainerId) -> RtFuture<'a, ()> {
        Box::pin(async move {
            let opts = RemoveContainerOptionsBuilder::new()
                .force(true)
                .v(true)
                .build();
            match tokio::time::timeout(OP_TIMEOUT, self.docker.remove_container(&id.0, Some(opts)))
                .await
            {
                Ok(Ok(())) => Ok(()),
                Ok(Err(e)) if status(&e) == Some(404) => Ok(()),
                // 409: removal already in progress.
                Ok(Err(e)) if status(&e) == Some(409) => Ok(()),
                Ok(Err(e)) => Err(RuntimeError::engine("remove container", &id.0, e)),
                Err(_) => Err(RuntimeError::Engine {
                    op: "remove container",
                    source: BollardError::RequestTimeoutError,
                }),
            }
        })
    }

    fn sweep<'a>(&'a self, label: &'a str) -> RtFuture<'a, usize> {
        Box::pin(async move {
            let mut filters = HashMap::new();
            filters.insert("label", vec![label]);
            let opts = ListContainersOptionsBuilder::new()
                .all(true)
                .filters(&filters)
                .build();
            let list = bounded(
                "list containers",
                "",
                self.docker.list_containers(Some(opts)),
            )
            .await?;
            let mut n = 0;
            for c in list {
                if let Some(id) = c.id {
                    self.remove(&ContainerId(id)).await?;
                    n += 1;
                }
            }
            Ok(n)
        })
    }

    fn inspect_image<'a>(&'a self, id: &'a ImageId) -> RtFuture<'a, ImageConfig> {
        Box::pin(async move {
            match tokio::time::timeout(OP_TIMEOUT, self.docker.inspect_image(&id.0)).await {
                Ok(Ok(i)) => Ok(ImageConfig::from_inspect(&i)),
                Ok(Err(e)) if status(&e) == Some(404) => Err(RuntimeError::ImageMissing {
                    reference: id.0.clone(),
                }),
                Ok(Err(source)) => Err(RuntimeError::Engine {
                    op: "inspect image",
                    source,
                }),
                Err(_) => Err(RuntimeError::Engine {
                    op: "inspect image",
                    source: BollardError::RequestTimeoutError,
                }),
            }
        })
    }
}
