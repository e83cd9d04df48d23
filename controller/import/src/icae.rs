//! `eval import v04-icae --from DIR --package RC3.tgz --dsh-image ID --grader-image ID`: v0.4's
//! ICAE suite from an ICAE-EVAL root (ALEX-nlp/ICAE-EVAL b33fe65, as `download_scaffold.sh`
//! leaves it):
//!
//! ```text
//! DIR/repo_alias.json                         {"realcode@NNN": {"key": "user__repo", "language": …}}
//! DIR/fuzzy_prds/<alias>/start.md             the deliberately fuzzy PRD
//! DIR/user_agent/init.md                      the simulated user's system prompt
//! DIR/user_agent/fuzzy_suffix.md              the PRD's Clarification block (its endpoint adapted)
//! DIR/user_agent/prd_json/<alias>.json        {"oracle_data": {"hidden_constraints": […], …}, …}
//! DIR/rcb_tests_repos/<key>/rcb_tests/{public_test_cases,test_cases,enhanced_test_cases}/*.json
//! ```
//!
//! v0.4's six tasks (`TASKS`, Plan Lattice 0414dfa `eval/v0.4/benchmark-lock.json`) are resolved
//! to their aliases through `repo_alias.json` as v0.4 did. Each becomes a task whose prompt is
//! eval's adaptation of ICAE's `task_docker.md` (`icae-prompt.md.in`), whose workspace holds the
//! PRD as `start.md`, and whose `hidden/` holds the authoritative cases, eval's `grade.py`
//! (evaluate.py's rules) and the stateful oracle's frozen files: `oracle/init.md` and
//! `oracle/oracle_data.json` (the task's `oracle_data` exactly as ICAE's `build_system_prompt`
//! injects it: `json.dumps(…, ensure_ascii=False, indent=2)`, key order kept). Nothing is
//! written unless every input checks out and no target exists.

use super::common::{
    AGENT_IMAGE_PLACEHOLDER, AGENT_RUNTIME, AGENT_RUNTIME_PATH, Arm, ImportError, PACKAGE_V04,
    PINNED, Summary, harness_arm_files, q, read_input, safe_relative, write_new, write_suite,
};

mod archive;
use archive::bad;
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

const SUITE: &str = "icae";
const GRADER_RUNTIME_PATH: &str = "runtimes/v04-icae-grader/runtime.toml";
const GRADE_PY: &str = include_str!("icae-grade.py");
const PROMPT_TEMPLATE: &str = include_str!("icae-prompt.md.in");
const CLARIFY_TEMPLATE: &str = include_str!("icae-clarify.md.in");
const PROTOCOL_TEMPLATE: &str = include_str!("icae-protocol.toml.in");
/// The grader's writable, executable scratch (grade.py's `SCRATCH`).
const GRADER_SCRATCH: &str = "/var/cache/grader";

/// The files of DIR the importer reads.
const ALIAS_FILE: &str = "repo_alias.json";
const INIT_FILE: &str = "user_agent/init.md";
const SUFFIX_FILE: &str = "user_agent/fuzzy_suffix.md";
/// The two files read from the ICAE repository itself when the data comes from the archives,
/// pinned to ICAE b33fe65 (v0.4's `sources.icae.commit`).
const REPO_PINS: [(&str, &str); 2] = [
    (
        INIT_FILE,
        "316ab5f4175a6b22ab9c56edf60745c12a9d13c1dc597bd82b918f275f4a5047",
    ),
    (
        SUFFIX_FILE,
        "4699adc7e08748fe0108e5ca3f8f08e797c9bf76c1ba45b9b5e00a00509cac91",
    ),
];
/// ICAE's case tiers (evaluate.py `SUBDIRS`), in its order.
pub const TIERS: [&str; 3] = ["public_test_cases", "test_cases", "enhanced_test_cases"];
/// The most case files in one tier.
const MAX_CASE_FILES: usize = 500;

/// v0.4's ICAE tasks: id, ICAE repository key, language (benchmark-lock.json `selectedTasks`).
pub const TASKS: [(&str, &str, &str); 6] = [
    (
        "icae-js-ts-01",
        "google-gemini__deprecated-generative-ai-js",
        "TypeScript",
    ),
    ("icae-js-ts-02", "atom__etch", "JavaScript"),
    ("icae-python-01", "ahawker__ulid", "Python"),
    ("icae-python-02", "john-kurkowski__tldextract", "Python"),
    ("icae-go-01", "containrrr__watchtower", "Go"),
    ("icae-go-02", "microsoft__typescript-go", "Go"),
];

/// ICAE's oracle: the heading `build_system_prompt` puts before the brief, and v0.4's limit.
pub const BRIEF_HEADING: &str = "# Injected oracle_data (your single source of truth)";
const MAX_QUESTIONS: u32 = 5;
/// The ids ICAE's briefs list among their hidden constraints that no question is expected to
/// trigger (architecture and harness scaffolding).
const SCAFFOLDING: [&str; 3] = ["ARCH001", "HARNESS*", "TC_*"];
const FALLBACK: &str = "No further information.";

