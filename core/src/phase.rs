//! The two phases of a run's schedule.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::name::UnknownName;

/// Which part of the schedule a slot belongs to. Serialized as `infrastructure` / `statistical`
/// in the matrix plan, the run ledger and the report's `RunData`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// Control arms (oracle, nop, exploits) graded before anything else: no agent, no model
    /// call, excluded from statistics; they test the grader, not an arm.
    Control,
    /// Run first, in the declared order, excluded from statistics.
    Infrastructure,
    /// The preregistered, seeded-order slots the statistics are computed from.
    Statistical,
}

impl Phase {
    /// Every phase, in schedule order.
    pub const ALL: [Phase; 3] = [Phase::Control, Phase::Infrastructure, Phase::Statistical];

    /// The name the ledger and the plan write.
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Control => "control",
            Phase::Infrastructure => "infrastructure",
            Phase::Statistical => "statistical",
        }
    }
}

impl fmt::Display for Phase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Phase {
    type Err = UnknownName;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        crate::name::parse("phase", s, &Self::ALL, Self::as_str)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_serde_and_parse_agree_for_every_phase() {
        for p in Phase::ALL {
            let json = serde_json::to_value(p).unwrap();
            assert_eq!(json, serde_json::Value::String(p.to_string()));
            assert_eq!(p.as_str().parse::<Phase>().unwrap(), p);
            assert_eq!(serde_json::from_value::<Phase>(json).unwrap(), p);
        }
        assert_ne!(Phase::Infrastructure.as_str(), Phase::Statistical.as_str());
    }

    #[test]
    fn unknown_phase_is_refused_naming_the_value() {
        let e = "Statistical".parse::<Phase>().unwrap_err();
        assert_eq!(e.value, "Statistical");
        let msg = e.to_string();
        assert!(
            msg.contains("\"Statistical\"") && msg.contains("infrastructure"),
            "{msg}"
        );
    }
}
