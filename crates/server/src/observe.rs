//! Follows one admitted request to its end: metrics, the one log line, the in-flight count,
//! and disconnect detection (dropped before its final event means the client went away).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use rillm_backend::Completion;

use crate::finish::openai_finish_reason;
use crate::metrics::{self, RequestMetrics};

pub struct RequestObserver {
    id: u64,
    endpoint: &'static str,
    metrics: RequestMetrics,
    received: Instant,
    first_token: Option<Instant>,
    last_token: Option<Instant>,
    finished: bool,
    _in_flight: InFlight,
    /// With several models: the request's model, kept loaded (and counted busy) until
    /// the stream ends.
    _model: Option<Arc<crate::models::BoundModel>>,
}

/// One request counted in flight while this lives (`connections` closes idle connections,
/// not ones with a request in flight, when the cap is reached).
pub struct InFlight(Arc<AtomicUsize>);

impl InFlight {
    pub fn hold(count: &Arc<AtomicUsize>) -> Self {
        count.fetch_add(1, Ordering::SeqCst);
        Self(Arc::clone(count))
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl RequestObserver {
    pub fn new(id: u64, endpoint: &'static str, model: &str, received: Instant, in_flight: Arc<AtomicUsize>) -> Self {
        Self {
            id,
            endpoint,
            metrics: RequestMetrics::new(model),
            received,
            first_token: None,
            last_token: None,
            finished: false,
            _in_flight: InFlight::hold(&in_flight),
            _model: None,
        }
    }

    /// Keeps `model` bound until this request ends.
    pub fn holding(mut self, model: Option<Arc<crate::models::BoundModel>>) -> Self {
        self._model = model;
        self
    }

    pub fn on_tokens(&mut self, tokens: usize) {
        let now = Instant::now();
        match self.last_token {
            None => {
                self.first_token = Some(now);
                self.metrics.first_token((now - self.received).as_secs_f64());
            }
            Some(last) => self.metrics.inter_token((now - last).as_secs_f64(), tokens),
        }
        self.last_token = Some(now);
    }

    pub fn on_finish(&mut self, done: &Completion) {
        self.finished = true;
        let e2e = self.received.elapsed();
        let reason = openai_finish_reason(done.finish_reason);
        self.metrics.finished(reason, e2e.as_secs_f64(), done);
        tracing::info!(
            id = self.id,
            endpoint = self.endpoint,
            status = if done.error.is_some() { "error" } else { "ok" },
            prompt_tokens = done.usage.prompt_tokens,
            completion_tokens = done.usage.completion_tokens,
            ttft_ms = format_args!("{:.1}", self.ttft_ms()),
            e2e_ms = format_args!("{:.1}", e2e.as_secs_f64() * 1000.0),
            finish_reason = done.finish_reason.as_str(),
            "request"
        );
    }

    fn ttft_ms(&self) -> f64 {
        self.first_token.map_or(0.0, |t| (t - self.received).as_secs_f64() * 1000.0)
    }
}

impl Drop for RequestObserver {
    fn drop(&mut self) {
        if !self.finished {
            metrics::record_disconnect();
            tracing::info!(
                id = self.id,
                endpoint = self.endpoint,
                status = "client_disconnected",
                ttft_ms = format_args!("{:.1}", self.ttft_ms()),
                e2e_ms = format_args!("{:.1}", self.received.elapsed().as_secs_f64() * 1000.0),
                finish_reason = "cancelled",
                "request"
            );
        }
    }
}
