//! `eval-shim`: the entrypoint of every agent container (mounted read-only from the host).
//!
//! 1. Hashes the attested paths it is given and reports them to the controller with
//!    `POST /_eval/attest` over the attempt's Unix socket; waits for the answer. Anything but
//!    `{"ok":true}` ends the container with status 86 and the harness never starts.
//! 2. Listens on `127.0.0.1:PORT` and relays every TCP connection byte for byte to the socket,
//!    so harness SDKs use a plain `http://127.0.0.1:PORT` base URL.
//! 3. Starts the harness command, forwards SIGTERM/SIGINT/SIGHUP/SIGQUIT to it, and exits with
//!    its status (128 + signal when it died of a signal).
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
}

fn parse_args() -> Result<Args, String> {
    let mut it = std::env::args().skip(1);
    let mut socket = None;
    let mut port = None;
    let mut attest = Vec::new();
    let mut command = Vec::new();
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
            "--" => {
                command.extend(it.by_ref());
            }
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    if command.is_empty() {
        return Err("no harness command after --".to_owned());
    }
    Ok(Args {
        socket: socket.ok_or("--socket is required")?,
        port: port.ok_or("--port is required")?,
        attest,
        command,
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
        body = dechunk(&body);
    }
    Ok((status, body))
}

fn dechunk(mut raw: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(eol) = raw.windows(2).position(|w| w == b"\r\n") {
        let size_text = String::from_utf8_lossy(&raw[..eol]);
        let size = usize::from_str_radix(size_text.split(';').next().unwrap_or("").trim(), 16)
            .unwrap_or(0);
        if size == 0 || raw.len() < eol + 2 + size {
            break;
        }
        out.extend_from_slice(&raw[eol + 2..eol + 2 + size]);
        raw = &raw[(eol + 4 + size).min(raw.len())..];
    }
    out
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
    let to_socket = thread::spawn(move || {
        let _ = io::copy(&mut conn_r, &mut up_w);
        let _ = up_w.shutdown(Shutdown::Write);
    });
    let (mut up_r, mut conn_w) = (upstream, conn);
    let _ = io::copy(&mut up_r, &mut conn_w);
    let _ = conn_w.shutdown(Shutdown::Both);
    let _ = to_socket.join();
}

fn serve_relay(listener: TcpListener, socket: PathBuf) {
    for conn in listener.incoming() {
        let Ok(conn) = conn else { continue };
        let socket = socket.clone();
        thread::spawn(move || relay(conn, &socket));
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
    thread::spawn(move || serve_relay(listener, socket));

    let mut signals = match signal_hook::iterator::Signals::new([
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGHUP,
        signal_hook::consts::SIGQUIT,
    ]) {
        Ok(s) => s,
        Err(e) => {
            log(&format!("cannot install signal handlers: {e}"));
            return ExitCode::from(EXIT_SHIM_FAILURE);
        }
    };
    let mut child = match Command::new(&args.command[0])
        .args(&args.command[1..])
        .spawn()
    {
        Ok(c) => c,
        Err(e) => {
            log(&format!("cannot start {:?}: {e}", args.command[0]));
            return ExitCode::from(EXIT_SHIM_FAILURE);
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
    let status = child.wait();
    handle.close();
    let _ = forwarder.join();
    match status {
        Ok(s) => match (s.code(), s.signal()) {
            (Some(c), _) => ExitCode::from(c.clamp(0, 255) as u8),
            (None, Some(sig)) => ExitCode::from((128 + sig).clamp(0, 255) as u8),
            _ => ExitCode::from(EXIT_SHIM_FAILURE),
        },
        Err(e) => {
            log(&format!("waiting for the harness failed: {e}"));
            ExitCode::from(EXIT_SHIM_FAILURE)
        }
    }
}
