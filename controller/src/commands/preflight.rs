//! `eval preflight`: before a paid run, in seconds and at no cost, that the upstream accepts the
//! key (`GET /models`), lists the model(s) the protocol's contract allows, has an available,
//! positive balance (`GET /user/balance`), and that the matrix's worst-case spend fits it. Each
//! check prints one line; the first that fails ends the command with exit 2 and names the check
//! and the value. The key is read from the environment or a file and only ever handed to the
//! proxy crate's account client, which sends it and returns nothing that contains it.
//!
//! `eval run` against a non-fixture upstream runs the same checks first ([`before_run`]), after
//! admission and before the ledger is opened: a run the account cannot pay for never starts.

use crate::cli::{KeySource, PreflightArgs};
use crate::status::{CmdResult, Failure, Status};
use eval_proxy::account::{AccountClient, Balance};
use std::time::Duration;

/// Bounds each account request (connect included): a preflight takes seconds or fails.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(20);

/// What a matrix's protocol lets the run use: the contract's model ids and the worst case of
/// its run budget.
struct Plan {
    matrix: String,
    protocol: String,
    models: Vec<String>,
    worst_case_usd: f64,
    why: String,
    /// The protocol's `[upstream]`: its TLS key pins hold for the account calls to that URL too
    /// (the key is sent with them).
    upstream: Option<eval_protocols::protocol::Upstream>,
}

/// The most the proxy lets a run spend: its `[budgets.run] max_spend_usd`, or less when the run's
/// token budget at the dearest rate of a contract model's price is smaller (both are enforced).
/// A contract model without a price is refused by the proxy, so it adds nothing.
fn plan(matrix: &str) -> Result<Plan, Failure> {
    let project = eval_protocols::Project::open(".");
    let m = project.load_matrix(matrix)?;
    let loaded = project.load(&m.protocol)?;
    Ok(plan_of(matrix, &loaded.protocol))
}

/// The [`Plan`] of protocol `p` run as `matrix`.
fn plan_of(matrix: &str, p: &eval_protocols::protocol::Protocol) -> Plan {
    let mut models: Vec<String> = p.models.values().map(|c| c.model.clone()).collect();
    models.sort();
    models.dedup();
    let dearest = p
        .budgets
        .prices
        .iter()
        .filter(|pr| models.contains(&pr.model))
        .map(|pr| {
            pr.input_usd_per_mtok
                .max(pr.output_usd_per_mtok)
                .max(pr.cached_input_rate())
                .max(pr.cache_write_rate())
        })
        .fold(0.0_f64, f64::max);
    let run = p.budgets.run;
    let by_tokens = run.max_tokens as f64 * dearest / 1e6;
    let (worst_case_usd, why) = if by_tokens < run.max_spend_usd {
        (
            by_tokens,
            format!(
                "[budgets.run] max_tokens {} at the dearest contract price {dearest} USD/Mtok",
                run.max_tokens
            ),
        )
    } else {
        (run.max_spend_usd, "[budgets.run] max_spend_usd".to_owned())
    };
    Plan {
        matrix: matrix.to_owned(),
        protocol: p.name.clone(),
        models,
        worst_case_usd,
        why,
        upstream: p.upstream.clone(),
    }
}

fn failed(check: &str, detail: impl std::fmt::Display) -> Failure {
    Failure::usage(format!("preflight failed: {check}: {detail}"))
}

fn key(source: &KeySource) -> Result<eval_proxy::SecretKey, Failure> {
    match (&source.api_key_env, &source.api_key_file) {
        (Some(var), _) => eval_proxy::SecretKey::from_env(var),
        (None, Some(file)) => eval_proxy::SecretKey::from_file(file),
        (None, None) => {
            return Err(Failure::usage(
                "give the upstream's key with --api-key-env VAR or --api-key-file PATH",
            ));
        }
    }
    .map_err(|e| Failure::usage(e.to_string()))
}

pub fn run(args: PreflightArgs) -> CmdResult {
    let key = key(&args.key)?;
    let plan = args.matrix.as_deref().map(plan).transpose()?;
    check(&args.upstream, key, plan.as_ref(), args.no_balance_check)
}

/// The preflight `eval run --upstream URL` runs before its session: the same checks as
/// `eval preflight --matrix M`, on the protocol admission loaded, with the run's key. Exit 2
/// naming the failed check; nothing is written.
pub fn before_run(
    upstream: &str,
    source: &KeySource,
    matrix: &str,
    protocol: &eval_protocols::protocol::Protocol,
    no_balance_check: bool,
) -> CmdResult {
    let key = key(source)?;
    let plan = plan_of(matrix, protocol);
    println!("preflight of upstream {}:", upstream.trim_end_matches('/'));
    check(upstream, key, Some(&plan), no_balance_check).map_err(|f| Failure {
        message: format!("refusing to run matrix {matrix}: {}", f.message),
        ..f
    })
}

