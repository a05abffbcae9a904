//! Turns an admitted request's engine stream into an SSE response, or collects it whole.
//!
//! The body stream owns the engine stream: when hyper drops the body because the client
//! went away, the engine stream drops with it and the engine cancels the request.

use std::convert::Infallible;

use axum::http::HeaderValue;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use rillm_backend::{Completion, FinishReason, PromptToken, ServerTimings, StreamEvent, TokenLogprob, Usage};

use crate::admission::Admitted;

/// How one protocol spells the events of a stream. A request with `n` choices interleaves
/// them; each event names its choice's index.
pub trait StreamFormat: Send + 'static {
    /// Sent before anything else (chat's role delta for each choice).
    fn opening(&mut self) -> Vec<Event> {
        Vec::new()
    }
    /// The scored prompt, before any text (requests that echo it).
    fn prompt(&mut self, prompt: &[PromptToken]) -> Vec<Event> {
        let _ = prompt;
        Vec::new()
    }
    /// New text of choice `index`; `logprobs` has an entry per token when asked for. Most
    /// formats send one event per piece; chat with tools may send none (text held back
    /// while it may open a call) or several.
    fn text(&mut self, index: u32, text: &str, token_ids: &[u32], logprobs: &[TokenLogprob]) -> Vec<Event>;
    /// New thinking of choice `index` (a reasoning model's, split from its answer); formats
    /// with no place for it send nothing.
    fn reasoning(&mut self, index: u32, text: &str, token_ids: &[u32], logprobs: &[TokenLogprob]) -> Vec<Event> {
        let _ = (index, text, token_ids, logprobs);
        Vec::new()
    }
    /// Choice `done.index` ended.
    fn choice_done(&mut self, done: &Completion) -> Vec<Event>;
    /// Choice `index` starts over (`StreamEvent::Restarted`): nothing of it was sent that
    /// must be taken back (only a reply whose calls were all held back restarts), but what
    /// is held back of it is void.
    fn restarted(&mut self, index: u32) {
        let _ = index;
    }
    /// Every choice ended; `usage` is the whole request's.
    fn end(&mut self, usage: &Usage) -> Vec<Event> {
        let _ = usage;
        Vec::new()
    }
}

/// Follows the choices of one request to their ends, adding up their usage.
struct Choices {
    left: u32,
    usage: Usage,
    last: Option<Completion>,
}

impl Choices {
    fn new(n: u32) -> Self {
        Self { left: n.max(1), usage: Usage::default(), last: None }
    }

    /// Counts a choice's end; the request's own completion once it was the last.
    fn finished(&mut self, done: &Completion) -> Option<Completion> {
        // Each choice reports the shared prompt; it was computed once.
        self.usage.prompt_tokens = done.usage.prompt_tokens;
        self.usage.cached_tokens = done.usage.cached_tokens;
        self.usage.completion_tokens += done.usage.completion_tokens;
        self.usage.reasoning_tokens += done.usage.reasoning_tokens;
        self.left = self.left.saturating_sub(1);
        // The request failed if any choice did.
        if self.last.as_ref().is_none_or(|l| l.error.is_none()) {
            self.last = Some(done.clone());
        }
        (self.left == 0).then(|| self.whole())
    }

    fn whole(&self) -> Completion {
        let last = self.last.clone().unwrap_or_else(|| engine_lost(0));
        Completion { usage: self.usage, ..last }
    }
}

pub fn sse_response(admitted: Admitted, format: impl StreamFormat) -> Response {
    struct Progress<F> {
        admitted: Admitted,
        format: F,
        choices: Choices,
        opened: bool,
        done: bool,
    }
    let keep_alive = admitted.keep_alive;
    let choices = Choices::new(admitted.choices);
    let progress = Progress { admitted, format, choices, opened: false, done: false };
    let events = futures::stream::unfold(progress, |mut p| async move {
        if p.done {
            return None;
        }
        if !p.opened {
            p.opened = true;
            let opening = p.format.opening();
            return Some((opening, p));
        }
        let events = match p.admitted.next_event().await {
            Some(StreamEvent::Prompt(prompt)) => p.format.prompt(&prompt),
            Some(StreamEvent::Text { index, text, token_ids, logprobs }) => {
                p.admitted.observer.on_tokens(token_ids.len());
                p.admitted.watch(index, &text);
                p.format.text(index, &text, &token_ids, &logprobs)
            }
            Some(StreamEvent::Reasoning { index, text, token_ids, logprobs }) => {
                p.admitted.observer.on_tokens(token_ids.len());
                p.format.reasoning(index, &text, &token_ids, &logprobs)
            }
            Some(StreamEvent::Restarted { index }) => {
                p.admitted.restarted(index);
                p.format.restarted(index);
                Vec::new()
            }
            Some(StreamEvent::Finished(done)) => {
                let mut events = p.format.choice_done(&done);
                if let Some(whole) = p.choices.finished(&done) {
                    p.done = true;
                    p.admitted.observer.on_finish(&whole);
                    events.extend(p.format.end(&whole.usage));
                }
                events
            }
            None => {
                p.done = true;
                let lost = engine_lost(p.admitted.choices - p.choices.left);
                p.admitted.observer.on_finish(&lost);
                let mut events = p.format.choice_done(&lost);
                events.extend(p.format.end(&p.choices.usage));
                events
            }
        };
        Some((events, p))
    })
    .flat_map(|events| futures::stream::iter(events.into_iter().map(Ok::<_, Infallible>)));

    let mut response = Sse::new(events).keep_alive(KeepAlive::new().interval(keep_alive)).into_response();
    let headers = response.headers_mut();
    headers.insert("cache-control", HeaderValue::from_static("no-cache"));
    headers.insert("x-accel-buffering", HeaderValue::from_static("no"));
    response
}

