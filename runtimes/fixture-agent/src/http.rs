//! A minimal HTTP/1.1 client over loopback TCP (one request per connection), enough for the
//! OpenAI chat API through the shim's relay. No TLS, no proxies, loopback only.

use std::io::{self, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::time::Duration;

pub struct Origin {
    pub addr: SocketAddr,
    /// Path prefix of the base URL, without a trailing slash (e.g. `/v1`).
    pub prefix: String,
}

/// Parses `http://127.0.0.1:PORT[/prefix]`; any other host is refused, so this agent can never
/// be pointed at a non-loopback address.
pub fn parse_base_url(url: &str) -> Result<Origin, String> {
    let rest = url
        .strip_prefix("http://")
        .ok_or_else(|| format!("base URL {url:?} must start with http://"))?;
    let (hostport, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, ""),
    };
    let (host, port) = hostport
        .rsplit_once(':')
        .ok_or_else(|| format!("base URL {url:?} needs a port"))?;
    if host != "127.0.0.1" && host != "localhost" {
        return Err(format!("base URL {url:?}: only 127.0.0.1 is allowed"));
    }
    let port: u16 = port
        .parse()
        .map_err(|_| format!("base URL {url:?}: bad port"))?;
    Ok(Origin {
        addr: SocketAddr::from((Ipv4Addr::LOCALHOST, port)),
        prefix: path.trim_end_matches('/').to_owned(),
    })
}

pub struct Response {
    pub status: u16,
    pub body: Vec<u8>,
}

pub fn post_json(
    origin: &Origin,
    path: &str,
    body: &[u8],
    timeout: Duration,
) -> io::Result<Response> {
    let mut s = TcpStream::connect_timeout(&origin.addr, Duration::from_secs(10))?;
    s.set_read_timeout(Some(timeout))?;
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        origin.addr,
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
    let head = String::from_utf8_lossy(&raw[..split]).to_ascii_lowercase();
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "no HTTP status"))?;
    let rest = &raw[split + 4..];
    let chunked = head
        .lines()
        .any(|l| l.starts_with("transfer-encoding:") && l.contains("chunked"));
    let body = if chunked {
        eval_fixture_core::chunked::decode(rest)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?
    } else if let Some(len) = head.lines().find_map(|l| {
        l.strip_prefix("content-length:")
            .and_then(|v| v.trim().parse::<usize>().ok())
    }) {
        rest.get(..len)
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "short body"))?
            .to_vec()
    } else {
        rest.to_vec()
    };
    Ok(Response { status, body })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base_url_loopback_only() {
        let o = parse_base_url("http://127.0.0.1:8080/v1/").unwrap();
        assert_eq!(o.addr.port(), 8080);
        assert_eq!(o.prefix, "/v1");
        assert!(parse_base_url("http://10.0.0.1:80/v1").is_err());
        assert!(parse_base_url("https://127.0.0.1:80").is_err());
    }
}
