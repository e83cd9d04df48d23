//! `eval import v04 --simple DIR --evocode PATH --icae PATH`: the whole v0.4 as one protocol and
//! one matrix. Each suite is imported by its own importer (`super::plan`, `evocode::plan`,
//! `icae::plan`, under the one protocol name, so their task, arm and runtime files land where the
//! composed protocol names them); their protocols and matrices are then composed table by table
//! (`compose_protocol`, `compose_matrix`) rather than written again here, so what an importer
//! changes flows into this one. What v0.4 has and a single suite's import leaves out is added
//! here: v0.4's hypotheses and registration (read from `protocols/v0.4`), EvoCode's `task_count`
//! and bootstrap rules, one budget, and the matrix's six infrastructure slots in v0.4's order.

use super::common::{ImportError, PACKAGE_V04, Summary, q};
use super::simple::Grading;
use super::{evocode, icae, simple};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use toml::{Table, Value};

/// v0.4 as `protocols/v0.4` expresses it: its hypotheses, registration and gate descriptions are
/// taken from there word for word.
const V04_PROTOCOL: &str = include_str!("../../../protocols/v0.4/protocol.toml");

/// The suites in v0.4's order (the matrix's suite order is its unshuffled slot order).
const SUITES: [&str; 3] = ["simple", "icae", "evocode"];

/// The base images v0.4 needs, by build name (`BUILD_NAME` of the script that builds them).
/// `dsh-poly` is every arm's agent image (the Harness with Go, Python, Node and TypeScript) and
/// ICAE's grader base, so an ICAE task is graded with the toolchains it was built with.
pub const IMAGES: [(&str, &str); 3] = [
    ("dsh-poly", "runtimes/images/dsh-poly/build.sh"),
    ("v04-grader", "runtimes/images/v04-grader/build.sh"),
    ("evocode-go", "runtimes/images/evocode-go/build.sh"),
];

/// Where `runtimes/images/lib.sh` records its builds (`build_record`): `$EVAL_IMAGES_WORK`,
/// by default `/var/tmp/eval-images`, then `built/<name>/<inputs digest>` holding the image id.
fn records_dir() -> PathBuf {
    std::env::var_os("EVAL_IMAGES_WORK")
        .filter(|v| !v.is_empty())
        .map_or_else(|| PathBuf::from("/var/tmp/eval-images"), PathBuf::from)
        .join("built")
}

/// Each image's id: from `--image NAME=ID`, else from the newest build record of its script. A
/// record counts only as `lib.sh`'s `cached_image_id` counts it: a regular file owned by root or
/// by us that neither group nor others may write, in a directory of the same kind, holding an
/// image id. Whether the engine still holds the image is `eval freeze`'s check.
pub fn images(flags: &[String]) -> Result<BTreeMap<&'static str, String>, ImportError> {
    let names = || {
        IMAGES
            .iter()
            .map(|(n, _)| *n)
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut out = BTreeMap::new();
    for flag in flags {
        let Some((name, id)) = flag.split_once('=') else {
            return Err(ImportError::ImageFlag(flag.clone(), names()));
        };
        let Some((name, _)) = IMAGES.iter().find(|(n, _)| *n == name) else {
            return Err(ImportError::ImageFlag(flag.clone(), names()));
        };
        if !eval_runtimes::definition::is_digest(id) {
            return Err(ImportError::ImageId {
                flag: "--image",
                id: id.to_owned(),
            });
        }
        out.insert(*name, id.to_owned());
    }
    let dir = records_dir();
    for (name, script) in IMAGES {
        if out.contains_key(name) {
            continue;
        }
        match newest_record(&dir.join(name)) {
            Some(id) => {
                out.insert(name, id);
            }
            None => {
                return Err(ImportError::MissingImage {
                    name,
                    script,
                    dir: dir.join(name),
                });
            }
        }
    }
    Ok(out)
}

/// Owned by root or by us, and writable by neither group nor others.
fn trusted(md: &std::fs::Metadata) -> bool {
    use std::os::unix::fs::MetadataExt as _;
    let me = rustix::process::getuid().as_raw();
    (md.uid() == 0 || md.uid() == me) && md.mode() & 0o022 == 0
}

