#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! The site, from a real (Docker-free) run: every page is escaped, every link resolves, the
//! verdict is the report's, and — in headless Chromium — every page loads, nothing runs.

use super::synthetic::{HOSTILE, Shape, Synthetic, build};
use eval_evidence::artifacts::ArtifactStore;
use eval_evidence::ledger::{Digest, LedgerReader};
use eval_evidence::report::{Report, RunData};
use eval_report::site::*;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The demo project run once per test binary, small: one repetition, three calls per attempt,
/// hostile text everywhere an agent, a model or a grader can put it.
fn hostile_run(dir: &Path) -> Synthetic {
    build(
        dir,
        Shape {
            repetitions: 1,
            calls: 3,
            hostile: true,
        },
    )
}

/// The run's data and its published report.
fn data_and_report(run: &Synthetic) -> (RunData, Report) {
    let data = eval_report::data::build(
        &run.root,
        &run.state,
        &run.matrix,
        &crate::driver::running(),
    )
    .unwrap();
    let report = crate::commands::report::publish(&data, &run.state, None).unwrap();
    (data, report)
}

fn report_and_site(run: &Synthetic, out: &Path) -> (RunData, Report, SiteSummary) {
    let (data, report) = data_and_report(run);
    let summary = write(&run.state, &data, &report, out).unwrap();
    (data, report, summary)
}

fn files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

/// Every `href="…"` / `src="…"` value in an HTML text (ours: always double-quoted).
fn links(html: &str) -> Vec<String> {
    let mut out = Vec::new();
    for attr in ["href=\"", "src=\""] {
        let mut rest = html;
        while let Some(i) = rest.find(attr) {
            rest = &rest[i + attr.len()..];
            let end = rest.find('"').unwrap();
            out.push(rest[..end].replace("&amp;", "&"));
            rest = &rest[end..];
        }
    }
    out
}

fn ids(html: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut rest = html;
    while let Some(i) = rest.find(" id=\"") {
        rest = &rest[i + 5..];
        let end = rest.find('"').unwrap();
        out.insert(rest[..end].to_owned());
        rest = &rest[end..];
    }
    out
}

/// Resolves `link` relative to the page at `page` (a path inside `root`); `None` when it leaves
/// the site.
fn resolve(root: &Path, page: &Path, link: &str) -> Option<(PathBuf, Option<String>)> {
    let (path, frag) = match link.split_once('#') {
        Some((p, f)) => (p, Some(f.to_owned())),
        None => (link, None),
    };
    let mut target = if path.is_empty() {
        page.to_path_buf()
    } else {
        let mut t = page.parent().unwrap().to_path_buf();
        for part in path.split('/') {
            match part {
                ".." => {
                    if !t.pop() {
                        return None;
                    }
                }
                "." | "" => {}
                p => t.push(p),
            }
        }
        t
    };
    if !target.starts_with(root) {
        return None;
    }
    target = target.components().collect();
    Some((target, frag))
}

