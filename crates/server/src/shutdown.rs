//! Graceful drain: stop admitting, let in-flight requests finish for a while, then cancel.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::state::AppState;

pub async fn drain(state: &AppState) {
    state.begin_draining();
    let timeout = state.config.shutdown_timeout;
    tracing::info!(in_flight = state.in_flight.load(Ordering::SeqCst), ?timeout, "draining");
    let deadline = Instant::now() + timeout;
    while !is_idle(state) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    if !is_idle(state) {
        tracing::warn!(in_flight = state.in_flight.load(Ordering::SeqCst), "shutdown timeout: cancelling");
    }
    for backend in state.serving_backends() {
        // Cancelled streams get their final event; joining the engine thread blocks.
        let _ = tokio::task::spawn_blocking(move || backend.shutdown()).await;
    }
    // Let the last events of cancelled streams reach their clients.
    wait_for_in_flight(state, Duration::from_secs(1)).await;
}

/// Waits until no admitted request is left, or `limit` passes.
pub async fn wait_for_in_flight(state: &AppState, limit: Duration) {
    let deadline = Instant::now() + limit;
    while state.in_flight.load(Ordering::SeqCst) > 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn is_idle(state: &AppState) -> bool {
    let engines_idle = state.serving_backends().iter().all(|b| {
        let s = b.stats();
        s.running == 0 && s.waiting == 0
    });
    engines_idle && state.in_flight.load(Ordering::SeqCst) == 0
}
