//! Turns an admitted request's engine stream into an SSE response, or collects it whole.
//!
//! The body stream owns the engine stream: when hyper drops the body because the client
//! went away, the engine stream drops with it and the engine cancels the request.

use std::convert::Infallible;

use axum::http::HeaderValue;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use rillm_backend::{Completion, FinishReason, ServerTimings, StreamEvent, TokenLogprob, Usage};

use crate::admission::Admitted;

/// How one protocol spells the events of a stream.
pub trait StreamFormat: Send + 'static {
    /// Sent before the first text (chat's role delta).
    fn opening(&mut self) -> Vec<Event> {
        Vec::new()
    }
    /// New text; `logprobs` has an entry per token when the request asked for them.
    fn text(&mut self, text: &str, token_ids: &[u32], logprobs: &[TokenLogprob]) -> Event;
    /// Sent after the last text.
    fn finish(&mut self, done: &Completion) -> Vec<Event>;
}

pub fn sse_response(admitted: Admitted, format: impl StreamFormat) -> Response {
    struct Progress<F> {
        admitted: Admitted,
        format: F,
        opened: bool,
        done: bool,
    }
    let keep_alive = admitted.keep_alive;
    let progress = Progress { admitted, format, opened: false, done: false };
    let events = futures::stream::unfold(progress, |mut p| async move {
        if p.done {
            return None;
        }
        if !p.opened {
            p.opened = true;
            let opening = p.format.opening();
            return Some((opening, p));
        }
        let events = match p.admitted.stream.next_event().await {
            Some(StreamEvent::Text { text, token_ids, logprobs }) => {
                p.admitted.observer.on_tokens(token_ids.len());
                vec![p.format.text(&text, &token_ids, &logprobs)]
            }
            Some(StreamEvent::Finished(done)) => {
                p.done = true;
                p.admitted.observer.on_finish(&done);
                p.format.finish(&done)
            }
            None => {
                p.done = true;
                let lost = engine_lost();
                p.admitted.observer.on_finish(&lost);
                p.format.finish(&lost)
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

/// A whole completion: its text, its tokens' log-probabilities (when asked) and its end.
pub struct Collected {
    pub text: String,
    pub logprobs: Vec<TokenLogprob>,
    pub done: Completion,
}

/// Waits for the whole completion. Dropping the returned future (client gone) cancels.
pub async fn collect(mut admitted: Admitted) -> Collected {
    let (mut text, mut all_logprobs) = (String::new(), Vec::new());
    loop {
        let done = match admitted.stream.next_event().await {
            Some(StreamEvent::Text { text: piece, token_ids, logprobs }) => {
                admitted.observer.on_tokens(token_ids.len());
                text.push_str(&piece);
                all_logprobs.extend(logprobs);
                continue;
            }
            Some(StreamEvent::Finished(done)) => done,
            None => engine_lost(),
        };
        admitted.observer.on_finish(&done);
        return Collected { text, logprobs: all_logprobs, done };
    }
}

/// The engine thread ended without finishing the request (it died or was shut down).
fn engine_lost() -> Completion {
    Completion {
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
