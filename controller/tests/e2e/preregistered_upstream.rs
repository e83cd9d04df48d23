//! The preregistered upstream: a protocol's `[upstream] url` is the only server whose answers
//! are release evidence. A run against a scripted OpenAI-compatible server (here: the hostile
//! suite's, on a random loopback port) is evidence only when the frozen protocol names exactly
//! that server — and even then an unsigned run releases only with `--allow-unsigned`.

use crate::support::hostile::*;
use crate::support::*;
use serde_json::Value;
use std::path::Path;

macro_rules! need_docker {
    () => {
        if !docker_available() {
            return;
        }
        static_binaries();
    };
}

fn append_upstream(dir: &Path, url: &str) {
    let p = dir.join("protocols/demo/protocol.toml");
    let mut text = std::fs::read_to_string(&p).unwrap();
    text.push_str(&format!("\n[upstream]\nurl = \"{url}\"\n"));
    std::fs::write(&p, text).unwrap();
}

/// `eval report --format json` (plus `extra`): exit status and the report.
fn report(dir: &Path, extra: &[&str]) -> (Option<i32>, Value) {
    let mut args = vec!["report", "--matrix", "demo", "--format", "json"];
    args.extend_from_slice(extra);
    let o = eval(dir, &args);
    let v: Value = serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("eval report --format json: {e}: {}", text(&o)));
    (o.status.code(), v)
}

fn reasons(r: &Value) -> Vec<String> {
    r["reasons"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_str().unwrap().to_owned())
        .collect()
}

fn run_other_upstream(p: &Project, url: &str) -> std::process::Output {
    std::process::Command::new(eval_bin())
        .args(["run", "--matrix", "demo", "--upstream", url])
        .args(["--api-key-env", KEY_ENV])
        .env(KEY_ENV, &p.key)
        .env_remove("EVAL_SIGNING_KEY_FILE")
        .current_dir(&p.dir)
        .output()
        .unwrap()
}

/// The scripted upstream preregistered: the unsigned run's report is not a release (exit 1,
/// the unsigned reason) unless `--allow-unsigned`, which then releases it (exit 0) and says so;
/// the upstream never adds a reason. `eval run` of the same frozen protocol against another URL
/// is refused (exit 2) naming both, before anything is written.
#[test]
fn an_unsigned_scripted_run_of_its_preregistered_upstream_releases_only_with_allow_unsigned() {
    need_docker!();
    let p = Project::new("okcall\nmetrics\nexit 0\n", &Cfg::default());
    let url = p.upstream.url();
    append_upstream(&p.dir, &url);
    let r = p.run();
    assert!(r.out.status.success(), "{}", r.text);
    let started = payloads(&r.entries, "run_started");
    assert_eq!(
        started[0]["upstream"]["preregistered"], true,
        "{}",
        started[0]
    );

    let (code, rep) = report(&p.dir, &[]);
    let why = reasons(&rep);
    assert_eq!(code, Some(1), "{why:?}");
    assert!(why.iter().any(|r| r.contains("unsigned")), "{why:?}");
    assert!(!why.iter().any(|r| r.contains("upstream")), "{why:?}");
    assert_eq!(rep["evidence"]["upstream"], url.trim_end_matches('/'));

    let (code, rep) = report(&p.dir, &["--allow-unsigned"]);
    assert_eq!(code, Some(0), "{:?}", reasons(&rep));
    assert!(
        rep["verdict"]
            .as_str()
            .unwrap()
            .contains("UNSIGNED (accepted by --allow-unsigned)"),
        "{}",
        rep["verdict"]
    );

    let before = std::fs::read(p.dir.join("runs/demo/ledger.sqlite")).unwrap();
    let other = "http://127.0.0.1:9/v1";
    let o = run_other_upstream(&p, other);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        text(&o).contains(other) && text(&o).contains(&url),
        "{}",
        text(&o)
    );
    assert_eq!(
        std::fs::read(p.dir.join("runs/demo/ledger.sqlite")).unwrap(),
        before
    );
}

/// The same scripted run of a protocol that preregisters no upstream is never a release, not
/// even with `--allow-unsigned`: the report names the missing preregistration (exit 1).
#[test]
fn a_scripted_run_of_a_protocol_without_a_preregistered_upstream_is_never_a_release() {
    need_docker!();
    let p = Project::new("okcall\nmetrics\nexit 0\n", &Cfg::default());
    let r = p.run();
    assert!(r.out.status.success(), "{}", r.text);
    let (code, rep) = report(&p.dir, &["--allow-unsigned"]);
    let why = reasons(&rep);
    assert_eq!(code, Some(1), "{why:?}");
    assert!(
        why.iter().any(|r| r.contains("preregisters no upstream")),
        "{why:?}"
    );
    assert!(!why.iter().any(|r| r.contains("unsigned")), "{why:?}");
}

/// A malformed `[upstream]` is refused at freeze, exit 2 naming the file and the field, nothing
/// written: no scheme, a password in the URL, a pin on plain HTTP, a pin that is not
/// `sha256:<64 hex>`, an unknown field.
#[test]
fn a_malformed_upstream_table_exits_2_naming_the_field() {
    let pin = format!("sha256:{}", "ab".repeat(32));
    for (table, field) in [
        ("url = \"api.example\"".to_owned(), "upstream.url"),
        (
            "url = \"https://user:pw@api.example\"".to_owned(),
            "upstream.url",
        ),
        (
            format!("url = \"http://api.example\"\ntls_spki_sha256 = [\"{pin}\"]"),
            "upstream.tls_spki_sha256",
        ),
        (
            "url = \"https://api.example\"\ntls_spki_sha256 = [\"sha256:abc\"]".to_owned(),
            "upstream.tls_spki_sha256",
        ),
        ("url = \"https://api.example\"\npin = 1".to_owned(), "pin"),
    ] {
        let (_tmp, dir) = demo_project();
        let p = dir.join("protocols/demo/protocol.toml");
        let mut text_ = std::fs::read_to_string(&p).unwrap();
        text_.push_str(&format!("\n[upstream]\n{table}\n"));
        std::fs::write(&p, text_).unwrap();
        let o = eval(&dir, &["freeze", "--protocol", "demo"]);
        assert_eq!(o.status.code(), Some(2), "{table}: {}", text(&o));
        assert!(
            text(&o).contains("protocols/demo/protocol.toml") && text(&o).contains(field),
            "{table}: {}",
            text(&o)
        );
        assert!(!dir.join("runs").exists());
    }
    // A good one freezes.
    let (_tmp, dir) = demo_project();
    let p = dir.join("protocols/demo/protocol.toml");
    let mut text_ = std::fs::read_to_string(&p).unwrap();
    text_.push_str(&format!(
        "\n[upstream]\nurl = \"https://api.example/\"\ntls_spki_sha256 = [\"{pin}\"]\n"
    ));
    std::fs::write(&p, text_).unwrap();
    let o = eval(&dir, &["freeze", "--protocol", "demo"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
}
