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

use crate::fault::RuntimeError;
use eval_core::fault::FaultCode;
use std::path::Path;

use crate::base::{BaseImage, read_archive};
use crate::definition::LoadedDef;
use crate::image::{ImageId, ImageSpec, build, build_thin};
use crate::image_config::ImageConfig;
use crate::policy::ContainerSpec;
use crate::runtime::{ContainerId, RtFuture, Runtime, WaitOutcome};

/// Bound on every engine call except `wait` (whose bound is the caller's timeout).
const OP_TIMEOUT: Duration = Duration::from_secs(120);
/// The client's own request timeout; long so that `wait` is bounded by the caller instead.
const CLIENT_TIMEOUT_SECS: u64 = 24 * 3600;
/// Read size when streaming an archive file to the engine.
const LOAD_CHUNK: usize = 256 * 1024;
const DEFAULT_HOST: &str = "unix:///var/run/docker.sock";

/// The [`Runtime`] backed by a Docker engine over its API; cheap to clone
/// (clones share the connection).
#[derive(Debug, Clone)]
pub struct DockerRuntime {
    docker: Docker,
    host: String,
    /// Serialises loading base archives, so arms prepared concurrently load a base once.
    base_load: std::sync::Arc<tokio::sync::Mutex<()>>,
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

    /// Connects to `host` (`unix://PATH`, `tcp://` or `http://`) and negotiates the API version;
    /// fails with `EngineUnavailable` when the engine does not answer within 15 s.
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
            base_load: std::sync::Arc::default(),
        })
    }

    /// The engine address this runtime was connected to (for messages and reports).
    pub fn host(&self) -> &str {
        &self.host
    }

    /// The negotiated API version, e.g. `1.41`.
    pub fn api_version(&self) -> String {
        self.docker.client_version().to_string()
    }

    /// The underlying bollard client, for engine calls the trait does not offer.
    pub fn docker(&self) -> &Docker {
        &self.docker
    }

    /// The engine's inspect answer for image `name` (an id or a reference); `None` if absent.
    /// The one place an image is inspected: a timeout and every engine error but 404 are
    /// engine failures.
    /// The containers carrying `label` (`key=value`), of any state or only of the one `status`
    /// names (`running`, `paused`, …, as the engine's `status` filter reads it).
    async fn labelled(
        &self,
        label: &str,
        status: Option<&str>,
    ) -> Result<Vec<bollard::models::ContainerSummary>, RuntimeError> {
        let mut filters = HashMap::new();
        filters.insert("label", vec![label]);
        if let Some(s) = status {
            filters.insert("status", vec![s]);
        }
        let opts = ListContainersOptionsBuilder::new()
            .all(true)
            .filters(&filters)
            .build();
        bounded(
            "list containers",
            "",
            self.docker.list_containers(Some(opts)),
        )
        .await
    }

    /// Pauses (or thaws) the containers `ids`, listed a moment ago; returns how many. A
    /// container that ended since it was listed (the engine answers 404, or 409 "is not
    /// running") is frozen as far as a freeze cares — nothing of it runs — and one no longer
    /// paused when thawed has nothing to thaw: neither is an engine fault. Before, a container
    /// ending between the listing and the pause failed its round as `container_runtime_failure`.
    pub async fn pause_listed(&self, ids: &[String], paused: bool) -> Result<usize, RuntimeError> {
        let op = if paused {
            "pause container"
        } else {
            "unpause container"
        };
        for id in ids {
            let call = async {
                if paused {
                    self.docker.pause_container(id).await
                } else {
                    self.docker.unpause_container(id).await
                }
            };
            match tokio::time::timeout(OP_TIMEOUT, call).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) if matches!(status(&e), Some(404 | 409)) => {}
                // The engine answers "is not paused" with a 500: asked again, a container that
                // is gone or no longer paused had nothing to thaw.
                Ok(Err(_)) if !paused && !self.is_paused(id).await? => {}
                Ok(Err(e)) => return Err(RuntimeError::engine(op, id, e)),
                Err(_) => {
                    return Err(RuntimeError::Engine {
                        op,
                        source: BollardError::RequestTimeoutError,
                    });
                }
            }
        }
        Ok(ids.len())
    }

    /// Whether container `id` exists and is paused.
    async fn is_paused(&self, id: &str) -> Result<bool, RuntimeError> {
        match bounded(
            "inspect container",
            id,
            self.docker.inspect_container(id, None),
        )
        .await
        {
            Ok(i) => Ok(i.state.and_then(|s| s.paused).unwrap_or(false)),
            Err(RuntimeError::NoSuchContainer { .. }) => Ok(false),
            Err(e) => Err(e),
        }
    }

    async fn inspect(
        &self,
        name: &str,
    ) -> Result<Option<bollard::models::ImageInspect>, RuntimeError> {
        match tokio::time::timeout(OP_TIMEOUT, self.docker.inspect_image(name)).await {
            Ok(Ok(i)) => Ok(Some(i)),
            Ok(Err(e)) if status(&e) == Some(404) => Ok(None),
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

    /// Whether the engine has an image with this id.
    pub async fn has_image(&self, id: &ImageId) -> Result<bool, RuntimeError> {
        Ok(self.inspect(&id.0).await?.is_some())
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

    /// Images carrying `label` (`key` or `key=value`): id, tags, size in bytes (`eval gc`).
    pub async fn images_with_label(
        &self,
        label: &str,
    ) -> Result<Vec<(String, Vec<String>, u64)>, RuntimeError> {
        let mut filters = HashMap::new();
        filters.insert("label", vec![label]);
        let opts = bollard::query_parameters::ListImagesOptionsBuilder::new()
            .filters(&filters)
            .build();
        let list = bounded("list images", "", self.docker.list_images(Some(opts))).await?;
        Ok(list
            .into_iter()
            .map(|i| (i.id, i.repo_tags, i.size.max(0) as u64))
            .collect())
    }

    /// Removes image `id` unless a container uses it; `false` when it is in use (or gone).
    pub async fn remove_unused_image(&self, id: &str) -> Result<bool, RuntimeError> {
        let opts = bollard::query_parameters::RemoveImageOptionsBuilder::new()
            .force(false)
            .build();
        match self.docker.remove_image(id, Some(opts), None).await {
            Ok(_) => Ok(true),
            Err(e) if matches!(status(&e), Some(404 | 409)) => Ok(false),
            Err(source) => Err(RuntimeError::Engine {
                op: "remove image",
                source,
            }),
        }
    }

    /// Containers (running or not) carrying `label`: id and names (`eval gc`).
    pub async fn containers_with_label(
        &self,
        label: &str,
    ) -> Result<Vec<(String, Vec<String>)>, RuntimeError> {
        Ok(self
            .labelled(label, None)
            .await?
            .into_iter()
            .filter_map(|c| c.id.map(|id| (id, c.names.unwrap_or_default())))
            .collect())
    }

    /// The engine's description of image `name` (an id or a reference); `None` if absent.
    pub async fn inspect_base(&self, name: &str) -> Result<Option<BaseImage>, RuntimeError> {
        let Some(i) = self.inspect(name).await? else {
            return Ok(None);
        };
        BaseImage::from_inspect(&i)
            .map(Some)
            .map_err(|detail| RuntimeError::ImageCreate {
                reference: name.to_owned(),
                detail,
                fault: FaultCode::ContainerRuntimeFailure,
            })
    }

    /// `docker load` of image `want` from an archive file, streamed from disk in `LOAD_CHUNK`
    /// pieces through [`crate::base::UntaggedArchive`]: only `want`'s manifest entry, without
    /// its tags, so loading changes no name in the engine (an archive whose manifest names
    /// `eval-base/…:<tag>` cannot retag the cache the build scripts trust). The caller checks by
    /// id that `want` is what arrived.
    pub async fn load_archive(&self, path: &Path, want: &ImageId) -> Result<(), RuntimeError> {
        let file = std::fs::File::open(path).map_err(|source| RuntimeError::HostIo {
            path: path.display().to_string(),
            source,
        })?;
        let mut filter =
            crate::base::UntaggedArchive::new(std::io::BufReader::new(file), want, LOAD_CHUNK);
        let (tx, rx) = tokio::sync::mpsc::channel::<std::io::Result<bytes::Bytes>>(4);
        // Reading the archive is blocking file I/O: off the runtime, one chunk ahead at most.
        let reader = tokio::task::spawn_blocking(move || {
            loop {
                let item = filter.next_chunk().transpose();
                let Some(item) = item else { break };
                let failed = item.is_err();
                if tx.blocking_send(item.map(bytes::Bytes::from)).is_err() || failed {
                    break;
                }
            }
        });
        let chunks =
            futures_util::stream::unfold(
                rx,
                |mut rx| async move { rx.recv().await.map(|c| (c, rx)) },
            );
        let opts = ImportImageOptionsBuilder::new().quiet(true).build();
        let mut stream = self.docker.import_image_stream(opts, chunks, None);
        let mut result = Ok(());
        while let Some(item) = stream.next().await {
            if let Err(source) = item {
                result = Err(RuntimeError::ImageCreate {
                    reference: path.display().to_string(),
                    detail: format!("loading the image archive failed: {source}"),
                    fault: FaultCode::ContainerRuntimeFailure,
                });
                break;
            }
        }
        drop(stream);
        let _ = reader.await;
        result
    }

    /// The base a definition without `[build]` names: by `id` (else by `reference`) in the
    /// engine, else loaded from `archive`. Never built. A base whose id differs from `image.id`
    /// is refused (`attestation_mismatch`: it is not the frozen base).
    pub async fn resolve_base(&self, loaded: &LoadedDef) -> Result<BaseImage, RuntimeError> {
        let img = &loaded.def.image;
        let name = img.id.clone().unwrap_or_else(|| img.reference.clone());
        let mut found = if name.is_empty() {
            None
        } else {
            self.inspect_base(&name).await?
        };
        if found.is_none()
            && let Some(a) = &img.archive
        {
            let path = loaded.dir.join(a);
            // Which image the archive holds is read first, so a reference-only definition finds
            // what it loaded by id (the archive need not carry a tag).
            let p = path.clone();
            let want = img.id.clone().map(ImageId);
            let base = tokio::task::spawn_blocking(move || read_archive(&p, want.as_ref()))
                .await
                .map_err(|e| RuntimeError::ImageCreate {
                    reference: path.display().to_string(),
                    detail: format!("reading the archive failed: {e}"),
                    fault: FaultCode::ContainerRuntimeFailure,
                })??;
            let _one = self.base_load.lock().await;
            // Another arm may have loaded it while this one waited.
            found = self.inspect_base(&base.id.0).await?;
            if found.is_none() {
                self.load_archive(&path, &base.id).await?;
                found = self.inspect_base(&base.id.0).await?;
            }
            if found.is_none() {
                return Err(RuntimeError::ImageCreate {
                    reference: path.display().to_string(),
                    detail: format!(
                        "the engine did not register image {} after loading it",
                        base.id
                    ),
                    fault: FaultCode::ContainerRuntimeFailure,
                });
            }
        }
        let base = found.ok_or_else(|| RuntimeError::ImageMissing {
            reference: if name.is_empty() {
                loaded.def.name.clone()
            } else {
                name.clone()
            },
        })?;
        if let Some(id) = &img.id
            && id != &base.id.0
        {
            return Err(RuntimeError::ImageCreate {
                reference: name,
                detail: format!(
                    "the engine's image is {}, the definition names {id}",
                    base.id
                ),
                fault: FaultCode::AttestationMismatch,
            });
        }
        Ok(base)
    }

    /// Loads an image archive built in memory (small: a thin layer or a recipe's image).
    async fn load_built(&self, built: crate::image::Built) -> Result<ImageId, RuntimeError> {
        if self.has_image(&built.id).await? {
            return Ok(built.id);
        }
        let tag = built.tag.clone();
        let id = built.id.clone();
        let archive = tokio::task::spawn_blocking(move || built.archive())
            .await
            .map_err(|e| RuntimeError::ImageCreate {
                reference: tag.clone(),
                detail: format!("writing the image archive failed: {e}"),
                fault: FaultCode::ContainerRuntimeFailure,
            })??;
        let opts = ImportImageOptionsBuilder::new().quiet(true).build();
        let mut stream = self
            .docker
            .import_image(opts, bollard::body_full(archive.into()), None);
        while let Some(item) = stream.next().await {
            item.map_err(|source| RuntimeError::ImageCreate {
                reference: tag.clone(),
                detail: format!("loading the image archive failed: {source}"),
                fault: FaultCode::ContainerRuntimeFailure,
            })?;
        }
        if !self.has_image(&id).await? {
            return Err(RuntimeError::ImageCreate {
                reference: tag,
                detail: format!("the engine did not register image {id} after loading it"),
                fault: FaultCode::ContainerRuntimeFailure,
            });
        }
        Ok(id)
    }

    async fn ensure_image_impl(&self, spec: &ImageSpec) -> Result<ImageId, RuntimeError> {
        let def = &spec.def.def;
        if def.build.is_none() {
            // A base image plus the arm's thin layer; the base is never built here.
            let base = self.resolve_base(&spec.def).await?;
            let s = spec.clone();
            let built = tokio::task::spawn_blocking(move || build_thin(&s, &base))
                .await
                .map_err(|e| RuntimeError::ImageCreate {
                    reference: def.image.reference.clone(),
                    detail: format!("building the arm layer failed: {e}"),
                    fault: FaultCode::ContainerRuntimeFailure,
                })??;
            return self.load_built(built).await;
        }
        let s = spec.clone();
        let built = tokio::task::spawn_blocking(move || build(&s))
            .await
            .map_err(|e| RuntimeError::ImageCreate {
                reference: def.image.reference.clone(),
                detail: format!("building the image failed: {e}"),
                fault: FaultCode::ContainerRuntimeFailure,
            })??;
        if let Some(pin) = &def.image.id
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
        self.load_built(built).await
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
            let mut n = 0;
            for id in self
                .labelled(label, None)
                .await?
                .into_iter()
                .filter_map(|c| c.id)
            {
                self.remove(&ContainerId(id)).await?;
                n += 1;
            }
            Ok(n)
        })
    }

    fn pause_labelled<'a>(&'a self, label: &'a str, paused: bool) -> RtFuture<'a, usize> {
        Box::pin(async move {
            // By state, not by label alone: the attempt's grader containers carry its label too,
            // and one still running when the agent is thawed is not paused (the engine refuses
            // to unpause it, which failed a round as an engine fault).
            let from = if paused { "running" } else { "paused" };
            let ids: Vec<String> = self
                .labelled(label, Some(from))
                .await?
                .into_iter()
                .filter_map(|c| c.id)
                .collect();
            self.pause_listed(&ids, paused).await
        })
    }

    fn inspect_image<'a>(&'a self, id: &'a ImageId) -> RtFuture<'a, ImageConfig> {
        Box::pin(async move {
            match self.inspect(&id.0).await? {
                Some(i) => Ok(ImageConfig::from_inspect(&i)),
                None => Err(RuntimeError::ImageMissing {
                    reference: id.0.clone(),
                }),
            }
        })
    }
}