/// v0.4's ICAE arms (frozen-manifest.json), baseline first; the plugin rows are what
/// `armPluginConfig` (`driver/lib/profile.mjs`) computes for them: the arm's `activationMode`
/// and `clarificationPolicy`.
const ARMS: [Arm; 3] = [
    (
        "native",
        "The native DeepSeek Harness, no plugin (baseline).",
        &[],
    ),
    (
        "v0.4-never",
        "Plan Lattice v0.4.0-rc.3: activationMode auto, clarificationPolicy never (ablation).",
        &[("activationMode", "auto"), ("clarificationPolicy", "never")],
    ),
    (
        "v0.4-critical",
        "Plan Lattice v0.4.0-rc.3: activationMode auto, clarificationPolicy critical (gated candidate).",
        &[
            ("activationMode", "auto"),
            ("clarificationPolicy", "critical"),
        ],
    ),
];
const BASELINE: &str = "native";
const CANDIDATE: &str = "v0.4-critical";
const REPETITIONS: usize = 2;

/// One task, read and checked.
struct IcaeTask {
    id: &'static str,
    key: &'static str,
    language: &'static str,
    alias: String,
    /// The PRD the agent gets: start.md and the adapted Clarification block.
    prd: String,
    /// `oracle_data` as ICAE injects it.
    brief: String,
    constraints: usize,
    fallback: String,
    /// Tier → (file name → bytes); a tier ICAE's data lacks is absent.
    cases: BTreeMap<&'static str, Vec<(String, Vec<u8>)>>,
    /// sha256 of every input file of this task, path and length framed.
    digest: String,
}

/// What `eval import v04-icae` is asked to do.
pub use super::common::SuiteOptions as Options;

/// Checks every input, then writes the suite; the summary names its tasks and arms.
pub fn import(args: &Options) -> Result<Summary, ImportError> {
    let (files, tasks) = plan(args)?;
    let arms = ARMS.map(|a| a.0.to_owned()).to_vec();
    write_suite(&files, GRADER_RUNTIME_PATH, tasks, arms)
}

type Files = BTreeMap<PathBuf, Vec<u8>>;

pub(super) fn plan(args: &Options) -> Result<(Files, Vec<String>), ImportError> {
    let name = &args.protocol;
    if !eval_matrix::valid_id(name) {
        return Err(ImportError::ProtocolName(name.clone()));
    }
    for (flag, id) in [
        ("--dsh-image", &args.dsh_image),
        ("--grader-image", &args.grader_image),
    ] {
        if !eval_runtimes::definition::is_digest(id) {
            return Err(ImportError::ImageId {
                flag,
                id: id.clone(),
            });
        }
    }
    let chosen = choose(&args.tasks)?;
    let mut inputs = Vec::new();
    let staged = stage(args, &chosen, &mut inputs)?;
    let from = staged
        .as_ref()
        .map_or(args.from.clone(), |d| d.path().to_path_buf());
    let pkg_dir = args.package.parent().unwrap_or(Path::new("."));
    let pkg_file = args
        .package
        .file_name()
        .and_then(|f| f.to_str())
        .ok_or_else(|| bad(&args.package, "--package: not a file name"))?;
    let package = read_input(pkg_dir, pkg_file)?;
    let package_sha = hex::encode(Sha256::digest(&package));
    let want = PINNED
        .iter()
        .find(|(f, _)| *f == PACKAGE_V04)
        .map(|(_, d)| *d)
        .unwrap_or_default();
    if package_sha != want && !args.allow_unpinned {
        return Err(ImportError::Unpinned {
            path: args.package.clone(),
            got: package_sha,
            want,
        });
    }
    let from = &from;
    let init = read_at(from, INIT_FILE)?;
    text_of(&init, &from.join(INIT_FILE))?;
    let suffix_bytes = read_at(from, SUFFIX_FILE)?;
    let suffix = clarification(
        text_of(&suffix_bytes, &from.join(SUFFIX_FILE))?,
        &from.join(SUFFIX_FILE),
    )?;
    let aliases = read_aliases(from)?;
    let tasks = chosen
        .iter()
        .map(|t| read_task(from, *t, &aliases, &suffix))
        .collect::<Result<Vec<_>, _>>()?;
    if !AGENT_RUNTIME.contains(AGENT_IMAGE_PLACEHOLDER) {
        return Err(ImportError::BuiltinRuntime);
    }
    let sha = |b: &[u8]| hex::encode(Sha256::digest(b));
    inputs.extend([
        format!("#   {INIT_FILE}: sha256 {}", sha(&init)),
        format!("#   {SUFFIX_FILE}: sha256 {}", sha(&suffix_bytes)),
        format!("#   {PACKAGE_V04}: sha256 {package_sha}"),
    ]);
    for t in &tasks {
        inputs.push(format!(
            "#   {} ({}, alias {}): input tree sha256 {}",
            t.id, t.key, t.alias, t.digest
        ));
    }

    let mut out = Files::new();
    let mut put = |rel: String, bytes: Vec<u8>| {
        out.insert(PathBuf::from(rel), bytes);
    };
    let pdir = format!("protocols/{name}");
    put(
        format!("{pdir}/protocol.toml"),
        protocol_toml(name, &tasks, &inputs).into_bytes(),
    );
    put(
        format!("matrix/{name}.toml"),
        matrix_toml(name, &tasks).into_bytes(),
    );
    for (rel, bytes) in harness_arm_files(&pdir, &ARMS, &package, &args.dsh_image) {
        put(rel, bytes);
    }
    put(
        GRADER_RUNTIME_PATH.to_owned(),
        grader_runtime_toml(&args.grader_image).into_bytes(),
    );
    for t in &tasks {
        let tdir = format!("{pdir}/tasks/{SUITE}/{}", t.id);
        put(format!("{tdir}/task.toml"), task_toml(t).into_bytes());
        put(
            format!("{tdir}/prompt.md"),
            PROMPT_TEMPLATE
                .replace("@LANGUAGE@", t.language)
                .replace("@TOOLCHAINS@", &super::common::agent_toolchains())
                .replace("@MAX_QUESTIONS@", &MAX_QUESTIONS.to_string())
                .into_bytes(),
        );
        put(
            format!("{tdir}/workspace/start.md"),
            t.prd.clone().into_bytes(),
        );
        // The run stage's inputs (`[grader] run_inputs = "public"`): grade.py and the cases
        // without their expected outputs; the score stage reads the authoritative cases.
        put(
            format!("{tdir}/hidden/public/grade.py"),
            GRADE_PY.as_bytes().to_vec(),
        );
        put(format!("{tdir}/hidden/oracle/init.md"), init.clone());
        put(
            format!("{tdir}/hidden/oracle/oracle_data.json"),
            t.brief.clone().into_bytes(),
        );
        for (tier, files) in &t.cases {
            for (file, bytes) in files {
                put(format!("{tdir}/hidden/cases/{tier}/{file}"), bytes.clone());
                put(
                    format!("{tdir}/hidden/public/cases/{tier}/{file}"),
                    sanitized_cases(bytes),
                );
            }
        }
    }
    Ok((out, tasks.iter().map(|t| t.id.to_owned()).collect()))
}