#[test]
fn the_site_escapes_what_agents_wrote_and_every_link_resolves() {
    let tmp = tempfile::tempdir().unwrap();
    let run = hostile_run(tmp.path());
    let out = tmp.path().join("site");
    let (data, report, summary) = report_and_site(&run, &out);
    assert_eq!(summary.attempts, data.attempts.len());
    assert!(data.attempts.len() >= 20, "{}", data.attempts.len());
    let all = files(&out);
    let html: BTreeMap<PathBuf, String> = all
        .iter()
        .filter(|p| p.extension().is_some_and(|e| e == "html"))
        .map(|p| (p.clone(), std::fs::read_to_string(p).unwrap()))
        .collect();
    // One page per attempt, per task, the index, the attempt list and the one-page report.
    let tasks: usize = report.suites.iter().map(|s| s.tasks.len()).sum();
    assert_eq!(html.len(), data.attempts.len() + tasks + 3);
    assert_eq!(summary.pages, data.attempts.len() + tasks + 2);
    for (p, text) in &html {
        // The agent's text is on the pages, escaped, and nothing of it is markup.
        assert!(
            !text.contains("<script"),
            "{}: a script element",
            p.display()
        );
        assert!(!text.contains("<img"), "{}: an image element", p.display());
        assert!(
            !text.contains("=\"javascript:"),
            "{}: a javascript: link",
            p.display()
        );
        for l in links(text) {
            assert!(
                !l.contains("://") && !l.starts_with("//") && !l.starts_with("data:"),
                "{}: an external reference {l}",
                p.display()
            );
            let (target, frag) = resolve(&out, p, &l)
                .unwrap_or_else(|| panic!("{}: {l} leaves the site", p.display()));
            assert!(
                all.contains(&target),
                "{}: broken link {l} ({})",
                p.display(),
                target.display()
            );
            if let Some(f) = frag {
                let t = html.get(&target).expect("a fragment into a page");
                assert!(
                    ids(t).contains(&f),
                    "{}: no #{f} in {}",
                    p.display(),
                    target.display()
                );
            }
        }
    }
    // The escaped hostile text reaches the pages (so the test would see it unescaped).
    let escaped = eval_evidence::report::render::esc(HOSTILE);
    let attempt_page = html
        .iter()
        .find(|(p, _)| p.starts_with(out.join("attempts")))
        .map(|(_, t)| t)
        .unwrap();
    assert!(
        attempt_page.matches(&escaped).count() >= 5,
        "the hostile text is shown (escaped) in the detail, checks, logs, transcript and notes"
    );
    // The verdict is the report's, and report.json is the recorded one, byte for byte.
    let index = &html[&out.join("index.html")];
    assert!(index.contains(&format!(
        "data-release-allowed=\"{}\"",
        report.release_allowed
    )));
    assert!(index.contains(&eval_evidence::report::render::esc(&report.verdict_line())));
    let recorded =
        std::fs::read(eval_runlog::layout::run_dir(&run.state, &run.matrix).join("report.json"))
            .unwrap();
    assert_eq!(std::fs::read(out.join("report.json")).unwrap(), recorded);
    // Every attempt page is reachable from the index (through the attempt list).
    let list = &html[&out.join("attempts.html")];
    for a in &data.attempts {
        assert!(list.contains(&format!(
            "{}#{}",
            eval_evidence::report::render::esc(&a.slot),
            a.attempt
        )));
    }
}

/// A suite the protocol runs without control arms is a warning, not a reason: the site's front
/// page shows every warning of the report (escaped), as its text and Markdown do.
#[test]
fn the_front_page_shows_the_reports_warnings() {
    let tmp = tempfile::tempdir().unwrap();
    let run = hostile_run(tmp.path());
    let (data, mut report) = data_and_report(&run);
    let plain = tmp.path().join("plain");
    write(&run.state, &data, &report, &plain).unwrap();
    let before = std::fs::read_to_string(plain.join("index.html")).unwrap();
    for w in &report.warnings {
        assert!(
            before.contains(&eval_evidence::report::render::esc(w)),
            "{w}"
        );
    }
    let warning = format!("suite simple runs without control arms: {HOSTILE}");
    report.warnings.push(warning.clone());
    let out = tmp.path().join("site");
    write(&run.state, &data, &report, &out).unwrap();
    let index = std::fs::read_to_string(out.join("index.html")).unwrap();
    assert!(index.contains("<ul id=\"warnings\">"), "{index}");
    assert!(index.contains(&eval_evidence::report::render::esc(&warning)));
}

