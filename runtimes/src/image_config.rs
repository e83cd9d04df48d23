//! The parts of an image's own configuration the container policy starts from (see "The
//! image's own config" in docs/containers.md): its environment, working directory, user and
//! default command. The runtime definition overrides each of them explicitly.

/// An image's `Config`, as far as the policy uses it. Empty fields mean "the image sets none".
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ImageConfig {
    /// `NAME=value` entries, in the image's order.
    pub env: Vec<String>,
    /// The image's working directory, if set.
    pub workdir: Option<String>,
    /// The user the image runs as (`name`, `uid` or `uid:gid`), if set.
    pub user: Option<String>,
    /// The image's entrypoint argument vector (empty: none).
    pub entrypoint: Vec<String>,
    /// The image's default command (arguments to the entrypoint, or the command itself).
    pub cmd: Vec<String>,
}

impl ImageConfig {
    /// From the engine's image inspect (a missing `Config` is an image that sets nothing).
    pub fn from_inspect(inspect: &bollard::models::ImageInspect) -> Self {
        let Some(c) = &inspect.config else {
            return Self::default();
        };
        let non_empty = |s: &Option<String>| s.clone().filter(|s| !s.is_empty());
        ImageConfig {
            env: c.env.clone().unwrap_or_default(),
            workdir: non_empty(&c.working_dir),
            user: non_empty(&c.user),
            entrypoint: c.entrypoint.clone().unwrap_or_default(),
            cmd: c.cmd.clone().unwrap_or_default(),
        }
    }
}
