//! What `eval plan` and `eval freeze` say about a protocol's preconditions before anything is
//! built or paid for: each pinned evaluation that has no passed report in the state directory's
//! registry by a signed attestation that verifies with the preregistered key (the same check `eval run`
//! refuses on, `eval_runlog::preconditions::check`),
//! or that none is pinned. Saying it up front spares building everything to learn it at
//! `eval run` (exit 3).

use eval_protocols::Project;
use eval_protocols::registry::Registry;
use std::path::Path;

/// The lines to print for protocol `name`; a protocol that does not load says nothing here (the
/// command itself reports that where it matters).
pub fn lines(project: &Project, name: &str, state: &Path) -> Vec<String> {
    let Ok(loaded) = project.load(name) else {
        return Vec::new();
    };
    if loaded.protocol.preconditions.is_empty() {
        return vec![format!(
            "preconditions: none pinned (protocol {name} requires no other evaluation to have passed before a paid run)"
        )];
    }
    let reg = match Registry::open(state) {
        Ok(r) => r,
        Err(e) => {
            return vec![format!(
                "preconditions: cannot be checked ({e}); a paid run checks them and refuses to start unless each has passed"
            )];
        }
    };
    let (met, unmet) = eval_runlog::preconditions::check(&reg, &loaded.protocol);
    let mut out: Vec<String> = met
        .iter()
        .map(|m| {
            format!(
                "precondition {}: met by the passed report (registry seq {}) of {}",
                m.protocol, m.report_seq, m.identity
            )
        })
        .collect();
    out.extend(unmet.iter().map(|u| {
        format!(
            "precondition {}: NOT MET, {}; a paid `eval run` will refuse to start (exit 3) until it is",
            u.protocol, u.reason
        )
    }));
    out
}