/// The image id of the most recently written trusted record in `dir`.
fn newest_record(dir: &Path) -> Option<String> {
    let md = std::fs::symlink_metadata(dir).ok()?;
    if !md.is_dir() || !trusted(&md) {
        return None;
    }
    let mut best: Option<(std::time::SystemTime, String)> = None;
    for entry in std::fs::read_dir(dir).ok()?.flatten() {
        let Ok(md) = std::fs::symlink_metadata(entry.path()) else {
            continue;
        };
        if !md.is_file() || !trusted(&md) || md.len() > 200 {
            continue;
        }
        let Ok(text) = std::fs::read_to_string(entry.path()) else {
            continue;
        };
        let id = text.lines().next().unwrap_or_default().trim().to_owned();
        if !eval_runtimes::definition::is_digest(&id) {
            continue;
        }
        let when = md.modified().unwrap_or(std::time::UNIX_EPOCH);
        if best.as_ref().is_none_or(|(t, _)| when > *t) {
            best = Some((when, id));
        }
    }
    best.map(|(_, id)| id)
}

/// What `eval import v04` is asked to do (its flags, as given).
pub struct Options {
    /// v0.4's `simple` files (its rc.3 package is also the ICAE and EvoCode plugin arms').
    pub simple: PathBuf,
    pub evocode: PathBuf,
    pub icae: PathBuf,
    pub protocol: String,
    pub router_identity: Option<String>,
    pub public_key: Option<String>,
    pub upstream: Option<String>,
    pub tls_spki_sha256: Vec<String>,
    pub allow_unpinned: bool,
    pub no_controls: bool,
    /// Each empty: the suite's v0.4 tasks.
    pub simple_tasks: Vec<String>,
    pub icae_tasks: Vec<String>,
    pub evocode_tasks: Vec<String>,
    /// `NAME=sha256:…` per base image given instead of its build record.
    pub images: Vec<String>,
}

/// Imports the three suites, composes them and writes the result; the summary counts the files.
pub fn import(args: &Options) -> Result<Summary, ImportError> {
    let files = plan(args)?;
    // Every runtime definition (and the dsh support plugin) is shared with other imports: left
    // alone when it already holds exactly these bytes.
    let written = super::common::write_files(&files, &|rel: &Path| rel.starts_with("runtimes"))?;
    Ok(Summary {
        written,
        ..Summary::default()
    })
}

type Files = BTreeMap<PathBuf, Vec<u8>>;

fn plan(args: &Options) -> Result<Files, ImportError> {
    let name = &args.protocol;
    if !eval_matrix::valid_id(name) {
        return Err(ImportError::ProtocolName(name.clone()));
    }
    let images = images(&args.images)?;
    let image = |n: &str| images.get(n).cloned().unwrap_or_default();
    let package = args.simple.join(PACKAGE_V04);
    let simple = simple::Options {
        from: args.simple.clone(),
        protocol: name.clone(),
        tasks: args.simple_tasks.clone(),
        dsh_image: image("dsh-poly"),
        grader_image: image("v04-grader"),
        router_identity: args.router_identity.clone(),
        public_key: args.public_key.clone(),
        upstream: args.upstream.clone(),
        tls_spki_sha256: args.tls_spki_sha256.clone(),
        solutions: None,
        no_controls: args.no_controls,
        allow_unpinned: args.allow_unpinned,
        grading: Grading::V04,
    };
    let icae_args = icae::Options {
        from: args.icae.clone(),
        package: package.clone(),
        protocol: name.clone(),
        tasks: args.icae_tasks.clone(),
        dsh_image: image("dsh-poly"),
        grader_image: image("dsh-poly"),
        allow_unpinned: args.allow_unpinned,
    };
    let evocode_args = evocode::Options {
        from: args.evocode.clone(),
        package,
        protocol: name.clone(),
        tasks: if args.evocode_tasks.is_empty() {
            evocode::V04_TASKS.map(str::to_owned).to_vec()
        } else {
            args.evocode_tasks.clone()
        },
        dsh_image: image("dsh-poly"),
        grader_image: image("evocode-go"),
        allow_unpinned: args.allow_unpinned,
    };
    let parts = [
        ("simple", simple::plan(&simple)?.0),
        ("icae", icae::plan(&icae_args)?.0),
        ("evocode", evocode::plan(&evocode_args)?.0),
    ];
    let protocol_path = PathBuf::from(format!("protocols/{name}/protocol.toml"));
    let matrix_path = PathBuf::from(format!("matrix/{name}.toml"));
    let mut out = Files::new();
    let mut protocols = Vec::new();
    let mut matrices = Vec::new();
    for (suite, files) in parts {
        for (path, bytes) in files {
            if path == protocol_path {
                protocols.push((suite, text(bytes, &path)?));
            } else if path == matrix_path {
                matrices.push((suite, text(bytes, &path)?));
            } else if let Some(other) = out.get(&path)
                && *other != bytes
            {
                return Err(ImportError::Compose(format!(
                    "{}: the {suite} import writes other bytes than an earlier suite's",
                    path.display()
                )));
            } else {
                out.insert(path, bytes);
            }
        }
    }
    out.insert(
        protocol_path,
        compose_protocol(name, &protocols)?.into_bytes(),
    );
    out.insert(matrix_path, compose_matrix(name, &matrices)?.into_bytes());
    Ok(out)
}

