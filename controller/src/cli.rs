//! The command-line surface, parsed by clap into plain structs. Turning these into validated
//! configurations happens in each command's module (`commands/*`), never here.

use clap::{Args, Parser, Subcommand, ValueEnum};
use std::path::PathBuf;

/// eval: a preregistered evaluation controller with a credential-isolating model proxy.
///
/// Exit status: 0 success, 1 gate not passed, 2 usage or input error, 3 integrity failure.
#[derive(Debug, Parser)]
#[command(name = "eval", version, about, long_about = None, propagate_version = true)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the whole pipeline on the fixture runtime and fixture upstream in a scratch directory
    Demo(DemoArgs),
    /// Scaffold a self-contained evaluation project (protocol `demo`, matrix `demo`) in DIR
    Init(InitArgs),
    /// Print a matrix's expanded schedule without running anything
    Plan(PlanArgs),
    /// Fix by content hash everything a protocol's result depends on
    Freeze(FreezeArgs),
    /// Recompute a frozen protocol's digests and report drift
    Verify(VerifyArgs),
    /// Retire a frozen protocol identity for good (it can never run again)
    Retire(RetireArgs),
    /// Check, at no cost, that a paid upstream accepts the key, lists the contract's model(s) and
    /// has the balance the matrix may spend
    Preflight(PreflightArgs),
    /// Run a matrix of a frozen protocol in arm-identified containers
    Run(RunArgs),
    /// Progress of a matrix run, read from its ledger
    Status(StatusArgs),
    /// Compute the statistics and release gates of a run; exit 0 only when release is allowed
    Report(ReportArgs),
    /// Grade a finished run's archived workspaces again with another grader runtime, as a
    /// sensitivity analysis of its own identity and ledger (never changes the run's verdict)
    Regrade(RegradeArgs),
    /// One attempt's story: outcome and rule, every model call with its messages and reply,
    /// tool calls, grader, artifacts
    Show(ShowArgs),
    /// Remove what no unfinished run or kept freeze needs (left containers, eval's images,
    /// attempt scratch, unreferenced artifacts, stale sockets); never a ledger or an artifact a
    /// ledger references
    Gc(GcArgs),
    /// Paired-bootstrap statistics on data from anywhere, and calibration by simulation
    #[command(subcommand)]
    Stats(StatsCommand),
    /// Serve the credential-isolating, metering model proxy for one attempt
    Proxy(ProxyArgs),
    /// Inspect, verify, export, annotate and prove entries of a hash-chained ledger
    #[command(subcommand)]
    Ledger(LedgerCommand),
    /// Make an Ed25519 signing key (mode 0600) and print its public key
    Keygen(KeygenArgs),
    /// Write a benchmark's tasks, grader, arms and protocol into this project from its files
    #[command(subcommand)]
    Import(ImportCommand),
    /// Write a run's attempts in other tools' formats (ATIF trajectories, Inspect logs)
    #[command(subcommand)]
    Export(ExportCommand),
}

/// Where `eval` keeps its outputs (freezes, the registry, ledgers, artifacts, reports).
#[derive(Debug, Args, Clone)]
pub struct StateArg {
    /// State directory (default: ./runs)
    #[arg(long, value_name = "DIR", default_value = "runs")]
    pub state: PathBuf,
}

#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Keep everything in DIR instead of a temporary directory
    #[arg(long, value_name = "DIR")]
    pub state: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct InitArgs {
    /// Directory to create (must not exist or be empty)
    pub dir: PathBuf,
}

#[derive(Debug, Args)]
pub struct PlanArgs {
    /// Matrix name (matrix/NAME.toml)
    #[arg(long, default_value = "v0.4")]
    pub matrix: String,
    /// Print JSON instead of a table
    #[arg(long)]
    pub json: bool,
    /// Instead of the schedule: each interval gate's power, with the task-level sd estimated from
    /// a pilot run's ledger (--pilot), and the tasks needed for 80 % power at [power.<gate>] effect
    #[arg(long, requires = "pilot")]
    pub power: bool,
    /// Instead of the schedule: each suite gate's false-fail rate under no effect, by resampling
    /// the pilot's task-level noise (--pilot; an A/A run is the natural pilot)
    #[arg(long, requires = "pilot", conflicts_with = "power")]
    pub calibrate: bool,
    /// No-effect replicates for --calibrate
    #[arg(long, value_name = "N", default_value_t = 200)]
    pub replicates: u32,
    /// Instead of the schedule: what the run may cost at worst under the protocol's budgets, and
    /// (with --pilot) what it is expected to cost at the pilot's use per attempt
    #[arg(long, conflicts_with_all = ["power", "calibrate"])]
    pub cost: bool,
    /// A pilot run's ledger (never the evaluated run's own: its identity is refused)
    #[arg(long, value_name = "LEDGER")]
    pub pilot: Option<PathBuf>,
    /// State directory (default: ./runs), where the protocol's frozen identity is looked up
    #[arg(long, value_name = "DIR", default_value = "runs")]
    pub state: PathBuf,
}