/// Where the inputs are read: `--from DIR` itself (extracted directories: no pin, so only with
/// `--allow-unpinned`), or, when DIR holds both Zenodo archives, a private directory laid out as
/// an ICAE root with the members the import needs (`archive::extract`) and DIR's `init.md` and
/// `fuzzy_suffix.md`; the archives and those two files must have v0.4's bytes unless
/// `--allow-unpinned`. Records the archives' digests in `inputs`.
fn stage(
    args: &Options,
    chosen: &[(&'static str, &'static str, &'static str)],
    inputs: &mut Vec<String>,
) -> Result<Option<tempfile::TempDir>, ImportError> {
    let has =
        archive::PINS.map(|(name, _)| std::fs::symlink_metadata(args.from.join(name)).is_ok());
    match has {
        [false, false] if args.allow_unpinned => return Ok(None),
        [false, false] => return Err(ImportError::IcaeUnpinned(args.from.clone())),
        [true, true] => {}
        [_, prd_here] => {
            let (here, missing) = if prd_here {
                (archive::PRD_ARCHIVE, archive::RCB_ARCHIVE)
            } else {
                (archive::RCB_ARCHIVE, archive::PRD_ARCHIVE)
            };
            return Err(bad(
                args.from.join(missing),
                format!(
                    "missing, while {here} is there: the import reads both archives or neither"
                ),
            ));
        }
    }
    let dir = tempfile::Builder::new()
        .prefix("eval-icae-")
        .tempdir()
        .map_err(|source| ImportError::Read {
            path: std::env::temp_dir(),
            source,
        })?;
    let mut bytes = Vec::new();
    for (name, want) in archive::PINS {
        let (b, got) = archive::read(&args.from, name)?;
        if got != want && !args.allow_unpinned {
            return Err(ImportError::Unpinned {
                path: args.from.join(name),
                got,
                want,
            });
        }
        inputs.push(format!("#   {name}: sha256 {got}"));
        bytes.push(b);
    }
    let mut it = bytes.into_iter();
    let (rcb, prd) = (it.next().unwrap_or_default(), it.next().unwrap_or_default());
    let under = |r: &str, top: &str| r == top || r.starts_with(&format!("{top}/"));
    let keys: Vec<String> = chosen
        .iter()
        .map(|t| format!("rcb_tests_repos/{}", t.1))
        .collect();
    archive::extract(
        &args.from.join(archive::PRD_ARCHIVE),
        prd,
        &|r| {
            r == ALIAS_FILE
                || r == "user_agent"
                || under(r, "fuzzy_prds")
                || under(r, "user_agent/prd_json")
        },
        dir.path(),
    )?;
    archive::extract(
        &args.from.join(archive::RCB_ARCHIVE),
        rcb,
        &|r| r == "rcb_tests_repos" || keys.iter().any(|k| under(r, k)),
        dir.path(),
    )?;
    for (rel, want) in REPO_PINS {
        let b = read_at(&args.from, rel)?;
        let got = hex::encode(Sha256::digest(&b));
        if got != want && !args.allow_unpinned {
            return Err(ImportError::Unpinned {
                path: args.from.join(rel),
                got,
                want,
            });
        }
        let target = dir.path().join(rel);
        let fail = |source| ImportError::Write {
            path: target.clone(),
            source,
        };
        if let Some(parent) = target.parent() {
            std::fs::create_dir_all(parent).map_err(fail)?;
        }
        write_new(&target, &b).map_err(fail)?;
    }
    Ok(Some(dir))
}

/// The tasks to import, in v0.4's order (`--tasks` selects; an unknown id is an error).
fn choose(
    wanted: &[String],
) -> Result<Vec<(&'static str, &'static str, &'static str)>, ImportError> {
    let known: Vec<String> = TASKS.iter().map(|t| t.0.to_owned()).collect();
    let mut want = BTreeSet::new();
    for w in wanted {
        if !known.contains(w) {
            return Err(ImportError::UnknownTask {
                id: w.clone(),
                known: known.clone(),
            });
        }
        if !want.insert(w.as_str()) {
            return Err(ImportError::TaskTwice(w.clone()));
        }
    }
    Ok(TASKS
        .iter()
        .filter(|t| want.is_empty() || want.contains(t.0))
        .copied()
        .collect())
}

/// `rel` (plain components) beneath `from`, every directory on the way a real directory (no
/// link leads the read elsewhere), the file itself read by [`read_input`].
fn read_at(from: &Path, rel: &str) -> Result<Vec<u8>, ImportError> {
    let (dir, file) = real_dir_of(from, rel)?;
    read_input(&dir, file)
}

/// The directory holding `rel`'s last component, each component checked, and that component.
fn real_dir_of<'a>(from: &Path, rel: &'a str) -> Result<(PathBuf, &'a str), ImportError> {
    safe_relative(rel).map_err(|why| bad(from.join(rel), why))?;
    let mut parts: Vec<&str> = rel.split('/').collect();
    let file = parts.pop().unwrap_or_default();
    let mut dir = from.to_path_buf();
    for p in parts {
        dir.push(p);
        real_dir(&dir)?;
    }
    Ok((dir, file))
}

/// `dir` is a directory, not a link to one.
fn real_dir(dir: &Path) -> Result<(), ImportError> {
    match std::fs::symlink_metadata(dir) {
        Ok(m) if m.is_dir() => Ok(()),
        Ok(m) if m.file_type().is_symlink() => Err(ImportError::NotRegular {
            path: dir.to_path_buf(),
            what: "a symbolic link where a directory belongs".into(),
        }),
        Ok(_) => Err(bad(dir, "not a directory")),
        Err(source) => Err(ImportError::Read {
            path: dir.to_path_buf(),
            source,
        }),
    }
}

fn text_of<'a>(bytes: &'a [u8], path: &Path) -> Result<&'a str, ImportError> {
    std::str::from_utf8(bytes).map_err(|_| bad(path, "not UTF-8"))
}

