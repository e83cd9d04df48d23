//! A/A calibration (`eval run --aa`): the frozen protocol's schedule with every suite's gated
//! candidate arm replaced by an identical copy of the suite's baseline arm.
//!
//! The copy keeps the candidate's arm id (so the schedule, the slots and every gate are exactly
//! the real run's) and takes everything else from the baseline's definition, byte for byte:
//! runtime definition (and with it image, patches, prompts), profile, package, settings. Nothing
//! differs between the two arms but their names, so any gate that fails on such a run failed
//! under no effect: the run is the natural pilot of `eval plan --calibrate` and never evidence.

use serde::{Deserialize, Serialize};

use crate::project::Loaded;
use crate::protocol::Protocol;

/// One candidate arm turned into a copy of its suite's baseline.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AaCopy {
    /// The suite whose gated candidate this is.
    pub suite: String,
    /// The candidate arm's id (kept).
    pub arm: String,
    /// The baseline arm whose definition it runs.
    pub copies: String,
}

/// Which arm each suite's candidate copies, or why the protocol has no A/A run (an arm that is
/// the candidate of one suite and the baseline of another, or the candidate of two suites with
/// different baselines, cannot be both at once). Each refusal names the suites and arms.
pub fn aa_copies(loaded: &Loaded) -> Result<Vec<AaCopy>, Vec<String>> {
    let suites = &loaded.matrix.suites;
    let mut copies: Vec<AaCopy> = Vec::new();
    let mut bad = Vec::new();
    for s in suites {
        if let Some(b) = suites.iter().find(|o| o.baseline == s.candidate) {
            bad.push(format!(
                "arm {:?} is the candidate of suite {} and the baseline of suite {}: an A/A run cannot replace it by a copy of {:?}",
                s.candidate, s.id, b.id, s.baseline
            ));
            continue;
        }
        if let Some(c) = copies
            .iter()
            .find(|c| c.arm == s.candidate && c.copies != s.baseline)
        {
            bad.push(format!(
                "arm {:?} is the candidate of suite {} (baseline {:?}) and of suite {} (baseline {:?}): an A/A run cannot copy both",
                s.candidate, c.suite, c.copies, s.id, s.baseline
            ));
            continue;
        }
        for arm in [&s.baseline, &s.candidate] {
            if !loaded.protocol.arms.iter().any(|a| &a.id == arm) {
                bad.push(format!(
                    "suite {}: arm {arm:?} is not defined by protocol {}",
                    s.id, loaded.protocol.name
                ));
            }
        }
        copies.push(AaCopy {
            suite: s.id.clone(),
            arm: s.candidate.clone(),
            copies: s.baseline.clone(),
        });
    }
    if bad.is_empty() { Ok(copies) } else { Err(bad) }
}

/// Rewrites `protocol`'s arms: each copied candidate becomes its baseline's definition under
/// its own id. Copies naming an arm the protocol does not define are skipped ([`aa_copies`]
/// refuses them first).
pub fn apply_aa(protocol: &mut Protocol, copies: &[AaCopy]) {
    for c in copies {
        let Some(base) = protocol.arms.iter().find(|a| a.id == c.copies).cloned() else {
            continue;
        };
        if let Some(arm) = protocol.arms.iter_mut().find(|a| a.id == c.arm) {
            *arm = crate::protocol::Arm {
                id: c.arm.clone(),
                ..base
            };
        }
    }
}
