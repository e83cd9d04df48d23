//! `eval-shim`: the entrypoint of every agent container (mounted read-only from the host).
//!
//! 1. Hashes the attested paths it is given and reports them to the controller with
//!    `POST /_eval/attest` over the attempt's Unix socket; waits for the answer. Anything but
//!    `{"ok":true}` ends the container with status 86 and the harness never starts.
//! 2. Listens on `127.0.0.1:PORT` and relays every TCP connection byte for byte to the socket,
//!    so harness SDKs use a plain `http://127.0.0.1:PORT` base URL.
//! 3. Starts the harness command, forwards SIGTERM/SIGINT/SIGHUP/SIGQUIT to it, and exits with
//!    its status (128 + signal when it died of a signal).
//! 4. In a multi-round attempt (`--round-timeout S` once per round, `--continue ARG…`, see
//!    docs/rounds.md): round k's harness runs with `EVAL_ROUND=k` and is killed at its round's
//!    limit; when it has ended the shim kills every other process of the container (so nothing
//!    of the agent's still writes while the round is graded), reports `POST /_eval/round`
//!    `{"round","exit","signal","timed_out"}` and waits for `{"next": bool}`; on `true` it runs
//!    the continue command for the next round, else it exits with the last harness's status.
//!
//! Must never: read or pass on any credential (it has none), connect anywhere but the socket,
//! or start the harness before the controller said yes.

use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::unix::net::UnixStream;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::thread;
use std::time::Duration;

mod attest;

use attest::path_digest;
use eval_core::attest::{AttestReport, AttestedPath};
use serde_json::Value;

/// The controller refused the attestation (or answered something else): the harness never ran.
const EXIT_ATTESTATION_REFUSED: u8 = 86;
/// The attempt's socket could not be reached for the attestation.
const EXIT_SOCKET_UNREACHABLE: u8 = 87;
/// Bad arguments, relay port busy, or the harness could not be started.
const EXIT_SHIM_FAILURE: u8 = 88;

struct Args {
    socket: PathBuf,
    port: u16,
    attest: Vec<String>,
    command: Vec<String>,
    /// One limit per round, in seconds; empty: a single-round attempt.
    round_timeouts: Vec<u64>,
    /// The command that continues the session in rounds 2..N.
    continue_command: Vec<String>,
}

fn parse_args() -> Result<Args, String> {
    let mut it = std::env::args().skip(1);
    let mut socket = None;
    let mut port = None;
    let mut attest = Vec::new();
    let mut command = Vec::new();
    let mut round_timeouts = Vec::new();
    let mut continue_command = Vec::new();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--socket" => socket = it.next().map(PathBuf::from),
            "--port" => {
                port = Some(
                    it.next()
                        .and_then(|p| p.parse::<u16>().ok())
                        .ok_or("--port needs a number")?,
                )
            }
            "--attest" => attest.push(it.next().ok_or("--attest needs a path")?),
            "--round-timeout" => round_timeouts.push(
                it.next()
                    .and_then(|p| p.parse::<u64>().ok())
                    .ok_or("--round-timeout needs a number of seconds")?,
            ),
            "--continue" => continue_command.push(it.next().ok_or("--continue needs an argument")?),
            "--" => {
                command.extend(it.by_ref());
            }
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    if command.is_empty() {
        return Err("no harness command after --".to_owned());
    }
    if round_timeouts.len() > 1 && continue_command.is_empty() {
        return Err("several rounds but no --continue command".to_owned());
    }
    Ok(Args {
        socket: socket.ok_or("--socket is required")?,
        port: port.ok_or("--port is required")?,
        attest,
        command,
        round_timeouts,
        continue_command,
    })
}

fn log(msg: &str) {
    let _ = writeln!(io::stderr(), "eval-shim: {msg}");
}

/// One HTTP/1.1 request over the Unix socket; returns (status, body).
fn post_unix(socket: &Path, path: &str, body: &[u8]) -> io::Result<(u16, Vec<u8>)> {
    let mut s = UnixStream::connect(socket)?;
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: eval\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes())?;
    s.write_all(body)?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw)?;
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "no HTTP header end"))?;
    let head = String::from_utf8_lossy(&raw[..split]).into_owned();
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "no HTTP status"))?;
    let mut body = raw[split + 4..].to_vec();
    if head
        .lines()
        .any(|l| l.to_ascii_lowercase().starts_with("transfer-encoding:") && l.contains("chunked"))
    {
        body = eval_fixture_core::chunked::decode(&body)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
    }
    Ok((status, body))
}