/// A name used as one path component: an alias or a repository key.
fn plain_component(s: &str) -> bool {
    !s.is_empty()
        && s != "."
        && s != ".."
        && s.len() <= 200
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '@'))
}

/// `repo_alias.json`: alias → repository key, every record's alias and key plain names.
fn read_aliases(from: &Path) -> Result<BTreeMap<String, String>, ImportError> {
    let path = from.join(ALIAS_FILE);
    let bytes = read_at(from, ALIAS_FILE)?;
    let v: serde_json::Value =
        serde_json::from_slice(&bytes).map_err(|e| bad(&path, format!("not JSON: {e}")))?;
    let map = v
        .as_object()
        .ok_or_else(|| bad(&path, "not an object of alias records"))?;
    let mut out = BTreeMap::new();
    for (alias, rec) in map {
        let key = rec
            .get("key")
            .and_then(|k| k.as_str())
            .ok_or_else(|| bad(&path, format!("{alias:?}.key: missing or not a string")))?;
        if !plain_component(alias) {
            return Err(bad(
                &path,
                format!("alias {alias:?}: not a plain name (letters, digits, `-_.@`)"),
            ));
        }
        if !plain_component(key) {
            return Err(bad(
                &path,
                format!("{alias:?}.key = {key:?}: not a plain name (letters, digits, `-_.@`)"),
            ));
        }
        out.insert(alias.clone(), key.to_owned());
    }
    Ok(out)
}

fn read_task(
    from: &Path,
    (id, key, language): (&'static str, &'static str, &'static str),
    aliases: &BTreeMap<String, String>,
    suffix: &str,
) -> Result<IcaeTask, ImportError> {
    let alias_path = from.join(ALIAS_FILE);
    let found: Vec<&String> = aliases
        .iter()
        .filter(|(_, k)| k.as_str() == key)
        .map(|(a, _)| a)
        .collect();
    let alias = match found.as_slice() {
        [a] => (*a).clone(),
        [] => {
            return Err(bad(
                &alias_path,
                format!("no record has key {key:?} (task {id})"),
            ));
        }
        many => {
            return Err(bad(
                &alias_path,
                format!("key {key:?} (task {id}) has {} records", many.len()),
            ));
        }
    };
    let mut digest = Sha256::new();
    let mut record = |rel: &str, bytes: &[u8]| {
        digest.update(format!("{rel}\0{}\0", bytes.len()));
        digest.update(bytes);
    };
    let prd_rel = format!("fuzzy_prds/{alias}/start.md");
    let prd_bytes = read_at(from, &prd_rel)?;
    record(&prd_rel, &prd_bytes);
    let raw = text_of(&prd_bytes, &from.join(&prd_rel))?;
    if raw.trim().is_empty() {
        return Err(bad(from.join(&prd_rel), "empty"));
    }
    // ICAE's build_fuzzy_prd: raw.rstrip() + "\n\n" + suffix.lstrip().
    let prd = format!("{}\n\n{}", raw.trim_end(), suffix.trim_start());

    let json_rel = format!("user_agent/prd_json/{alias}.json");
    let json_bytes = read_at(from, &json_rel)?;
    record(&json_rel, &json_bytes);
    let json_path = from.join(&json_rel);
    let (brief, constraints, fallback) = brief_of(&json_bytes, &json_path)?;

    let rcb = format!("rcb_tests_repos/{key}/rcb_tests");
    let (rcb_dir, last) = real_dir_of(from, &rcb)?;
    let rcb_dir = rcb_dir.join(last);
    real_dir(&rcb_dir)?;
    let mut cases = BTreeMap::new();
    for tier in TIERS {
        let dir = rcb_dir.join(tier);
        match std::fs::symlink_metadata(&dir) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            _ => real_dir(&dir)?,
        }
        let files = read_cases(&dir)?;
        for (file, bytes) in &files {
            record(&format!("{rcb}/{tier}/{file}"), bytes);
        }
        cases.insert(tier, files);
    }
    if !cases.contains_key("test_cases") && !cases.contains_key("enhanced_test_cases") {
        return Err(bad(
            &rcb_dir,
            "neither test_cases/ nor enhanced_test_cases/: nothing to score",
        ));
    }
    Ok(IcaeTask {
        id,
        key,
        language,
        alias,
        prd,
        brief,
        constraints,
        fallback,
        cases,
        digest: hex::encode(digest.finalize()),
    })
}