fn text(bytes: Vec<u8>, path: &Path) -> Result<String, ImportError> {
    String::from_utf8(bytes)
        .map_err(|_| ImportError::Compose(format!("{}: not UTF-8", path.display())))
}

fn parse(suite: &str, what: &str, text: &str) -> Result<Table, ImportError> {
    text.parse::<Table>().map_err(|e| {
        ImportError::Compose(format!("the {suite} import's {what} does not parse: {e}"))
    })
}

/// The leading comment block of a file (its provenance lines), as written.
fn leading_comments(text: &str) -> String {
    let mut s = String::new();
    for line in text.lines() {
        if line.starts_with('#') {
            s.push_str(line);
            s.push('\n');
        } else if !line.trim().is_empty() {
            break;
        }
    }
    s
}

fn get<'a>(t: &'a Table, suite: &str, key: &str) -> Result<&'a Value, ImportError> {
    t.get(key).ok_or_else(|| {
        ImportError::Compose(format!("the {suite} import's protocol has no `{key}`"))
    })
}

fn array<'a>(t: &'a Table, key: &str) -> &'a [Value] {
    t.get(key)
        .and_then(Value::as_array)
        .map_or(&[][..], Vec::as_slice)
}

fn table<'a>(t: &'a Table, key: &str) -> Option<&'a Table> {
    t.get(key).and_then(Value::as_table)
}

fn id_of(v: &Value) -> Option<&str> {
    v.get("id").and_then(Value::as_str)
}

/// Appends the tables of `from` to `into`, once per `id`; the same id with other contents is
/// refused (two suites that disagree about one arm).
fn union_by_id(into: &mut Vec<Value>, from: &[Value], what: &str) -> Result<(), ImportError> {
    for v in from {
        match into.iter().find(|x| id_of(x) == id_of(v)) {
            None => into.push(v.clone()),
            Some(x) if x == v => {}
            Some(_) => {
                return Err(ImportError::Compose(format!(
                    "{what} {:?}: two suites define it differently",
                    id_of(v).unwrap_or_default()
                )));
            }
        }
    }
    Ok(())
}

