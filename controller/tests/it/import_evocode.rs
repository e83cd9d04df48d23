//! `eval import v04-evocode`: a synthetic 3-round Go task written here in the Harbor multi-step
//! layout of EvoCode-Bench (never the benchmark's own hidden data) imported into a temporary
//! project: it becomes a multi-round bundle (one prompt and one hidden test directory per round,
//! eval's grader wrapper beside each), the three arms of v0.4's EvoCode suite and a protocol that
//! plans and freezes; refusals (unpinned directories, a Dockerfile line eval cannot translate, a
//! step directory [[steps]] does not declare) exit 2 naming the file and line, and write nothing.

pub(crate) use crate::support::import_evocode::*;
use crate::support::{eval, text};
use std::path::Path;

#[test]
fn a_harbor_multi_step_task_becomes_a_multi_round_protocol_that_plans() {
    let tmp = tempfile::tempdir().unwrap();
    let from = tmp.path().join("tasks");
    write_task(&from, DOCKERFILE);
    let proj = project(tmp.path());
    let o = import(&proj, &from, &["--allow-unpinned"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let t = proj.join("protocols/evocode/tasks/evocode/theme_synthetic_greet");
    let toml = std::fs::read_to_string(t.join("task.toml")).unwrap();
    // Three rounds, their timeouts (the task's 600 s, step 2's own 300 s), the attempt's total.
    assert_eq!(toml.matches("[[rounds]]").count(), 3, "{toml}");
    assert!(toml.contains("timeout_seconds = 1500"), "{toml}");
    assert!(
        toml.contains("[[rounds]]\ntimeout_seconds = 300\n"),
        "{toml}"
    );
    for m in eval_core::round_metrics::ROUND_METRICS {
        assert!(toml.contains(&format!("\"{m}\"")), "{m}: {toml}");
    }
    // Round k: its instruction as the prompt; its tests only, with the wrapper, in hidden/rounds/k.
    for k in 1..=3 {
        let prompt = std::fs::read_to_string(t.join(format!("rounds/{k}/prompt.md"))).unwrap();
        let instr = std::fs::read_to_string(from.join(format!(
            "theme_synthetic_greet/steps/round-{k}/instruction.md"
        )))
        .unwrap();
        assert_eq!(prompt, instr);
        let h = t.join(format!("hidden/rounds/{k}"));
        assert_eq!(
            std::fs::read(h.join("tests/test.sh")).unwrap(),
            std::fs::read(from.join(format!(
                "theme_synthetic_greet/steps/round-{k}/tests/test.sh"
            )))
            .unwrap()
        );
        assert!(h.join("grade.sh").is_file());
        assert_eq!(
            std::fs::read_to_string(h.join("env")).unwrap(),
            "CGO_ENABLED=0\n"
        );
    }
    assert!(!t.join("prompt.md").exists());
    // The workspace is what the Dockerfile COPYs into /app.
    assert_eq!(
        std::fs::read_to_string(t.join("workspace/go.mod")).unwrap(),
        "module example.com/greet\n\ngo 1.22\n"
    );
    assert!(t.join("workspace/cmd/greet/main.go").is_file());
    assert!(!t.join("workspace/Dockerfile").exists());
    // v0.4's EvoCode arms: armPluginConfig of the frozen manifest's arms.
    let arms = proj.join("protocols/evocode/arms");
    let lattice = std::fs::read_to_string(arms.join("v0.4-lattice/cordis.patch.yml")).unwrap();
    assert!(
        lattice.ends_with("- id: plan-lattice\n  config:\n    activationMode: always\n    clarificationPolicy: critical\n    controlCeiling: lattice\n"),
        "{lattice}"
    );
    let contract = std::fs::read_to_string(arms.join("v0.4-contract/cordis.patch.yml")).unwrap();
    assert!(
        contract.contains("    controlCeiling: contract\n"),
        "{contract}"
    );
    assert!(!arms.join(format!("native/{PACKAGE}")).exists());
    // eval's support plugin beside the dsh runtime (its `[[arm.file]]`).
    assert!(
        proj.join("runtimes/dsh-poly/eval-support/index.js")
            .is_file()
    );
    let grader =
        std::fs::read_to_string(proj.join("runtimes/v04-evocode-grader/runtime.toml")).unwrap();
    assert!(grader.contains("\"/usr/local/bin\""), "{grader}");
    // Every step has a solution/solve.sh: oracle and nop control arms and grader_valid.
    let protocol = std::fs::read_to_string(proj.join("protocols/evocode/protocol.toml")).unwrap();
    let parsed: toml::Table = toml::from_str(&protocol).unwrap();
    let c = &parsed["suites"]["evocode"]["controls"];
    assert_eq!(
        c["metric"].as_str(),
        Some("rounds_mean_reward"),
        "{protocol}"
    );
    // …and the forgery of issue 33 item 2 as an exploit arm.
    let arms: Vec<&str> = c["arms"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert_eq!(
        arms,
        ["oracle", "nop", "exploit:forge-reward"],
        "{protocol}"
    );
    // The grader runs in two stages, the reward captured from /logs/verifier.
    assert!(
        grader.contains("run_inputs = \".\"") && grader.contains("capture = \"/logs/verifier\""),
        "{grader}"
    );
    assert!(
        protocol.contains("statistic = \"grader_valid\""),
        "{protocol}"
    );
    // The protocol loads and plans: one task x 3 arms x 2 repetitions, plus 2 infrastructure
    // slots (the control slots are not in the matrix's plan: `run/controls.rs`).
    let o = eval(&proj, &["plan", "--matrix", "evocode", "--json"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let plan: Vec<serde_json::Value> = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(plan.len(), 3 * 2 + 2, "{plan:?}");
    // Nothing is overwritten.
    let again = import(&proj, &from, &["--allow-unpinned"]);
    assert_eq!(again.status.code(), Some(2), "{}", text(&again));
    assert!(text(&again).contains("exists"), "{}", text(&again));
}

#[test]
fn the_evocode_import_refuses_unpinned_directories_untranslatable_dockerfiles_and_orphan_steps() {
    let tmp = tempfile::tempdir().unwrap();
    let from = tmp.path().join("tasks");
    let task = write_task(&from, DOCKERFILE);
    let proj = project(tmp.path());
    let refused = |o: &std::process::Output, want: &str| {
        assert_eq!(o.status.code(), Some(2), "{}", text(o));
        assert!(text(o).contains(want), "{want}: {}", text(o));
        assert_eq!(
            std::fs::read_dir(&proj).unwrap().count(),
            0,
            "nothing written"
        );
    };
    refused(&import(&proj, &from, &[]), "--allow-unpinned");
    std::fs::write(
        task.join("environment/Dockerfile"),
        "FROM golang:1.22\nWORKDIR /app\n\nRUN go install golang.org/x/tools/cmd/stringer@latest\n",
    )
    .unwrap();
    refused(
        &import(&proj, &from, &["--allow-unpinned"]),
        "environment/Dockerfile: line 4: `RUN go install",
    );
    std::fs::write(task.join("environment/Dockerfile"), DOCKERFILE).unwrap();
    std::fs::create_dir_all(task.join("steps/round-9")).unwrap();
    refused(
        &import(&proj, &from, &["--allow-unpinned"]),
        "a step directory [[steps]] does not declare",
    );
    std::fs::remove_dir(task.join("steps/round-9")).unwrap();
    std::fs::remove_file(task.join("steps/round-2/tests/test.sh")).unwrap();
    refused(&import(&proj, &from, &["--allow-unpinned"]), "no test.sh");
}

/// The dataset archive's pin (V04-SUITES.md: dataset commit 9fcae3e,
/// `archives/evocodebench_wotraj.tar.zst`).
const ARCHIVE_PIN: &str = "a13d0cb47574282372c59366217ac68d895ff49d1387c81098b058f739906184";

/// A tar member written header by header, its name as raw bytes (so a hostile name the `tar`
/// crate's own path setter would refuse still reaches the importer).
fn member(b: &mut tar::Builder<Vec<u8>>, name: &str, kind: tar::EntryType, body: &[u8]) {
    let mut h = tar::Header::new_ustar();
    h.as_old_mut().name[..name.len()].copy_from_slice(name.as_bytes());
    h.set_entry_type(kind);
    h.set_size(body.len() as u64);
    h.set_mode(if kind.is_dir() { 0o755 } else { 0o644 });
    if kind.is_symlink() || kind.is_hard_link() {
        h.set_link_name("../../../etc/passwd").unwrap();
    }
    h.set_cksum();
    b.append(&h, body).unwrap();
}

/// The tree `dir` as the members `root/<path>` of a zstd-compressed tar, as the dataset's
/// archive holds `evocodebench_wotraj/<task>/…`; `extra` appends members after it.
fn archive_of(dir: &Path, root: &str, extra: impl FnOnce(&mut tar::Builder<Vec<u8>>)) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    member(&mut b, &format!("{root}/"), tar::EntryType::Directory, b"");
    let mut stack = vec![dir.to_path_buf()];
    let mut files = Vec::new();
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                files.push(p);
            }
        }
    }
    files.sort();
    for p in files {
        let rel = p.strip_prefix(dir).unwrap().to_str().unwrap();
        member(
            &mut b,
            &format!("{root}/{rel}"),
            tar::EntryType::Regular,
            &std::fs::read(&p).unwrap(),
        );
    }
    extra(&mut b);
    let tar = b.into_inner().unwrap();
    ruzstd::encoding::compress_to_vec(&tar[..], ruzstd::encoding::CompressionLevel::Fastest)
}

fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest as _;
    hex::encode(sha2::Sha256::digest(bytes))
}

