//! A deterministic timing server: streams `tokens` tokens with the first after `ttft` and
//! the rest every `itl`, on rillm's `/generate` and the OpenAI streaming endpoints, and
//! answers 429 beyond `capacity` concurrent streams. Its "tokenizer" counts words: usage
//! and `/tokenize` report one prompt token per whitespace-separated word. The benchmark's calibration target
//! and test fixture; it stands beside real servers, never in place of one.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::sse::{Event, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::serve::ListenerExt;
use axum::{Json, Router};
use serde_json::{json, Value};
use tokio::sync::Semaphore;
use tokio::time::Instant;

#[derive(Debug, Clone, Copy)]
pub struct MockConfig {
    pub ttft: Duration,
    pub itl: Duration,
    pub tokens: u32,
    pub capacity: usize,
}

#[derive(Clone)]
struct MockState {
    config: MockConfig,
    slots: Arc<Semaphore>,
}

#[derive(Clone, Copy, PartialEq)]
enum Flavor {
    Generate,
    Completions,
    Chat,
}

pub fn router(config: MockConfig) -> Router {
    let state = MockState { config, slots: Arc::new(Semaphore::new(config.capacity)) };
    Router::new()
        .route("/generate", post(|s, b| stream(s, b, Flavor::Generate)))
        .route("/v1/completions", post(|s, b| stream(s, b, Flavor::Completions)))
        .route("/v1/chat/completions", post(|s, b| stream(s, b, Flavor::Chat)))
        .route("/v1/models", get(|| async { Json(json!({"object": "list", "data": [{"id": "mock", "object": "model"}]})) }))
        .route("/tokenize", post(tokenize))
        .route("/health", get(|| async { "ok" }))
        .with_state(state)
}

/// Serves until `shutdown` resolves.
pub async fn serve(listener: tokio::net::TcpListener, config: MockConfig, shutdown: impl std::future::Future<Output = ()> + Send + 'static) -> std::io::Result<()> {
    // Like a real server, each event leaves at once (no Nagle delay behind an unACKed write).
    let listener = listener.tap_io(|tcp| {
        let _ = tcp.set_nodelay(true);
    });
    axum::serve(listener, router(config)).with_graceful_shutdown(shutdown).await
}

async fn stream(State(state): State<MockState>, body: Option<Json<Value>>, flavor: Flavor) -> Response {
    let received = Instant::now();
    let Ok(permit) = Arc::clone(&state.slots).try_acquire_owned() else {
        let error = json!({"error": {"message": "mock server at capacity", "type": "rate_limit_error", "param": null, "code": "queue_full"}});
        return (StatusCode::TOO_MANY_REQUESTS, [(header::RETRY_AFTER, "1")], Json(error)).into_response();
    };
    let body = body.map(|Json(v)| v).unwrap_or_default();
    let tokens = body["max_tokens"].as_u64().map_or(state.config.tokens, |m| (m as u32).min(state.config.tokens)).max(1);
    let include_usage = body["stream_options"]["include_usage"].as_bool().unwrap_or(false);
    let prompt_tokens = prompt_words(&body);
    let cfg = state.config;
    // The permit rides in the stream's state: capacity counts open streams, and a client
    // that disconnects frees its slot.
    let events = futures::stream::unfold((0u32, permit), move |(i, permit)| async move {
        if i > tokens {
            return None;
        }
        if i == tokens {
            return Some((finish_events(flavor, tokens, prompt_tokens, include_usage), (i + 1, permit)));
        }
        // Scheduled from the request's arrival, so delays never accumulate.
        tokio::time::sleep_until(received + cfg.ttft + cfg.itl * i).await;
        Some((vec![token_event(flavor, i)], (i + 1, permit)))
    });
    let events = futures::StreamExt::flat_map(events, |e| futures::stream::iter(e.into_iter().map(Ok::<_, Infallible>)));
    Sse::new(events).into_response()
}

/// Written directly: the mock shares cores with the client it calibrates, so each event
/// should cost it as little as possible.
fn token_event(flavor: Flavor, i: u32) -> Event {
    let data = match flavor {
        Flavor::Generate => format!(r#"{{"text":" t{i}","token_ids":[{i}]}}"#),
        Flavor::Completions => format!(r#"{{"object":"text_completion","choices":[{{"index":0,"text":" t{i}","finish_reason":null}}]}}"#),
        Flavor::Chat => format!(r#"{{"object":"chat.completion.chunk","choices":[{{"index":0,"delta":{{"content":" t{i}"}},"finish_reason":null}}]}}"#),
    };
    Event::default().data(data)
}

/// vLLM's `/tokenize` shape over the mock's word "tokenizer".
async fn tokenize(body: Option<Json<Value>>) -> Json<Value> {
    let count = prompt_words(&body.map(|Json(v)| v).unwrap_or_default());
    Json(json!({"count": count, "max_model_len": 1 << 20, "tokens": (0..count).collect::<Vec<u32>>()}))
}

/// The mock's "tokenizer": one token per whitespace-separated word of the prompt.
fn prompt_words(body: &Value) -> u32 {
    let words = |v: &Value| v.as_str().map_or(0, |s| s.split_whitespace().count());
    let n = words(&body["prompt"]) + body["messages"].as_array().map_or(0, |m| m.iter().map(|m| words(&m["content"])).sum());
    n as u32
}

fn finish_events(flavor: Flavor, tokens: u32, prompt_tokens: u32, include_usage: bool) -> Vec<Event> {
    let usage = json!({"prompt_tokens": prompt_tokens, "completion_tokens": tokens, "total_tokens": tokens + prompt_tokens});
    match flavor {
        Flavor::Generate => vec![Event::default().event("done").data(json!({"finish_reason": "length", "usage": usage}).to_string())],
        Flavor::Completions | Flavor::Chat => {
            let mut events = Vec::new();
            if include_usage {
                events.push(Event::default().data(json!({"choices": [], "usage": usage}).to_string()));
            }
            events.push(Event::default().data("[DONE]"));
            events
        }
    }
}