/// The `[budgets]` of the whole evaluation: each attempt ceiling the largest of the suites'
/// (a ceiling binds per attempt, whatever its suite), each run ceiling their sum (each suite's
/// was sized for that suite alone), the prices of the first suite (all three write the same).
fn compose_budgets(parts: &[(&str, Table)]) -> Result<Table, ImportError> {
    let mut attempt = Table::new();
    let mut run = Table::new();
    let mut prices = None;
    for (suite, t) in parts {
        let b = get(t, suite, "budgets")?
            .as_table()
            .ok_or_else(|| ImportError::Compose(format!("{suite}: `budgets` is not a table")))?;
        for (kind, into, sum) in [("attempt", &mut attempt, false), ("run", &mut run, true)] {
            for (k, v) in table(b, kind).into_iter().flatten() {
                let merged = match (into.get(k), v) {
                    (None, v) => v.clone(),
                    (Some(Value::Integer(a)), Value::Integer(b)) => {
                        Value::Integer(if sum { a.saturating_add(*b) } else { *a.max(b) })
                    }
                    (Some(Value::Float(a)), Value::Float(b)) => {
                        Value::Float(if sum { a + b } else { a.max(*b) })
                    }
                    (Some(a), b) if a == b => a.clone(),
                    _ => {
                        return Err(ImportError::Compose(format!(
                            "budgets.{kind}.{k}: the suites' values are of different kinds"
                        )));
                    }
                };
                into.insert(k.clone(), merged);
            }
        }
        if prices.is_none() {
            prices = b.get("prices").cloned();
        }
    }
    let mut out = Table::new();
    out.insert("attempt".into(), Value::Table(attempt));
    out.insert("run".into(), Value::Table(run));
    if let Some(p) = prices {
        out.insert("prices".into(), p);
    }
    Ok(out)
}

/// v0.4's two EvoCode rules a suite import may lack: `task_count == <tasks>` after the pair count,
/// and the paired-bootstrap lower bound (v0.4's interval) of the cumulative score `> 0` after its
/// mean difference, on the metric the import's mean-difference rule reads.
fn complete_evocode_gate(gate: &mut Table, n_tasks: usize) -> Result<(), ImportError> {
    let Some(Value::Array(rules)) = gate.get_mut("rules") else {
        return Err(ImportError::Compose(
            "the evocode gate has no rules".to_owned(),
        ));
    };
    let has = |rules: &[Value], stat: &str| {
        rules
            .iter()
            .any(|r| r.get("statistic").and_then(Value::as_str) == Some(stat))
    };
    let after = |rules: &[Value], stat: &str| {
        rules
            .iter()
            .position(|r| r.get("statistic").and_then(Value::as_str) == Some(stat))
            .map_or(rules.len(), |i| i + 1)
    };
    let rule = |pairs: &[(&str, Value)]| {
        Value::Table(
            pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), v.clone()))
                .collect(),
        )
    };
    if !has(rules, "task_count") {
        let at = after(rules, "pair_count");
        rules.insert(
            at,
            rule(&[
                ("id", "tasks".into()),
                ("statistic", "task_count".into()),
                ("op", "==".into()),
                ("threshold", Value::Integer(n_tasks as i64)),
            ]),
        );
    }
    if !has(rules, "bootstrap_lower") {
        let metric = rules
            .iter()
            .find(|r| r.get("statistic").and_then(Value::as_str) == Some("pair_diff_mean"))
            .and_then(|r| r.get("metric"))
            .cloned()
            .ok_or_else(|| {
                ImportError::Compose(
                    "the evocode gate has no pair_diff_mean rule to bound".to_owned(),
                )
            })?;
        let at = after(rules, "pair_diff_mean");
        rules.insert(
            at,
            rule(&[
                ("id", "cumulative_score_bootstrap_lower".into()),
                ("statistic", "bootstrap_lower".into()),
                ("metric", metric),
                ("method", "v04-percentile".into()),
                ("op", ">".into()),
                ("threshold", Value::Integer(0)),
            ]),
        );
    }
    Ok(())
}

/// The header of the composed protocol: what it is, and where it departs from v0.4's text.
const HEADER: &str = "\
# Plan Lattice v0.4 on the real DeepSeek Harness, written by `eval import v04`: v0.4's three suites
# (simple, icae, evocode) as their own importers import them, composed into one protocol with
# v0.4's hypotheses, registration, order, seed, infrastructure slots and every gate rule
# (1052326311/dsh-plan-lattice at 0414dfa; protocols/v0.4 is the same design on stand-ins).
#
# Deviation from v0.4's text, preregistered here: v0.4 pinned temperature 0 and max_tokens 32768
# for the agent (through a support plugin of its own). The stock headless DeepSeek Harness sends no
# temperature and max_tokens 256000 on every agent call, so the agent contract below is that one:
# v0.4's would make every Harness attempt a contract_violation. The oracle (ICAE's simulated user)
# is v0.4's: deepseek-v4-flash, max_tokens 4096. The gates read the importers' metrics (EvoCode's
# corrected rounds_* metrics, ICAE's oracle_constraints_missed), with v0.4's exact ones reported
# beside them; each suite's own deviations are stated in its [suites.*] description and below.
# One budget: each attempt ceiling is the largest of the suites', each run ceiling their sum.
#
# The suites' inputs, as each importer recorded them:
";

