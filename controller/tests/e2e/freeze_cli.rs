//! `eval init`, `plan`, `freeze`, `verify` and `retire` through the built binary, in temporary
//! project directories.
//!
//! The tests of this behaviour that need a Docker engine; the rest are in `tests/it/freeze_cli.rs`.

pub(crate) use crate::support::freeze_cli::*;
use crate::support::{eval, text};

/// The report shows, per interval rule, exactly the power figures `eval freeze` printed: the
/// same function from the same frozen protocol and seeds. The text/md/html carry the freeze
/// line verbatim; the JSON's numbers format to the line's figures.
#[test]
fn the_report_shows_the_power_freeze_printed() {
    use crate::support::{
        Sweep, docker_available, edit, identity_of, small_demo_project, static_binaries,
    };
    if !docker_available() {
        eprintln!("skipping: no Docker engine");
        return;
    }
    static_binaries();
    let (_tmp, dir) = small_demo_project();
    // Three icae tasks, so the simulated interval is not the degenerate one-task case.
    edit(&dir.join("matrix/demo.toml"), |s| {
        s.replace(
            "  \"demo-icae-1\",\n",
            "  \"demo-icae-1\",\n  \"demo-icae-2\",\n  \"demo-icae-3\",\n",
        )
    });
    edit(&dir.join("protocols/demo/protocol.toml"), |s| {
        s + "\n[power.icae]\neffect = 15.0\nsd = 12.0\n"
    });
    let o = eval(&dir, &["freeze", "--protocol", "demo"]);
    assert_eq!(code(&o), 0, "{}", text(&o));
    let out = text(&o);
    let lines: Vec<&str> = out.lines().filter(|l| l.starts_with("power: ")).collect();
    assert!(
        lines.iter().any(|l| l.contains("gate icae")
            && l.contains("3 tasks")
            && l.contains("power at the declared effect 15 (sd 12): ")),
        "{out}"
    );
    let _sweep = Sweep(format!("eval.identity={}", identity_of(&dir)));
    let o = eval(&dir, &["run", "--matrix", "demo", "--upstream", "fixture"]);
    assert_eq!(code(&o), 0, "{}", text(&o));

    for format in ["text", "md", "html"] {
        let o = eval(&dir, &["report", "--matrix", "demo", "--format", format]);
        let shown = String::from_utf8_lossy(&o.stdout).to_string();
        for l in &lines {
            // Markdown escapes nothing in these lines; HTML escapes nothing either (no & < >).
            assert!(shown.contains(l), "{format} lacks {l:?}:\n{shown}");
        }
    }
    let o = eval(&dir, &["report", "--matrix", "demo", "--format", "json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let rows = v["power"].as_array().unwrap();
    assert_eq!(rows.len(), lines.len(), "{v}");
    for (row, l) in rows.iter().zip(&lines) {
        assert!(
            l.contains(&format!(
                "gate {} rule {} ",
                row["gate"].as_str().unwrap(),
                row["rule"].as_str().unwrap()
            )),
            "{row} {l}"
        );
        let mde = format!(
            "minimum detectable effect at 80% power: {:.3}",
            row["mde80"].as_f64().unwrap()
        );
        assert!(l.contains(&mde), "{row} {l}");
        assert_eq!(row["reps"], 2000, "{row}");
        if let Some(p) = row["power"].as_f64() {
            let se = row["power_se"].as_f64().unwrap();
            let at = format!(": {:.1}% ± {:.1}; ", 100.0 * p, 100.0 * se);
            assert!(l.contains(&at), "{row} {l}");
            assert_eq!(row["effect"], 15.0, "{row}");
            assert_eq!(row["sd_units"], false, "{row}");
        } else {
            assert_eq!(row["sd_units"], true, "{row}");
        }
    }
    assert!(rows.iter().any(|r| r["power"].is_f64()), "{v}");
}