#[derive(Debug, Args)]
pub struct FreezeArgs {
    /// Protocol name (protocols/NAME/protocol.toml)
    #[arg(long, default_value = "v0.4")]
    pub protocol: String,
    #[command(flatten)]
    pub state: StateArg,
    /// A pilot run's ledger (never a run of this protocol): print each suite gate's false-fail
    /// rate under no effect beside the calibration lines, as `eval plan --calibrate` computes it
    #[arg(long, value_name = "LEDGER")]
    pub pilot: Option<PathBuf>,
    /// No-effect replicates for --pilot
    #[arg(long, value_name = "N", default_value_t = 200, requires = "pilot")]
    pub replicates: u32,
}

#[derive(Debug, Args)]
pub struct VerifyArgs {
    /// Protocol name
    #[arg(long, default_value = "v0.4")]
    pub protocol: String,
    #[command(flatten)]
    pub state: StateArg,
    /// Print JSON
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct RetireArgs {
    /// Protocol name
    #[arg(long)]
    pub protocol: String,
    /// Why it is retired (recorded in the registry)
    #[arg(long)]
    pub reason: String,
    #[command(flatten)]
    pub state: StateArg,
}

#[derive(Debug, Args)]
pub struct KeySource {
    /// Name of the environment variable holding the upstream API key
    #[arg(long, value_name = "VAR", conflicts_with = "api_key_file")]
    pub api_key_env: Option<String>,
    /// File holding the upstream API key
    #[arg(long, value_name = "PATH")]
    pub api_key_file: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct PreflightArgs {
    /// Upstream model API base URL (the one `eval run --upstream` would use)
    #[arg(long, value_name = "URL")]
    pub upstream: String,
    #[command(flatten)]
    pub key: KeySource,
    /// Matrix name (matrix/NAME.toml): check its protocol's model(s) and worst-case spend
    #[arg(long, value_name = "M")]
    pub matrix: Option<String>,
    /// Skip `GET /user/balance` and the spend check (providers without DeepSeek's endpoint)
    #[arg(long)]
    pub no_balance_check: bool,
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// Matrix name (matrix/NAME.toml)
    #[arg(long, default_value = "v0.4")]
    pub matrix: String,
    /// Protocol name (default: the matrix's protocol)
    #[arg(long)]
    pub protocol: Option<String>,
    #[command(flatten)]
    pub state: StateArg,
    /// Attempts to run at once (default: the matrix's)
    #[arg(long)]
    pub concurrency: Option<usize>,
    /// Upstream model API base URL, `fixture` for the embedded deterministic fixture upstream, or
    /// `model-free` for the built-in upstream that answers every request with a plain stop
    /// (evidence only for a protocol declaring `model_free = true`)
    #[arg(long, value_name = "URL|fixture|model-free")]
    pub upstream: Option<String>,
    #[command(flatten)]
    pub key: KeySource,
    /// Skip the preflight's `GET /user/balance` and spend checks (providers without DeepSeek's
    /// endpoint); the key and model checks still run
    #[arg(long)]
    pub no_balance_check: bool,
    /// Ed25519 signing key file for checkpoints (or EVAL_SIGNING_KEY_FILE)
    #[arg(long, value_name = "PATH", env = "EVAL_SIGNING_KEY_FILE")]
    pub signing_key_file: Option<PathBuf>,
    /// A smoke run: a part of the schedule into its own run directory (STATE/NAME.smoke),
    /// recorded as a smoke run; never evidence, never counted toward the real run
    #[arg(long)]
    pub smoke: bool,
    /// An A/A calibration run: the schedule with every suite's candidate arm replaced by an
    /// identical copy of its baseline (arm ids kept), into its own run directory
    /// (STATE/NAME.aa) and ledger; the pilot of `eval plan --calibrate`, never evidence for a
    /// release, never counted toward the real run
    #[arg(long, conflicts_with = "smoke")]
    pub aa: bool,
    /// With --smoke: only these tasks (comma-separated)
    #[arg(long, value_delimiter = ',', requires = "smoke")]
    pub tasks: Vec<String>,
    /// With --smoke: only these arms (comma-separated)
    #[arg(long, value_delimiter = ',', requires = "smoke")]
    pub arms: Vec<String>,
    /// With --smoke: at most N statistical attempts (the first in schedule order)
    #[arg(long, value_name = "N", requires = "smoke")]
    pub limit: Option<usize>,
}

#[derive(Debug, Args)]
pub struct StatusArgs {
    #[arg(long, default_value = "v0.4")]
    pub matrix: String,
    #[command(flatten)]
    pub state: StateArg,
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct RegradeArgs {
    /// Matrix name of the finished run (matrix/NAME.toml)
    #[arg(long, default_value = "v0.4")]
    pub matrix: String,
    /// The grader runtime definition, project-relative (e.g. runtimes/strict/runtime.toml)
    #[arg(long, value_name = "RUNTIME")]
    pub grader: String,
    /// Only these tasks (comma-separated; default: every task of the run)
    #[arg(long, value_delimiter = ',')]
    pub tasks: Vec<String>,
    #[command(flatten)]
    pub state: StateArg,
    /// Ed25519 signing key file for the regrade ledger's checkpoints (or EVAL_SIGNING_KEY_FILE);
    /// required when the protocol preregisters a key
    #[arg(long, value_name = "PATH", env = "EVAL_SIGNING_KEY_FILE")]
    pub signing_key_file: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct GcArgs {
    /// State directory (default: ./runs)
    #[arg(long, value_name = "DIR", default_value = "runs")]
    pub state: PathBuf,
    /// Print what would be removed; remove nothing
    #[arg(long)]
    pub dry_run: bool,
    /// Which images are eval's (a Docker label filter, `key` or `key=value`)
    #[arg(long, value_name = "LABEL", default_value = "eval.runtime")]
    pub images_label: String,
    /// Leave containers and images alone (files only)
    #[arg(long)]
    pub no_engine: bool,
}

#[derive(Debug, Args)]
pub struct ShowArgs {
    /// The attempt, as the ledger names it (`<slot>#<n>`), or a slot (its latest attempt)
    pub attempt: String,
    #[arg(long, default_value = "v0.4")]
    pub matrix: String,
    /// State directory (default: ./runs)
    #[arg(long, value_name = "DIR", default_value = "runs")]
    pub state: PathBuf,
    /// Print `eval.show/1` JSON (docs/show.md) instead of text
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Clone, Copy, ValueEnum, PartialEq, Eq)]
pub enum ReportFormat {
    Text,
    Json,
    Md,
    Html,
    /// A directory of static pages (`--out DIR`): verdict, gates, forest plots, task × arm
    /// tables, each task's arms side by side and a page per attempt
    Site,
}

#[derive(Debug, Args)]
pub struct ReportArgs {
    #[arg(long, default_value = "v0.4")]
    pub matrix: String,
    #[command(flatten)]
    pub state: StateArg,
    #[arg(long, value_enum, default_value = "text")]
    pub format: ReportFormat,
    /// Write the report here instead of standard output (a directory for `--format site`)
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
    /// Verify a report attestation (report.intoto.json) instead of writing a report
    #[arg(long, value_name = "FILE", requires = "public_key")]
    pub verify: Option<PathBuf>,
    /// Public key for --verify
    #[arg(long, value_name = "KEY")]
    pub public_key: Option<String>,
    /// Ed25519 signing key file for the report attestation (or EVAL_SIGNING_KEY_FILE)
    #[arg(long, value_name = "PATH", env = "EVAL_SIGNING_KEY_FILE")]
    pub signing_key_file: Option<PathBuf>,
    /// Let unsigned evidence (no preregistered or named public key verified it) allow a release;
    /// the verdict line then says so. Without it unsigned evidence never allows one (exit 1)
    #[arg(long)]
    pub allow_unsigned: bool,
    /// Take preregistered interim look N ([sequential]) first: record it in the ledger (never
    /// twice) and report the gates against its adjusted boundary
    #[arg(long, value_name = "N")]
    pub look: Option<u32>,
}

#[derive(Debug, Subcommand)]
pub enum StatsCommand {
    /// Paired bootstrap on a CSV with columns task,arm,rep,score
    Paired(StatsPairedArgs),
    /// Simulate how often each interval method's bound clears zero under the null at n tasks
    Calibrate(StatsCalibrateArgs),
}

#[derive(Debug, Clone, Copy, ValueEnum, PartialEq, Eq)]
pub enum ExactMode {
    Auto,
    Always,
    Never,
}

#[derive(Debug, Args)]
pub struct StatsPairedArgs {
    #[arg(long, value_name = "FILE.csv")]
    pub input: PathBuf,
    #[arg(long)]
    pub baseline: String,
    #[arg(long)]
    pub candidate: String,
    /// Column to use instead of `score`
    #[arg(long)]
    pub metric: Option<String>,
    #[arg(long, default_value_t = 10_000)]
    pub resamples: u64,
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    #[arg(long, default_value_t = 0.95)]
    pub confidence: f64,
    #[arg(long, value_enum, default_value = "auto")]
    pub exact: ExactMode,
    /// Interval method: `bootstrap` (percentile and BCa) or `v04-percentile`
    #[arg(long, default_value = "bootstrap")]
    pub method: String,
    /// Seed string for --method v04-percentile
    #[arg(long)]
    pub seed_string: Option<String>,
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct StatsCalibrateArgs {
    #[arg(long)]
    pub n: usize,
    #[arg(long)]
    pub method: Option<String>,
    #[arg(long, default_value_t = 0.95)]
    pub confidence: f64,
    #[arg(long, default_value_t = 2_000)]
    pub reps: u64,
    /// Effect size (in standard deviations) at which to report power
    #[arg(long, default_value_t = 0.5)]
    pub effect: f64,
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    #[arg(long)]
    pub json: bool,
}

/// `--api`: eval-core's [`ApiKind`](eval_core::contract::ApiKind) as a command-line choice (the
/// core crate does not know clap, and the orphan rule keeps the impl off the core type).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ApiArg(pub eval_core::contract::ApiKind);

impl ValueEnum for ApiArg {
    fn value_variants<'a>() -> &'a [Self] {
        use eval_core::contract::ApiKind;
        const ALL: [ApiArg; 2] = [ApiArg(ApiKind::ALL[0]), ApiArg(ApiKind::ALL[1])];
        &ALL
    }

