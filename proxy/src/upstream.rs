//! The upstream client of streamed calls: HTTP/1.1 over hyper's connection API, with each
//! connection driven by the call that uses it instead of a task of its own.
//!
//! Through reqwest a streamed answer crosses two tasks per chunk: hyper's connection task decodes
//! one chunk into a one-slot channel and waits for the reader to take it, so a stream of
//! token-sized events costs two wakeups and two task polls per event. Here the response body
//! ([`Inline`]) polls the connection itself whenever it has nothing buffered, so the bytes that
//! are already in the socket are read, de-chunked and handed on in one task poll, with the
//! channel only ever touched by that one task. Between calls an idle connection rests in
//! [`StreamClient`]'s pool unpolled; a checkout polls it once first, so one the upstream closed
//! meanwhile (its FIN already read) is dropped, never used.
//!
//! TLS is rustls with the same verifier as the reqwest client (`tls_pin::h1_config`: the platform
//! verifier, the extra roots, the SPKI pins inside the handshake), offering only `http/1.1`.
//! The reqwest client stays for everything else (non-stream calls, `/v1/models`, the account
//! checks, an outbound proxy); the answer is handed on as a `reqwest::Response`, so everything
//! after `forward` is the same code for both.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Method, Request, Uri};
use http_body::{Body, Frame, SizeHint};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::client::conn::http1;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;

use crate::errors::error_chain;

/// A byte stream to the upstream: plain TCP or TLS over it.
trait Io: AsyncRead + AsyncWrite + Send + Unpin {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin> Io for T {}

type Conn = http1::Connection<TokioIo<Box<dyn Io>>, Full<Bytes>>;
type Sender = http1::SendRequest<Full<Bytes>>;

/// Idle connections kept for reuse: as many as streams ran at once, up to this bound.
const MAX_IDLE: usize = 64;
/// An idle connection older than this is closed rather than reused (reqwest's pool uses the
/// same, `server.rs` `fn upstream_client`).
const IDLE_TIMEOUT: Duration = Duration::from_secs(90);

struct Idle {
    send: Sender,
    conn: Conn,
    /// A second descriptor of the connection's socket, only ever peeked at (`fn closed`).
    probe: std::net::TcpStream,
    since: Instant,
}

/// Whether the upstream closed (or wrote to) an idle connection. A real `recv(MSG_PEEK)` on the
/// socket, not the runtime's cached readiness, which may not yet know of a FIN that the kernel
/// already has: a request sent on such a connection would be lost, and the proxy never retries.
fn closed(probe: &std::net::TcpStream) -> bool {
    let mut b = [0u8; 1];
    // The descriptor shares the connection's non-blocking flag: an open, quiet socket is
    // `WouldBlock`; `Ok(0)` is the FIN, `Ok(_)` bytes nobody asked for.
    !matches!(probe.peek(&mut b), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock)
}

/// Why a request got no response head.
#[derive(Debug)]
pub(crate) struct SendError {
    /// The connection could not be made (TCP or TLS): nothing reached the upstream.
    pub connect: bool,
    pub message: String,
}

/// The streamed calls' upstream client (see the module comment).
pub(crate) struct StreamClient {
    https: Option<tokio_rustls::TlsConnector>,
    host: String,
    port: u16,
    /// The `Host` header: the authority as the upstream URL spells it.
    authority: HeaderValue,
    connect_timeout: Duration,
    idle: Mutex<Vec<Idle>>,
}

impl StreamClient {
    /// `None` when the upstream URL is not one this client speaks to (then reqwest does).
    pub(crate) fn new(
        upstream: &str,
        connect_timeout: Duration,
        tls: Option<rustls::ClientConfig>,
    ) -> Option<Self> {
        let uri: Uri = upstream.parse().ok()?;
        let https = match uri.scheme_str()? {
            "https" => Some(tokio_rustls::TlsConnector::from(Arc::new(tls?))),
            "http" => None,
            _ => return None,
        };
        let authority = uri.authority()?;
        let host = authority
            .host()
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_owned();
        let port = authority
            .port_u16()
            .unwrap_or(if https.is_some() { 443 } else { 80 });
        Some(Self {
            https,
            host,
            port,
            authority: HeaderValue::from_str(authority.as_str()).ok()?,
            connect_timeout,
            idle: Mutex::new(Vec::new()),
        })
    }

