//! One request through the proxy: identify, check, reserve, forward, stream back, meter, record.
//!
//! The upstream exchange runs in the client connection's task; if the client goes away first,
//! it moves to a tracked task of its own (`Detached`), so leaving cancels nothing: the upstream
//! is drained, the usage settled and the record written regardless.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use axum::body::Body;
use axum::extract::Request;
use axum::response::Response;
use futures_util::FutureExt;
use http::{HeaderValue, Method, StatusCode};
use tokio_util::task::task_tracker::TaskTrackerToken;

use crate::config::Role;
use crate::errors::api_error;
use crate::record::CallOutcome;
use crate::state::{Attempt, Shared};

mod coalesce;
mod exchange;
mod pipeline;
mod stream;
mod whole;

pub(crate) use exchange::RefusedByProxy;
use exchange::*;
use pipeline::run;

/// Entry point for every request on an attempt's socket, the token listener, or an oracle call.
pub(crate) async fn serve(
    shared: Arc<Shared>,
    attempt: Option<Arc<Attempt>>,
    role: Role,
    req: Request,
) -> Response {
    let attempt = attempt.filter(|a| !a.closed.load(Ordering::SeqCst));
    let path = req.uri().path().to_owned();
    let method = req.method().clone();
    let Some(attempt) = attempt else {
        let call = Call::new(shared, None, role, &method, &path);
        return call.refuse(
            StatusCode::UNAUTHORIZED,
            CallOutcome::UnknownAttempt,
            "unknown_attempt",
            "no registered attempt matches this socket or token",
        );
    };
    if role == Role::Agent && path.starts_with("/_eval/") {
        return control(shared, attempt, req).await;
    }
    // The call runs in the connection's own task: no task spawned and no channel per call,
    // so the response is ready in the poll that completes it. `Detached` keeps the guarantee a
    // task of its own gave: a client that leaves mid-call only moves the rest of the call to a
    // tracked task, so its record and usage are never lost.
    let tokens = (shared.tracker.token(), attempt.calls.token());
    let call = Call::new(shared.clone(), Some(attempt), role, &method, &path);
    let run = std::panic::AssertUnwindSafe(run(call, req)).catch_unwind();
    match Detached::new(run, tokens).await {
        Some(Ok(r)) => r,
        _ => api_error(
            shared.api,
            StatusCode::INTERNAL_SERVER_ERROR,
            "proxy_error",
            "the proxy could not complete this call",
        ),
    }
}

/// A call's future, polled in place by whoever awaits it; dropped before it completes (the
/// client left, its connection was dropped), it is moved — boxed, so moving it is allowed — to
/// a task of its own that runs it to the end. The tracker tokens (the proxy's and the attempt's)
/// travel with it, so shutdown and `close_attempt_and_wait` wait for it either way.
struct Detached<F: Future + Send + 'static> {
    fut: Option<std::pin::Pin<Box<F>>>,
    tokens: Option<(TaskTrackerToken, TaskTrackerToken)>,
}

impl<F: Future + Send + 'static> Detached<F> {
    fn new(fut: F, tokens: (TaskTrackerToken, TaskTrackerToken)) -> Self {
        Self {
            fut: Some(Box::pin(fut)),
            tokens: Some(tokens),
        }
    }
}

impl<F: Future + Send + 'static> Future for Detached<F> {
    /// `None` only if polled again after it completed.
    type Output = Option<F::Output>;

    fn poll(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        // `Detached` is `Unpin` (it holds the future boxed).
        let this = self.get_mut();
        let Some(fut) = this.fut.as_mut() else {
            return std::task::Poll::Ready(None);
        };
        let out = std::task::ready!(fut.as_mut().poll(cx));
        this.fut = None;
        this.tokens = None;
        std::task::Poll::Ready(Some(out))
    }
}

impl<F: Future + Send + 'static> Drop for Detached<F> {
    fn drop(&mut self) {
        let (Some(fut), tokens) = (self.fut.take(), self.tokens.take()) else {
            return;
        };
        match tokio::runtime::Handle::try_current() {
            Ok(h) => {
                h.spawn(async move {
                    let _tokens = tokens;
                    let _ = fut.await;
                });
            }
            Err(_) => tracing::error!("a call was dropped outside the runtime; its record is lost"),
        }
    }
}

async fn control(shared: Arc<Shared>, attempt: Arc<Attempt>, req: Request) -> Response {
    let api = shared.api;
    let Some(plane) = shared.control.clone() else {
        return api_error(
            api,
            StatusCode::NOT_FOUND,
            "not_found",
            "no control plane is configured",
        );
    };
    if req.method() != Method::POST {
        return api_error(
            api,
            StatusCode::METHOD_NOT_ALLOWED,
            "method_not_allowed",
            "use POST",
        );
    }
    let path = req.uri().path().to_owned();
    let body = match read_body(
        req.into_body(),
        shared.max_body,
        shared.listener.body_read_timeout,
    )
    .await
    {
        Ok(b) => b,
        Err(status) => {
            return api_error(api, status, "bad_request", "cannot read the request body");
        }
    };
    let (status, value) = plane.handle(&attempt.id, &path, body).await;
    let mut r = Response::new(Body::from(value.to_string()));
    *r.status_mut() = status;
    r.headers_mut().insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;
    use tokio::sync::oneshot;
    use tokio_util::task::TaskTracker;

    /// A call whose awaiting side goes away (the client left) is not cancelled: it runs to its
    /// end in a task of its own, and both trackers count it until then. A call that completes
    /// where it is awaited releases them at once.
    #[tokio::test]
    async fn a_call_dropped_midway_runs_to_its_end_and_is_waited_for() {
        let (proxy, calls) = (TaskTracker::new(), TaskTracker::new());
        let (go, wait) = oneshot::channel::<()>();
        let (done, finished) = oneshot::channel::<&str>();
        let mut d = Detached::new(
            async move {
                wait.await.unwrap();
                done.send("recorded").unwrap();
            },
            (proxy.token(), calls.token()),
        );
        assert!(futures_util::poll!(&mut d).is_pending());
        drop(d);
        proxy.close();
        calls.close();
        assert_eq!(
            (proxy.len(), calls.len()),
            (1, 1),
            "the moved call is tracked"
        );
        go.send(()).unwrap();
        assert_eq!(finished.await, Ok("recorded"));
        calls.wait().await;
        proxy.wait().await;

        let (proxy, calls) = (TaskTracker::new(), TaskTracker::new());
        let d = Detached::new(async { 7 }, (proxy.token(), calls.token()));
        assert_eq!(d.await, Some(7));
        assert!(proxy.is_empty() && calls.is_empty());
    }
}
