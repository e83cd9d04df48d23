//! Runtime definitions: `runtimes/<name>/runtime.toml`.
//!
//! A definition says which image an arm's containers run (a tag or a pinned content digest,
//! and how to build it locally from a root filesystem), the harness command, the environment
//! the harness may see (an allow-list of literal values; the key is never among them), the
//! attested paths, the resource limits, the user and the extra tmpfs paths.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// Fixed paths inside every container; the policy mounts exactly these.
pub mod paths {
    pub const WORKSPACE: &str = "/workspace";
    pub const PROMPT: &str = "/task/prompt.md";
    pub const SHIM: &str = "/.eval/eval-shim";
    pub const SOCKET_DIR: &str = "/run/eval";
    pub const HIDDEN: &str = "/hidden";
    pub const OUT: &str = "/out";
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuntimeDef {
    pub name: String,
    pub image: ImageRef,
    #[serde(default)]
    pub build: Option<BuildRecipe>,
    pub harness: Harness,
    #[serde(default)]
    pub grader: Option<GraderCmd>,
    /// Environment allow-list: name → literal value (variables allowed). Nothing else is set.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    #[serde(default)]
    pub attest: Attest,
    #[serde(default)]
    pub limits: Limits,
    /// Numeric `uid:gid`; never 0.
    #[serde(default = "default_user")]
    pub user: String,
    /// Extra tmpfs mount points besides `/tmp` (a harness's `$HOME`, caches).
    #[serde(default)]
    pub tmpfs: Vec<String>,
    /// Port the shim's relay listens on at 127.0.0.1 inside the container.
    #[serde(default = "default_port")]
    pub relay_port: u16,
    /// Where the arm's files go inside the image.
    #[serde(default)]
    pub arm: ArmPaths,
    /// The harness's own metrics file, relative to the workspace (accounting cross-check).
    #[serde(default)]
    pub metrics_path: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ImageRef {
    /// Repository name for the tag of a locally built image, or an existing `name:tag`.
    pub reference: String,
    /// A content digest (`sha256:<hex>` image id) the image must have.
    #[serde(default)]
    pub digest: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BuildRecipe {
    /// Copy the host's static `/bin/busybox` to `/bin/busybox` with a few applet links.
    #[serde(default)]
    pub busybox: bool,
    /// Names of this workspace's static binaries to install in `/usr/local/bin/`.
    #[serde(default)]
    pub static_binaries: Vec<String>,
    #[serde(default, rename = "file")]
    pub files: Vec<BuildFile>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BuildFile {
    /// Relative to the definition's directory.
    pub src: String,
    /// Absolute path in the image.
    pub dest: String,
    #[serde(default)]
    pub executable: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Harness {
    /// Argument vector; `{prompt}`, `{workspace}`, `{base_url}`, `{profile}`, `{candidate}`.
    pub command: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GraderCmd {
    /// Argument vector; `{workspace}`, `{hidden}`, `{out}`.
    pub command: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Attest {
    /// Absolute paths in the container (variables allowed), hashed by the shim before start.
    #[serde(default)]
    pub paths: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Limits {
    pub memory_mb: u64,
    pub cpus: f64,
    pub pids: u64,
    pub tmpfs_mb: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            memory_mb: 512,
            cpus: 1.0,
            pids: 256,
            tmpfs_mb: 64,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ArmPaths {
    pub profile: String,
    pub candidate: String,
}

impl Default for ArmPaths {
    fn default() -> Self {
        ArmPaths {
            profile: "/opt/eval/profile.toml".to_owned(),
            candidate: "/opt/eval/candidate".to_owned(),
        }
    }
}

fn default_user() -> String {
    "65532:65532".to_owned()
}
fn default_port() -> u16 {
    8080
}

#[derive(Debug, thiserror::Error)]
pub enum DefinitionError {
    #[error("{path}: {source}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: {source}")]
    Toml {
        path: String,
        #[source]
        source: toml::de::Error,
    },
    #[error("{path}: field {field}: {detail}")]
    Invalid {
        path: String,
        field: String,
        detail: String,
    },
}

/// A definition with the directory it was read from (build files are relative to it).
#[derive(Debug, Clone, PartialEq)]
pub struct LoadedDef {
    pub def: RuntimeDef,
    pub dir: PathBuf,
    pub path: PathBuf,
}

impl RuntimeDef {
    /// Reads and checks `path` (a `runtime.toml`).
    pub fn load(path: &Path) -> Result<LoadedDef, DefinitionError> {
        let shown = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| DefinitionError::Read {
            path: shown.clone(),
            source,
        })?;
        let def = Self::parse(&text, &shown)?;
        Ok(LoadedDef {
            def,
            dir: path.parent().map(Path::to_path_buf).unwrap_or_default(),
            path: path.to_path_buf(),
        })
    }

    pub fn parse(text: &str, shown: &str) -> Result<Self, DefinitionError> {
        let def: RuntimeDef = toml::from_str(text).map_err(|source| DefinitionError::Toml {
            path: shown.to_owned(),
            source,
        })?;
        def.validate(shown)?;
        Ok(def)
    }

    fn validate(&self, shown: &str) -> Result<(), DefinitionError> {
        let bad = |field: &str, detail: String| DefinitionError::Invalid {
            path: shown.to_owned(),
            field: field.to_owned(),
            detail,
        };
        self.uid_gid().map_err(|d| bad("user", d))?;
        if self.harness.command.is_empty() {
            return Err(bad("harness.command", "must not be empty".into()));
        }
        if let Some(g) = &self.grader
            && g.command.is_empty()
        {
            return Err(bad("grader.command", "must not be empty".into()));
        }
        if let Some(d) = &self.image.digest
            && !is_digest(d)
        {
            return Err(bad("image.digest", format!("{d:?} is not sha256:<64 hex>")));
        }
        if self.image.reference.is_empty()
            || self
                .image
                .reference
                .chars()
                .any(|c| !(c.is_ascii_alphanumeric() || "._-/:".contains(c)))
        {
            return Err(bad(
                "image.reference",
                format!("{:?} is not an image name", self.image.reference),
            ));
        }
        for t in &self.tmpfs {
            if !t.starts_with('/') || t.contains("..") || reserved(t) {
                return Err(bad(
                    "tmpfs",
                    format!("{t:?} must be an absolute, unreserved path"),
                ));
            }
        }
        for (name, _) in self.env.iter() {
            if name.is_empty() || name.contains('=') {
                return Err(bad("env", format!("{name:?} is not a variable name")));
            }
        }
        let l = &self.limits;
        if l.memory_mb == 0 || l.pids == 0 || l.tmpfs_mb == 0 || !(l.cpus > 0.0 && l.cpus <= 64.0) {
            return Err(bad("limits", "every limit must be positive".into()));
        }
        if let Some(b) = &self.build {
            for f in &b.files {
                if !f.dest.starts_with('/') || f.dest.contains("..") || f.src.contains("..") {
                    return Err(bad(
                        "build.file",
                        format!(
                            "{} -> {}: src must stay in the definition's directory and dest be absolute",
                            f.src, f.dest
                        ),
                    ));
                }
            }
        }
        for p in [&self.arm.profile, &self.arm.candidate] {
            if !p.starts_with('/') || p.contains("..") {
                return Err(bad("arm", format!("{p:?} must be absolute")));
            }
        }
        if self.relay_port == 0 {
            return Err(bad("relay_port", "must not be 0".into()));
        }
        Ok(())
    }

    /// The numeric user and group; root is refused.
    pub fn uid_gid(&self) -> Result<(u32, u32), String> {
        let (u, g) = self
            .user
            .split_once(':')
            .ok_or_else(|| format!("{:?} is not uid:gid", self.user))?;
        let uid: u32 = u.parse().map_err(|_| format!("{u:?} is not a number"))?;
        let gid: u32 = g.parse().map_err(|_| format!("{g:?} is not a number"))?;
        if uid == 0 || gid == 0 {
            return Err("containers never run as root".to_owned());
        }
        Ok((uid, gid))
    }

    pub fn base_url(&self) -> String {
        format!("http://127.0.0.1:{}/v1", self.relay_port)
    }

    /// Substitutes the agent-side variables.
    pub fn render_agent(&self, s: &str) -> String {
        s.replace("{prompt}", paths::PROMPT)
            .replace("{workspace}", paths::WORKSPACE)
            .replace("{base_url}", &self.base_url())
            .replace("{profile}", &self.arm.profile)
            .replace("{candidate}", &self.arm.candidate)
    }

    pub fn render_grader(&self, s: &str) -> String {
        s.replace("{workspace}", paths::WORKSPACE)
            .replace("{hidden}", paths::HIDDEN)
            .replace("{out}", &format!("{}/score.json", paths::OUT))
    }

    /// The attested container paths, rendered.
    pub fn attested_paths(&self) -> Vec<String> {
        self.attest
            .paths
            .iter()
            .map(|p| self.render_agent(p))
            .collect()
    }

    /// The environment allow-list, rendered, as `NAME=value`, sorted.
    pub fn agent_env(&self) -> Vec<String> {
        self.env
            .iter()
            .map(|(k, v)| format!("{k}={}", self.render_agent(v)))
            .collect()
    }
}

fn reserved(p: &str) -> bool {
    [
        "/tmp",
        paths::WORKSPACE,
        "/task",
        "/.eval",
        paths::SOCKET_DIR,
        paths::HIDDEN,
        paths::OUT,
        "/proc",
        "/sys",
        "/dev",
    ]
    .iter()
    .any(|r| p == *r || p.starts_with(&format!("{r}/")))
        || p == "/"
}

pub fn is_digest(s: &str) -> bool {
    s.strip_prefix("sha256:").is_some_and(|h| {
        h.len() == 64
            && h.bytes()
                .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIN: &str = r#"
name = "t"
[image]
reference = "eval-runtime/t"
[harness]
command = ["/usr/local/bin/agent", "{prompt}", "{base_url}"]
"#;

    #[test]
    fn parses_renders_and_refuses() {
        let d = RuntimeDef::parse(MIN, "t.toml").unwrap();
        assert_eq!(d.uid_gid().unwrap(), (65532, 65532));
        assert_eq!(
            d.render_agent(&d.harness.command[2]),
            "http://127.0.0.1:8080/v1"
        );
        let e = RuntimeDef::parse(&format!("{MIN}\nbogus = 1"), "t.toml").unwrap_err();
        assert!(e.to_string().contains("bogus"), "{e}");
        let root = format!("user = \"0:0\"\n{MIN}");
        let e = RuntimeDef::parse(&root, "t.toml").unwrap_err();
        assert!(e.to_string().contains("root"), "{e}");
        let tmp = format!("tmpfs = [\"/workspace/x\"]\n{MIN}");
        assert!(RuntimeDef::parse(&tmp, "t.toml").is_err());
    }

    #[test]
    fn the_fixture_runtime_definition_loads() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixture/runtime.toml");
        let l = RuntimeDef::load(&path).unwrap();
        assert_eq!(l.def.name, "fixture");
        assert_eq!(l.def.attested_paths().len(), 3);
        assert!(l.def.grader.is_some());
        assert!(l.def.agent_env().iter().all(|e| !e.contains("sk-")));
    }
}
