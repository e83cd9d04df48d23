//! Helpers both halves of `import_evocode` use: `tests/it/import_evocode.rs` (no Docker) and
//! `tests/e2e/import_evocode.rs` (Docker).

use crate::support::eval;
use std::path::{Path, PathBuf};

pub const PACKAGE: &str = "dsh-plan-lattice-0.4.0-rc.3.tgz";

/// The synthetic task: `greet`, a Go CLI. Round 1: `greet hello NAME` prints `hello, NAME`.
/// Round 2 adds `greet count WORD…`. Round 3 changes round 1's output to `Hello, NAME!` (an
/// earlier behaviour that changes, as EvoCode's "correction" rounds do).
pub fn write_task(dir: &Path, dockerfile: &str) -> PathBuf {
    let t = dir.join("theme_synthetic_greet");
    let w = |rel: &str, body: &str| {
        let p = t.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, body).unwrap();
    };
    w(
        "task.toml",
        r#"schema_version = "1.2"
multi_step_reward_strategy = "mean"

[metadata]
name = "greet-cli"
difficulty = "easy"
category = "code-build-greenfield-go"

[metadata.requirement_chain]
num_steps = 3

[agent]
timeout_sec = 600.0

[verifier]
timeout_sec = 600.0

[environment]
build_timeout_sec = 600.0
cpus = 1
memory_mb = 4096

[[steps]]
name = "round-1"

[[steps]]
name = "round-2"
[steps.agent]
timeout_sec = 300.0

[[steps]]
name = "round-3"
"#,
    );
    w("environment/Dockerfile", dockerfile);
    w(
        "environment/app_init/go.mod",
        "module example.com/greet\n\ngo 1.22\n",
    );
    w(
        "environment/app_init/cmd/greet/main.go",
        "package main\n\nfunc main() {}\n",
    );
    let case = |id: &str, origin: &str, req: &str, scenario: &str, cond: &str| {
        format!(
            "if {cond}; then st=success; pass=$((pass+1)); else st=fail; fi\ntotal=$((total+1))\necho \"CASE_RESULT case_id={id} origin_step={origin} requirement_ref={req} case_type=behavior status=$st intent=\\\"{scenario}\\\" scenario=\\\"{scenario}\\\" input=\\\"\\\" expected=\\\"\\\" actual=\\\"\\\" failure_reason=\\\"\\\"\"\n"
        )
    };
    let test = |cases: &[String]| {
        format!(
            "#!/bin/bash\nmkdir -p /logs/verifier\ncd /app\nif ! go build -o /usr/local/bin/greet ./cmd/greet; then echo 'FAIL: build'; echo 0 > /logs/verifier/reward.txt; exit 0; fi\npass=0; total=0\n{}echo \"CASE_SUMMARY total_cases=$total success_count=$pass fail_count=$((total-pass))\"\nif [ \"$pass\" = \"$total\" ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi\n",
            cases.concat()
        )
    };
    let hello = |id: &str, want: &str| {
        case(
            id,
            "round-1",
            "hello",
            "hello_name",
            &format!("[ \"$(greet hello Ada)\" = \"{want}\" ]"),
        )
    };
    let count = |id: &str| {
        case(
            id,
            "round-2",
            "count",
            "count_words",
            "[ \"$(greet count a b c)\" = 3 ]",
        )
    };
    let prompts = [
        "# greet\n\nBuild `greet` with `go build -o /usr/local/bin/greet ./cmd/greet`. `greet hello NAME` prints `hello, NAME`.\n",
        "# greet count\n\nAdd `greet count WORD...`: it prints how many words it got. `hello` is unchanged.\n",
        "# greet, politely\n\n`greet hello NAME` now prints `Hello, NAME!`. `count` is unchanged.\n",
    ];
    let tests = [
        test(&[hello("c001", "hello, Ada")]),
        // The ordinal moves: round 2 lists the new case first.
        test(&[count("c001"), hello("c002", "hello, Ada")]),
        test(&[
            count("c001"),
            case(
                "c002",
                "round-3",
                "hello",
                "hello_polite",
                "[ \"$(greet hello Ada)\" = 'Hello, Ada!' ]",
            ),
        ]),
    ];
    for (k, (p, tst)) in prompts.iter().zip(tests.iter()).enumerate() {
        let r = format!("steps/round-{}", k + 1);
        w(&format!("{r}/instruction.md"), p);
        w(&format!("{r}/tests/test.sh"), tst);
        w(&format!("{r}/solution/solve.sh"), &solve(SOLUTIONS[k]));
    }
    t
}