#[test]
fn out_must_be_new_empty_or_an_earlier_site_and_the_ledger_must_still_be_the_reports() {
    let tmp = tempfile::tempdir().unwrap();
    let run = build(
        tmp.path(),
        Shape {
            repetitions: 1,
            calls: 1,
            hostile: false,
        },
    );
    let data = eval_report::data::build(
        &run.root,
        &run.state,
        &run.matrix,
        &crate::driver::running(),
    )
    .unwrap();
    let report = crate::commands::report::publish(&data, &run.state, None).unwrap();
    // A directory with someone else's files is refused, and left alone.
    let other = tmp.path().join("other");
    std::fs::create_dir_all(&other).unwrap();
    std::fs::write(other.join("notes.txt"), "mine").unwrap();
    let e = write(&run.state, &data, &report, &other).unwrap_err();
    assert!(matches!(e, SiteError::NotASite(_)), "{e}");
    assert_eq!(crate::exit::site_status(&e), crate::status::Status::Usage);
    assert_eq!(
        std::fs::read_to_string(other.join("notes.txt")).unwrap(),
        "mine"
    );
    // An earlier site is replaced whole (nothing stale is left in it).
    let out = tmp.path().join("site");
    write(&run.state, &data, &report, &out).unwrap();
    std::fs::write(out.join("stale.html"), "old").unwrap();
    write(&run.state, &data, &report, &out).unwrap();
    assert!(!out.join("stale.html").exists());
    assert!(out.join(MARKER).is_file());
    // Run data whose head the ledger does not hold (another ledger's, say) writes no site.
    let mut forged = data.clone();
    forged.ledger_head.hash = eval_evidence::ledger::Digest::of(b"another ledger").to_string();
    let fresh = tmp.path().join("fresh");
    let e = write(&run.state, &forged, &report, &fresh).unwrap_err();
    assert!(matches!(e, SiteError::LedgerChanged { .. }), "{e}");
    assert_eq!(
        crate::exit::site_status(&e),
        crate::status::Status::Integrity
    );
    assert!(!fresh.exists());
    // An artifact altered since the report re-hashed it is refused too (exit 3), nothing written.
    let store =
        ArtifactStore::open(&eval_runlog::layout::artifacts_dir(&run.state, &run.matrix)).unwrap();
    let (_, o) = eval_report::site::detail::collect(
        &LedgerReader::open(&eval_runlog::layout::ledger_path(&run.state, &run.matrix))
            .unwrap()
            .entries()
            .unwrap(),
    )
    .into_values()
    .find_map(|d| d.outcome)
    .unwrap();
    let log = Digest::parse(o.artifacts.agent_log.as_deref().unwrap()).unwrap();
    let path = store.path_of(&log);
    let mut perms = std::fs::metadata(&path).unwrap().permissions();
    #[allow(clippy::permissions_set_readonly_false)]
    perms.set_readonly(false);
    std::fs::set_permissions(&path, perms).unwrap();
    std::fs::write(&path, b"rewritten").unwrap();
    let e = write(&run.state, &data, &report, &fresh).unwrap_err();
    assert!(matches!(e, SiteError::Artifact { .. }), "{e}");
    assert_eq!(
        crate::exit::site_status(&e),
        crate::status::Status::Integrity
    );
    assert!(!fresh.exists());
}

#[test]
fn names_are_safe_and_unique() {
    assert_eq!(
        safe_name("stat-simple-t1-v0.4-auto-r1"),
        "stat-simple-t1-v0.4-auto-r1"
    );
    for bad in ["../x", "a/b", ".hidden", "", "<x>", "a b"] {
        let n = safe_name(bad);
        assert!(
            n.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')),
            "{n}"
        );
        assert!(!n.starts_with('.') && !n.is_empty(), "{n}");
    }
    assert_ne!(safe_name("a/b"), safe_name("a_b"));
    let mut names = Names::default();
    let a = names.attempt("s#1");
    assert_eq!(a, "s.1");
    assert_eq!(names.attempt("s#1"), a);
    assert_ne!(names.attempt("s.1"), a, "two ids never share a page");
}

// The binary and the flags, shared with the e2e tests that open Inspect's viewer.
#[path = "../../tests/support/chromium.rs"]
mod chromium;
use chromium::{HEADLESS, chromium};