    /// Sends `POST url` and waits for the response head, driving the connection meanwhile; the
    /// answer's body keeps driving it (`Inline`) and returns it to the pool at its end.
    pub(crate) async fn post(
        self: &Arc<Self>,
        url: &str,
        mut headers: HeaderMap,
        body: Bytes,
    ) -> Result<reqwest::Response, SendError> {
        let uri: Uri = url.parse().map_err(|e| SendError {
            connect: true,
            message: format!("bad upstream URL: {e}"),
        })?;
        let path = uri
            .path_and_query()
            .map(|p| p.as_str())
            .unwrap_or("/")
            .to_owned();
        headers.insert(http::header::HOST, self.authority.clone());
        // What reqwest sends when the request names none; the upstream sees the same request
        // whichever client carries it.
        headers
            .entry(http::header::ACCEPT)
            .or_insert(HeaderValue::from_static("*/*"));
        let request = || {
            let mut r = Request::new(Full::new(body.clone()));
            *r.method_mut() = Method::POST;
            *r.uri_mut() = path.parse().unwrap_or_else(|_| Uri::from_static("/"));
            *r.headers_mut() = headers.clone();
            r
        };
        let (mut send, conn, probe, reused) = match self.checkout() {
            Some(i) => (i.send, i.conn, i.probe, true),
            None => {
                let (s, c, p) = self.connect().await?;
                (s, c, p, false)
            }
        };
        match exchange(&mut send, conn, request()).await {
            Ok((head, conn)) => Ok(self.response(head, send, conn, probe)),
            // A pooled connection that closed before the request went out (hyper's `canceled`):
            // the upstream never saw it, so a fresh connection is not a retry.
            Err(e) if reused && e.is_canceled() => {
                let (mut send, conn, probe) = self.connect().await?;
                match exchange(&mut send, conn, request()).await {
                    Ok((head, conn)) => Ok(self.response(head, send, conn, probe)),
                    Err(e) => Err(sent_error(&e)),
                }
            }
            Err(e) => Err(sent_error(&e)),
        }
    }

    fn response(
        self: &Arc<Self>,
        head: http::Response<Incoming>,
        send: Sender,
        conn: Option<Conn>,
        probe: std::net::TcpStream,
    ) -> reqwest::Response {
        let pool = Arc::downgrade(self);
        let head = head.map(|body| {
            reqwest::Body::wrap(SyncBody(sync_wrapper::SyncWrapper::new(Inline {
                body,
                link: conn.map(|conn| Link { send, conn, probe }),
                pool,
            })))
        });
        reqwest::Response::from(head)
    }

    /// The newest idle connection still open and ready.
    fn checkout(&self) -> Option<Idle> {
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        let mut cx = Context::from_waker(std::task::Waker::noop());
        while let Some(mut i) = idle.pop() {
            if i.since.elapsed() > IDLE_TIMEOUT || closed(&i.probe) {
                continue;
            }
            // One poll reads what arrived while it rested: a FIN or an error ends it here.
            if Pin::new(&mut i.conn).poll(&mut cx).is_ready() {
                continue;
            }
            if matches!(i.send.poll_ready(&mut cx), Poll::Ready(Ok(()))) {
                return Some(i);
            }
        }
        None
    }

    fn checkin(&self, link: Link, cx: &mut Context<'_>) {
        let Link {
            send,
            mut conn,
            probe,
        } = link;
        // The poll lets the connection finish the exchange (back to idle); one that ends here
        // (the upstream said `connection: close`) is not kept.
        if Pin::new(&mut conn).poll(cx).is_ready() || send.is_closed() {
            return;
        }
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        if idle.len() < MAX_IDLE {
            idle.push(Idle {
                send,
                conn,
                probe,
                since: Instant::now(),
            });
        }
    }

