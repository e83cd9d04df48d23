//! The per-arm fixture profile (`/opt/eval/profile.toml` inside the arm's image).

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Profile {
    pub name: String,
    #[serde(default = "default_model")]
    pub model: String,
    #[serde(default)]
    pub temperature: f64,
    #[serde(default = "default_max_tokens")]
    pub max_tokens: u64,
    #[serde(default = "yes")]
    pub stream: bool,
    #[serde(default = "default_skill")]
    pub skill: f64,
    #[serde(default = "default_max_turns")]
    pub max_turns: u32,
    #[serde(default = "default_edits_per_turn")]
    pub edits_per_turn: u32,
    #[serde(default)]
    pub plan_turn: bool,
    #[serde(default)]
    pub padding_tokens: u64,
    #[serde(default)]
    pub clarify: ClarifyPolicy,
    #[serde(default = "default_max_questions")]
    pub max_questions: u32,
    #[serde(default)]
    pub adversarial: Adversarial,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ClarifyPolicy {
    #[default]
    Never,
    Critical,
    Always,
}

/// Escape attempts for isolation tests. Each probe's result is recorded in the metrics file.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Adversarial {
    #[serde(default)]
    pub read_env: Vec<String>,
    #[serde(default)]
    pub connect_tcp: Vec<u16>,
    #[serde(default)]
    pub read_paths: Vec<String>,
    #[serde(default)]
    pub write_paths: Vec<String>,
    #[serde(default)]
    pub list_interfaces: bool,
    #[serde(default)]
    pub sleep_secs: u64,
    #[serde(default)]
    pub model_override: Option<String>,
    #[serde(default)]
    pub max_tokens_override: Option<u64>,
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

#[derive(Debug, thiserror::Error)]
pub enum ProfileError {
    #[error("profile {path}: {source}")]
    Toml {
        path: String,
        source: toml::de::Error,
    },
    #[error("profile {path}: skill must be within 0..=1, got {skill}")]
    Skill { path: String, skill: f64 },
    #[error("profile {path}: edits_per_turn must be at least 1")]
    EditsPerTurn { path: String },
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
