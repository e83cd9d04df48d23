//! The per-arm fixture profile (`/opt/eval/profile.toml` inside the arm's image).

use serde::{Deserialize, Serialize};

/// How the fixture agent behaves for one arm: the request it sends, the simulated model skill, its
/// turn and question limits, and any escape attempts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Profile {
    /// The profile's name (recorded in the agent's metrics file).
    pub name: String,
    /// The model id the agent requests (default `deepseek-v4-flash`).
    #[serde(default = "default_model")]
    pub model: String,
    /// The `temperature` the agent sends (default 0).
    #[serde(default)]
    pub temperature: f64,
    /// The `max_tokens` the agent sends (default 32768).
    #[serde(default = "default_max_tokens")]
    pub max_tokens: u64,
    /// Whether the agent asks for a streamed response (default true).
    #[serde(default = "yes")]
    pub stream: bool,
    /// Simulated model skill in 0..=1: the higher, the more requirements the fixture model gets
    /// right (default 0.5).
    #[serde(default = "default_skill")]
    pub skill: f64,
    /// Model calls the agent makes at most (default 6).
    #[serde(default = "default_max_turns")]
    pub max_turns: u32,
    /// Requirements the fixture model addresses per answer (at least 1; default 2).
    #[serde(default = "default_edits_per_turn")]
    pub edits_per_turn: u32,
    /// Whether the model's first answer is a plan (`fixture-plan: yes`).
    #[serde(default)]
    pub plan_turn: bool,
    /// Number of `pad` words added to the system message, to make requests bigger.
    #[serde(default)]
    pub padding_tokens: u64,
    /// Which requirements the agent asks the oracle about.
    #[serde(default)]
    pub clarify: ClarifyPolicy,
    /// Oracle questions the agent asks at most (default 5).
    #[serde(default = "default_max_questions")]
    pub max_questions: u32,
    /// Escape attempts for isolation tests (none by default).
    #[serde(default)]
    pub adversarial: Adversarial,
}

/// When the fixture agent asks the oracle a clarifying question.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ClarifyPolicy {
    /// Never asks.
    #[default]
    Never,
    /// Asks about ambiguous requirements that have a question.
    Critical,
    /// Also asks about every other requirement (those answers are not used).
    Always,
}

/// Escape attempts for isolation tests. Each probe's result is recorded in the metrics file.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Adversarial {
    /// Environment variables to look for (only whether each is set is recorded, plus the list of
    /// names).
    #[serde(default)]
    pub read_env: Vec<String>,
    /// Ports on 127.0.0.1 to try to connect to.
    #[serde(default)]
    pub connect_tcp: Vec<u16>,
    /// Paths to try to read.
    #[serde(default)]
    pub read_paths: Vec<String>,
    /// Paths to try to write.
    #[serde(default)]
    pub write_paths: Vec<String>,
    /// Whether to list the container's network interfaces.
    #[serde(default)]
    pub list_interfaces: bool,
    /// Seconds to sleep before starting (for timeout tests).
    #[serde(default)]
    pub sleep_secs: u64,
    /// A model id to request instead of `model` (to provoke a contract violation).
    #[serde(default)]
    pub model_override: Option<String>,
    /// A `max_tokens` to send instead of the profile's (to break a parameter bound).
    #[serde(default)]
    pub max_tokens_override: Option<u64>,
    /// Extra model calls after the agent is done (to exhaust a request or token budget).
    #[serde(default)]
    pub repeat_calls: u32,
    /// Added to `total_tokens` in the agent's own metrics file (may be negative), so that the
    /// harness's accounting disagrees with the proxy's meter (accounting cross-check tests).
    #[serde(default)]
    pub misreport_tokens: i64,
}

fn default_model() -> String {
    "deepseek-v4-flash".to_owned()
}
fn default_max_tokens() -> u64 {
    32768
}
fn yes() -> bool {
    true
}
fn default_skill() -> f64 {
    0.5
}
fn default_max_turns() -> u32 {
    6
}
fn default_edits_per_turn() -> u32 {
    2
}
fn default_max_questions() -> u32 {
    5
}

/// A profile the fixture agent refuses to run with.
#[derive(Debug, thiserror::Error)]
pub enum ProfileError {
    /// Not valid TOML, or an unknown or mistyped field.
    #[error("profile {path}: {source}")]
    Toml {
        /// The profile file, as named by the caller.
        path: String,
        /// The parser's error.
        source: toml::de::Error,
    },
    /// `skill` is outside 0..=1.
    #[error("profile {path}: skill must be within 0..=1, got {skill}")]
    Skill {
        /// The profile file.
        path: String,
        /// The value given.
        skill: f64,
    },
    /// `edits_per_turn` is 0, so the agent could never finish.
    #[error("profile {path}: edits_per_turn must be at least 1")]
    EditsPerTurn {
        /// The profile file.
        path: String,
    },
}

impl Profile {
    /// Parses and checks a profile; `path` only names it in errors.
    pub fn parse(text: &str, path: &str) -> Result<Self, ProfileError> {
        let profile: Profile = toml::from_str(text).map_err(|source| ProfileError::Toml {
            path: path.to_owned(),
            source,
        })?;
        if !(0.0..=1.0).contains(&profile.skill) {
            return Err(ProfileError::Skill {
                path: path.to_owned(),
                skill: profile.skill,
            });
        }
        if profile.edits_per_turn == 0 {
            return Err(ProfileError::EditsPerTurn {
                path: path.to_owned(),
            });
        }
        Ok(profile)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_unknown_keys() {
        let p = Profile::parse("name = \"x\"", "p.toml").unwrap();
        assert_eq!(p.max_turns, 6);
        assert!(p.stream);
        assert_eq!(p.clarify, ClarifyPolicy::Never);
        let err = Profile::parse("name = \"x\"\nbogus = 1", "p.toml").unwrap_err();
        assert!(err.to_string().contains("bogus"), "{err}");
        assert!(Profile::parse("name = \"x\"\nskill = 1.5", "p.toml").is_err());
        let p = Profile::parse(
            "name = \"x\"\n[adversarial]\nmisreport_tokens = -7",
            "p.toml",
        )
        .unwrap();
        assert_eq!(p.adversarial.misreport_tokens, -7);
    }
}