fn attest(args: &Args) -> Result<(), u8> {
    let report = AttestReport {
        format: 1,
        paths: args
            .attest
            .iter()
            .map(|p| match path_digest(Path::new(p)) {
                Ok(d) => AttestedPath {
                    path: p.clone(),
                    digest: Some(d),
                    error: None,
                },
                Err(e) => AttestedPath {
                    path: p.clone(),
                    digest: None,
                    error: Some(e.kind().to_string()),
                },
            })
            .collect(),
    };
    let body = serde_json::to_string(&report).unwrap_or_default();
    // The proxy may still be binding the socket when the container starts: retry briefly.
    let mut last = None;
    for _ in 0..50 {
        match post_unix(&args.socket, "/_eval/attest", body.as_bytes()) {
            Ok((status, reply)) => {
                let ok = status == 200
                    && serde_json::from_slice::<Value>(&reply)
                        .ok()
                        .and_then(|v| v.get("ok").and_then(Value::as_bool))
                        == Some(true);
                if ok {
                    return Ok(());
                }
                log(&format!(
                    "attestation refused (HTTP {status}): {}",
                    String::from_utf8_lossy(&reply)
                        .chars()
                        .take(400)
                        .collect::<String>()
                ));
                return Err(EXIT_ATTESTATION_REFUSED);
            }
            Err(e) => {
                last = Some(e);
                thread::sleep(Duration::from_millis(100));
            }
        }
    }
    log(&format!(
        "attempt socket {} unreachable: {}",
        args.socket.display(),
        last.map(|e| e.to_string()).unwrap_or_default()
    ));
    Err(EXIT_SOCKET_UNREACHABLE)
}

/// Relays one TCP connection to a fresh connection on the attempt's socket, both directions,
/// passing each side's end-of-stream on as a half-close.
fn relay(conn: TcpStream, socket: &Path) {
    let Ok(upstream) = UnixStream::connect(socket) else {
        let _ = conn.shutdown(Shutdown::Both);
        return;
    };
    let (Ok(mut conn_r), Ok(mut up_w)) = (conn.try_clone(), upstream.try_clone()) else {
        return;
    };
    let to_socket = spawn(move || {
        let _ = io::copy(&mut conn_r, &mut up_w);
        let _ = up_w.shutdown(Shutdown::Write);
    });
    let Ok(to_socket) = to_socket else {
        // No thread for the other direction: this connection is refused, the relay lives on.
        let _ = conn.shutdown(Shutdown::Both);
        return;
    };
    let (mut up_r, mut conn_w) = (upstream, conn);
    let _ = io::copy(&mut up_r, &mut conn_w);
    let _ = conn_w.shutdown(Shutdown::Both);
    let _ = to_socket.join();
}

/// A thread, or the error of not getting one. The agent shares the container's pid limit with
/// the shim and may exhaust it on purpose; `thread::spawn` would then panic and take the relay
/// (and with it every later model call of the attempt) down with the thread that asked.
fn spawn<T: Send + 'static>(
    f: impl FnOnce() -> T + Send + 'static,
) -> io::Result<thread::JoinHandle<T>> {
    thread::Builder::new().spawn(f)
}

/// Accepts relay connections until the listener fails, each on its own thread. A connection
/// that gets no thread is closed at once (`start` hands the refused connection back by dropping
/// it) and the loop goes on, so an agent that exhausts its pid limit loses only the connections
/// it opened while it held them.
fn serve_relay(listener: TcpListener, socket: PathBuf) {
    serve_relay_with(listener, socket, |f| spawn(f).map(drop));
}