fn check(
    upstream: &str,
    key: eval_proxy::SecretKey,
    plan: Option<&Plan>,
    no_balance_check: bool,
) -> CmdResult {
    // The preregistered pins, when the protocol preregisters this URL (loading checked them).
    let pins = plan
        .and_then(|p| p.upstream.as_ref())
        .filter(|u| u.matches(upstream))
        .map(|u| u.pins())
        .transpose()
        .map_err(|e| failed("upstream", e))?
        .unwrap_or_default();
    let client = AccountClient::new_pinned(upstream, key, REQUEST_TIMEOUT, &pins)
        .map_err(|e| failed("upstream", e))?;
    // Its own runtime: `eval run` calls this before it builds the session's.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Failure::usage(format!("cannot start the async runtime: {e}")))?;
    rt.block_on(checks(upstream, no_balance_check, &client, plan))
}

async fn checks(
    upstream: &str,
    no_balance_check: bool,
    client: &AccountClient,
    plan: Option<&Plan>,
) -> CmdResult {
    // (a) and (b): one call; a refused key answers 401/403 here.
    let listed = client.models().await.map_err(|e| {
        use eval_proxy::account::AccountError as E;
        let check = match e {
            E::KeyRefused { .. } => "key",
            E::Untrusted { .. } | E::Transport { .. } => "connection",
            _ => "models",
        };
        failed(check, e)
    })?;
    println!(
        "ok   key accepted: GET {}/models listed {} model(s)",
        upstream.trim_end_matches('/'),
        listed.len()
    );
    match plan {
        Some(plan) => {
            for m in &plan.models {
                if !listed.contains(m) {
                    return Err(failed(
                        "model",
                        format!(
                            "protocol {}'s contract model {m:?} is not in the upstream's /models list {listed:?}",
                            plan.protocol
                        ),
                    ));
                }
            }
            println!(
                "ok   model listed: {} (protocol {} of matrix {})",
                plan.models.join(", "),
                plan.protocol,
                plan.matrix
            );
        }
        None => println!("     models: {}", listed.join(", ")),
    }
    if no_balance_check {
        println!("skip balance and spend checks (--no-balance-check)");
        return Ok(Status::Ok);
    }
    // (c) the balance.
    let balance = client.balance().await.map_err(|e| match e {
        eval_proxy::account::AccountError::Status { .. } => failed(
            "balance",
            format!(
                "{e} (a provider without DeepSeek's balance endpoint: pass --no-balance-check)"
            ),
        ),
        e => failed("balance", e),
    })?;
    let shown = show(&balance);
    if !balance.is_available {
        return Err(failed(
            "balance",
            format!("the upstream account is out of balance (is_available false; {shown})"),
        ));
    }
    if !balance.infos.iter().any(|i| i.total_balance > 0.0) {
        return Err(failed(
            "balance",
            format!("the upstream account is out of balance (total_balance {shown})"),
        ));
    }
    println!("ok   balance available: {shown}");
    // (d) the matrix's worst case against the balance in the price table's currency.
    if let Some(plan) = plan {
        let Some(usd) = balance
            .infos
            .iter()
            .find(|i| i.currency.eq_ignore_ascii_case("USD"))
        else {
            return Err(failed(
                "spend",
                format!(
                    "the balance is in {shown}, the protocol's prices are in USD: the worst case {:.2} USD cannot be compared (check it yourself, then pass --no-balance-check)",
                    plan.worst_case_usd
                ),
            ));
        };
        if plan.worst_case_usd > usd.total_balance {
            return Err(failed(
                "spend",
                format!(
                    "matrix {}'s worst-case spend {:.2} USD ({}) exceeds the balance {:.2} USD",
                    plan.matrix, plan.worst_case_usd, plan.why, usd.total_balance
                ),
            ));
        }
        println!(
            "ok   worst-case spend {:.2} USD ({}) fits the balance {:.2} USD",
            plan.worst_case_usd, plan.why, usd.total_balance
        );
    }
    Ok(Status::Ok)
}

fn show(b: &Balance) -> String {
    if b.infos.is_empty() {
        return "no balance_infos".into();
    }
    b.infos
        .iter()
        .map(|i| format!("{:.2} {}", i.total_balance, i.currency))
        .collect::<Vec<_>>()
        .join(", ")
}