/// A test page (outside the site; the site itself has no script) that loads every page of the
/// site in turn in an iframe, in one Chromium process, and writes what each loaded page holds as
/// JSON into its own DOM for `--dump-dom`.
const HARNESS: &str = r#"<!DOCTYPE html><html><body><pre id="out">pending</pre><script>
const pages = PAGES;
const out = {};
let i = 0;
function next() {
  if (i >= pages.length) { document.getElementById('out').textContent = JSON.stringify(out); return; }
  const url = pages[i++];
  const f = document.createElement('iframe');
  f.onload = () => {
    const r = {};
    try {
      const d = f.contentDocument;
      r.links = [...d.querySelectorAll('[href],[src]')].map(e => e.getAttribute('href') ?? e.getAttribute('src'));
      r.resolved = r.links.map(l => new URL(l, url).href);
      r.ids = [...d.querySelectorAll('[id]')].map(e => e.id);
      r.scripts = d.querySelectorAll('script,iframe,object,embed,form').length;
      r.handlers = [...d.querySelectorAll('*')].filter(e => [...e.attributes].some(a => a.name.startsWith('on'))).length;
      r.title = d.title;
      r.styled = d.styleSheets.length > 0 && d.styleSheets[0].cssRules.length > 0;
      // (split: a closing script tag in this literal would end this script element)
      r.hostile_text = d.body.textContent.includes("<scr" + "ipt>document.title='pwned'</scr" + "ipt>");
      const v = d.getElementById('verdict');
      if (v) { r.verdict = v.textContent; r.allowed = v.getAttribute('data-release-allowed'); }
      r.calls = d.querySelectorAll('section.call').length;
      r.replies = d.querySelectorAll('section.call .msg.reply > pre').length;
      r.reply_text = [...d.querySelectorAll('section.call .msg.reply > pre')].map(e => e.textContent);
      r.svgs = d.querySelectorAll('svg.forest').length;
      r.task_dots = d.querySelectorAll('svg.forest circle.task-diff').length;
    } catch (e) { r.error = String(e); }
    out[url] = r;
    f.remove();
    next();
  };
  f.src = url;
  document.body.appendChild(f);
}
next();
</script></body></html>"#;

#[test]
fn every_page_loads_in_chromium_links_resolve_nothing_runs_and_the_verdict_is_report_json() {
    let tmp = tempfile::tempdir().unwrap();
    let run = hostile_run(tmp.path());
    let out = tmp.path().join("site");
    let (_, report, _) = report_and_site(&run, &out);
    let all = files(&out);
    let url = |p: &Path| format!("file://{}", p.display());
    let pages: Vec<String> = all
        .iter()
        .filter(|p| p.extension().is_some_and(|e| e == "html"))
        .map(|p| url(p))
        .collect();
    let harness = tmp.path().join("harness.html");
    std::fs::write(
        &harness,
        HARNESS.replace("PAGES", &serde_json::to_string(&pages).unwrap()),
    )
    .unwrap();
    let o = std::process::Command::new(chromium())
        .args(HEADLESS)
        .args([
            "--allow-file-access-from-files",
            "--virtual-time-budget=600000",
        ])
        .arg(format!(
            "--user-data-dir={}",
            tmp.path().join("profile").display()
        ))
        .arg("--dump-dom")
        .arg(url(&harness))
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "chromium: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let dom = String::from_utf8(o.stdout).unwrap();
    let start = dom.find("<pre id=\"out\">").expect("harness output") + "<pre id=\"out\">".len();
    let end = start + dom[start..].find("</pre>").unwrap();
    let text = dom[start..end]
        .replace("&quot;", "\"")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&");
    assert_ne!(
        text,
        "pending",
        "Chromium ended before the harness had loaded every page: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let loaded: BTreeMap<String, serde_json::Value> = serde_json::from_str(&text).unwrap();
    assert_eq!(loaded.len(), pages.len(), "every page was loaded");
    let files: BTreeSet<String> = all.iter().map(|p| url(p)).collect();
    let mut ids: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for (page, r) in &loaded {
        assert!(r.get("error").is_none(), "{page}: {r}");
        ids.insert(
            page,
            r["ids"]
                .as_array()
                .unwrap()
                .iter()
                .map(|i| i.as_str().unwrap())
                .collect(),
        );
    }
    let mut hostile_pages = 0;
    for (page, r) in &loaded {
        assert_eq!(r["scripts"], 0, "{page}: active content");
        assert_eq!(r["handlers"], 0, "{page}: an event handler attribute");
        assert_ne!(r["title"], "pwned", "{page}: a script ran");
        if page.ends_with("/report.html") {
            continue; // the one-page report has its own stylesheet inline
        }
        assert_eq!(r["styled"], true, "{page}: site.css did not load");
        if r["hostile_text"] == true {
            hostile_pages += 1;
        }
        for l in r["resolved"].as_array().unwrap() {
            let l = l.as_str().unwrap();
            assert!(l.starts_with("file://"), "{page}: external link {l}");
            let (file, frag) = l.split_once('#').map_or((l, None), |(f, x)| (f, Some(x)));
            assert!(files.contains(file), "{page}: broken link {l}");
            if let Some(frag) = frag {
                assert!(
                    ids.get(file).is_some_and(|s| s.contains(frag)),
                    "{page}: no #{frag} in {file}"
                );
            }
        }
    }
    assert!(
        hostile_pages > 0,
        "the agent's text was shown as text somewhere"
    );
    // Every attempt page tells its conversation from the wire log: each call with its reply,
    // in order, the model's `<script>` shown as text.
    let attempt_pages: Vec<_> = loaded
        .iter()
        .filter(|(p, _)| p.contains("/attempts/"))
        .collect();
    assert!(!attempt_pages.is_empty());
    for (page, r) in attempt_pages {
        assert_eq!(r["calls"], 3, "{page}");
        assert_eq!(r["replies"], 3, "{page}");
        for (i, t) in r["reply_text"].as_array().unwrap().iter().enumerate() {
            let t = t.as_str().unwrap();
            assert!(t.starts_with(&format!("Step {}: ", i + 1)), "{page}: {t}");
            assert!(t.ends_with(HOSTILE), "{page}: the reply as text: {t}");
        }
    }
    // The verdict shown is report.json's.
    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("report.json")).unwrap()).unwrap();
    let index = &loaded[&url(&out.join("index.html"))];
    assert_eq!(index["verdict"], json["verdict"]);
    assert_eq!(index["verdict"].as_str().unwrap(), report.verdict_line());
    assert_eq!(
        index["allowed"].as_str().unwrap(),
        json["release_allowed"].as_bool().unwrap().to_string()
    );
    // One forest plot per comparison, one dot per task in each.
    let comparisons: usize = report.suites.iter().map(|s| s.comparisons.len()).sum();
    assert_eq!(index["svgs"], comparisons);
    let dots: usize = report
        .suites
        .iter()
        .flat_map(|s| &s.comparisons)
        .filter_map(|c| c.summary.as_ref())
        .map(|p| p.tasks.len())
        .sum();
    assert_eq!(index["task_dots"], dots);
}