    fn to_possible_value(&self) -> Option<clap::builder::PossibleValue> {
        Some(clap::builder::PossibleValue::new(self.0.as_str()))
    }
}

#[derive(Debug, Args)]
pub struct ProxyArgs {
    /// unix:PATH or 127.0.0.1:PORT
    #[arg(long)]
    pub listen: String,
    /// Upstream base URL
    #[arg(long)]
    pub upstream: String,
    #[command(flatten)]
    pub key: KeySource,
    /// Exact model id the contract allows
    #[arg(long)]
    pub model: String,
    #[arg(long, value_enum, default_value = "openai-chat")]
    pub api: ApiArg,
    /// Append one JSON record per call here
    #[arg(long, value_name = "FILE.jsonl")]
    pub meter_out: Option<PathBuf>,
    /// Where to write the client token (TCP listeners; mode 0600)
    #[arg(long, value_name = "PATH")]
    pub token_file: Option<PathBuf>,
    /// Admin listener for GET /metrics (127.0.0.1:PORT)
    #[arg(long)]
    pub admin: Option<String>,
    /// A body parameter clients may send besides the API's defaults (repeatable)
    #[arg(long, value_name = "NAME")]
    pub allow_param: Vec<String>,
    /// A client header forwarded besides the API's defaults (repeatable)
    #[arg(long, value_name = "NAME")]
    pub allow_header: Vec<String>,
}

#[derive(Debug, Subcommand)]
pub enum LedgerCommand {
    /// Recompute every hash; exit 3 naming the first bad seq
    Verify(LedgerVerifyArgs),
    /// Write one canonical JSON entry per line
    Export(LedgerExportArgs),
    /// A readable listing of entries
    Show(LedgerShowArgs),
    /// Append a human `note` entry (creating the ledger if there is none)
    Note(LedgerNoteArgs),
    /// Write a self-contained inclusion receipt for one entry
    Prove(LedgerProveArgs),
    /// Verify a receipt offline, with nothing but the public key
    VerifyReceipt(LedgerVerifyReceiptArgs),
    /// Prove that one checkpoint's tree extends another's
    Consistency(LedgerConsistencyArgs),
}

#[derive(Debug, Args)]
pub struct LedgerVerifyArgs {
    /// A SQLite ledger or a JSONL export
    pub path: PathBuf,
    /// Also require this head (SEQ:sha256:HEX), catching a cut-off tail
    #[arg(long, value_name = "SEQ:HASH")]
    pub expect_head: Option<String>,
    /// Check checkpoint signatures with this public key
    #[arg(long, value_name = "KEY")]
    pub public_key: Option<String>,
    /// Also re-hash every artifact the ledger references, in DIR (default: `artifacts/` beside
    /// the ledger)
    #[arg(long, value_name = "DIR", num_args = 0..=1, default_missing_value = "")]
    pub artifacts: Option<String>,
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct LedgerExportArgs {
    pub path: PathBuf,
    #[arg(long, value_name = "OUT")]
    pub jsonl: PathBuf,
}

#[derive(Debug, Args)]
pub struct LedgerShowArgs {
    pub path: PathBuf,
    /// Only entries of this kind
    #[arg(long)]
    pub kind: Option<String>,
    /// Only entries whose payload names this attempt id
    #[arg(long)]
    pub attempt: Option<String>,
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct LedgerNoteArgs {
    pub path: PathBuf,
    #[arg(long)]
    pub text: String,
}

#[derive(Debug, Args)]
pub struct LedgerProveArgs {
    pub path: PathBuf,
    #[arg(long)]
    pub seq: u64,
    #[arg(long, value_name = "RECEIPT.json")]
    pub out: PathBuf,
}

#[derive(Debug, Args)]
pub struct LedgerVerifyReceiptArgs {
    pub receipt: PathBuf,
    #[arg(long, value_name = "KEY")]
    pub public_key: String,
}

#[derive(Debug, Args)]
pub struct LedgerConsistencyArgs {
    pub path: PathBuf,
    #[arg(long, value_name = "CHECKPOINT")]
    pub from: PathBuf,
    #[arg(long, value_name = "CHECKPOINT")]
    pub to: PathBuf,
}

#[derive(Debug, Args)]
pub struct KeygenArgs {
    #[arg(long, value_name = "FILE")]
    pub out: PathBuf,
}

#[derive(Debug, Subcommand)]
#[allow(
    clippy::enum_variant_names,
    reason = "each variant is one of v0.4's suites"
)]
pub enum ImportCommand {
    /// v0.4's `simple` suite: its six tasks and grader, and its three DeepSeek Harness arms with
    /// the real Plan Lattice packages (from a directory of v0.4's files)
    #[command(name = "v04-simple")]
    V04Simple(ImportV04SimpleArgs),
    /// v0.4's router gate: V1 (split by label) and the synthetic override rows of Plan Lattice's
    /// router corpus, the native arm and the rc.3 package in activationMode auto, the model-free
    /// upstream and the four gates (from a directory in Plan Lattice's eval/router-corpus layout)
    #[command(name = "v04-router")]
    V04Router(ImportV04RouterArgs),
    /// v0.4's EvoCode suite: task directories in the Harbor multi-step layout (task.toml with
    /// [[steps]], environment/Dockerfile, steps/<step>/{instruction.md,tests/,solution/}) become
    /// multi-round tasks, a Go grader runtime, the arms native, v0.4-contract and v0.4-lattice,
    /// the protocol and its matrix
    #[command(name = "v04-evocode")]
    V04Evocode(ImportV04EvocodeArgs),
    /// v0.4's ICAE suite: ICAE-EVAL's layout (repo_alias.json, fuzzy_prds/, user_agent/,
    /// rcb_tests_repos/) becomes six ambiguous-build tasks with a stateful simulated user, an
    /// eval-written grader of evaluate.py's rules, the arms native, v0.4-never and v0.4-critical,
    /// the protocol and its matrix
    #[command(name = "v04-icae")]
    V04Icae(ImportV04IcaeArgs),
    /// The whole v0.4 as one protocol and one matrix: the `simple`, ICAE and EvoCode suites
    /// imported as their own importers import them, composed with v0.4's order, seed,
    /// infrastructure slots, hypotheses, gates (EvoCode's included) and one budget; the base
    /// images found from their build records (`runtimes/images/*/build.sh`) or `--image`
    #[command(name = "v04")]
    V04(ImportV04Args),
    /// Task directories in Harbor's task format (task.toml, instruction.md, environment/,
    /// tests/, solution/, or [[steps]] with steps/<step>/…) on the arms you name: each task's
    /// environment image built by the engine, its tests as the grader, its solution as the
    /// oracle control (docs/harbor.md)
    #[command(name = "harbor")]
    Harbor(ImportHarborArgs),
}

#[derive(Debug, Args)]
pub struct ImportHarborArgs {
    /// Directory of Harbor task directories (DIR/<task>/task.toml)
    #[arg(long, value_name = "DIR")]
    pub from: PathBuf,
    /// Import only these tasks (comma-separated directory names; default: all of DIR)
    #[arg(long, value_name = "NAME,NAME", value_delimiter = ',')]
    pub tasks: Vec<String>,
    /// Name of the protocol (and matrix) to write
    #[arg(long, value_name = "NAME", default_value = "harbor")]
    pub protocol: String,
    /// An arm: its id, runtime definition and profile (project-relative); at least two, the
    /// baseline first and the gated candidate last
    #[arg(long = "arm", value_name = "ID=RUNTIME=PROFILE")]
    pub arms: Vec<String>,
    /// Also write the DeepSeek Harness runtime (runtimes/dsh-poly/runtime.toml) on this image,
    /// for arms to name
    #[arg(long, value_name = "sha256:…")]
    pub dsh_image: Option<String>,
    /// Repetitions of each (task, arm)
    #[arg(long, value_name = "N", default_value_t = 2)]
    pub repetitions: usize,
    /// Only read and check the tasks and print what was read (JSON); build and write nothing
    #[arg(long)]
    pub check: bool,
}

#[derive(Debug, Args)]
pub struct ImportV04Args {
    /// v0.4's `simple` files, as `v04-simple --from` takes them (simple-tasks.json,
    /// simple-grader.mjs, the two dsh-plan-lattice packages, SHA256SUMS); its
    /// dsh-plan-lattice-0.4.0-rc.3.tgz is also the ICAE and EvoCode plugin arms' package
    #[arg(long, value_name = "DIR")]
    pub simple: PathBuf,
    /// EvoCode-Bench, as `v04-evocode --from` takes it (task directories or the dataset
    /// archive); v0.4's three tasks are imported
    #[arg(long, value_name = "DIR|ARCHIVE.tar.zst")]
    pub evocode: PathBuf,
    /// The ICAE-EVAL root, as `v04-icae --from` takes it
    #[arg(long, value_name = "DIR")]
    pub icae: PathBuf,
    /// Name of the protocol (and matrix) to write
    #[arg(long, value_name = "NAME", default_value = "v0.4-real")]
    pub protocol: String,
    /// Keep v0.4's router precondition, pinned to this frozen identity of a router evaluation
    #[arg(long, value_name = "sha256:…")]
    pub router_identity: Option<String>,
    /// Preregister this Ed25519 public key as the protocol's `[signing] public_key`
    #[arg(long, value_name = "eval+…")]
    pub public_key: Option<String>,
    /// Preregister the model upstream as the protocol's `[upstream] url`
    #[arg(long, value_name = "URL")]
    pub upstream: Option<String>,
    /// A TLS key pin for `--upstream` (`[upstream] tls_spki_sha256`); repeatable
    #[arg(
        long = "tls-spki-sha256",
        value_name = "sha256:…",
        requires = "upstream"
    )]
    pub tls_spki_sha256: Vec<String>,
    /// Accept inputs whose SHA-256 is not v0.4's pin (passed to each suite's importer)
    #[arg(long)]
    pub allow_unpinned: bool,
    /// Write no control arms for the `simple` suite (eval's reference solutions are used
    /// otherwise): its grader goes unchecked, which the protocol states
    #[arg(long)]
    pub no_controls: bool,
    /// Import only these `simple` tasks (comma-separated ids, as `v04-simple --tasks`; default:
    /// all of simple-tasks.json). A subset is a reduced v0.4 (its gates sized to it), not v0.4
    #[arg(long, value_name = "ID,ID", value_delimiter = ',')]
    pub simple_tasks: Vec<String>,
    /// Import only these ICAE tasks (comma-separated v0.4 ids, as `v04-icae --tasks`; default:
    /// v0.4's six)
    #[arg(long, value_name = "ID,ID", value_delimiter = ',')]
    pub icae_tasks: Vec<String>,
    /// Import only these EvoCode tasks (comma-separated ids, as `v04-evocode --tasks`; default:
    /// v0.4's three)
    #[arg(long, value_name = "ID,ID", value_delimiter = ',')]
    pub evocode_tasks: Vec<String>,
    /// A base image by its build name (dsh, v04-grader, evocode-go), instead of its build
    /// record; repeatable
    #[arg(long = "image", value_name = "NAME=sha256:…")]
    pub images: Vec<String>,
}

#[derive(Debug, Args)]
pub struct ImportV04IcaeArgs {
    /// The ICAE-EVAL root as download_scaffold.sh leaves it: repo_alias.json, fuzzy_prds/,
    /// user_agent/{init.md,fuzzy_suffix.md,prd_json/}, rcb_tests_repos/ (extracted), or beside
    /// them the Zenodo archives rcb_tests_repos.tar.gz and icae_prd_bundle.tar.gz (checked
    /// against v0.4's pins, then read)
    #[arg(long, value_name = "DIR")]
    pub from: PathBuf,
    /// The Plan Lattice package of the two plugin arms (dsh-plan-lattice-0.4.0-rc.3.tgz)
    #[arg(long, value_name = "FILE")]
    pub package: PathBuf,
    /// Name of the protocol (and matrix) to write
    #[arg(long, value_name = "NAME", default_value = "icae")]
    pub protocol: String,
    /// Import only these tasks (comma-separated v0.4 ids, e.g. icae-python-01; default: all six)
    #[arg(long, value_name = "ID,ID", value_delimiter = ',')]
    pub tasks: Vec<String>,
    /// Image id of the DeepSeek Harness with the tasks' toolchains (the last line
    /// runtimes/images/dsh-poly/build.sh prints)
    #[arg(long, value_name = "sha256:…")]
    pub dsh_image: String,
    /// Image id of the grader base: bash, python3 and the tasks' toolchains (the last line
    /// runtimes/images/v04-grader/build.sh prints)
    #[arg(long, value_name = "sha256:…")]
    pub grader_image: String,
    /// Accept extracted directories (their tree digests are recorded) and archives or a package
    /// whose SHA-256 is not v0.4's pin
    #[arg(long)]
    pub allow_unpinned: bool,
}

#[derive(Debug, Args)]
pub struct ImportV04EvocodeArgs {
    /// Directory of EvoCode-Bench task directories (DIR/<task id>/task.toml, as the dataset
    /// extracts to data/EvoCodeBench/), or the dataset archive itself
    /// (archives/evocodebench_wotraj.tar.zst, checked against its pinned sha256 before anything
    /// is extracted)
    #[arg(long, value_name = "DIR|ARCHIVE.tar.zst")]
    pub from: PathBuf,
    /// The Plan Lattice package of the two plugin arms (dsh-plan-lattice-0.4.0-rc.3.tgz)
    #[arg(long, value_name = "FILE")]
    pub package: PathBuf,
    /// Name of the protocol (and matrix) to write
    #[arg(long, value_name = "NAME", default_value = "evocode")]
    pub protocol: String,
    /// Import only these tasks (comma-separated directory names; default: all of DIR, or from
    /// the archive v0.4's three)
    #[arg(long, value_name = "ID,ID", value_delimiter = ',')]
    pub tasks: Vec<String>,
    /// Image id of the DeepSeek Harness with the tasks' toolchains (the last line
    /// runtimes/images/dsh-poly/build.sh prints)
    #[arg(long, value_name = "sha256:…")]
    pub dsh_image: String,
    /// Image id of the Go grader base (the last line runtimes/images/evocode-go/build.sh prints)
    #[arg(long, value_name = "sha256:…")]
    pub grader_image: String,
    /// Accept task directories (no pin exists for extracted tasks: the dataset pins only its
    /// archive), an archive that is not the pinned one, and a package whose SHA-256 is not Plan
    /// Lattice 0414dfa's; the protocol records every task's tree digest and the archive's
    #[arg(long)]
    pub allow_unpinned: bool,
}

#[derive(Debug, Args)]
pub struct ImportV04RouterArgs {
    /// Directory in Plan Lattice's eval/router-corpus layout: blind-real.prompts.jsonl,
    /// blind-real.labels.jsonl, blind-real.manifest.json, development.jsonl, blind.jsonl
    #[arg(long, value_name = "DIR")]
    pub from: PathBuf,
    /// The Plan Lattice package to evaluate (dsh-plan-lattice-0.4.0-rc.3.tgz)
    #[arg(long, value_name = "FILE")]
    pub package: PathBuf,
    /// Name of the protocol (and matrix) to write
    #[arg(long, value_name = "NAME", default_value = "router")]
    pub protocol: String,
    /// Image id of the DeepSeek Harness base (the last line runtimes/images/dsh/build.sh prints)
    #[arg(long, value_name = "sha256:…")]
    pub dsh_image: String,
    /// Accept a package, manifest or synthetic corpus whose SHA-256 is not Plan Lattice 0414dfa's
    /// (V1's two files are always checked against the manifest)
    #[arg(long)]
    pub allow_unpinned: bool,
}

#[derive(Debug, Args)]
pub struct ImportV04SimpleArgs {
    /// Directory holding simple-tasks.json, simple-grader.mjs, the two dsh-plan-lattice .tgz
    /// packages and SHA256SUMS
    #[arg(long, value_name = "DIR")]
    pub from: PathBuf,
    /// Name of the protocol (and matrix) to write: protocols/NAME/, matrix/NAME.toml
    #[arg(long, value_name = "NAME")]
    pub protocol: String,
    /// Import only these tasks (comma-separated ids; default: all)
    #[arg(long, value_name = "ID,ID", value_delimiter = ',')]
    pub tasks: Vec<String>,
    /// Image id of the DeepSeek Harness with the tasks' toolchains (the last line
    /// runtimes/images/dsh-poly/build.sh prints)
    #[arg(long, value_name = "sha256:…")]
    pub dsh_image: String,
    /// Image id of the grader base (the last line runtimes/images/v04-grader/build.sh prints)
    #[arg(long, value_name = "sha256:…")]
    pub grader_image: String,
    /// Keep v0.4's router precondition, pinned to this frozen identity of a router evaluation
    /// (no other identity meets it); without it the protocol has no precondition
    #[arg(long, value_name = "sha256:…")]
    pub router_identity: Option<String>,
    /// Preregister this Ed25519 public key (`eval keygen` prints it) as the protocol's
    /// `[signing] public_key`: its evidence must then be signed by the private half
    #[arg(long, value_name = "eval+…")]
    pub public_key: Option<String>,
    /// Preregister the model upstream as the protocol's `[upstream] url` (e.g.
    /// https://api.deepseek.com): only a run against it is release evidence
    #[arg(long, value_name = "URL")]
    pub upstream: Option<String>,
    /// A TLS key pin for `--upstream` (`sha256:<hex>` of the server certificate's
    /// SubjectPublicKeyInfo), `[upstream] tls_spki_sha256`; repeatable
    #[arg(
        long = "tls-spki-sha256",
        value_name = "sha256:…",
        requires = "upstream"
    )]
    pub tls_spki_sha256: Vec<String>,
    /// Reference solutions, DIR/<task id>/<files>, instead of eval's own for v0.4's six tasks:
    /// each imported task gets them as its `solution/`; the suite's control arms (oracle, nop,
    /// eval's exploits) and the `grader_valid` integrity rule are written either way
    #[arg(long, value_name = "DIR")]
    pub solutions: Option<PathBuf>,
    /// Write no control arms and no `grader_valid` rule: v0.4's grader goes unchecked, which the
    /// protocol states and the report gives as a reason
    #[arg(long, conflicts_with = "solutions")]
    pub no_controls: bool,
    /// Accept inputs whose SHA-256 is not the one of v0.4 (Plan Lattice 0414dfa) built into eval
    /// (the two packages, simple-tasks.json, simple-grader.mjs); the protocol then records them
    #[arg(long)]
    pub allow_unpinned: bool,
    /// Which grading of the same assertions the gates read: `v04` (v0.4's grader, `score`) or
    /// `hardened` (eval's, each case in its own child process, `hardened_score`); both always run
    #[arg(long, value_enum, default_value = "v04")]
    pub grading: Grading,
}

