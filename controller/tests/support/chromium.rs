//! Headless Chromium for the tests that open pages (the report site, Inspect's viewer): which
//! binary, and the flags every run of it takes. Included by `controller/src/report_tests/site.rs`
//! as well as by this directory's `mod.rs`.

use std::path::PathBuf;

/// Every headless run: no sandbox (the tests may run as root in a container), no GPU, no first-run
/// pages, nothing fetched on Chromium's own behalf.
pub const HEADLESS: [&str; 7] = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
];

/// `EVAL_TEST_CHROMIUM`, else the Chromium on the path (scripts/ensure-chromium.sh).
pub fn chromium() -> PathBuf {
    match std::env::var("EVAL_TEST_CHROMIUM") {
        Ok(p) if !p.is_empty() => PathBuf::from(p),
        _ => {
            let o = std::process::Command::new("sh")
                .args(["-c", "command -v chromium || command -v chromium-browser"])
                .output()
                .unwrap();
            assert!(
                o.status.success(),
                "Chromium is needed: run scripts/ensure-chromium.sh (or set EVAL_TEST_CHROMIUM)"
            );
            PathBuf::from(String::from_utf8(o.stdout).unwrap().trim())
        }
    }
}
