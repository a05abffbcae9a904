//! Admission: hands a validated request to the backend or answers why not, before any
//! response header is sent. A rejection costs a queue-length check, not a model step.
//!
//! Submitting tokenizes the prompt (and renders the chat template): microseconds for a
//! chat turn, but a megabyte prompt takes the better part of a second of CPU. Large
//! prompts are therefore submitted from the blocking pool, a few at a time, so they never
//! stall the async workers that stream other requests' tokens or answer `/health`.

use std::time::Instant;

use rillm_backend::{Backend, Constraint, GenerateRequest, Rejected, RequestStream, StreamEvent};

use crate::error::ApiError;
use crate::fields::Fields;
use crate::late_restart::{LateRestarts, Resubmit};
use crate::metrics;
use crate::observe::{InFlight, RequestObserver};
use crate::state::AppState;
use crate::tools::{RepeatWatch, Verdict};

pub struct Admitted {
    pub stream: RequestStream,
    /// Choices the request generates (its `n`).
    pub choices: u32,
    pub observer: RequestObserver,
    /// Comment-line interval of its SSE response while no token comes.
    pub keep_alive: std::time::Duration,
    /// With tools: ends a choice's generation once it repeats a call.
    pub repeat_watch: Option<RepeatWatch>,
    /// Choices whose restart came after they ended, generated again.
    late_restarts: LateRestarts,
}

impl Admitted {
    /// Reads choice `index`'s new text for a repeated call: the choice ends at its first,
    /// or, where it only repeats a call the conversation has the result of, is made again
    /// as the answer.
    pub fn watch(&mut self, index: u32, text: &str) {
        let Some(watch) = self.repeat_watch.as_mut() else { return };
        match watch.read(index, text) {
            Verdict::GoOn => {}
            Verdict::End if self.stream.end_choice(index) => metrics::record_repeated_call("ended"),
            Verdict::Restart if self.stream.restart_choice(index) => {
                self.late_restarts.asked(index);
                metrics::record_repeated_call("restarted");
            }
            Verdict::End | Verdict::Restart => {}
        }
    }

    /// The request's next event (choices whose restart came after they ended are generated
    /// again: `late_restart`).
    pub async fn next_event(&mut self) -> Option<StreamEvent> {
        self.late_restarts.next_event(&mut self.stream).await
    }

    /// Choice `index` started again (`StreamEvent::Restarted`).
    pub fn restarted(&mut self, index: u32) {
        if let Some(watch) = self.repeat_watch.as_mut() {
            watch.restarted(index);
        }
    }
}

pub async fn admit(
    state: &AppState,
    endpoint: &'static str,
    fields: Fields,
    request: GenerateRequest,
    received: Instant,
) -> Result<Admitted, ApiError> {
    let backend = state.ready_backend().inspect_err(|_| metrics::record_rejected("unavailable"))?.clone();
    let log_prompt = state.config.log_prompts.then(|| format!("{:?}", request.prompt));
    let choices = request.n;
    let late_restarts = LateRestarts::new(LateRestarts::follow_up(&request).map(|again| {
        let backend = backend.clone();
        Box::new(move || backend.submit(again.clone())) as Resubmit
    }));
    // A constraint seen for the first time is compiled in `submit`: milliseconds of CPU.
    let submitted = if request.prompt.text_len() <= INLINE_PROMPT_BYTES && request.constraint.is_none() {
        backend.submit(request)
    } else {
        let backend = backend.clone();
        off_runtime(move || backend.submit(request)).await?
    };
    let refuse = |rejected: Rejected| {
        let mut error = rejection_error(&rejected, &fields);
        if matches!(rejected, Rejected::InvalidConstraint(_)) {
            if let Some((param, part)) = refused_part(backend.as_ref(), &fields.constraint_parts) {
                error = ApiError::invalid(param, part.to_string()).with_code("invalid_constraint");
            }
        }
        metrics::record_rejected(rejection_reason(&rejected));
        tracing::info!(endpoint, status = error.status.as_u16(), reason = %rejected, "request rejected");
        error
    };
    let mut stream = submitted.map_err(refuse)?;
    // `--max-queue-ms`: the engine checks the bound again when the request reaches the head
    // of the queue. Until it says, nothing is answered, so a refusal is still a 429 with
    // Retry-After and no stream. A client that leaves meanwhile cancels it (the stream drops).
    if let Some(started) = stream.take_start() {
        // Held, it counts as in flight: its connection is busy, not idle.
        let _busy = InFlight::hold(&state.in_flight);
        if let Ok(Err(rejected)) = started.await {
            return Err(refuse(rejected));
        }
    }
    if let Some(prompt) = log_prompt {
        tracing::info!(id = stream.id(), endpoint, prompt = %prompt, "prompt");
    }
    let observer = RequestObserver::new(stream.id(), endpoint, &state.model_name(), received, state.in_flight.clone())
        .holding(state.bound());
    let keep_alive = state.config.sse_keep_alive;
    Ok(Admitted { stream, choices, observer, keep_alive, repeat_watch: None, late_restarts })
}