/// The `*.json` files of one tier (what evaluate.py's glob reads), each an object whose `cases`
/// is an array of objects with an `expected_output`; other names are left out, as ICAE does.
fn read_cases(dir: &Path) -> Result<Vec<(String, Vec<u8>)>, ImportError> {
    let entries = std::fs::read_dir(dir).map_err(|source| ImportError::Read {
        path: dir.to_path_buf(),
        source,
    })?;
    let mut names = Vec::new();
    for e in entries {
        let e = e.map_err(|source| ImportError::Read {
            path: dir.to_path_buf(),
            source,
        })?;
        let n = e.file_name();
        let Some(n) = n.to_str() else {
            return Err(bad(e.path(), "not a UTF-8 name"));
        };
        if n.ends_with(".json") {
            names.push(n.to_owned());
        }
    }
    if names.len() > MAX_CASE_FILES {
        return Err(bad(dir, format!("more than {MAX_CASE_FILES} case files")));
    }
    names.sort();
    let mut out = Vec::new();
    for n in names {
        if !plain_component(&n) {
            return Err(bad(dir.join(&n), "not a plain file name"));
        }
        let bytes = read_input(dir, &n)?;
        let path = dir.join(&n);
        let v: serde_json::Value =
            serde_json::from_slice(&bytes).map_err(|e| bad(&path, format!("not JSON: {e}")))?;
        let cases = v
            .get("cases")
            .and_then(|c| c.as_array())
            .ok_or_else(|| bad(&path, "cases: missing or not an array"))?;
        for (i, c) in cases.iter().enumerate() {
            if c.get("expected_output").is_none() {
                return Err(bad(&path, format!("cases[{i}].expected_output: missing")));
            }
        }
        out.push((n, bytes));
    }
    Ok(out)
}

/// The brief of `prd_json/<alias>.json`: its `oracle_data` as ICAE's `build_system_prompt`
/// writes it, the number of hidden constraints (each with a string `constraint_id`), and the
/// `fallback_response` (or eval's) for a malformed reply.
fn brief_of(bytes: &[u8], path: &Path) -> Result<(String, usize, String), ImportError> {
    let v: serde_json::Value =
        serde_json::from_slice(bytes).map_err(|e| bad(path, format!("not JSON: {e}")))?;
    let data = v
        .get("oracle_data")
        .filter(|d| d.is_object())
        .ok_or_else(|| bad(path, "oracle_data: missing or not an object"))?;
    let list = data
        .get("hidden_constraints")
        .and_then(|l| l.as_array())
        .ok_or_else(|| {
            bad(
                path,
                "oracle_data.hidden_constraints: missing or not an array",
            )
        })?;
    let mut ids = BTreeSet::new();
    for (i, c) in list.iter().enumerate() {
        let id = c
            .get("constraint_id")
            .and_then(|x| x.as_str())
            .filter(|x| !x.is_empty())
            .ok_or_else(|| {
                bad(
                    path,
                    format!(
                        "oracle_data.hidden_constraints[{i}].constraint_id: missing or not a string"
                    ),
                )
            })?;
        if !ids.insert(id) {
            return Err(bad(
                path,
                format!("oracle_data.hidden_constraints[{i}].constraint_id {id:?}: listed twice"),
            ));
        }
    }
    let fallback = data
        .get("fallback_response")
        .and_then(|f| f.as_str())
        .filter(|f| !f.trim().is_empty())
        .unwrap_or(FALLBACK)
        .to_owned();
    let text = std::str::from_utf8(bytes).map_err(|_| bad(path, "not UTF-8"))?;
    let ordered: Ordered =
        serde_json::from_str(text).map_err(|e| bad(path, format!("not JSON: {e}")))?;
    let Ordered::Obj(top) = ordered else {
        return Err(bad(path, "not an object"));
    };
    let data = top
        .into_iter()
        .rev()
        .find(|(k, _)| k == "oracle_data")
        .map(|(_, v)| v)
        .ok_or_else(|| bad(path, "oracle_data: missing"))?;
    let mut brief = String::new();
    py_dumps(&data, 0, &mut brief);
    Ok((brief, list.len(), fallback))
}

/// A JSON value with its objects' key order kept (serde_json's map sorts), to write the brief
/// as Python's `json.dumps` does.
#[derive(Debug, PartialEq)]
enum Ordered {
    Null,
    Bool(bool),
    Num(serde_json::Number),
    Str(String),
    Arr(Vec<Ordered>),
    Obj(Vec<(String, Ordered)>),
}