/// What freeze and verify record for a definition without `[build]`: its base as the engine
/// describes it (by `id`, else by `reference`), else as its `archive`'s config says. Blocking:
/// it asks the engine on a thread of its own, so it works inside and outside an async runtime.
/// `Err` is a message for the `image.id` field.
pub fn describe_base_blocking(loaded: &LoadedDef) -> Result<BaseImage, String> {
    let img = &loaded.def.image;
    let name = img.id.clone().unwrap_or_else(|| img.reference.clone());
    let asked = name.clone();
    let engine = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| format!("cannot start an async runtime: {e}"))?;
        rt.block_on(async {
            let d = DockerRuntime::connect().await.map_err(|e| e.to_string())?;
            if asked.is_empty() {
                return Ok(None);
            }
            d.inspect_base(&asked).await.map_err(|e| e.to_string())
        })
    })
    .join()
    .unwrap_or_else(|_| Err("the engine query failed".to_owned()));
    let engine_note = match engine {
        Ok(Some(base)) => {
            if let Some(id) = &img.id
                && id != &base.id.0
            {
                return Err(format!("{id} is not the engine's image {}", base.id));
            }
            return Ok(base);
        }
        Ok(None) if name.is_empty() => "no id or reference to ask the engine for".to_owned(),
        Ok(None) => format!("the engine has no image {name}"),
        Err(e) => format!("no engine answered ({e})"),
    };
    match &img.archive {
        Some(a) => {
            let want = img.id.clone().map(ImageId);
            read_archive(&loaded.dir.join(a), want.as_ref())
                .map_err(|e| format!("{engine_note}, and the archive {a}: {e}"))
        }
        None if img.id.is_none() => Err(format!(
            "cannot resolve the base image: {engine_note}, and no `image.archive` is declared; set `image.id = \"sha256:…\"` (docker image inspect --format '{{{{.Id}}}}' NAME)"
        )),
        None => Err(format!(
            "{}: {engine_note}, and no `image.archive` is declared to load it from",
            name
        )),
    }
}
