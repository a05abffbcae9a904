use std::pin::Pin;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::sync::mpsc::UnboundedReceiver;
use tokio::sync::oneshot;

use crate::request::StreamEvent;
use crate::Rejected;

/// What a stream's reader asked of each choice of its request: end it early
/// (`RequestStream::end_choice`: the backend finishes it at its next step as a stop string
/// would, `stop`, usage counted) or restart it (`RequestStream::restart_choice`), its other
/// choices going on. Shared by the stream and the backend's sequences.
#[derive(Debug)]
pub struct ChoiceControls(Box<[AtomicU8]>);

const GO_ON: u8 = 0;
const END: u8 = 1;
const RESTART: u8 = 2;

impl ChoiceControls {
    /// For a request of `n` choices.
    pub fn new(n: u32) -> Arc<Self> {
        Arc::new(Self((0..n.max(1)).map(|_| AtomicU8::new(GO_ON)).collect()))
    }

    /// Whether choice `index` was ended early.
    pub fn is_ended(&self, index: u32) -> bool {
        self.0.get(index as usize).is_some_and(|state| state.load(Ordering::Relaxed) == END)
    }

    /// Whether a restart of choice `index` was asked for, once: the request is taken.
    pub fn take_restart(&self, index: u32) -> bool {
        self.0
            .get(index as usize)
            .is_some_and(|state| state.compare_exchange(RESTART, GO_ON, Ordering::Relaxed, Ordering::Relaxed).is_ok())
    }

    /// The backend itself starts choice `index` over at its next step (its constraint's own
    /// restart: `Constraint::CallsOrAnswer`), unless its reader ended it.
    pub fn ask_restart(&self, index: u32) {
        if let Some(state) = self.0.get(index as usize) {
            let _ = state.compare_exchange(GO_ON, RESTART, Ordering::Relaxed, Ordering::Relaxed);
        }
    }

    fn set(&self, index: u32, to: u8) {
        if let Some(state) = self.0.get(index as usize) {
            state.store(to, Ordering::Relaxed);
        }
    }
}

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
    controls: Option<Arc<ChoiceControls>>,
}

impl RequestStream {
    /// The engine side keeps the sender; every event it sends arrives here in order.
    pub fn new(id: u64, prompt_tokens: usize, events: UnboundedReceiver<StreamEvent>) -> Self {
        Self { id, prompt_tokens, events, started: None, controls: None }
    }

    /// A stream whose reader may end or restart choices (`end_choice`, `restart_choice`),
    /// through `controls`.
    pub fn controlled(mut self, controls: Arc<ChoiceControls>) -> Self {
        self.controls = Some(controls);
        self
    }

    /// Ends choice `index` early: the backend finishes it at its next step with `stop`
    /// (a reader that has what it wants, such as a repeated tool call, stops paying for
    /// the rest). Its final event still comes; text after this call is to be ignored.
    /// Returns false where the backend cannot end a choice early.
    pub fn end_choice(&self, index: u32) -> bool {
        self.controls.as_ref().map(|c| c.set(index, END)).is_some()
    }

    /// Restarts choice `index` under its constraint's restart (`Constraint::Restartable`):
    /// the backend voids its output so far and says so with `StreamEvent::Restarted`; text
    /// between this call and that event is to be ignored. Returns false where the backend
    /// cannot restart a choice.
    pub fn restart_choice(&self, index: u32) -> bool {
        self.controls.as_ref().map(|c| c.set(index, RESTART)).is_some()
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