/// One whole choice: its text (a reasoning model's answer, its thought apart), its tokens'
/// log-probabilities (when asked, thought and answer in order) and its end.
pub struct CollectedChoice {
    pub text: String,
    pub reasoning: String,
    pub logprobs: Vec<TokenLogprob>,
    pub done: Completion,
}

impl CollectedChoice {
    fn empty(done: Completion) -> Self {
        Self { text: String::new(), reasoning: String::new(), logprobs: Vec::new(), done }
    }
}

/// A whole request: its choices in index order, the scored prompt (when asked), and the
/// request's own completion (usage added up over the choices; an error if any failed).
pub struct Collected {
    pub choices: Vec<CollectedChoice>,
    pub prompt: Vec<PromptToken>,
    pub done: Completion,
}

/// Waits for every choice. Dropping the returned future (client gone) cancels them all.
pub async fn collect(mut admitted: Admitted) -> Collected {
    let n = admitted.choices.max(1);
    let mut choices: Vec<CollectedChoice> = (0..n).map(|i| CollectedChoice::empty(engine_lost(i))).collect();
    let mut prompt = Vec::new();
    let mut progress = Choices::new(n);
    let done = loop {
        match admitted.next_event().await {
            Some(StreamEvent::Prompt(tokens)) => prompt = tokens,
            Some(StreamEvent::Restarted { index }) => {
                admitted.restarted(index);
                if let Some(choice) = choices.get_mut(index as usize) {
                    *choice = CollectedChoice::empty(choice.done.clone());
                }
            }
            Some(StreamEvent::Text { index, text, token_ids, logprobs }) => {
                admitted.observer.on_tokens(token_ids.len());
                admitted.watch(index, &text);
                if let Some(choice) = choices.get_mut(index as usize) {
                    choice.text.push_str(&text);
                    choice.logprobs.extend(logprobs);
                }
            }
            Some(StreamEvent::Reasoning { index, text, token_ids, logprobs }) => {
                admitted.observer.on_tokens(token_ids.len());
                if let Some(choice) = choices.get_mut(index as usize) {
                    choice.reasoning.push_str(&text);
                    choice.logprobs.extend(logprobs);
                }
            }
            Some(StreamEvent::Finished(done)) => {
                let whole = progress.finished(&done);
                if let Some(choice) = choices.get_mut(done.index as usize) {
                    choice.done = done;
                }
                if let Some(whole) = whole {
                    break whole;
                }
            }
            None => break Completion { usage: progress.usage, ..engine_lost(0) },
        }
    };
    admitted.observer.on_finish(&done);
    Collected { choices, prompt, done }
}

/// The engine thread ended without finishing choice `index` (it died or was shut down).
fn engine_lost(index: u32) -> Completion {
    Completion {
        index,
        finish_reason: FinishReason::Error,
        usage: Usage::default(),
        timings: ServerTimings::default(),
        error: Some("the engine stopped before the request finished".into()),
    }
}

/// `data: <json>`, serialised straight into the event's buffer (typed structs on the
/// per-token path, JSON trees for once-per-request events).
pub fn json_event<T: serde::Serialize>(value: &T) -> Event {
    Event::default().json_data(value).unwrap_or_else(|error| {
        // Our own types always serialise; if one ever does not, say so in the stream.
        tracing::error!(%error, "could not serialise a stream event");
        Event::default().event("error").data(r#"{"error":{"message":"internal error: unserialisable event","type":"internal_error","param":null,"code":null}}"#)
    })
}
