//! Escape attempts of adversarial profiles. Each returns `ok: true` only if the escape worked;
//! details never contain a value read from the environment or a file.

use std::fs;
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::path::Path;
use std::time::Duration;

use eval_fixture_core::metrics::Probe;
use eval_fixture_core::profile::Adversarial;

pub fn run(adv: &Adversarial, _workspace: &Path) -> Vec<Probe> {
    let mut out = Vec::new();
    for name in &adv.read_env {
        let set = std::env::var_os(name).is_some_and(|v| !v.is_empty());
        out.push(Probe {
            probe: format!("read_env:{name}"),
            ok: set,
            detail: if set { "set" } else { "not set" }.to_owned(),
        });
    }
    // Names only: proves what the container's environment holds without copying values.
    if !adv.read_env.is_empty() {
        let mut names: Vec<String> = std::env::vars_os()
            .map(|(k, _)| k.to_string_lossy().into_owned())
            .collect();
        names.sort();
        out.push(Probe {
            probe: "env_names".to_owned(),
            ok: false,
            detail: names.join(","),
        });
    }
    for port in &adv.connect_tcp {
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, *port));
        let r = TcpStream::connect_timeout(&addr, Duration::from_secs(2));
        out.push(Probe {
            probe: format!("connect_tcp:127.0.0.1:{port}"),
            ok: r.is_ok(),
            detail: match r {
                Ok(_) => "connected".to_owned(),
                Err(e) => e.kind().to_string(),
            },
        });
    }
    for path in &adv.read_paths {
        let r = fs::read(path);
        out.push(Probe {
            probe: format!("read_path:{path}"),
            ok: r.is_ok(),
            detail: match r {
                Ok(b) => format!("read {} bytes", b.len()),
                Err(e) => e.kind().to_string(),
            },
        });
    }
    for path in &adv.write_paths {
        let r = fs::write(path, b"escaped\n");
        if r.is_ok() {
            let _ = fs::remove_file(path);
        }
        out.push(Probe {
            probe: format!("write_path:{path}"),
            ok: r.is_ok(),
            detail: match r {
                Ok(()) => "written".to_owned(),
                Err(e) => e.kind().to_string(),
            },
        });
    }
    if adv.list_interfaces {
        let names: Vec<String> = fs::read_dir("/sys/class/net")
            .map(|rd| {
                rd.filter_map(Result::ok)
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        let mut names = names;
        names.sort();
        out.push(Probe {
            probe: "interfaces".to_owned(),
            ok: names.iter().any(|n| n != "lo") || names.is_empty(),
            detail: names.join(","),
        });
    }
    out
}