#[test]
fn the_dataset_archive_is_checked_against_its_pin_before_extraction_and_imports_like_the_directory()
{
    let tmp = tempfile::tempdir().unwrap();
    let from = tmp.path().join("tasks");
    write_task(&from, DOCKERFILE);
    let bytes = archive_of(&from, "evocodebench_wotraj", |_| {});
    let archive = tmp.path().join("evocodebench_wotraj.tar.zst");
    std::fs::write(&archive, &bytes).unwrap();
    let got = sha256_hex(&bytes);
    let proj = project(tmp.path());
    let task = ["--tasks", "theme_synthetic_greet"];
    // Unpinned: refused naming both digests, nothing written.
    let o = import(&proj, &archive, &task);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    for want in [got.as_str(), ARCHIVE_PIN, "--allow-unpinned"] {
        assert!(text(&o).contains(want), "{want}: {}", text(&o));
    }
    assert_eq!(std::fs::read_dir(&proj).unwrap().count(), 0);
    // From the archive the tasks default to v0.4's three, which this one lacks.
    let o = import(&proj, &archive, &["--allow-unpinned"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    for want in [
        "theme_d1_w1_code_build_greenfield_implementation",
        "theme_synthetic_greet",
    ] {
        assert!(text(&o).contains(want), "{want}: {}", text(&o));
    }
    assert_eq!(std::fs::read_dir(&proj).unwrap().count(), 0);
    // Accepted with --allow-unpinned: the same task files the directory import writes, and the
    // protocol records the archive's digest as not the pinned one.
    let o = import(&proj, &archive, &["--allow-unpinned", task[0], task[1]]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let d = tmp.path().join("d");
    std::fs::create_dir(&d).unwrap();
    let by_dir = project(&d);
    let o = import(&by_dir, &from, &["--allow-unpinned"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let t = "protocols/evocode/tasks/evocode/theme_synthetic_greet";
    for rel in [
        "task.toml",
        "rounds/1/prompt.md",
        "rounds/3/prompt.md",
        "hidden/rounds/2/tests/test.sh",
        "hidden/rounds/3/solution/solve.sh",
        "workspace/go.mod",
        "workspace/cmd/greet/main.go",
    ] {
        assert_eq!(
            std::fs::read(proj.join(t).join(rel)).unwrap(),
            std::fs::read(by_dir.join(t).join(rel)).unwrap(),
            "{rel}"
        );
    }
    let protocol = std::fs::read_to_string(proj.join("protocols/evocode/protocol.toml")).unwrap();
    assert!(
        protocol.contains(&format!("dataset archive, sha256 {got}: NOT the pinned")),
        "{protocol}"
    );
    let o = eval(&proj, &["plan", "--matrix", "evocode", "--json"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
}

#[test]
fn a_hostile_dataset_archive_is_refused_naming_the_member_and_writes_nothing() {
    use tar::EntryType as K;
    let tmp = tempfile::tempdir().unwrap();
    let from = tmp.path().join("tasks");
    write_task(&from, DOCKERFILE);
    let proj = project(tmp.path());
    let t = "evocodebench_wotraj/theme_synthetic_greet";
    let big = vec![b'x'; (4 << 20) + 1];
    let cases: Vec<(String, K, Vec<u8>, &str)> = vec![
        (
            format!("{t}/environment/link"),
            K::Symlink,
            vec![],
            "a link or special file",
        ),
        (
            format!("{t}/environment/hard"),
            K::Link,
            vec![],
            "a link or special file",
        ),
        (
            format!("{t}/environment/fifo"),
            K::Fifo,
            vec![],
            "a link or special file",
        ),
        (
            format!("{t}/environment/dev"),
            K::Char,
            vec![],
            "a link or special file",
        ),
        (
            format!("{t}/../../escape"),
            K::Regular,
            b"x".to_vec(),
            "contains `..`",
        ),
        (
            "/etc/evil".to_owned(),
            K::Regular,
            b"x".to_vec(),
            "is absolute",
        ),
        (
            "other_root/x/task.toml".to_owned(),
            K::Regular,
            b"x".to_vec(),
            "one top-level directory",
        ),
        (
            format!("{t}/task.toml"),
            K::Regular,
            b"x".to_vec(),
            "in the archive twice",
        ),
        (
            format!("{t}/environment/big.bin"),
            K::Regular,
            big,
            "larger than 4194304 bytes",
        ),
    ];
    for (name, kind, body, why) in cases {
        let bytes = archive_of(&from, "evocodebench_wotraj", |b| {
            member(b, &name, kind, &body)
        });
        let archive = tmp.path().join("evocodebench_wotraj.tar.zst");
        std::fs::write(&archive, &bytes).unwrap();
        let o = import(
            &proj,
            &archive,
            &["--allow-unpinned", "--tasks", "theme_synthetic_greet"],
        );
        assert_eq!(o.status.code(), Some(2), "{name}: {}", text(&o));
        assert!(text(&o).contains(why), "{name}: {why}: {}", text(&o));
        if why.contains("link") || why.contains("twice") || why.contains("larger") {
            assert!(text(&o).contains(&name), "{name}: {}", text(&o));
        }
        assert_eq!(std::fs::read_dir(&proj).unwrap().count(), 0, "{name}");
    }
    // Not zstd at all.
    let archive = tmp.path().join("evocodebench_wotraj.tar.zst");
    std::fs::write(&archive, b"not an archive").unwrap();
    let o = import(
        &proj,
        &archive,
        &["--allow-unpinned", "--tasks", "theme_synthetic_greet"],
    );
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        text(&o).contains("not a zstd-compressed tar"),
        "{}",
        text(&o)
    );
}
