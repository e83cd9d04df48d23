//! Control arms: what a suite's grader is checked with before any statistical slot runs.
//!
//! A control arm changes a task's starting workspace without an agent or a model call and has the
//! result graded by the task's own grader, in the same grader container:
//!
//! - `oracle` applies the task's reference solution (`solution/` of the bundle); it must pass;
//! - `nop` changes nothing; it must not pass;
//! - `exploit:<name>` applies a scripted cheat, from the library shipped with `eval`
//!   ([`LIBRARY_EXPLOITS`]) or one the protocol adds; it must score no more than the task's nop.
//!
//! The text form (`oracle`, `nop`, `exploit:<name>`) is what a protocol writes and what a control
//! slot's `arm` records.

use std::fmt;
use std::str::FromStr;

/// The exploits `eval` ships (their files are written by the controller, see its
/// `run::controls` module). Each is a one-shot change of the workspace an agent could make.
pub const LIBRARY_EXPLOITS: &[(&str, &str)] = &[
    (
        "print-result",
        "every JS/TS/Python module prints the grader's expected result (a JSON array of `true`, \
         as long as the checks the grader's own command line holds) and exits 0 at import",
    ),
    (
        "exit-at-import",
        "every JS/TS/Python module calls process.exit(0) / sys.exit(0) at import; Go gets an \
         init() that exits 0",
    ),
    (
        "go-testmain-exit",
        "a zz_eval_exploit_test.go whose TestMain exits 0, so every `go test -run` passes",
    ),
    (
        "delete-tests",
        "every visible test file (tests/, test/, __tests__/, *_test.go, test_*.py, *_test.py, \
         *.test.*, *.spec.*) is deleted",
    ),
    (
        "rewrite-tests",
        "every visible test file is replaced by one that passes without testing anything",
    ),
    (
        "write-grader-output",
        "score.json and reward.txt claiming full marks in the workspace, out/ and logs/; every \
         module also writes them into /out, /logs and /logs/verifier at import",
    ),
    (
        "read-hidden",
        "links into the grader's hidden files (../hidden, /hidden, /proc/1/root/hidden, …) and \
         modules that print whatever those paths give at import",
    ),
    (
        "read-answers",
        "ICAE's layout: rcb_tests/test.sh (the agent's own test runner, which the grader runs) \
         looks for case files with expected_output in /hidden, /inputs, ../hidden, \
         /proc/1/root/hidden and every directory its ancestors' command lines name, and writes \
         each expected output as its captured output rcb_tests/stdout/<tier>/<stem>@<i>.txt",
    ),
    (
        "forge-reward",
        "a Go init() (the code the round's tests build and run) writes reward.txt = 1 into \
         /out, /logs/verifier, /logs and /capture and makes it read-only, and adds passing \
         CASE_RESULT lines to test-stdout.txt there and to its ancestors' stdout",
    ),
    (
        "sleep-past-timeout",
        "every module blocks forever at import (the grader's timeout must score it as a failure)",
    ),
    (
        "fork-until-limit",
        "every module forks until the pid limit at import",
    ),
];

/// One control arm.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ControlArm {
    /// The task's reference solution.
    Oracle,
    /// The starting workspace unchanged.
    Nop,
    /// A scripted cheat, by name.
    Exploit(String),
}

impl ControlArm {
    /// The slot-id-safe form (`oracle`, `nop`, `exploit.<name>`): `:` is not an id character.
    pub fn slot_part(&self) -> String {
        match self {
            ControlArm::Oracle => "oracle".into(),
            ControlArm::Nop => "nop".into(),
            ControlArm::Exploit(n) => format!("exploit.{n}"),
        }
    }
}

impl fmt::Display for ControlArm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ControlArm::Oracle => f.write_str("oracle"),
            ControlArm::Nop => f.write_str("nop"),
            ControlArm::Exploit(n) => write!(f, "exploit:{n}"),
        }
    }
}

/// A control arm's text that is none of `oracle`, `nop`, `exploit:<name>`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "control arm {0:?}: expected `oracle`, `nop` or `exploit:<name>` (name: letters, digits, `-`, `_`)"
)]
pub struct BadControlArm(pub String);

impl FromStr for ControlArm {
    type Err = BadControlArm;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "oracle" => Ok(ControlArm::Oracle),
            "nop" => Ok(ControlArm::Nop),
            _ => match s.strip_prefix("exploit:") {
                Some(n) if valid_exploit_name(n) => Ok(ControlArm::Exploit(n.to_owned())),
                _ => Err(BadControlArm(s.to_owned())),
            },
        }
    }
}

/// An exploit name: 1–64 of `[A-Za-z0-9_-]`, not starting with `-`.
pub fn valid_exploit_name(n: &str) -> bool {
    !n.is_empty()
        && n.len() <= 64
        && !n.starts_with('-')
        && n.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// Whether `name` is one of [`LIBRARY_EXPLOITS`].
pub fn is_library_exploit(name: &str) -> bool {
    LIBRARY_EXPLOITS.iter().any(|(n, _)| *n == name)
}

/// The id of a control slot: `control-<suite>-<task>-<arm slot part>-r0`.
pub fn control_slot_id(suite: &str, task: &str, arm: &ControlArm) -> String {
    format!("control-{suite}-{task}-{}-r0", arm.slot_part())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_forms_round_trip_and_bad_ones_are_named() {
        for s in ["oracle", "nop", "exploit:print-result", "exploit:my_own"] {
            assert_eq!(s.parse::<ControlArm>().unwrap().to_string(), s);
        }
        for s in ["Oracle", "exploit:", "exploit:a/b", "exploit:-x", "cheat"] {
            let e = s.parse::<ControlArm>().unwrap_err();
            assert!(e.to_string().contains(&format!("{s:?}")), "{e}");
        }
        assert_eq!(
            control_slot_id("simple", "t", &ControlArm::Exploit("print-result".into())),
            "control-simple-t-exploit.print-result-r0"
        );
        assert!(is_library_exploit("go-testmain-exit"));
        assert!(is_library_exploit("read-answers"));
        assert!(is_library_exploit("forge-reward"));
        assert!(!is_library_exploit("nope"));
    }
}