impl<'de> serde::Deserialize<'de> for Ordered {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Ordered;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("JSON")
            }
            fn visit_unit<E>(self) -> Result<Ordered, E> {
                Ok(Ordered::Null)
            }
            fn visit_none<E>(self) -> Result<Ordered, E> {
                Ok(Ordered::Null)
            }
            fn visit_bool<E>(self, b: bool) -> Result<Ordered, E> {
                Ok(Ordered::Bool(b))
            }
            fn visit_i64<E>(self, n: i64) -> Result<Ordered, E> {
                Ok(Ordered::Num(n.into()))
            }
            fn visit_u64<E>(self, n: u64) -> Result<Ordered, E> {
                Ok(Ordered::Num(n.into()))
            }
            fn visit_f64<E: serde::de::Error>(self, n: f64) -> Result<Ordered, E> {
                serde_json::Number::from_f64(n)
                    .map(Ordered::Num)
                    .ok_or_else(|| E::custom("a number JSON cannot hold"))
            }
            fn visit_str<E>(self, s: &str) -> Result<Ordered, E> {
                Ok(Ordered::Str(s.to_owned()))
            }
            fn visit_string<E>(self, s: String) -> Result<Ordered, E> {
                Ok(Ordered::Str(s))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut a: A,
            ) -> Result<Ordered, A::Error> {
                let mut v = Vec::new();
                while let Some(x) = a.next_element()? {
                    v.push(x);
                }
                Ok(Ordered::Arr(v))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut a: A,
            ) -> Result<Ordered, A::Error> {
                let mut v: Vec<(String, Ordered)> = Vec::new();
                while let Some((k, x)) = a.next_entry::<String, Ordered>()? {
                    // Python's dict: a repeated key keeps its first place and its last value.
                    match v.iter_mut().find(|(key, _)| *key == k) {
                        Some(slot) => slot.1 = x,
                        None => v.push((k, x)),
                    }
                }
                Ok(Ordered::Obj(v))
            }
        }
        d.deserialize_any(V)
    }
}

/// Python's `json.dumps(v, ensure_ascii=False, indent=2)` (separators `,` and `: `, strings
/// escaped as serde_json escapes them: `"`, `\`, and control characters, which is Python's set).
fn py_dumps(v: &Ordered, depth: usize, out: &mut String) {
    let pad = |d: usize| "  ".repeat(d);
    let string = |s: &str| serde_json::to_string(s).unwrap_or_default();
    match v {
        Ordered::Null => out.push_str("null"),
        Ordered::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Ordered::Num(n) => out.push_str(&n.to_string()),
        Ordered::Str(s) => out.push_str(&string(s)),
        Ordered::Arr(a) if a.is_empty() => out.push_str("[]"),
        Ordered::Obj(o) if o.is_empty() => out.push_str("{}"),
        Ordered::Arr(a) => {
            out.push_str("[\n");
            for (i, x) in a.iter().enumerate() {
                if i > 0 {
                    out.push_str(",\n");
                }
                out.push_str(&pad(depth + 1));
                py_dumps(x, depth + 1, out);
            }
            out.push('\n');
            out.push_str(&pad(depth));
            out.push(']');
        }
        Ordered::Obj(o) => {
            out.push_str("{\n");
            for (i, (k, x)) in o.iter().enumerate() {
                if i > 0 {
                    out.push_str(",\n");
                }
                out.push_str(&pad(depth + 1));
                out.push_str(&string(k));
                out.push_str(": ");
                py_dumps(x, depth + 1, out);
            }
            out.push('\n');
            out.push_str(&pad(depth));
            out.push('}');
        }
    }
}

/// ICAE's `fuzzy_suffix.md` for an agent in its own container: its `**Oracle** — POST …`
/// paragraph (the endpoint, its JSON body and `Answer is in data …` line) becomes eval's
/// question channel; `{{`/`}}` are unescaped as Python's `str.format` does. A suffix without
/// that paragraph, or with another placeholder, is refused: it is not the file eval adapts.
fn clarification(text: &str, path: &Path) -> Result<String, ImportError> {
    let lines: Vec<&str> = text.lines().collect();
    let start = lines
        .iter()
        .position(|l| l.starts_with("**Oracle**"))
        .ok_or_else(|| bad(path, "no `**Oracle**` line (the endpoint eval adapts)"))?;
    let end = lines[start..]
        .iter()
        .position(|l| l.starts_with("Answer is in"))
        .map(|k| start + k)
        .ok_or_else(|| bad(path, "no `Answer is in …` line after `**Oracle**`"))?;
    let ours = CLARIFY_TEMPLATE.replace("@MAX_QUESTIONS@", &MAX_QUESTIONS.to_string());
    let mut out = String::new();
    for l in &lines[..start] {
        out.push_str(l);
        out.push('\n');
    }
    out.push_str(&ours);
    for l in &lines[end + 1..] {
        out.push_str(l);
        out.push('\n');
    }
    let unescaped = out.replace("{{", "\u{0}").replace("}}", "\u{1}");
    if unescaped.contains('{') || unescaped.contains('}') {
        return Err(bad(
            path,
            "a placeholder outside the `**Oracle**` paragraph (eval fills in none)",
        ));
    }
    Ok(unescaped.replace('\u{0}', "{").replace('\u{1}', "}"))
}

