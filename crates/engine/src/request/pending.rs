//! A request between `submit` and its final event, before it has a slot and as it runs:
//! its prompt tokens, limits, sampling, stops, constraint, and the channel its events go
//! back on. Each of its choices (`n`) runs as a sequence of its own with a copy of it.

use std::sync::Arc;
use std::time::Instant;

use tokio::sync::mpsc::UnboundedSender;
use tokio::sync::oneshot;

use super::constraint::SequenceConstraint;
use super::thinking::ThinkingPlan;
use crate::runtime::TokenId;
use rillm_backend::{
    ChoiceControls, Completion, FinishReason, Rejected, SamplingParams, ServerTimings, StreamEvent, Usage,
};

/// A request waiting for a sequence slot, already tokenized and validated.
#[derive(Debug)]
pub(crate) struct PendingRequest {
    pub id: u64,
    /// Which of the request's choices this is (0 for the request as submitted).
    pub index: u32,
    /// Choices the request asks for: it runs as this many sequences, sharing the prompt.
    pub n: u32,
    pub prompt: Vec<TokenId>,
    pub max_tokens: u32,
    pub sampling: SamplingParams,
    pub stops: StopRules,
    /// Structured output: the compiled constraint, at its start.
    pub constraint: Option<SequenceConstraint>,
    /// A reasoning model's output read as thought and answer (the constraint applies to
    /// the answer).
    pub thinking: Option<ThinkingPlan>,
    /// Alternatives per token when log-probabilities are asked for (`None`: not asked).
    pub logprobs: Option<u32>,
    /// Alternatives per prompt token when the prompt is to be scored (`None`: not asked).
    pub prompt_logprobs: Option<u32>,
    pub queueing: Queueing,
    pub events: UnboundedSender<StreamEvent>,
    /// What the caller asked of each choice: end it early, or restart it.
    pub controls: Arc<ChoiceControls>,
}

/// What ends its output besides `max_tokens` and the context: stop strings and tokens, and
/// how soon anything may.
#[derive(Debug, Clone, Default)]
pub(crate) struct StopRules {
    pub stop: Vec<String>,
    /// The matched stop string is streamed as the text's end.
    pub include_stop_str: bool,
    /// Tokens that end the output as end of generation does (`stop_token_ids`).
    pub stop_token_ids: Vec<TokenId>,
    /// Output tokens before anything may end it (`min_tokens`).
    pub min_tokens: u32,
    pub ignore_eos: bool,
}

/// Its time in the queue: when it came, what it will cost, what its wait was forecast to
/// be, and who waits to hear whether it starts.
#[derive(Debug)]
pub(crate) struct Queueing {
    pub submitted: Instant,
    /// Prompt tokens it is expected to compute, the rest predicted cached (for the wait
    /// forecast of requests queued behind it).
    pub expected_prefill: usize,
    /// The wait for its first token predicted at admission (`--max-queue-ms`), logged
    /// beside the wait it had (debug level) to see how far the forecast is off.
    pub forecast_ms: Option<f64>,
    /// `--max-queue-ms`: told whether the request starts or is refused at the head of the
    /// queue (its route holds the response until then).
    pub started: Option<oneshot::Sender<Result<(), Rejected>>>,
}

impl Queueing {
    /// Submitted now, expected to compute `expected_prefill` prompt tokens.
    pub fn now(expected_prefill: usize) -> Self {
        Self { submitted: Instant::now(), expected_prefill, forecast_ms: None, started: None }
    }
}

impl PendingRequest {
    pub fn is_cancelled(&self) -> bool {
        self.events.is_closed()
    }

    /// The caller has what it wants of this choice: it ends as a stop string would end it.
    pub fn is_ended_early(&self) -> bool {
        self.controls.is_ended(self.index)
    }

    /// The caller asked to restart this choice (once: the ask is taken).
    pub fn take_restart(&self) -> bool {
        self.controls.take_restart(self.index)
    }

    /// The engine starts this choice over at its next step, as if its caller asked.
    pub fn ask_restart(&self) {
        self.controls.ask_restart(self.index);
    }

    /// Choice `index` of this request: the same prompt and stream, its own constraint
    /// matcher, and with a request seed its own (reproducible) sampling stream.
    pub fn choice(&self, index: u32) -> Self {
        let mut sampling = self.sampling.clone();
        sampling.seed = sampling.seed.map(|seed| seed.wrapping_add(u64::from(index)));
        let queueing = Queueing {
            submitted: self.queueing.submitted,
            expected_prefill: self.queueing.expected_prefill,
            forecast_ms: None,
            started: None,
        };
        Self {
            index,
            prompt: self.prompt.clone(),
            sampling,
            stops: self.stops.clone(),
            constraint: self.constraint.clone(),
            thinking: self.thinking.clone(),
            queueing,
            events: self.events.clone(),
            controls: Arc::clone(&self.controls),
            ..*self
        }
    }

    /// A greedy request for `prompt` with nothing else asked, and its event receiver.
    #[cfg(test)]
    pub fn for_test(
        id: u64,
        prompt: Vec<TokenId>,
        max_tokens: u32,
    ) -> (Self, tokio::sync::mpsc::UnboundedReceiver<StreamEvent>) {
        let (events, receiver) = tokio::sync::mpsc::unbounded_channel();
        let request = Self {
            id,
            index: 0,
            n: 1,
            queueing: Queueing::now(prompt.len()),
            prompt,
            max_tokens,
            sampling: SamplingParams::greedy(),
            stops: StopRules::default(),
            constraint: None,
            thinking: None,
            logprobs: None,
            prompt_logprobs: None,
            events,
            controls: ChoiceControls::new(1),
        };
        (request, receiver)
    }

    /// Sends the final event for a request that never got a slot.
    pub fn finish_unstarted(self, reason: FinishReason, error: Option<String>) {
        let usage = Usage { prompt_tokens: self.prompt.len() as u32, ..Usage::default() };
        let queue_ms = self.queueing.submitted.elapsed().as_secs_f64() * 1000.0;
        let _ = self.events.send(StreamEvent::Finished(Completion {
            index: self.index,
            finish_reason: reason,
            usage,
            timings: ServerTimings { queue_ms, ..ServerTimings::default() },
            error,
        }));
    }
}
