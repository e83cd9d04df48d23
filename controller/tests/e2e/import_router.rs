//! `eval import v04-router`: Plan Lattice's router corpora (read from `../shared/v04-upstream/
//! router`, never copied into this repository) imported into temporary projects, without an
//! engine: the model-free protocol loads and plans every row once per arm, its tasks are split by
//! label with the wire expectations of the labels, the prompt reaches dsh through `EVAL_TASK`
//! (never as an argv a leading `-` could turn into an option), and refusals (a prompt file that is
//! not the manifest's, a link, an existing target) exit 2 and write nothing.
//!
//! The tests of this behaviour that need a Docker engine; the rest are in `tests/it/import_router.rs`.

pub(crate) use crate::support::import_router::*;
use crate::support::{eval, text};
use std::path::Path;

/// The route a first request's tools show (V04-SUITES.md, "What a route looks like in the real
/// Harness"): written here from that table, independently of `wire_metrics::route_of`.
fn route_of_tools(tools: &[String]) -> &'static str {
    let l: std::collections::BTreeSet<&str> = tools
        .iter()
        .map(String::as_str)
        .filter(|t| t.starts_with("lattice_"))
        .collect();
    match l.len() {
        0 => "bypass",
        1 if l.contains("lattice_route") => "probe",
        6 if !l.contains("lattice_route") && l.contains("lattice_intake") => "contract",
        15 if !l.contains("lattice_route") => "lattice",
        _ => "none",
    }
}

/// The reference: the same package's own `routeRequest` with the options Plan Lattice scores it
/// by (`eval/router-corpus/evaluate-real-blind.mjs`), run with Node on the prompts as imported.
fn reference_routes(
    prompts: &std::collections::BTreeMap<String, String>,
    scratch: &Path,
) -> std::collections::BTreeMap<String, String> {
    let pkg = scratch.join("pkg");
    std::fs::create_dir_all(&pkg).unwrap();
    let o = std::process::Command::new("tar")
        .args(["xzf", upstream().join(PACKAGE).to_str().unwrap(), "-C"])
        .arg(&pkg)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let script = scratch.join("ref.mjs");
    std::fs::write(
        &script,
        "import { routeRequest } from './pkg/package/lib/router.js';\n\
         import { readFileSync } from 'node:fs';\n\
         const rows = JSON.parse(readFileSync(0, 'utf8'));\n\
         const out = {};\n\
         for (const [id, text] of Object.entries(rows)) out[id] = routeRequest(text, {activationMode: 'auto', clarificationPolicy: 'critical', controlCeiling: 'lattice', longTaskThreshold: 8}).phase;\n\
         console.log(JSON.stringify(out));\n",
    )
    .unwrap();
    let node = std::env::var("EVAL_TEST_NODE").unwrap_or_else(|_| "node".into());
    let mut child = std::process::Command::new(&node)
        .arg(&script)
        .current_dir(scratch)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{node}: {e} (set EVAL_TEST_NODE to a Node ≥ 20)"));
    use std::io::Write as _;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(serde_json::to_string(prompts).unwrap().as_bytes())
        .unwrap();
    let o = child.wait_with_output().unwrap();
    assert!(o.status.success());
    serde_json::from_slice(&o.stdout).unwrap()
}

