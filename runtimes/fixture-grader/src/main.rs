//! `eval-fixture-grader`: scores a final workspace (read-only) against the task's
//! `hidden/checks.toml` and writes `score.json`. Runs in its own network-less container.
//!
//! Must never: modify the workspace, or read anything but the workspace and the hidden files.

use std::fs;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use eval_fixture_core::checks::{Checks, grade};

fn log(msg: &str) {
    let _ = writeln!(std::io::stderr(), "eval-fixture-grader: {msg}");
}

fn run() -> Result<(), String> {
    let mut it = std::env::args().skip(1);
    let (mut workspace, mut hidden, mut out) = (None, None, None);
    while let Some(a) = it.next() {
        let v = it.next().ok_or_else(|| format!("{a} needs a value"))?;
        match a.as_str() {
            "--workspace" => workspace = Some(PathBuf::from(v)),
            "--hidden" => hidden = Some(PathBuf::from(v)),
            "--out" => out = Some(PathBuf::from(v)),
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    let workspace = workspace.ok_or("--workspace is required")?;
    let hidden = hidden.ok_or("--hidden is required")?;
    let out = out.ok_or("--out is required")?;
    let checks_path = hidden.join("checks.toml");
    let text =
        fs::read_to_string(&checks_path).map_err(|e| format!("{}: {e}", checks_path.display()))?;
    let checks = Checks::parse(&text).map_err(|e| format!("{}: {e}", checks_path.display()))?;
    let score = grade(&checks, &workspace);
    let bytes = serde_json::to_vec(&score).map_err(|e| e.to_string())?;
    fs::write(&out, bytes).map_err(|e| format!("{}: {e}", out.display()))
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            log(&e);
            ExitCode::from(2)
        }
    }
}