/// The first of a composed constraint's parts that does not compile alone, with its field
/// and the compiler's reason.
fn refused_part(backend: &dyn Backend, parts: &[(String, Constraint)]) -> Option<(String, Rejected)> {
    parts.iter().find_map(|(param, part)| backend.check_constraint(part).err().map(|e| (param.clone(), e)))
}

/// Prompts up to this size are tokenized in place (well under a millisecond).
const INLINE_PROMPT_BYTES: usize = 16 * 1024;

/// Large tokenizations and grammar compiles at once: each takes a blocking thread and a core.
static LARGE_TOKENIZATIONS: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(2);

/// Runs CPU-heavy request preparation (tokenizing, compiling a constraint) on the blocking
/// pool, at most a few at a time.
pub async fn off_runtime<T: Send + 'static>(work: impl FnOnce() -> T + Send + 'static) -> Result<T, ApiError> {
    let _permit = LARGE_TOKENIZATIONS.acquire().await.map_err(|_| ApiError::internal("tokenizer pool closed"))?;
    tokio::task::spawn_blocking(work).await.map_err(|_| ApiError::internal("preparing the request failed"))
}

pub(crate) fn rejection_error(rejected: &Rejected, fields: &Fields) -> ApiError {
    let prompt_param = fields.prompt;
    let message = rejected.to_string();
    match rejected {
        Rejected::QueueFull { .. } => ApiError::overloaded(message),
        // Come back once the predicted excess wait has passed.
        Rejected::WouldWaitTooLong { predicted_ms, limit_ms }
        | Rejected::WaitedTooLong { predicted_ms, limit_ms, .. } => {
            let mut error = ApiError::overloaded(message);
            error.retry_after = Some(predicted_ms.saturating_sub(*limit_ms).div_ceil(1000).clamp(1, 600) as u32);
            error
        }
        Rejected::ContextOverflow { .. } => {
            ApiError::invalid(prompt_param, message).with_code("context_length_exceeded")
        }
        Rejected::EmptyPrompt => ApiError::invalid(prompt_param, message).with_code("empty_prompt"),
        Rejected::TooManyChoices { .. } => ApiError::invalid("n", message),
        Rejected::InvalidRequest(_) => ApiError::invalid(prompt_param, message),
        Rejected::InvalidField { param, .. } => ApiError::invalid(*param, message),
        Rejected::InvalidConstraint(_) => {
            ApiError::invalid(fields.constraint.clone().unwrap_or_else(|| "response_format".into()), message)
                .with_code("invalid_constraint")
        }
        Rejected::WrongTask { .. } => ApiError::invalid("model", message).with_code("model_not_supported"),
        Rejected::ShuttingDown | Rejected::EngineFailed(_) => ApiError::unavailable(message),
    }
}

pub(crate) fn rejection_reason(rejected: &Rejected) -> &'static str {
    match rejected {
        Rejected::QueueFull { .. } => "queue_full",
        Rejected::WouldWaitTooLong { .. } => "would_miss_deadline",
        Rejected::WaitedTooLong { .. } => "waited_past_deadline",
        Rejected::ContextOverflow { .. } => "context_overflow",
        Rejected::EmptyPrompt
        | Rejected::InvalidRequest(_)
        | Rejected::InvalidField { .. }
        | Rejected::InvalidConstraint(_)
        | Rejected::TooManyChoices { .. }
        | Rejected::WrongTask { .. } => "invalid",
        Rejected::ShuttingDown | Rejected::EngineFailed(_) => "unavailable",
    }
}