/// `eval import v04-simple --grading`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Grading {
    /// v0.4's own grader (`score`): fidelity to v0.4.
    V04,
    /// eval's hardened grading of the same assertions (`hardened_score`).
    Hardened,
}

#[derive(Debug, Subcommand)]
pub enum ExportCommand {
    /// One ATIF trajectory (Harbor's Agent Trajectory Interchange Format) per attempt
    Atif(ExportAtifArgs),
    /// Inspect logs (`.json`): one per suite and arm, one sample per task × repetition
    Inspect(ExportInspectArgs),
}

#[derive(Debug, Args)]
pub struct ExportAtifArgs {
    /// Attempts (`<slot>#<n>`, or a slot: its latest attempt), as `eval show` names them; every
    /// attempt of the run when none is given
    pub attempts: Vec<String>,
    #[command(flatten)]
    pub run: ExportInspectArgs,
}

/// The run an export reads and where it writes.
#[derive(Debug, Args)]
pub struct ExportInspectArgs {
    #[arg(long, default_value = "v0.4")]
    pub matrix: String,
    /// State directory (default: ./runs)
    #[arg(long, value_name = "DIR", default_value = "runs")]
    pub state: PathBuf,
    /// Directory to write into (created when missing): `<slot>.<n>.json` per attempt (atif),
    /// `<time>_<suite>_<arm>.json` per suite and arm (inspect)
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
}
