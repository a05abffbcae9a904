//! Accepts connections and bounds what idle or slow clients can hold.
//!
//! `axum::serve` keeps every connection as long as its client likes: a thousand idle or
//! half-sent connections exhaust the process's file descriptors and then `/health` itself
//! cannot be reached. Here each connection is served by hyper directly, with
//! - a header-read timeout: a request's headers must arrive within it (slow-loris);
//! - an idle timeout: a connection with no bytes in either direction for this long is
//!   closed after its current response (a long non-streamed completion is not cut off:
//!   hyper's graceful shutdown lets the response in progress finish);
//! - a connection cap that only requests in flight fill (`registry`): at the cap the
//!   longest-idle keep-alive connection is closed to admit the new one; with every place
//!   busy, a small reserve answers probes and tells other requests `503` with a body; past
//!   the reserve, new connections are closed with a log line, before the descriptor limit.

mod registry;
mod tracked;

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::Request;
use axum::response::{IntoResponse, Response};
use axum::Router;
use http_body_util::BodyExt;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinSet;
use tower::ServiceExt;

use crate::error::ApiError;
use registry::{Admission, Connection, Place, Registry};
use tracked::Tracked;

/// Paths a reserve connection serves: what load balancers and scrapers probe.
const PROBES: [&str; 3] = ["/health", "/ready", "/metrics"];

/// Limits on client connections.
#[derive(Debug, Clone)]
pub struct ConnectionLimits {
    /// Most connections with requests in flight; idle ones give way to new clients.
    pub max_connections: usize,
    /// Connections taken past the cap when every place is busy, one request each: probes
    /// are served, other requests get `503` with `Retry-After`.
    pub reserve: usize,
    /// Time a request's headers may take to arrive, from the connection's start or the
    /// first byte of a kept-alive connection's next request.
    pub header_read_timeout: Duration,
    /// A connection silent in both directions this long is closed.
    pub idle_timeout: Duration,
}

impl Default for ConnectionLimits {
    fn default() -> Self {
        Self {
            // Far above what the engine can run or queue, below the usual 1024-descriptor limit.
            max_connections: 512,
            // Within the 64 descriptors the default cap leaves below the process's limit.
            reserve: 32,
            header_read_timeout: Duration::from_secs(10),
            // Well past the SSE keep-alive interval (15 s): a waiting stream never looks idle.
            idle_timeout: Duration::from_secs(60),
        }
    }
}

/// Serves `router` on `listener` until `stop` turns true, then lets every connection
/// finish its current response and returns once they have (or `grace` passed).
pub async fn serve(
    listener: TcpListener,
    router: Router,
    limits: ConnectionLimits,
    mut stop: watch::Receiver<bool>,
    grace: Duration,
) {
    let registry = Registry::new(limits.max_connections, limits.reserve);
    let mut connections = JoinSet::new();
    let mut refused_since_log = 0u64;
    let mut last_refusal_log: Option<Instant> = None;
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            _ = stop.wait_for(|stopped| *stopped) => break,
        };
        // Reap finished connection tasks so the set does not grow without bound.
        while connections.try_join_next().is_some() {}
        let tcp = match accepted {
            Ok((tcp, _)) => tcp,
            Err(error) => {
                // EMFILE and friends: back off rather than spin; the cap should prevent it.
                tracing::error!(%error, "accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let Some(place) = registry.admit() else {
            refused_since_log += 1;
            if last_refusal_log.is_none_or(|at| at.elapsed() >= Duration::from_secs(5)) {
                tracing::warn!(
                    max_connections = limits.max_connections,
                    reserve = limits.reserve,
                    refused = refused_since_log,
                    "every connection has a request in flight and the reserve is full; closing new connections \
                     (raise --max-connections)"
                );
                refused_since_log = 0;
                last_refusal_log = Some(Instant::now());
            }
            drop(tcp);
            continue;
        };
        if place.admission == Admission::Evicted {
            tracing::debug!("connection cap reached; closed the longest-idle connection to admit a new one");
        }
        // Nagle's algorithm would hold a token event back until the client ACKs the headers
        // (up to its 40 ms delayed-ACK timer): every SSE write must leave at once.
        if let Err(error) = tcp.set_nodelay(true) {
            tracing::warn!(%error, "could not set TCP_NODELAY");
        }
        let (router, limits, stop) = (router.clone(), limits.clone(), stop.clone());
        connections.spawn(async move { serve_connection(tcp, router, &limits, stop, place).await });
    }
    let _ = tokio::time::timeout(grace, async { while connections.join_next().await.is_some() {} }).await;
}

async fn serve_connection(
    tcp: TcpStream,
    router: Router,
    limits: &ConnectionLimits,
    mut stop: watch::Receiver<bool>,
    place: Place,
) {
    let connection = Arc::clone(&place.connection);
    let reserve = place.admission == Admission::Reserve;
    let io = TokioIo::new(Tracked { inner: tcp, connection: Arc::clone(&connection) });
    let service = tower::service_fn(move |request: Request<hyper::body::Incoming>| {
        handle(router.clone(), Arc::clone(&connection), reserve, request.map(Body::new))
    });
    let connection = http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        // A reserve place serves one request.
        .keep_alive(!reserve)
        .serve_connection(io, TowerToHyperService::new(service));
    tokio::pin!(connection);
    let mut check = tokio::time::interval((limits.idle_timeout / 4).max(Duration::from_millis(10)));
    let mut closing = false;
    loop {
        tokio::select! {
            result = connection.as_mut() => {
                if let Err(error) = result {
                    tracing::debug!(%error, "connection ended with an error");
                }
                return;
            }
            _ = stop.wait_for(|stopped| *stopped), if !closing => {
                connection.as_mut().graceful_shutdown();
                closing = true;
            }
            _ = place.connection.close_requested(), if !closing => {
                connection.as_mut().graceful_shutdown();
                closing = true;
            }
            _ = check.tick(), if !closing => {
                if place.connection.idle_for() >= limits.idle_timeout {
                    connection.as_mut().graceful_shutdown();
                    closing = true;
                }
            }
        }
    }
}

/// One request on a connection, counted in flight until its response body is dropped
/// (sent, or the client gone); on a reserve place, only probes reach the router.
async fn handle(
    router: Router,
    connection: Arc<Connection>,
    reserve: bool,
    request: Request,
) -> Result<Response, std::convert::Infallible> {
    if reserve && !PROBES.contains(&request.uri().path()) {
        return Ok(ApiError::connections_busy().into_response());
    }
    let in_flight = connection.request_started();
    let response = router.oneshot(request).await?;
    Ok(response.map(|body| {
        Body::new(body.map_frame(move |frame| {
            // Owned by the body, so the request counts until hyper drops it.
            let _in_flight = &in_flight;
            frame
        }))
    }))
}