fn serve_relay_with(
    listener: TcpListener,
    socket: PathBuf,
    start: impl Fn(Box<dyn FnOnce() + Send>) -> io::Result<()>,
) {
    let mut refused = 0u64;
    for conn in listener.incoming() {
        let Ok(conn) = conn else { continue };
        let socket = socket.clone();
        if start(Box::new(move || relay(conn, &socket))).is_err() {
            refused += 1;
            // Said once per power of two, so a flood cannot fill the log either.
            if refused.is_power_of_two() {
                log(&format!(
                    "relay: no thread for a connection ({refused} refused so far); closed it"
                ));
            }
        }
    }
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            log(&e);
            return ExitCode::from(EXIT_SHIM_FAILURE);
        }
    };
    if let Err(code) = attest(&args) {
        return ExitCode::from(code);
    }
    let listener = match TcpListener::bind(("127.0.0.1", args.port)) {
        Ok(l) => l,
        Err(e) => {
            log(&format!("cannot listen on 127.0.0.1:{}: {e}", args.port));
            return ExitCode::from(EXIT_SHIM_FAILURE);
        }
    };
    let socket = args.socket.clone();
    if let Err(e) = spawn(move || serve_relay(listener, socket)) {
        log(&format!("cannot start the relay: {e}"));
        return ExitCode::from(EXIT_SHIM_FAILURE);
    }

    if args.round_timeouts.is_empty() {
        return match run_harness(&args.command, None, None) {
            Ok(end) => end.exit_code(),
            Err(code) => ExitCode::from(code),
        };
    }
    run_rounds(&args)
}

/// How one harness run ended.
struct HarnessEnd {
    code: Option<i32>,
    signal: Option<i32>,
    timed_out: bool,
}

impl HarnessEnd {
    fn exit_code(&self) -> ExitCode {
        match (self.code, self.signal) {
            (Some(c), _) => ExitCode::from(c.clamp(0, 255) as u8),
            (None, Some(sig)) => ExitCode::from((128 + sig).clamp(0, 255) as u8),
            _ => ExitCode::from(EXIT_SHIM_FAILURE),
        }
    }
}

/// The rounds, in order: each harness run, then quiet, the report and the controller's answer.
fn run_rounds(args: &Args) -> ExitCode {
    let mut last = ExitCode::SUCCESS;
    for (i, limit) in args.round_timeouts.iter().enumerate() {
        let k = i + 1;
        let command = if k == 1 {
            &args.command
        } else {
            &args.continue_command
        };
        let end = match run_harness(command, Some(k), Some(Duration::from_secs(*limit))) {
            Ok(end) => end,
            Err(code) => HarnessEnd {
                code: Some(i32::from(code)),
                signal: None,
                timed_out: false,
            },
        };
        last = end.exit_code();
        // Whatever the harness left running (a background build, a process writing ahead) ends
        // before the round is graded.
        kill_the_rest();
        let report = serde_json::json!({
            "round": k,
            "exit": end.code,
            "signal": end.signal,
            "timed_out": end.timed_out,
        })
        .to_string();
        let next = match post_unix(&args.socket, "/_eval/round", report.as_bytes()) {
            Ok((200, reply)) => serde_json::from_slice::<Value>(&reply)
                .ok()
                .and_then(|v| v.get("next").and_then(Value::as_bool))
                .unwrap_or(false),
            Ok((status, _)) => {
                log(&format!("round {k}: the controller answered HTTP {status}"));
                false
            }
            Err(e) => {
                log(&format!("round {k}: the attempt socket: {e}"));
                return ExitCode::from(EXIT_SOCKET_UNREACHABLE);
            }
        };
        if !next {
            break;
        }
    }
    last
}

/// Kills every process of the container but this one (the shim is its PID 1, so orphans are
/// its children to reap) until `/proc` lists no other, bounded by a count of passes.
fn kill_the_rest() {
    let me = std::process::id();
    for _ in 0..1000 {
        let others: Vec<i32> = std::fs::read_dir("/proc")
            .map(|d| {
                d.filter_map(Result::ok)
                    .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
                    .filter(|pid| *pid != me)
                    .filter_map(|pid| i32::try_from(pid).ok())
                    .collect()
            })
            .unwrap_or_default();
        if others.is_empty() {
            return;
        }
        for pid in others {
            if let Some(pid) = rustix::process::Pid::from_raw(pid) {
                let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
            }
        }
        // Reap what died (a zombie stays listed until reaped); ECHILD ends it.
        while let Ok(Some(_)) = rustix::process::wait(rustix::process::WaitOptions::empty()) {}
    }
}