    async fn connect(&self) -> Result<(Sender, Conn, std::net::TcpStream), SendError> {
        let fail = |message: String| SendError {
            connect: true,
            message,
        };
        let tcp = tokio::time::timeout(
            self.connect_timeout,
            TcpStream::connect((self.host.as_str(), self.port)),
        )
        .await
        .map_err(|_| {
            fail(format!(
                "connect timed out after {:?}",
                self.connect_timeout
            ))
        })?
        .map_err(|e| fail(format!("connect to {}:{}: {e}", self.host, self.port)))?;
        let _ = tcp.set_nodelay(true);
        let probe = tcp
            .into_std()
            .and_then(|std| Ok((std.try_clone()?, std)))
            .and_then(|(probe, std)| Ok((probe, TcpStream::from_std(std)?)));
        let (probe, tcp) = probe.map_err(|e| fail(format!("connection set-up: {e}")))?;
        let io: Box<dyn Io> = match &self.https {
            None => Box::new(tcp),
            Some(tls) => {
                let name = rustls::pki_types::ServerName::try_from(self.host.clone())
                    .map_err(|e| fail(format!("TLS server name {}: {e}", self.host)))?;
                let handshake = tls.connect(name, tcp);
                let s = tokio::time::timeout(self.connect_timeout, handshake)
                    .await
                    .map_err(|_| fail("TLS handshake timed out".into()))?
                    .map_err(|e| fail(format!("TLS handshake: {}", error_chain(&e))))?;
                Box::new(s)
            }
        };
        let (send, conn) = http1::handshake(TokioIo::new(io))
            .await
            .map_err(|e| fail(format!("HTTP/1.1 handshake: {}", error_chain(&e))))?;
        Ok((send, conn, probe))
    }
}

/// Sends one request on a connection and drives the connection until the response head is in.
/// The connection is returned beside the head, or `None` if it already ended (the body then
/// holds everything there is).
async fn exchange(
    send: &mut Sender,
    conn: Conn,
    req: Request<Full<Bytes>>,
) -> Result<(http::Response<Incoming>, Option<Conn>), hyper::Error> {
    let mut reply = std::pin::pin!(send.send_request(req));
    let mut conn = Some(conn);
    let head = std::future::poll_fn(|cx| {
        loop {
            if let Poll::Ready(r) = reply.as_mut().poll(cx) {
                return Poll::Ready(r);
            }
            let Some(c) = conn.as_mut() else {
                return Poll::Pending;
            };
            match Pin::new(c).poll(cx) {
                // Ended: the reply resolves now, with the head or the connection's error.
                Poll::Ready(_) => conn = None,
                Poll::Pending => return reply.as_mut().poll(cx),
            }
        }
    })
    .await?;
    Ok((head, conn))
}

fn sent_error(e: &hyper::Error) -> SendError {
    SendError {
        connect: false,
        message: error_chain(e),
    }
}

/// A streamed answer's body, which drives its own connection: when nothing is buffered it polls
/// the connection (read, de-chunk, hand over) and then itself again, so everything already in
/// the socket is taken in this one poll. At the end the connection goes back to the pool;
/// dropped before the end, it closes the connection (as hyper does for an unfinished body).
struct Inline {
    body: Incoming,
    link: Option<Link>,
    pool: std::sync::Weak<StreamClient>,
}

/// A connection in use: what goes back to the pool.
struct Link {
    send: Sender,
    conn: Conn,
    probe: std::net::TcpStream,
}

impl Inline {
    fn poll_body(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let r = Pin::new(&mut self.body).poll_frame(cx);
        if let Poll::Ready(None) = r
            && let Some(link) = self.link.take()
            && let Some(pool) = self.pool.upgrade()
        {
            pool.checkin(link, cx);
        }
        r.map(|f| f.map(|f| f.map_err(BoxError::from)))
    }
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

impl Body for Inline {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = &mut *self;
        if let Poll::Ready(f) = this.poll_body(cx) {
            return Poll::Ready(f);
        }
        let Some(Link { conn, .. }) = this.link.as_mut() else {
            // The connection ended without ending the body: hyper gives the body its end or
            // error when the connection ends, so this is only reached if it did not.
            return Poll::Ready(Some(
                Err("the upstream connection closed mid-answer".into()),
            ));
        };
        match Pin::new(conn).poll(cx) {
            // Ended (closed or failed): dropping it hands the body its end or the error.
            Poll::Ready(_) => {
                this.link = None;
                match this.poll_body(cx) {
                    Poll::Pending => Poll::Ready(Some(Err(
                        "the upstream connection closed mid-answer".into(),
                    ))),
                    r => r,
                }
            }
            // Waiting on the socket, or on this body to take the chunk it just decoded.
            Poll::Pending => this.poll_body(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// reqwest's body wants `Sync`; the body is only ever polled through `&mut`, which
/// `SyncWrapper` makes sound without a lock.
struct SyncBody(sync_wrapper::SyncWrapper<Inline>);

impl Body for SyncBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        Pin::new(self.get_mut().0.get_mut()).poll_frame(cx)
    }

    fn size_hint(&self) -> SizeHint {
        // `SyncWrapper` gives no shared access; an unknown size is always a valid hint.
        SizeHint::default()
    }
}