fn compose_protocol(name: &str, texts: &[(&str, String)]) -> Result<String, ImportError> {
    let v04 = parse("protocols/v0.4", "protocol", V04_PROTOCOL)?;
    let mut parts = Vec::new();
    for (suite, text) in texts {
        parts.push((*suite, parse(suite, "protocol", text)?));
    }
    let part = |s: &str| {
        parts
            .iter()
            .find(|(suite, _)| *suite == s)
            .map(|(_, t)| t)
            .ok_or_else(|| ImportError::Compose(format!("no {s} protocol")))
    };
    let (simple, icae, evocode) = (part("simple")?, part("icae")?, part("evocode")?);
    // The simple import's protocol is the frame: what it carries that is not composed here
    // (custody, preconditions, statistics, reruns, and whatever a later importer adds) is kept.
    let mut out = simple.clone();
    out.insert("name".into(), name.into());
    out.insert("matrix".into(), name.into());
    out.insert(
        "title".into(),
        "Plan Lattice v0.4 on the real DeepSeek Harness: activation, clarification and control ceiling versus the native harness".into(),
    );
    for key in ["hypotheses", "registration"] {
        out.insert(key.into(), get(&v04, "protocols/v0.4", key)?.clone());
    }
    let mut models = table(simple, "models").cloned().unwrap_or_default();
    if let Some(oracle) = table(icae, "models").and_then(|m| m.get("oracle")) {
        models.insert("oracle".into(), oracle.clone());
    }
    out.insert("models".into(), Value::Table(models));
    out.insert("budgets".into(), Value::Table(compose_budgets(&parts)?));

    let mut arms = Vec::new();
    let mut suites = Table::new();
    let mut values = Table::new();
    let mut rules = Vec::new();
    let mut integrity_rules = Vec::new();
    let mut integrity = None;
    let mut gates = Vec::new();
    for (suite, t) in &parts {
        union_by_id(&mut arms, array(t, "arms"), "arm")?;
        for (id, s) in table(t, "suites").into_iter().flatten() {
            suites.insert(id.clone(), s.clone());
        }
        if let Some(md) = table(t, "missing_data") {
            if let Some(rule) = md.get("rule").and_then(Value::as_str) {
                rules.push(format!("{suite}: {rule}"));
            }
            for (k, v) in table(md, "values").into_iter().flatten() {
                values.insert(k.clone(), v.clone());
            }
        }
        for gate in array(t, "gates") {
            if id_of(gate) == Some("integrity") {
                integrity.get_or_insert_with(|| gate.clone());
                let gate_rules = gate
                    .get("rules")
                    .and_then(Value::as_array)
                    .map_or(&[][..], Vec::as_slice);
                union_by_id(&mut integrity_rules, gate_rules, "integrity rule")?;
            } else {
                let mut gate = gate.as_table().cloned().unwrap_or_default();
                if *suite == "evocode" {
                    complete_evocode_gate(&mut gate, evocode_tasks(evocode))?;
                    // v0.4's wording of the gate, now that every one of its rules is here.
                    if let Some(d) = v04_gate_description(&v04, "evocode") {
                        gate.insert(
                            "description".into(),
                            format!("{d} (on the corrected rounds_* metrics)").into(),
                        );
                    }
                }
                gates.push(Value::Table(gate));
            }
        }
    }
    let mut integrity = integrity
        .and_then(|g| g.as_table().cloned())
        .ok_or_else(|| ImportError::Compose("no integrity gate".to_owned()))?;
    if let Some(d) = v04_gate_description(&v04, "integrity") {
        integrity.insert("description".into(), d.into());
    }
    integrity.insert("rules".into(), Value::Array(integrity_rules));
    gates.insert(0, Value::Table(integrity));
    out.insert("arms".into(), Value::Array(arms));
    out.insert("suites".into(), Value::Table(suites));
    let mut md = Table::new();
    md.insert("rule".into(), rules.join(" ").into());
    md.insert("values".into(), Value::Table(values));
    out.insert("missing_data".into(), Value::Table(md));
    out.insert("gates".into(), Value::Array(gates));

    let body = toml::to_string(&out)
        .map_err(|e| ImportError::Compose(format!("the composed protocol: {e}")))?;
    let mut s = HEADER.to_owned();
    for (suite, text) in texts {
        s.push_str(&format!("#\n# [{suite}]\n"));
        s.push_str(&leading_comments(text));
    }
    s.push('\n');
    s.push_str(&body);
    Ok(s)
}

