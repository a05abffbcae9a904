//! A deterministic timing server: streams `tokens` tokens with the first after `ttft` and
//! the rest every `itl`, on rillm's `/generate` and the OpenAI streaming endpoints, and
//! answers 429 beyond `capacity` concurrent streams. Its "tokenizer" counts words: usage
//! and `/tokenize` report one prompt token per whitespace-separated word. It speaks every
//! protocol the benchmark reads (`framing`), and can cut a stream short or fail it midway,
//! so anyone can check a stream parser against it. The benchmark's calibration target
//! and test fixture; it stands beside real servers, never in place of one.

mod framing;

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::{header, StatusCode};
use axum::response::sse::Sse;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::serve::ListenerExt;
use axum::{Json, Router};
use serde_json::{json, Value};
use tokio::sync::Semaphore;
use tokio::time::Instant;

use framing::Flavor;
pub use framing::Framing;

#[derive(Debug, Clone, Copy)]
pub struct MockConfig {
    pub ttft: Duration,
    /// Added to `ttft` per prompt word, as a prefill would (zero unless set).
    pub ttft_per_prompt_token: Duration,
    pub itl: Duration,
    pub tokens: u32,
    pub capacity: usize,
    pub framing: Framing,
    pub fault: Option<Fault>,
}

impl MockConfig {
    pub fn new(ttft: Duration, itl: Duration, tokens: u32, capacity: usize) -> Self {
        Self {
            ttft,
            ttft_per_prompt_token: Duration::ZERO,
            itl,
            tokens,
            capacity,
            framing: Framing::default(),
            fault: None,
        }
    }
}

/// A broken stream, after this many tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// The connection ends with no end marker.
    Truncate { after: u32 },
    /// An error event in the protocol's framing, then the end of the stream.
    Error { after: u32 },
}

#[derive(Clone)]
struct MockState {
    config: MockConfig,
    slots: Arc<Semaphore>,
}

pub fn router(config: MockConfig) -> Router {
    let state = MockState { config, slots: Arc::new(Semaphore::new(config.capacity)) };
    let generate = if config.framing == Framing::Sglang { Flavor::Sglang } else { Flavor::Generate };
    let chat = if config.framing == Framing::OpenaiReasoning { Flavor::ChatReasoning } else { Flavor::Chat };
    Router::new()
        .route("/generate", post(move |s, b| stream(s, b, generate)))
        .route("/v1/completions", post(|s, b| stream(s, b, Flavor::Completions)))
        .route("/v1/chat/completions", post(move |s, b| stream(s, b, chat)))
        .route("/generate_stream", post(|s, b| stream(s, b, Flavor::Tgi)))
        .route("/v2/models/{model}/generate_stream", post(|_: Path<String>, s, b| stream(s, b, Flavor::Triton)))
        .route("/completion", post(|s, b| stream(s, b, Flavor::Llamacpp)))
        .route(
            "/v1/models",
            get(|| async { Json(json!({"object": "list", "data": [{"id": "mock", "object": "model"}]})) }),
        )
        .route("/tokenize", post(tokenize))
        .route("/health", get(|| async { "ok" }))
        .with_state(state)
}

/// Serves until `shutdown` resolves.
pub async fn serve(
    listener: tokio::net::TcpListener,
    config: MockConfig,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
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
    let tokens = flavor
        .max_tokens(&body)
        .map_or(state.config.tokens, |m| (m.min(u64::from(u32::MAX)) as u32).min(state.config.tokens))
        .max(1);
    let include_usage = body["stream_options"]["include_usage"].as_bool().unwrap_or(false);
    let prompt_tokens = prompt_words(&body);
    let cfg = state.config;
    let broken_after = match cfg.fault {
        Some(Fault::Truncate { after } | Fault::Error { after }) => after.min(tokens),
        None => u32::MAX,
    };
    // The permit rides in the stream's state: capacity counts open streams, and a client
    // that disconnects frees its slot.
    let events = futures::stream::unfold((0u32, permit), move |(i, permit)| async move {
        if i > tokens || i > broken_after {
            return None;
        }
        if i == broken_after {
            return match cfg.fault {
                Some(Fault::Error { .. }) => {
                    Some((vec![framing::error(flavor, "mock: injected failure")], (u32::MAX, permit)))
                }
                _ => None,
            };
        }
        if i == tokens {
            return Some((framing::finish(flavor, tokens, prompt_tokens, include_usage), (i + 1, permit)));
        }
        // Scheduled from the request's arrival, so delays never accumulate.
        tokio::time::sleep_until(received + cfg.ttft + cfg.ttft_per_prompt_token * prompt_tokens + cfg.itl * i).await;
        Some((vec![framing::token(flavor, i, tokens)], (i + 1, permit)))
    });
    let events =
        futures::StreamExt::flat_map(events, |e| futures::stream::iter(e.into_iter().map(Ok::<_, Infallible>)));
    Sse::new(events).into_response()
}

/// vLLM's `/tokenize` shape over the mock's word "tokenizer".
async fn tokenize(body: Option<Json<Value>>) -> Json<Value> {
    let count = prompt_words(&body.map(|Json(v)| v).unwrap_or_default());
    Json(json!({"count": count, "max_model_len": 1 << 20, "tokens": (0..count).collect::<Vec<u32>>()}))
}

/// The mock's "tokenizer": one token per whitespace-separated word of the prompt.
fn prompt_words(body: &Value) -> u32 {
    let words = |v: &Value| v.as_str().map_or(0, |s| s.split_whitespace().count());
    let text = ["prompt", "text", "inputs", "text_input"].iter().map(|k| words(&body[*k])).sum::<usize>();
    let n = text + body["messages"].as_array().map_or(0, |m| m.iter().map(|m| words(&m["content"])).sum());
    n as u32
}
