//! `eval gc`: frees scratch, unreferenced artifacts, left containers and eval's images of runs
//! no session holds, and never a ledger or an artifact a ledger references. Only images and
//! containers this test made are in reach (its own label and identity): other tests run Docker
//! on the same machine.

use crate::support::*;
use std::process::Command;

fn docker(args: &[&str]) -> String {
    let o = Command::new("docker").args(args).output().unwrap();
    assert!(
        o.status.success(),
        "docker {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).trim().to_owned()
}

#[test]
fn gc_frees_what_no_run_needs_and_keeps_every_referenced_artifact() {
    if !docker_available() {
        return;
    }
    static_binaries();
    let (_tmp, dir) = small_demo_project();
    let (identity, _sweep) = freeze_demo(&dir);
    let run = fixture_run(&dir, &["--smoke", "--limit", "2"]);
    assert!(run.status.success(), "{}", text(&run));
    let run_dir = dir.join("runs/demo.smoke");
    let ledger = run_dir.join("ledger.sqlite");
    let before = std::fs::read(&ledger).unwrap();

    // What a killed run leaves: scratch, a half-written artifact, an object nothing references,
    // a container of the run's identity; and an eval image of this test's own.
    let tag = format!("gc-test-{}", std::process::id());
    std::fs::create_dir_all(run_dir.join("attempts/stat-x/workspace")).unwrap();
    std::fs::write(
        run_dir.join("attempts/stat-x/workspace/big"),
        vec![7u8; 10_000],
    )
    .unwrap();
    std::fs::write(run_dir.join("artifacts/tmp/123.456"), b"half").unwrap();
    let orphan = b"an object no ledger references";
    let hex = eval_evidence::ledger::Digest::of(orphan).hex();
    let orphan_path = run_dir.join(format!("artifacts/sha256/{}/{hex}", &hex[..2]));
    std::fs::create_dir_all(orphan_path.parent().unwrap()).unwrap();
    std::fs::write(&orphan_path, orphan).unwrap();
    let ctx = tempfile::tempdir().unwrap();
    std::fs::write(
        ctx.path().join("Dockerfile"),
        format!("FROM scratch\nLABEL eval.runtime={tag}\nCMD [\"x\"]\n"),
    )
    .unwrap();
    let image = docker(&[
        "build",
        "-q",
        "-t",
        &format!("eval-runtime/{tag}:1"),
        ctx.path().to_str().unwrap(),
    ]);
    let state_id = std::fs::read_to_string(dir.join("runs/state-id")).unwrap();
    let container = docker(&[
        "create",
        "--label",
        &format!("eval.identity={identity}"),
        "--label",
        &format!("eval.owner={}/{identity}", state_id.trim()),
        &image,
    ]);
    let label = format!("eval.runtime={tag}");

    // Socket directories: a killed session's (its socket answers no one) goes, a live one
    // stays. In a TMPDIR of the test's own: other sessions on this machine have theirs in /tmp.
    let tmpdir = tempfile::tempdir().unwrap();
    let dead = tmpdir.path().join("evs-dead/0123456789abcdef");
    std::fs::create_dir_all(&dead).unwrap();
    drop(std::os::unix::net::UnixListener::bind(dead.join("a.sock")).unwrap());
    let alive = tmpdir.path().join("evs-alive/0123456789abcdef");
    std::fs::create_dir_all(&alive).unwrap();
    let _listener = std::os::unix::net::UnixListener::bind(alive.join("a.sock")).unwrap();
    let gc = |extra: &[&str]| {
        let mut a = vec!["gc", "--images-label", label.as_str()];
        a.extend_from_slice(extra);
        eval_env(&dir, &a, &[("TMPDIR", tmpdir.path().to_str().unwrap())])
    };
    // A dry run names everything and removes nothing.
    let o = gc(&["--dry-run"]);
    assert!(o.status.success(), "{}", text(&o));
    let t = text(&o);
    for needle in [
        "attempt scratch",
        "stat-x",
        "123.456",
        "1 artifact(s)",
        &container[..12],
    ] {
        assert!(t.contains(needle), "{needle}: {t}");
    }
    assert!(t.contains("would free"), "{t}");
    assert!(orphan_path.exists() && run_dir.join("attempts/stat-x").exists());
    assert!(!docker(&["ps", "-aq", "--filter", &format!("id={container}")]).is_empty());

    let o = gc(&[]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("freed"), "{}", text(&o));
    assert!(!orphan_path.exists());
    assert!(!run_dir.join("attempts/stat-x").exists());
    assert!(!run_dir.join("artifacts/tmp/123.456").exists());
    assert!(docker(&["ps", "-aq", "--filter", &format!("id={container}")]).is_empty());
    // An eval image no freeze of this state names may be another state directory's: kept.
    assert!(!docker(&["images", "-q", "--filter", &format!("label={label}")]).is_empty());
    docker(&["rmi", &image]);
    assert!(!tmpdir.path().join("evs-dead").exists());
    assert!(alive.join("a.sock").exists());

    // The ledger is byte for byte what it was, and every artifact it references is still there
    // and whole; the attempts still read.
    assert_eq!(std::fs::read(&ledger).unwrap(), before);
    let o = eval(
        &dir,
        &["ledger", "verify", ledger.to_str().unwrap(), "--artifacts"],
    );
    assert!(o.status.success(), "{}", text(&o));
    let outcome = &payloads(&entries(&ledger), "attempt_outcome")[0];
    let o = eval(
        &dir,
        &[
            "show",
            outcome["attempt"].as_str().unwrap(),
            "--matrix",
            "demo.smoke",
        ],
    );
    assert!(o.status.success(), "{}", text(&o));
}