/// The score stage (runs no agent code, sees no workspace): the comparison with the expected
/// outputs, as ICAE's evaluate.py compares on its host.
const GRADER_COMMAND: &str = r#"["/usr/bin/python3", "{hidden}/public/grade.py", "score", "{hidden}", "{capture}", "{out}"]"#;
/// The run stage: the agent's rcb_tests/test.sh over the sanitized cases of hidden/public/.
const GRADER_RUN: &str =
    r#"["/usr/bin/python3", "{inputs}/grade.py", "run", "{workspace}", "{inputs}", "{capture}"]"#;

/// A case file as ICAE's evaluate.py `_sanitize_cases` hands it to the agent's test runner: every
/// case's `expected_output` removed; a file that does not parse, or is not an object, becomes
/// `{"cases": []}` (fail-closed: no answer ever reaches the run stage).
fn sanitized_cases(bytes: &[u8]) -> Vec<u8> {
    let empty = || br#"{"cases": []}"#.to_vec();
    let Ok(mut v) = serde_json::from_slice::<serde_json::Value>(bytes) else {
        return empty();
    };
    let Some(obj) = v.as_object_mut() else {
        return empty();
    };
    match obj.get_mut("cases") {
        Some(serde_json::Value::Array(cases)) => {
            for c in cases.iter_mut() {
                if let Some(c) = c.as_object_mut() {
                    c.remove("expected_output");
                }
            }
        }
        None => {}
        Some(_) => return empty(),
    }
    serde_json::to_vec(&v).unwrap_or_else(|_| empty())
}

/// The grader's metrics (grade.py's `score.json`).
pub const GRADER_METRICS: [&str; 7] = [
    "hidden_score",
    "public_passed",
    "public_total",
    "hidden_passed",
    "hidden_total",
    "enhanced_passed",
    "enhanced_total",
];

fn task_toml(t: &IcaeTask) -> String {
    let tiers: Vec<String> = TIERS
        .iter()
        .map(|tier| match t.cases.get(tier) {
            Some(files) => format!("{tier} {} file(s)", files.len()),
            None => format!("{tier} absent"),
        })
        .collect();
    let metrics: Vec<String> = GRADER_METRICS.iter().map(|m| q(m)).collect();
    let scaffolding: Vec<String> = SCAFFOLDING.iter().map(|s| q(s)).collect();
    format!(
        r#"# ICAE-EVAL task {id}: {key} ({lang}), ICAE alias {alias}, imported by `eval import v04-icae`
# (input tree sha256 {digest}). The agent gets prompt.md and the fuzzy PRD as workspace/start.md;
# hidden/ holds the authoritative cases ({tiers}), in public/ eval's grade.py (ICAE
# evaluate.py's rules) and the cases without their expected outputs (the grader's run stage sees
# only these), and the simulated user's frozen system prompt and brief ({n} hidden constraints).
id = {qid}
suite = "{SUITE}"
timeout_seconds = 3600
description = {desc}
metrics = [{metrics}]

[grader]
runtime = {rt}
command = {GRADER_COMMAND}

# ICAE's simulated user (user_agent.py): init.md, then the brief under ICAE's heading in a json
# fence; the attempt's conversation resent with each question; only `reply` reaches the agent,
# `_internal_log.triggers_hit` is recorded per question.
[oracle]
answers = "hidden/oracle/oracle_data.json"
max_questions = {maxq}
answered_by = "stateful"

[oracle.stateful]
system_prompt = "hidden/oracle/init.md"
brief_heading = {heading}
brief_fence = "json"
reply = "json"
reply_field = "reply"
record_field = "_internal_log.triggers_hit"
fallback_answer = {fallback}

[oracle.constraints]
list = "hidden_constraints"
id_field = "constraint_id"
scaffolding = [{scaffolding}]
"#,
        id = t.id,
        key = t.key,
        lang = t.language,
        alias = t.alias,
        digest = t.digest,
        tiers = tiers.join(", "),
        n = t.constraints,
        qid = q(t.id),
        desc = q(&format!(
            "{} ambiguous product build of v0.4's ICAE suite ({})",
            t.language, t.key
        )),
        metrics = metrics.join(", "),
        rt = q(GRADER_RUNTIME_PATH),
        maxq = MAX_QUESTIONS,
        heading = q(BRIEF_HEADING),
        fallback = q(&t.fallback),
        scaffolding = scaffolding.join(", "),
    )
}

fn grader_runtime_toml(image: &str) -> String {
    format!(
        r#"# The grader of imported ICAE tasks (written by `eval import v04-icae`): an image with bash,
# python3 (for hidden/public/grade.py) and the tasks' toolchains (Go, Node, Python; e.g.
# runtimes/images/v04-grader/build.sh in the eval repository prints such an id). It grades in
# eval's two stages: the run stage sees the workspace snapshot and hidden/public/ (the cases
# without expected outputs) only, copies the snapshot into the exec tmpfs below for each case tier
# and runs the agent's rcb_tests/test.sh there (HOME, TMPDIR and the Go and npm caches in it
# too), its outputs captured by eval; the score stage sees no workspace and compares eval's copy
# of those outputs with the authoritative cases.
name = "v04-icae-grader"
user = "65532:65532"
tmpfs_exec = [{scratch}]

[image]
id = {id}

[grader]
run = {run}
run_inputs = "public"
command = {cmd}

[limits]
memory_mb = 4096
cpus = 1.0
pids = 512
tmpfs_mb = 2048
"#,
        scratch = q(GRADER_SCRATCH),
        id = q(image),
        cmd = GRADER_COMMAND,
        run = GRADER_RUN,
    )
}

