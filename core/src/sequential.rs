//! The protocol's `[sequential]` table: preregistered interim looks. The boundaries are computed
//! in `eval_evidence::stats::sequential`; this is the shape the protocol and the report share.

use serde::{Deserialize, Serialize};

/// How the overall α is spread over the looks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Spending {
    /// The same boundary at every look (Pocock 1977).
    Pocock,
    /// b_k = c/√t_k: very strict early, close to the fixed design at the end (O'Brien–Fleming).
    OBrienFleming,
    /// Lan–DeMets α(t) = α·ln(1 + (e − 1)t) (Pocock-like).
    LanDemetsPocock,
    /// Lan–DeMets α(t) = 2·(2 − 2Φ(z_{1−α/4}/√t)) (O'Brien–Fleming-like, α/2 a side).
    LanDemetsOBrienFleming,
}

impl Spending {
    /// The name the protocol uses.
    pub fn name(self) -> &'static str {
        match self {
            Spending::Pocock => "pocock",
            Spending::OBrienFleming => "o-brien-fleming",
            Spending::LanDemetsPocock => "lan-demets-pocock",
            Spending::LanDemetsOBrienFleming => "lan-demets-o-brien-fleming",
        }
    }
}

/// `[sequential]`: the watched gate, the looks, the spending function and the futility bound.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SequentialPlan {
    /// The gate whose first task-level rule (bootstrap or contrast lower bound, sign-flip p)
    /// the looks watch.
    pub gate: String,
    /// The looks, as fractions of the statistical slots resolved; the last is 1.
    pub looks: Vec<f64>,
    /// How α is spread over the looks.
    pub spending: Spending,
    /// Non-binding futility: stop at an interim look when z is below this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub futility_z: Option<f64>,
}

/// Why `looks` are not increasing fractions in (0, 1] ending at 1, if they are not.
pub fn check_looks(looks: &[f64]) -> Result<(), String> {
    if looks.is_empty() {
        return Err("a sequential design needs at least one look".into());
    }
    let mut prev = 0.0;
    for &t in looks {
        if !(t.is_finite() && t > prev && t <= 1.0) {
            return Err(format!(
                "look fractions must increase strictly within (0, 1]: {looks:?}"
            ));
        }
        prev = t;
    }
    if (prev - 1.0).abs() > 1e-12 {
        return Err(format!(
            "the last look must be at fraction 1 (all slots): {looks:?}"
        ));
    }
    Ok(())
}