/// Round k's reference `cmd/greet/main.go` (rounds 1..k's requirements): what each step's
/// `solution/solve.sh` writes in /app, as EvoCode-Bench's reference solutions write files.
pub const SOLUTIONS: [&str; 3] = [
    "package main\n\nimport (\n\t\"fmt\"\n\t\"os\"\n)\n\nfunc main() {\n\tif len(os.Args) == 3 && os.Args[1] == \"hello\" {\n\t\tfmt.Printf(\"hello, %s\\n\", os.Args[2])\n\t\treturn\n\t}\n\tos.Exit(2)\n}\n",
    "package main\n\nimport (\n\t\"fmt\"\n\t\"os\"\n)\n\nfunc main() {\n\tif len(os.Args) == 3 && os.Args[1] == \"hello\" {\n\t\tfmt.Printf(\"hello, %s\\n\", os.Args[2])\n\t\treturn\n\t}\n\tif len(os.Args) >= 2 && os.Args[1] == \"count\" {\n\t\tfmt.Println(len(os.Args) - 2)\n\t\treturn\n\t}\n\tos.Exit(2)\n}\n",
    "package main\n\nimport (\n\t\"fmt\"\n\t\"os\"\n)\n\nfunc main() {\n\tif len(os.Args) == 3 && os.Args[1] == \"hello\" {\n\t\tfmt.Printf(\"Hello, %s!\\n\", os.Args[2])\n\t\treturn\n\t}\n\tif len(os.Args) >= 2 && os.Args[1] == \"count\" {\n\t\tfmt.Println(len(os.Args) - 2)\n\t\treturn\n\t}\n\tos.Exit(2)\n}\n",
];

pub fn solve(main_go: &str) -> String {
    format!(
        "#!/bin/bash\nset -e\nmkdir -p cmd/greet\ncat > cmd/greet/main.go <<'EOF_GREET'\n{main_go}EOF_GREET\n"
    )
}

pub const DOCKERFILE: &str = "FROM golang:1.22-bookworm\nWORKDIR /app\nRUN apt-get update && apt-get install -y --no-install-recommends jq \\\n    && rm -rf /var/lib/apt/lists/*\nCOPY app_init/ /app/\nENV CGO_ENABLED=0\nRUN mkdir -p /logs/verifier\n";

pub fn import(project: &Path, from: &Path, extra: &[&str]) -> std::process::Output {
    let id = format!("sha256:{}", "d".repeat(64));
    let gid = format!("sha256:{}", "e".repeat(64));
    import_with(project, from, &id, &gid, extra)
}

pub fn import_with(
    project: &Path,
    from: &Path,
    id: &str,
    gid: &str,
    extra: &[&str],
) -> std::process::Output {
    let pkg = crate::support::v04_upstream().join(PACKAGE);
    let mut args = vec![
        "import",
        "v04-evocode",
        "--from",
        from.to_str().unwrap(),
        "--package",
        pkg.to_str().unwrap(),
        "--dsh-image",
        id,
        "--grader-image",
        gid,
    ];
    args.extend_from_slice(extra);
    eval(project, &args)
}

pub fn project(tmp: &Path) -> PathBuf {
    let dir = tmp.join("proj");
    std::fs::create_dir(&dir).unwrap();
    dir
}