fn matrix_toml(name: &str, tasks: &[IcaeTask]) -> String {
    let ids: Vec<&str> = tasks.iter().map(|t| t.id).collect();
    let arms: Vec<&str> = ARMS.iter().map(|a| a.0).collect();
    // v0.4 runs its ICAE infrastructure slots on icae-js-ts-01; with a subset, the first task.
    let infra = ids
        .iter()
        .find(|id| **id == "icae-js-ts-01")
        .or(ids.first())
        .copied()
        .unwrap_or_default();
    super::common::V04Matrix {
        name,
        header: "# v0.4's ICAE suite (written by `eval import v04-icae`): its tasks, its three arms (baseline\n\
# first, gated candidate named), two repetitions, infrastructure slots first, v0.4's order\n\
# algorithm and seed string.\n",
        description: "v0.4's ICAE suite on the DeepSeek Harness with the real Plan Lattice package",
        concurrency: 1,
        suite: SUITE,
        tasks: &ids,
        arms: &arms,
        baseline: BASELINE,
        candidate: CANDIDATE,
        repetitions: REPETITIONS,
        infra,
    }
    .toml()
}

fn protocol_toml(name: &str, tasks: &[IcaeTask], inputs: &[String]) -> String {
    let mut arms = String::new();
    for (id, description, config) in &ARMS {
        arms.push_str(&format!(
            "\n[[arms]]\nid = {}\ndescription = {}\nruntime = {}\nprofile = {}\n",
            q(id),
            q(description),
            q(AGENT_RUNTIME_PATH),
            q(&format!("protocols/{name}/arms/{id}/cordis.patch.yml")),
        ));
        if !config.is_empty() {
            arms.push_str(&format!(
                "package = {}\n",
                q(&format!("protocols/{name}/arms/{id}/{PACKAGE_V04}"))
            ));
        }
        arms.push_str("[arms.settings]\n");
        if config.is_empty() {
            arms.push_str("plugin = \"none\"\n");
        } else {
            arms.push_str("plugin = \"plan-lattice\"\npluginVersion = \"0.4.0-rc.3\"\n");
        }
        for (k, v) in *config {
            arms.push_str(&format!("{k} = {}\n", q(v)));
        }
    }
    let most = tasks.iter().map(|t| t.constraints).max().unwrap_or(0);
    PROTOCOL_TEMPLATE
        .replace("@NAME@", &q(name))
        .replace("@INPUTS@", &inputs.join("\n"))
        .replace("@N_TASKS@", &tasks.len().to_string())
        .replace("@REPETITIONS@", &REPETITIONS.to_string())
        .replace("@PAIRS@", &(tasks.len() * REPETITIONS).to_string())
        .replace("@MAX_CONSTRAINTS@", &format!("{most}.0"))
        .replace("@ARMS@", &arms)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The brief is what ICAE's `json.dumps(oracle_data, ensure_ascii=False, indent=2)` gives
    /// (written here by hand from Python's rules): key order kept, `": "` and `","`, two
    /// spaces, empty containers inline, non-ASCII kept, control characters escaped.
    #[test]
    fn the_brief_is_written_as_pythons_json_dumps_writes_it() {
        let input = r#"{"z": 1, "oracle_data": {"zeta": [], "alpha": {"b": [1, 2.5, true, null], "a": {}}, "s": "é\"\\\n\u0001", "zeta": [3]}}"#;
        let (brief, _, _) = brief_of(
            format!(
                r#"{{"oracle_data": {{"hidden_constraints": [{{"constraint_id": "C1"}}], "rest": {}}}}}"#,
                input
            )
            .as_bytes(),
            Path::new("x.json"),
        )
        .unwrap();
        assert_eq!(
            brief,
            "{\n  \"hidden_constraints\": [\n    {\n      \"constraint_id\": \"C1\"\n    }\n  ],\n  \"rest\": {\n    \"z\": 1,\n    \"oracle_data\": {\n      \"zeta\": [\n        3\n      ],\n      \"alpha\": {\n        \"b\": [\n          1,\n          2.5,\n          true,\n          null\n        ],\n        \"a\": {}\n      },\n      \"s\": \"é\\\"\\\\\\n\\u0001\"\n    }\n  }\n}"
        );
    }

    #[test]
    fn the_clarification_block_gets_evals_channel_and_keeps_the_rest() {
        let suffix = "---\n\n## Clarification\n\nThis PRD is intentionally incomplete.\n\n**Oracle** — POST `http://{host}:{query_port}/`\n```\n{{\"append_id\":\"{append_id}\",\"question\":\"...\"}}\n```\nAnswer is in `data`. Budget shown in `status.remaining`.\n\nAsk before you code.\n";
        let out = clarification(suffix, Path::new("s.md")).unwrap();
        assert!(out.starts_with("---\n\n## Clarification\n\nThis PRD is intentionally incomplete.\n\n**Oracle** — ask your question with your tool"), "{out}");
        assert!(
            out.ends_with("At most 5 questions.\n\nAsk before you code.\n"),
            "{out}"
        );
        assert!(
            !out.contains("query_port") && !out.contains("data`"),
            "{out}"
        );
        let e = clarification("no oracle here\n", Path::new("s.md")).unwrap_err();
        assert!(e.to_string().contains("s.md: no `**Oracle**`"), "{e}");
        let e = clarification(
            "**Oracle** x\nAnswer is in y\n{task_id}\n",
            Path::new("s.md"),
        )
        .unwrap_err();
        assert!(e.to_string().contains("placeholder"), "{e}");
    }
}
