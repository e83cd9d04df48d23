//! `eval stats paired` and `eval stats calibrate` end to end through the binary.

use std::process::Command;

fn eval(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_eval"))
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

fn csv(dir: &std::path::Path, name: &str, body: &str) -> String {
    let p = dir.join(name);
    std::fs::write(&p, body).unwrap();
    p.display().to_string()
}

/// V04.md's icae vector, as a CSV: baseline 0, candidate = the difference.
fn v04_csv() -> String {
    let d = [20, 10, -5, 0, 30, 25, 15, 5, -10, 40, 0, 10];
    let t = [
        "aa", "aa", "bb", "bb", "cc", "cc", "dd", "dd", "ee", "ee", "ff", "ff",
    ];
    let mut s = String::from("task,arm,rep,score,comment\n");
    for (i, (d, t)) in d.iter().zip(t).enumerate() {
        let rep = i % 2 + 1;
        s.push_str(&format!(
            "{t},native,{rep},0,\"base, ok\"\n{t},v0.4-critical,{rep},{d},\n"
        ));
    }
    s
}

#[test]
fn paired_json_has_the_documented_fields() {
    let dir = tempfile::tempdir().unwrap();
    let f = csv(dir.path(), "in.csv", &v04_csv());
    let (code, out, err) = eval(&[
        "stats",
        "paired",
        "--input",
        &f,
        "--baseline",
        "native",
        "--candidate",
        "v0.4-critical",
        "--json",
        "--seed",
        "5",
    ]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    for k in [
        "n_tasks",
        "baseline",
        "candidate",
        "mean_baseline",
        "mean_candidate",
        "mean_diff",
        "relative_improvement",
        "ci",
        "relative_ci",
        "method",
        "resamples",
        "seed",
        "sign_flip_p",
    ] {
        assert!(v.get(k).is_some(), "missing {k}: {out}");
    }
    assert_eq!(v["n_tasks"], 6);
    assert_eq!(v["method"], "exact");
    assert_eq!(v["ci"]["level"], 0.95);
    assert!(v["ci"]["percentile"][0].as_f64().unwrap() > 0.0);
    assert!(v["ci"]["bca"][1].as_f64().unwrap() > v["ci"]["bca"][0].as_f64().unwrap());
    assert!(v["relative_improvement"].is_null(), "baseline mean 0");
    assert_eq!(v["sign_flip"]["method"], "exact");
    // Sampled when asked, and reproducible.
    let args = [
        "stats",
        "paired",
        "--input",
        &f,
        "--baseline",
        "native",
        "--candidate",
        "v0.4-critical",
        "--json",
        "--exact",
        "never",
        "--resamples",
        "3000",
    ];
    let (_, a, _) = eval(&args);
    let (_, b, _) = eval(&args);
    assert_eq!(a, b);
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&a).unwrap()["method"],
        "sampled"
    );
}

#[test]
fn v04_percentile_reproduces_the_v04_vector() {
    let dir = tempfile::tempdir().unwrap();
    let f = csv(dir.path(), "in.csv", &v04_csv());
    let (code, out, err) = eval(&[
        "stats",
        "paired",
        "--input",
        &f,
        "--baseline",
        "native",
        "--candidate",
        "v0.4-critical",
        "--json",
        "--method",
        "v04-percentile",
        "--seed-string",
        "94fb0fce13dba54f06a3b36f93167c4acd46a6953f7a66daae8567889a1d5426:icae",
    ]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        v["ci"]["percentile"][0].as_f64().unwrap().to_bits(),
        4.166666666666667f64.to_bits()
    );
    assert_eq!(
        v["ci"]["percentile"][1].as_f64().unwrap().to_bits(),
        19.166666666666668f64.to_bits()
    );
    assert_eq!(v["resamples"], 20000);
    let (code, _, err) = eval(&[
        "stats",
        "paired",
        "--input",
        &f,
        "--baseline",
        "native",
        "--candidate",
        "v0.4-critical",
        "--method",
        "v04-percentile",
    ]);
    assert_eq!(code, 2);
    assert!(err.contains("--seed-string"), "{err}");
}

#[test]
fn bad_input_exits_2_naming_file_line_and_column() {
    let dir = tempfile::tempdir().unwrap();
    for (body, needle) in [
        (
            "task,arm,rep,score\nt1,a,1,5\nt1,b,1,oops\n",
            ":3: column \"score\"",
        ),
        (
            "task,arm,rep,score\nt1,a,1,5\nt1,b,1,nan\n",
            ":3: column \"score\"",
        ),
        (
            "task,arm,rep,score\nt1,a,1,5\nt2,b,1,6\nt2,a,1,6\n",
            ":2: task \"t1\" has no rows for arm \"b\"",
        ),
        ("task,arm,rep,score\nt1,a,1,5\n", "arm \"b\" has no rows"),
    ] {
        let f = csv(dir.path(), "bad.csv", body);
        let (code, out, err) = eval(&[
            "stats",
            "paired",
            "--input",
            &f,
            "--baseline",
            "a",
            "--candidate",
            "b",
        ]);
        assert_eq!(code, 2, "{body}: {out} {err}");
        assert!(err.contains(needle), "{body}: {err}");
        assert!(!err.contains("panicked"));
    }
}

#[test]
fn calibrate_flags_three_tasks() {
    let (code, out, err) = eval(&[
        "stats",
        "calibrate",
        "--n",
        "3",
        "--reps",
        "300",
        "--method",
        "percentile,sign-flip",
        "--json",
    ]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let rows = v["rows"].as_array().unwrap();
    let pct = rows.iter().find(|r| r["method"] == "percentile").unwrap();
    // At n = 3 the percentile lower bound is about the smallest difference: it clears zero far
    // more often than the nominal 2.5 %.
    assert!(pct["false_pass_rate"].as_f64().unwrap() > 0.06, "{pct}");
    assert_eq!(pct["warn"], true);
    let sf = rows.iter().find(|r| r["method"] == "sign-flip").unwrap();
    assert_eq!(sf["false_pass_rate"], 0.0, "2^-3 cannot reach 0.025");
    let (code, _, err) = eval(&["stats", "calibrate", "--n", "3", "--method", "vibes"]);
    assert_eq!(code, 2);
    assert!(err.contains("unknown method"));
}

#[test]
fn report_on_an_empty_state_dir_is_a_clear_input_error() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().display().to_string();
    let (code, _, err) = eval(&["report", "--matrix", "nothing-here", "--state", &state]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("nothing-here") && !err.contains("panicked"),
        "{err}"
    );
}