/// Runs one harness command to its end (killed at `limit`), forwarding signals to it.
fn run_harness(
    command: &[String],
    round: Option<usize>,
    limit: Option<Duration>,
) -> Result<HarnessEnd, u8> {
    let mut signals = match signal_hook::iterator::Signals::new([
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGHUP,
        signal_hook::consts::SIGQUIT,
    ]) {
        Ok(s) => s,
        Err(e) => {
            log(&format!("cannot install signal handlers: {e}"));
            return Err(EXIT_SHIM_FAILURE);
        }
    };
    let mut cmd = Command::new(&command[0]);
    cmd.args(&command[1..]);
    if let Some(k) = round {
        cmd.env("EVAL_ROUND", k.to_string());
    }
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            log(&format!("cannot start {:?}: {e}", command[0]));
            return Err(EXIT_SHIM_FAILURE);
        }
    };
    let pid = rustix::process::Pid::from_raw(child.id() as i32);
    let handle = signals.handle();
    let forwarder = thread::spawn(move || {
        for sig in signals.forever() {
            if let (Some(pid), Some(sig)) = (pid, rustix::process::Signal::from_named_raw(sig)) {
                let _ = rustix::process::kill_process(pid, sig);
            }
        }
    });
    // The round's limit: a timer thread kills the harness unless told it ended first.
    let (ended_tx, ended_rx) = std::sync::mpsc::channel::<()>();
    let timer = limit.map(|limit| {
        thread::spawn(move || {
            if let Err(std::sync::mpsc::RecvTimeoutError::Timeout) = ended_rx.recv_timeout(limit) {
                if let Some(pid) = pid {
                    let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
                }
                return true;
            }
            false
        })
    });
    let status = child.wait();
    let _ = ended_tx.send(());
    let timed_out = timer.is_some_and(|t| t.join().unwrap_or(false));
    handle.close();
    let _ = forwarder.join();
    match status {
        Ok(s) => Ok(HarnessEnd {
            code: s.code(),
            signal: s.signal(),
            timed_out,
        }),
        Err(e) => {
            log(&format!("waiting for the harness failed: {e}"));
            Err(EXIT_SHIM_FAILURE)
        }
    }
}

#[cfg(test)]
mod relay_tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A Unix-socket server that answers each connection's first bytes with "ok:" + them.
    fn echo_socket(dir: &Path) -> PathBuf {
        let path = dir.join("attempt.sock");
        let server = std::os::unix::net::UnixListener::bind(&path).unwrap();
        thread::spawn(move || {
            for c in server.incoming() {
                let Ok(mut c) = c else { continue };
                thread::spawn(move || {
                    let mut buf = Vec::new();
                    let _ = c.read_to_end(&mut buf);
                    let _ = c.write_all(b"ok:");
                    let _ = c.write_all(&buf);
                });
            }
        });
        path
    }

    fn ask(port: u16, what: &[u8]) -> Vec<u8> {
        let mut c = TcpStream::connect(("127.0.0.1", port)).unwrap();
        // A refused connection may be closed before or while this writes; only the answer counts.
        let _ = c.write_all(what);
        let _ = c.shutdown(Shutdown::Write);
        let mut out = Vec::new();
        let _ = c.read_to_end(&mut out);
        out
    }

    #[test]
    fn a_connection_that_gets_no_thread_is_closed_and_the_relay_serves_the_next() {
        let dir = std::env::temp_dir().join(format!("eval-shim-relay-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let socket = echo_socket(&dir);
        let listener = TcpListener::bind(("127.0.0.1", 0)).unwrap();
        let port = listener.local_addr().unwrap().port();
        // The first two connections find the pid limit exhausted; the rest get their thread.
        let calls = Arc::new(AtomicUsize::new(0));
        let seen = calls.clone();
        thread::spawn(move || {
            serve_relay_with(listener, socket, move |f| {
                if seen.fetch_add(1, Ordering::SeqCst) < 2 {
                    return Err(io::Error::from(io::ErrorKind::WouldBlock));
                }
                spawn(f).map(drop)
            })
        });
        assert_eq!(ask(port, b"one"), b"", "refused: closed without an answer");
        assert_eq!(ask(port, b"two"), b"", "refused: closed without an answer");
        assert_eq!(ask(port, b"three"), b"ok:three", "the relay still serves");
        assert_eq!(ask(port, b"four"), b"ok:four");
        assert_eq!(calls.load(Ordering::SeqCst), 4);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
