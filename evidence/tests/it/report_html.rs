//! The HTML report renders in a real browser: headless Chromium loads the file (no network) and
//! the DOM it builds must show the verdict and one SVG forest plot per suite.

use std::process::Command;

use crate::support::*;
use eval_evidence::report::*;

// The binary and the flags every headless run takes, shared with the controller's tests.
#[path = "../../../controller/tests/support/chromium.rs"]
mod chromium;
use chromium::{HEADLESS, chromium};

fn dump_dom(html: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("report.html");
    std::fs::write(&file, html).unwrap();
    let profile = dir.path().join("profile");
    let out = Command::new(chromium())
        .args(HEADLESS)
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg("--dump-dom")
        .arg(format!("file://{}", file.display()))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "chromium failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn html_report_renders_verdict_and_forest_plot_in_chromium() {
    let mut run = run_data([10.0, 5.0, 0.0, 20.0, 15.0, 10.0]);
    run.fixture_upstream = true;
    let report = build_report(&run).unwrap();
    let html = render(&report, Format::Html).unwrap();
    assert!(!html.contains("<script"), "the report needs no scripts");
    let dom = dump_dom(&html);
    // Parsed by the browser, not just present in our string: Chromium re-serialises the DOM.
    assert!(dom.contains("id=\"verdict\""), "{dom}");
    assert!(dom.contains("RELEASE NOT ALLOWED"), "verdict missing");
    assert!(dom.contains("data-release-allowed=\"false\""));
    assert!(dom.contains("fixture upstream"), "reason missing");
    let svg_at = dom
        .find("<svg class=\"forest\" id=\"forest-s\"")
        .expect("forest plot SVG missing");
    let svg = &dom[svg_at..dom[svg_at..].find("</svg>").unwrap() + svg_at];
    assert_eq!(
        svg.matches("class=\"ci-bca\"").count(),
        2,
        "one interval per compared arm"
    );
    assert_eq!(svg.matches("class=\"estimate\"").count(), 2);
    // Verdict first: it comes before the gates table and the plot.
    assert!(dom.find("id=\"verdict\"").unwrap() < dom.find("id=\"gates\"").unwrap());
    assert!(dom.find("id=\"gates\"").unwrap() < svg_at);
    assert!(dom.contains("Token and turn accounting per arm"));
    assert!(dom.contains("Infrastructure faults and reruns"));

    // An allowed run says so.
    run.fixture_upstream = false;
    let html = render(&build_report(&run).unwrap(), Format::Html).unwrap();
    let dom = dump_dom(&html);
    assert!(dom.contains("RELEASE ALLOWED") && dom.contains("data-release-allowed=\"true\""));
}