/// How many tasks the EvoCode import's gate counts pairs over (its `pair_count` threshold over
/// the two repetitions).
fn evocode_tasks(evocode: &Table) -> usize {
    array(evocode, "gates")
        .iter()
        .filter_map(|g| g.get("rules").and_then(Value::as_array))
        .flatten()
        .find(|r| r.get("statistic").and_then(Value::as_str) == Some("pair_count"))
        .and_then(|r| r.get("threshold"))
        .and_then(Value::as_integer)
        .map_or(0, |pairs| usize::try_from(pairs / 2).unwrap_or(0))
}

fn v04_gate_description(v04: &Table, id: &str) -> Option<String> {
    array(v04, "gates")
        .iter()
        .find(|g| id_of(g) == Some(id))
        .and_then(|g| g.get("description"))
        .and_then(Value::as_str)
        .map(str::to_owned)
}

/// One matrix of the three suites' matrices: their `[[suites]]` in v0.4's order, their
/// infrastructure slots in that order (v0.4's six), v0.4's order algorithm and seed string (each
/// import writes the same), the smallest concurrency any suite asked for.
fn compose_matrix(name: &str, texts: &[(&str, String)]) -> Result<String, ImportError> {
    let mut suites = Vec::new();
    let mut infra = Vec::new();
    let mut order = None;
    let mut concurrency: Option<i64> = None;
    for want in SUITES {
        let (suite, text) = texts
            .iter()
            .find(|(s, _)| *s == want)
            .ok_or_else(|| ImportError::Compose(format!("no {want} matrix")))?;
        let t = parse(suite, "matrix", text)?;
        suites.extend(array(&t, "suites").iter().cloned());
        infra.extend(array(&t, "infra").iter().cloned());
        let o = get(&t, suite, "order")?;
        if order.as_ref().is_some_and(|x| x != o) {
            return Err(ImportError::Compose(format!(
                "the {suite} matrix's [order] differs from the other suites'"
            )));
        }
        order = Some(o.clone());
        if let Some(c) = t.get("concurrency").and_then(Value::as_integer) {
            concurrency = Some(concurrency.map_or(c, |x| x.min(c)));
        }
    }
    let mut out = Table::new();
    out.insert("name".into(), name.into());
    out.insert("protocol".into(), name.into());
    out.insert(
        "description".into(),
        "Plan Lattice v0.4 on the DeepSeek Harness with the real Plan Lattice packages: simple, icae and evocode".into(),
    );
    out.insert(
        "concurrency".into(),
        Value::Integer(concurrency.unwrap_or(1)),
    );
    if let Some(o) = order {
        out.insert("order".into(), o);
    }
    out.insert("suites".into(), Value::Array(suites));
    out.insert("infra".into(), Value::Array(infra));
    let body = toml::to_string(&out)
        .map_err(|e| ImportError::Compose(format!("the composed matrix: {e}")))?;
    Ok(format!(
        "# The v0.4 matrix (written by `eval import v04`, protocol {}): its three suites, each with\n\
         # its own three arms (baseline first, gated candidate named), two repetitions, the six\n\
         # infrastructure slots first and v0.4's original statistical order.\n\n{body}",
        q(name)
    ))
}
