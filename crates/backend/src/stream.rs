use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::sync::mpsc::UnboundedReceiver;
use tokio::sync::oneshot;

use crate::request::StreamEvent;
use crate::Rejected;

/// Whether a queued request started (`Ok`) or was refused at the head of the queue.
pub type StartSignal = oneshot::Receiver<Result<(), Rejected>>;

/// The receiving end of one request. Dropping it cancels the request: the engine notices
/// before its next step, takes the sequence out of the batch and frees its KV cells.
///
/// The channel is unbounded on purpose: the engine thread must never block on a slow
/// reader, and what can pile up is bounded by the request's `max_tokens` anyway.
#[derive(Debug)]
pub struct RequestStream {
    id: u64,
    prompt_tokens: usize,
    events: UnboundedReceiver<StreamEvent>,
    started: Option<StartSignal>,
}

impl RequestStream {
    /// The engine side keeps the sender; every event it sends arrives here in order.
    pub fn new(id: u64, prompt_tokens: usize, events: UnboundedReceiver<StreamEvent>) -> Self {
        Self { id, prompt_tokens, events, started: None }
    }

    /// A request the backend may still refuse when it reaches the head of its queue (a
    /// queueing bound it can only check then): `started` says which, before any event.
    pub fn refusable(mut self, started: StartSignal) -> Self {
        self.started = Some(started);
        self
    }

    /// The start signal of a refusable request, once: a caller that must answer a refusal
    /// as such (an HTTP 429 before any header) awaits it before reading events.
    pub fn take_start(&mut self) -> Option<StartSignal> {
        self.started.take()
    }

    /// Engine-wide unique request id.
    pub fn id(&self) -> u64 {
        self.id
    }

    pub fn prompt_tokens(&self) -> usize {
        self.prompt_tokens
    }

    /// Next event; `None` after the `Finished` event.
    pub async fn next_event(&mut self) -> Option<StreamEvent> {
        self.events.recv().await
    }

    /// Blocking variant for callers outside an async runtime (the CLI, benchmarks).
    pub fn blocking_next(&mut self) -> Option<StreamEvent> {
        self.events.blocking_recv()
    }
}

impl futures_core::Stream for RequestStream {
    type Item = StreamEvent;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<StreamEvent>> {
        self.events.poll_recv(cx)
    }
}
