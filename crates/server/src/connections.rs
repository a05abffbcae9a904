//! Accepts connections and bounds what idle or slow clients can hold.
//!
//! `axum::serve` keeps every connection as long as its client likes: a thousand idle or
//! half-sent connections exhaust the process's file descriptors and then `/health` itself
//! cannot be reached. Here each connection is served by hyper directly, with
//! - a header-read timeout: a request's headers must arrive within it (slow-loris);
//! - an idle timeout: a connection with no bytes in either direction for this long is
//!   closed after its current response (a long non-streamed completion is not cut off:
//!   hyper's graceful shutdown lets the response in progress finish);
//! - a connection cap: past it, new connections are closed at once with a log line,
//!   before the descriptor limit is reached.

use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Semaphore};
use tokio::task::JoinSet;

/// Limits on client connections.
#[derive(Debug, Clone)]
pub struct ConnectionLimits {
    /// Most open client connections; more are closed on accept.
    pub max_connections: usize,
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
    let permits = Arc::new(Semaphore::new(limits.max_connections));
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
        let Ok(permit) = Arc::clone(&permits).try_acquire_owned() else {
            refused_since_log += 1;
            if last_refusal_log.is_none_or(|at| at.elapsed() >= Duration::from_secs(5)) {
                tracing::warn!(
                    max_connections = limits.max_connections,
                    refused = refused_since_log,
                    "connection limit reached; closing new connections (raise --max-connections)"
                );
                refused_since_log = 0;
                last_refusal_log = Some(Instant::now());
            }
            drop(tcp);
            continue;
        };
        // Nagle's algorithm would hold a token event back until the client ACKs the headers
        // (up to its 40 ms delayed-ACK timer): every SSE write must leave at once.
        if let Err(error) = tcp.set_nodelay(true) {
            tracing::warn!(%error, "could not set TCP_NODELAY");
        }
        let (router, limits, stop) = (router.clone(), limits.clone(), stop.clone());
        connections.spawn(async move {
            serve_connection(tcp, router, &limits, stop).await;
            drop(permit);
        });
    }
    let _ = tokio::time::timeout(grace, async { while connections.join_next().await.is_some() {} }).await;
}

async fn serve_connection(tcp: TcpStream, router: Router, limits: &ConnectionLimits, mut stop: watch::Receiver<bool>) {
    let activity = Arc::new(Activity::new());
    let io = TokioIo::new(Tracked { inner: tcp, activity: Arc::clone(&activity) });
    let connection = http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .serve_connection(io, TowerToHyperService::new(router));
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
            _ = check.tick(), if !closing => {
                if activity.idle_for() >= limits.idle_timeout {
                    connection.as_mut().graceful_shutdown();
                    closing = true;
                }
            }
        }
    }
}

/// When a connection last moved a byte.
struct Activity {
    start: Instant,
    last_ms: AtomicU64,
}

impl Activity {
    fn new() -> Self {
        Self { start: Instant::now(), last_ms: AtomicU64::new(0) }
    }

    fn touch(&self) {
        self.last_ms.store(self.start.elapsed().as_millis() as u64, Ordering::Relaxed);
    }

    fn idle_for(&self) -> Duration {
        let now = self.start.elapsed().as_millis() as u64;
        Duration::from_millis(now.saturating_sub(self.last_ms.load(Ordering::Relaxed)))
    }
}

/// A TCP stream that records when it last read or wrote.
struct Tracked {
    inner: TcpStream,
    activity: Arc<Activity>,
}

impl AsyncRead for Tracked {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let result = Pin::new(&mut self.inner).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.activity.touch();
        }
        result
    }
}

impl AsyncWrite for Tracked {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, data: &[u8]) -> Poll<std::io::Result<usize>> {
        let result = Pin::new(&mut self.inner).poll_write(cx, data);
        if matches!(result, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.touch();
        }
        result
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let result = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        if matches!(result, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.touch();
        }
        result
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}