/// The imported corpus, cut to a CI-sized subset (V1 rows of each label, override rows of each
/// kind, and a made-up prompt starting with `-`), frozen and run through the real Harness with the
/// real rc.3 package against the model-free upstream: every attempt's route on the wire equals the
/// package's own `routeRequest` on the same prompt, `native` is bypass everywhere, the transcript
/// agrees with the wire (no anomaly), and the report's gate values are what those routes imply.
#[test]
fn the_router_gate_runs_through_the_real_harness_and_agrees_with_route_request() {
    let Some(image) = crate::dsh_harness::image_id() else {
        return;
    };
    if !crate::support::docker_available() {
        return;
    }
    crate::support::static_binaries();
    let (tmp, proj) = project();
    let pkg = upstream().join(PACKAGE);
    let o = eval(
        &proj,
        &[
            "import",
            "v04-router",
            "--from",
            upstream().join("router").to_str().unwrap(),
            "--package",
            pkg.to_str().unwrap(),
            "--dsh-image",
            &image,
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let p = proj.join("protocols/router");
    // A prompt the launcher would take for an option, were it passed as argv.
    let dash = p.join("tasks/bypass/dash-prompt");
    std::fs::create_dir_all(dash.join("workspace")).unwrap();
    std::fs::create_dir_all(dash.join("hidden")).unwrap();
    std::fs::write(dash.join("hidden/README"), "-\n").unwrap();
    std::fs::write(
        dash.join("prompt.md"),
        "-h is not an option: fix the typo in README.md\n",
    )
    .unwrap();
    let t = std::fs::read_to_string(p.join("tasks/bypass/real-blind-001/task.toml")).unwrap();
    std::fs::write(
        dash.join("task.toml"),
        t.replace("\"real-blind-001\"", "\"dash-prompt\""),
    )
    .unwrap();
    let keep = [
        "real-blind-001",
        "real-blind-002",
        "dash-prompt",
        "real-blind-041",
        "real-blind-081",
        "real-blind-120",
        "blind-override-bypass-1",
        "blind-override-no-questions-1",
        "development-override-lattice-1",
    ];
    let m = proj.join("matrix/router.toml");
    let text_m = std::fs::read_to_string(&m).unwrap();
    let mut cut = String::new();
    for l in text_m.lines() {
        let id = l.trim().trim_end_matches(',').trim_matches('"');
        if l.starts_with("  \"") && !keep.contains(&id) {
            continue;
        }
        cut.push_str(l);
        cut.push('\n');
        if l == "tasks = [" && cut.contains("id = \"bypass\"") && !cut.contains("\"dash-prompt\"") {
            cut.push_str("  \"dash-prompt\",\n");
        }
    }
    std::fs::write(&m, cut).unwrap();
    let o = eval(&proj, &["freeze", "--protocol", "router"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let o = eval(
        &proj,
        &[
            "run",
            "--matrix",
            "router",
            "--upstream",
            "model-free",
            "--concurrency",
            "2",
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));

    let es = crate::support::entries(&proj.join("runs/router/ledger.sqlite"));
    let started = crate::support::payloads(&es, "attempt_started");
    assert_eq!(started.len(), 2 * keep.len());
    let outcomes = crate::support::payloads(&es, "attempt_outcome");
    for o in &outcomes {
        assert_eq!(o["outcome"], "completed", "{o}");
        assert_eq!(o["model_turns"], 1, "one request, then the plain stop: {o}");
    }
    // The wire's route per attempt: the first agent request with tools.
    let mut first: std::collections::BTreeMap<String, (u64, Vec<String>)> = Default::default();
    for c in crate::support::payloads(&es, "model_call") {
        let Some(tools) = c["record"]["wire"]["tools"].as_array() else {
            continue;
        };
        let seq = c["seq"].as_u64().unwrap();
        let a = c["attempt"].as_str().unwrap().to_owned();
        if first.get(&a).is_none_or(|(s, _)| seq < *s) {
            let names = tools
                .iter()
                .map(|t| t.as_str().unwrap().to_owned())
                .collect();
            first.insert(a, (seq, names));
        }
    }
    let mut prompts = std::collections::BTreeMap::new();
    for id in keep {
        let suite = ["bypass", "complex", "override"]
            .into_iter()
            .find(|s| p.join(format!("tasks/{s}/{id}")).exists())
            .unwrap();
        let text =
            std::fs::read_to_string(p.join(format!("tasks/{suite}/{id}/prompt.md"))).unwrap();
        prompts.insert(id.to_owned(), text.trim_end_matches('\n').to_owned());
    }
    let reference = reference_routes(&prompts, tmp.path());
    let mut implied: std::collections::BTreeMap<&str, Vec<bool>> = Default::default();
    for s in &started {
        let (attempt, task, arm, suite) = (
            s["attempt"].as_str().unwrap(),
            s["task"].as_str().unwrap(),
            s["arm"].as_str().unwrap(),
            s["suite"].as_str().unwrap(),
        );
        let (_, tools) = first
            .get(attempt)
            .unwrap_or_else(|| panic!("{attempt}: no request with tools"));
        let route = route_of_tools(tools);
        if arm == "native" {
            assert_eq!(
                route, "bypass",
                "{attempt}: the negative control routes nothing"
            );
            continue;
        }
        assert_eq!(route, reference[task], "{attempt}: wire vs routeRequest");
        implied.entry(suite).or_default().push(route != "bypass");
    }
    // The report's gate values are what those routes imply.
    let o = eval(&proj, &["report", "--matrix", "router", "--allow-unsigned"]);
    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(proj.join("runs/router/report.json")).unwrap())
            .unwrap();
    assert!(
        json["checks"]["model_free_upstream"] == true,
        "{}",
        text(&o)
    );
    assert!(
        !json["anomalies"].to_string().contains("wire:"),
        "the transcript agrees with the wire: {}",
        json["anomalies"]
    );
    let value = |gate: &str| {
        json["gates"]
            .as_array()
            .unwrap()
            .iter()
            .find(|g| g["id"] == gate)
            .unwrap()["rules"][0]["value"]
            .as_f64()
            .unwrap()
    };
    let share = |v: &[bool], x: bool| v.iter().filter(|b| **b == x).count() as f64 / v.len() as f64;
    assert_eq!(
        value("simple_false_activation"),
        share(&implied["bypass"], true)
    );
    assert_eq!(value("complex_recall"), share(&implied["complex"], false));
    assert_eq!(
        value("outcome_critical_bypasses"),
        implied["complex"].iter().filter(|b| !**b).count() as f64
    );
    assert_eq!(
        value("override_compliance"),
        1.0,
        "rc.3 complies with these overrides"
    );
    let expect_exit = if json["release_allowed"] == true {
        0
    } else {
        1
    };
    assert_eq!(o.status.code(), Some(expect_exit), "{}", text(&o));
}