/// Not a check: writes the hostile demo run and its site under `$EVAL_SITE_OUT` (for a look in
/// a browser, and the screenshots). `cargo test -p eval-controller --bin eval write_demo_site -- --ignored`
#[test]
#[ignore]
fn write_demo_site() {
    let dir = PathBuf::from(std::env::var("EVAL_SITE_OUT").expect("EVAL_SITE_OUT"));
    let run = hostile_run(&dir);
    let (_, report, s) = report_and_site(&run, &dir.join("site"));
    eprintln!(
        "{}: {} ({s:?})",
        dir.join("site").display(),
        report.verdict_line()
    );
}

/// Not a check: the benchmark's input (`scripts/bench-site.sh`): a finished run of
/// `$EVAL_BENCH_SITE_REPS` repetitions (45 statistical slots each, plus 6 infrastructure) with
/// `$EVAL_BENCH_SITE_CALLS` model calls per attempt, in `$EVAL_BENCH_SITE_DIR`.
#[test]
#[ignore]
fn bench_state() {
    let var = |k: &str| std::env::var(k).unwrap_or_else(|_| panic!("{k} is not set"));
    let dir = PathBuf::from(var("EVAL_BENCH_SITE_DIR"));
    let run = build(
        &dir,
        Shape {
            repetitions: var("EVAL_BENCH_SITE_REPS").parse().unwrap(),
            calls: var("EVAL_BENCH_SITE_CALLS").parse().unwrap(),
            hostile: false,
        },
    );
    eprintln!("{}", run.root.display());
}

