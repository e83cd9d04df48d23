//! `eval proxy`: runs the model proxy by hand for one attempt, on a Unix socket or on loopback TCP
//! with a generated client token, until Ctrl-C or SIGTERM.

use std::collections::BTreeMap;
use std::io::Write;
use std::net::SocketAddr;
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use eval_proxy::{
    ApiKind, AttemptSpec, Budget, Contract, JsonlSink, Listen, NullSink, Proxy, ProxyConfig,
    RecordSink, Role, RoleSpec, SecretKey,
};

use crate::cli::{self, ProxyArgs};
use crate::status::{CmdResult, Status};

/// Why `eval proxy` could not start serving; each kind's exit status is decided in
/// `exit::proxy_cmd_status`.
#[derive(Debug, thiserror::Error)]
pub enum ProxyCmdError {
    #[error("--listen unix: needs a path")]
    ListenNoPath,
    #[error("--listen {0:?} is neither unix:PATH nor a loopback IP:PORT such as 127.0.0.1:8080")]
    ListenUnparsable(String),
    #[error("--listen {0} is not a loopback address; the proxy only listens on 127.0.0.1 or ::1")]
    ListenNotLoopback(SocketAddr),
    #[error("name the upstream key with exactly one of --api-key-env VAR or --api-key-file PATH")]
    KeySource,
    /// The key's variable or file is missing or unusable (the error names it, never its value).
    #[error("{0}")]
    Key(#[from] eval_proxy::SecretError),
    #[error("cannot write --token-file {path}: {source}")]
    TokenFile {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("--admin {0:?} must be a loopback IP:PORT")]
    Admin(String),
    #[error("{0}")]
    MeterOut(#[from] eval_proxy::RecordError),
    #[error("cannot start the async runtime: {0}")]
    AsyncRuntime(std::io::Error),
    /// The proxy refused the configuration or the attempt (an upstream URL, a listener).
    #[error("{0}")]
    Proxy(#[from] eval_proxy::ProxyError),
}

const ATTEMPT: &str = "manual";

enum Where {
    Unix(PathBuf),
    Tcp(SocketAddr),
}

fn parse_listen(s: &str) -> Result<Where, ProxyCmdError> {
    if let Some(path) = s.strip_prefix("unix:") {
        if path.is_empty() {
            return Err(ProxyCmdError::ListenNoPath);
        }
        return Ok(Where::Unix(PathBuf::from(path)));
    }
    let addr: SocketAddr = s
        .parse()
        .map_err(|_| ProxyCmdError::ListenUnparsable(s.to_owned()))?;
    if !addr.ip().is_loopback() {
        return Err(ProxyCmdError::ListenNotLoopback(addr));
    }
    Ok(Where::Tcp(addr))
}

fn load_key(key: &cli::KeySource) -> Result<SecretKey, ProxyCmdError> {
    let loaded = match (&key.api_key_env, &key.api_key_file) {
        (Some(var), None) => SecretKey::from_env(var),
        (None, Some(path)) => SecretKey::from_file(path),
        _ => {
            return Err(ProxyCmdError::KeySource);
        }
    };
    Ok(loaded?)
}

fn write_token(path: &PathBuf, token: &str) -> Result<(), ProxyCmdError> {
    // A stale token file from an earlier proxy goes; if removing fails, `create_new` below
    // refuses and says so.
    let _ = std::fs::remove_file(path);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(token_file(path))?;
    f.write_all(format!("{token}\n").as_bytes())
        .map_err(token_file(path))
}

fn token_file(path: &std::path::Path) -> impl FnOnce(std::io::Error) -> ProxyCmdError {
    let path = path.to_path_buf();
    move |source| ProxyCmdError::TokenFile { path, source }
}

pub fn run(args: ProxyArgs) -> CmdResult {
    let listen = parse_listen(&args.listen)?;
    let key = load_key(&args.key)?;
    let admin = args
        .admin
        .as_deref()
        .map(|a| {
            a.parse::<SocketAddr>()
                .ok()
                .filter(|s| s.ip().is_loopback())
                .ok_or_else(|| ProxyCmdError::Admin(a.to_string()))
        })
        .transpose()?;
    let sink: Arc<dyn RecordSink> = match &args.meter_out {
        Some(p) => Arc::new(JsonlSink::open(p).map_err(ProxyCmdError::from)?),
        None => Arc::new(NullSink),
    };
    let api = args.api.0;
    let mut cfg = ProxyConfig::new(&args.upstream, api, key, sink);
    cfg.admin_listen = admin;
    let attempt_listen = match &listen {
        Where::Unix(p) => Listen::Unix(p.clone()),
        Where::Tcp(a) => {
            cfg.tcp_listen = Some(*a);
            Listen::Token
        }
    };
    let contract = contract_of_args(&args, api);
    let mut roles = BTreeMap::new();
    roles.insert(
        Role::Agent,
        RoleSpec {
            contract,
            budget: Budget::default(),
        },
    );
    let spec = AttemptSpec {
        attempt_id: ATTEMPT.to_owned(),
        arm: ATTEMPT.to_owned(),
        session_id: ATTEMPT.to_owned(),
        listen: attempt_listen,
        roles,
    };
    let rt = tokio::runtime::Runtime::new().map_err(ProxyCmdError::AsyncRuntime)?;
    rt.block_on(async move {
        let proxy = Proxy::start(cfg)
            .await
            .map_err(ProxyCmdError::from)?;
        let reg = proxy
            .register_attempt(spec)
            .await
            .map_err(ProxyCmdError::from)?;
        match (&reg.socket, &reg.token, reg.tcp_addr) {
            (Some(sock), _, _) => println!(
                "eval proxy: serving model {} at unix:{} (upstream {})",
                args.model,
                sock.display(),
                args.upstream
            ),
            (_, Some(token), Some(addr)) => {
                println!(
                    "eval proxy: serving model {} at http://{addr} (upstream {})",
                    args.model, args.upstream
                );
                match &args.token_file {
                    Some(p) => {
                        write_token(p, token)?;
                        println!("client token written to {} (mode 0600)", p.display());
                    }
                    // The token is not the upstream key and is worthless outside this proxy.
                    None => println!("client token: {token}"),
                }
            }
            _ => {}
        }
        if let Some(a) = proxy.admin_addr() {
            println!("metrics at http://{a}/metrics");
        }
        let _ = std::io::stdout().flush();
        wait_for_signal().await;
        let meter = proxy.close_attempt_and_wait(ATTEMPT, Duration::from_secs(10)).await;
        proxy.shutdown(Duration::from_secs(10)).await;
        if let Ok(m) = meter
            && let Some(a) = m.roles.get(&Role::Agent)
        {
            println!(
                "eval proxy: {} calls, {} turns, {} input / {} output tokens, {} unmetered, {} refused by contract, {} by budget",
                a.calls,
                a.turns,
                a.input_tokens,
                a.output_tokens,
                a.unmetered_calls,
                a.contract_violations,
                a.budget_exhaustions
            );
        }
        Ok(Status::Ok)
    })
}

async fn wait_for_signal() {
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(s) => s,
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
            return;
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}

/// The attempt's contract: the model, and the API's default allow-lists extended (never
/// replaced) by `--allow-param` / `--allow-header`.
fn contract_of_args(args: &cli::ProxyArgs, api: ApiKind) -> Contract {
    let mut contract = Contract::model_only(&args.model);
    // The flags extend the API's default allow-lists rather than replace them.
    if !args.allow_param.is_empty() {
        let mut list: std::collections::BTreeSet<String> = Contract::default_allowed_params(api)
            .iter()
            .map(|s| (*s).to_owned())
            .collect();
        list.extend(args.allow_param.iter().cloned());
        contract.allowed_params = Some(list);
    }
    if !args.allow_header.is_empty() {
        let mut list: std::collections::BTreeSet<String> = Contract::default_allowed_headers(api)
            .iter()
            .map(|s| (*s).to_owned())
            .collect();
        list.extend(args.allow_header.iter().map(|h| h.to_ascii_lowercase()));
        contract.allowed_headers = Some(list);
    }
    contract
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser as _;

    #[test]
    fn allow_flags_extend_the_default_lists() {
        let cli = cli::Cli::try_parse_from([
            "eval",
            "proxy",
            "--listen",
            "127.0.0.1:0",
            "--upstream",
            "http://x",
            "--api-key-env",
            "K",
            "--model",
            "m",
            "--allow-param",
            "temperature",
            "--allow-header",
            "X-Trace",
        ])
        .unwrap();
        let cli::Command::Proxy(args) = cli.command else {
            panic!("not the proxy command");
        };
        let c = contract_of_args(&args, ApiKind::OpenAiChat);
        assert!(c.allows_param(ApiKind::OpenAiChat, "temperature"));
        assert!(c.allows_param(ApiKind::OpenAiChat, "stream_options"));
        assert!(!c.allows_param(ApiKind::OpenAiChat, "logit_bias"));
        assert!(c.allows_header(ApiKind::OpenAiChat, "x-trace"));
        assert!(c.allows_header(ApiKind::OpenAiChat, "user-agent"));
        assert!(!c.allows_header(ApiKind::OpenAiChat, "openai-organization"));
    }
}