/// A hand-built ledger's round entries: the attempt's rounds and each call's round come from
/// ledger order (a call between `round_started` 1 and 2 is round 1's), the rounds table shows
/// each round's exact values escaped, and a single-round attempt has neither.
#[test]
fn a_multi_round_attempt_page_has_a_rounds_table_from_the_ledger_order() {
    use eval_evidence::ledger::Digest;
    use eval_runlog::events;
    let mut seq = 0u64;
    let mut entry = |kind: &str, v: serde_json::Value| {
        seq += 1;
        eval_evidence::ledger::Entry {
            seq,
            prev: Digest::ZERO,
            kind: kind.to_owned(),
            payload: serde_json::to_vec(&v).unwrap(),
            hash: Digest::ZERO,
            recorded_at: String::new(),
        }
    };
    let call = |a: &str, n: u64| {
        serde_json::json!({"schema": 1, "attempt": a, "role": "agent", "seq": n, "model": "m",
            "status": 200, "result": "ok", "tokens": {"input": 1, "output": 1, "cached": 0,
            "reasoning": 0}, "metered": true, "latency_ms": 1, "record": {}})
    };
    let started = |k: u32| {
        serde_json::json!({"schema": 1, "attempt": "m#1", "round": k, "rounds": 2,
            "timeout_seconds": 60, "prompt_digest": "sha256:p", "started_at": format!("s{k}")})
    };
    let snap = format!("sha256:{}", "ab".repeat(32));
    let finished = |k: u32, status: &str, extra: serde_json::Value| {
        let mut v = serde_json::json!({"schema": 1, "attempt": "m#1", "round": k,
            "status": status, "graded": "scored", "metrics": {"score": 50.0 * k as f64},
            "model_turns": k, "tokens": 100 * k as u64, "artifacts": {"snapshot": snap},
            "finished_at": format!("f{k}")});
        for (key, val) in extra.as_object().unwrap() {
            v[key] = val.clone();
        }
        v
    };
    let entries = vec![
        entry(events::ROUND_STARTED, started(1)),
        entry(events::MODEL_CALL, call("m#1", 1)),
        entry(events::MODEL_CALL, call("s#1", 1)),
        entry(
            events::ROUND_FINISHED,
            finished(
                1,
                "passed",
                serde_json::json!({"harness": {"exit": 0, "signal": null, "timed_out": false}}),
            ),
        ),
        entry(events::MODEL_CALL, call("m#1", 2)),
        entry(events::ROUND_STARTED, started(2)),
        entry(events::MODEL_CALL, call("m#1", 3)),
        entry(
            events::ROUND_FINISHED,
            finished(
                2,
                "failed",
                serde_json::json!({"failures": ["exit"], "detail": "<b>bad</b>",
                    "harness": {"exit": 3, "signal": null, "timed_out": true}}),
            ),
        ),
    ];
    let details = detail::collect(&entries);
    let m = &details["m#1"];
    assert_eq!(m.rounds.len(), 2);
    assert_eq!(
        m.rounds[0].calls,
        [1, 2],
        "a call after round 1 ended is still round 1's"
    );
    assert_eq!(m.rounds[1].calls, [3]);
    assert_eq!(
        m.call_rounds,
        BTreeMap::from([(2, 1), (5, 1), (7, 2)]),
        "by ledger seq"
    );
    let s = &details["s#1"];
    assert!(s.rounds.is_empty() && s.call_rounds.is_empty());
    let mut none = String::new();
    html::rounds_table(&mut none, s, |_| None);
    assert!(none.is_empty());

    let mut o = String::new();
    html::rounds_table(&mut o, m, |d| (d == snap).then_some(7));
    assert!(o.contains("<h2 id=\"rounds\">Rounds (2)</h2>"), "{o}");
    assert!(
        o.contains("<tr id=\"round-1\"><td>1</td><td class=\"pass\">passed</td><td></td><td>exit 0</td><td>scored</td><td>score 50</td><td>1</td><td>100</td><td>1, 2</td><td>snapshot <code"),
        "{o}"
    );
    assert!(
        o.contains("<tr id=\"round-2\"><td>2</td><td class=\"fail\">failed</td><td>exit</td><td>exit 3, timed out</td><td>scored: &lt;b&gt;bad&lt;/b&gt;</td><td>score 100</td><td>2</td><td>200</td><td>3</td>"),
        "{o}"
    );
    assert!(o.contains("(7 bytes)</td><td>s2<br>f2</td></tr>"), "{o}");
    assert!(!o.contains("<b>"), "escaped: {o}");
}
