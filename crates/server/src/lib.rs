//! rillm's HTTP layer: axum routes in front of a [`Backend`].
//!
//! Modules each do one job: `admission` decides whether a request gets in, `sse` streams
//! it out, `observe` follows it to its end (metrics, log line, disconnects), `routes`
//! speak the protocols, `shutdown` drains.

mod admission;
mod auth;
mod connections;
mod error;
mod fields;
mod finish;
mod json;
mod late_restart;
mod logprobs;
pub mod metrics;
mod models;
mod observe;
mod openai;
mod pooled;
mod reasoning;
mod responses;
mod routes;
mod sampling;
mod schema_reading;
mod shape;
mod shutdown;
mod sse;
mod state;
mod stop_fields;
mod structured;
mod tools;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::DefaultBodyLimit;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{middleware, Extension, Router};
use tokio::net::TcpListener;
use tower_http::catch_panic::CatchPanicLayer;

pub use connections::ConnectionLimits;
pub use error::ApiError;
pub use models::{ModelLimits, ModelLoader, ModelRegistry, ModelSpec, ModelState, ModelStatus};
pub use pooled::EmbeddingOptions;
pub use reasoning::{EffortBudgets, ReasoningField, ReasoningOptions, ReasoningParser};
pub use rillm_backend::{Backend, Health, ToolCallFormat};
pub use schema_reading::SchemaReading;
pub use state::{AppState, Phase};

#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// When set, generation endpoints require `Authorization: Bearer <key>`.
    pub api_key: Option<String>,
    /// `/metrics` requires the key too. Off by default, as in vLLM: scrapers rarely carry
    /// one, and the metrics hold counts and timings, never prompt text.
    pub metrics_require_key: bool,
    /// Log prompt text (off by default: prompts are user data).
    pub log_prompts: bool,
    /// How long in-flight requests may run after SIGTERM before they are cancelled.
    pub shutdown_timeout: Duration,
    pub max_body_bytes: usize,
    /// An SSE comment line goes out this often while a stream waits for its first token
    /// (queued, or a long prefill), so proxies and clients do not time the stream out.
    pub sse_keep_alive: Duration,
    /// Model name reported and accepted; default: the model file's stem.
    pub served_model_name: Option<String>,
    pub connections: ConnectionLimits,
    /// How tool calls and JSON Schemas shape output.
    pub outputs: OutputOptions,
    /// Memory for responses kept for `previous_response_id` (the Responses API's `store`);
    /// 0 keeps none.
    pub responses_store_bytes: usize,
    /// Embedding models: normalisation, Matryoshka sizes, inputs per request.
    pub embeddings: EmbeddingOptions,
    /// Reasoning models: the parser, the field names, the effort budgets.
    pub reasoning: ReasoningOptions,
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            api_key: None,
            metrics_require_key: false,
            log_prompts: false,
            shutdown_timeout: Duration::from_secs(30),
            max_body_bytes: 1 << 20,
            sse_keep_alive: Duration::from_secs(15),
            served_model_name: None,
            connections: ConnectionLimits::default(),
            outputs: OutputOptions::default(),
            responses_store_bytes: 64 << 20,
            embeddings: EmbeddingOptions::default(),
            reasoning: ReasoningOptions::default(),
        }
    }
}

/// How tool calls and JSON Schemas shape output.
#[derive(Debug, Clone, Copy, Default)]
pub struct OutputOptions {
    /// The tool-call format (vLLM's `--tool-call-parser`); `None`: the chat template's.
    pub tool_call_parser: Option<rillm_backend::ToolCallFormat>,
    /// How JSON Schemas are read (`--literal-json-schemas`: to the letter).
    pub schemas: SchemaReading,
    /// A reply's call identical to one it already made is kept, and the reply goes on
    /// (`--keep-repeated-calls`); by default the reply ends there without it.
    pub keep_repeated_calls: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("loading the model failed: {0}")]
    Load(String),
    /// The engine died while serving; the process should exit non-zero to be restarted.
    #[error("the engine failed: {0}")]
    EngineFailed(String),
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

pub fn router(state: AppState) -> Router {
    // Install the recorder before the first request records anything.
    metrics::handle();
    let limit = state.config.max_body_bytes;
    let protected = Router::new()
        .route("/generate", post(routes::generate::generate))
        .route("/v1/completions", post(routes::completions::completions))
        .route("/v1/chat/completions", post(routes::chat::chat_completions))
        .route("/v1/responses", post(routes::responses::create_response))
        .route("/v1/responses/{id}", get(routes::responses::retrieve).delete(routes::responses::delete))
        .route("/v1/responses/{id}/cancel", post(routes::responses::cancel))
        .route("/v1/embeddings", post(routes::embeddings::embeddings))
        .route("/v1/rerank", post(routes::rerank::rerank))
        .route("/rerank", post(routes::rerank::rerank))
        .route("/score", post(routes::rerank::score))
        .route("/v1/score", post(routes::rerank::score))
        .route("/v1/models", get(routes::info::models))
        .route("/models/load", post(routes::info::load_model))
        .route("/models/unload", post(routes::info::unload_model))
        .route("/tokenize", post(routes::tokenize::tokenize))
        .route("/detokenize", post(routes::tokenize::detokenize))
        .route("/tokenizer_info", get(routes::tokenize::tokenizer_info));
    let protected = routes::worker::routes(protected);
    let metrics = Router::new().route("/metrics", get(routes::info::prometheus));
    let (protected, open) =
        if state.config.metrics_require_key { (protected.merge(metrics), Router::new()) } else { (protected, metrics) };
    let protected = protected.route_layer(middleware::from_fn_with_state(state.clone(), auth::require_api_key));
    // Probes never carry a key: /health and /ready stay open.
    Router::new()
        .merge(protected)
        .merge(open)
        .route("/health", get(routes::info::health))
        .route("/ready", get(routes::info::ready))
        .fallback(|| async { ApiError::not_found() })
        .method_not_allowed_fallback(|| async { ApiError::method_not_allowed() })
        .layer(DefaultBodyLimit::max(limit))
        .layer(middleware::from_fn(json::refuse_declared_oversize))
        .layer(Extension(json::BodyLimit(limit)))
        .layer(CatchPanicLayer::custom(panic_response))
        .with_state(state)
}

fn panic_response(_: Box<dyn std::any::Any + Send + 'static>) -> Response {
    tracing::error!("a request handler panicked");
    ApiError::internal("internal error").into_response()
}

/// Serves on `listener` while `load` brings the backend up (`/ready` is 503 until then),
/// until `shutdown` resolves; then drains and returns.
pub async fn run<L, E>(
    listener: TcpListener,
    config: ServerConfig,
    load: L,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServeError>
where
    L: FnOnce() -> Result<Arc<dyn Backend>, E> + Send + 'static,
    E: std::fmt::Display + Send + 'static,
{
    let limits = config.connections.clone();
    let state = AppState::new(config);
    let (stop_http, http_stopped) = tokio::sync::watch::channel(false);
    // Connections get this long to finish their current response once HTTP stops.
    let grace = Duration::from_secs(2);
    let server = tokio::spawn(connections::serve(listener, router(state.clone()), limits, http_stopped, grace));
    let upkeep = tokio::spawn(metrics::upkeep_forever());

    // A signal while the model loads stops the server at once: nothing is in flight.
    tokio::pin!(shutdown);
    let loaded = tokio::select! {
        loaded = tokio::task::spawn_blocking(load) => loaded,
        () = &mut shutdown => {
            tracing::info!("shutdown while loading the model");
            state.begin_draining();
            let _ = stop_http.send(true);
            let _ = server.await;
            upkeep.abort();
            return Ok(());
        }
    };
    let backend = loaded.map_err(|e| ServeError::Load(e.to_string()))?.map_err(|e| ServeError::Load(e.to_string()))?;
    state.set_backend(Arc::clone(&backend));
    tracing::info!(model = %state.model_name(), "ready");

    let failure = tokio::select! {
        () = shutdown => None,
        reason = engine_failure(Arc::clone(&backend)) => Some(reason),
    };
    match &failure {
        None => shutdown::drain(&state).await,
        Some(reason) => {
            // Waiting and running requests got their error events from the engine side;
            // let those reach the clients, then stop so an orchestrator restarts us.
            tracing::error!(%reason, "the engine failed; stopping the server");
            state.begin_draining();
            shutdown::wait_for_in_flight(&state, FAILED_ENGINE_FLUSH).await;
        }
    }
    let _ = stop_http.send(true);
    let _ = server.await;
    upkeep.abort();
    match failure {
        None => Ok(()),
        Some(reason) => Err(ServeError::EngineFailed(reason)),
    }
}

/// Serves several models on `listener` (requests route by `model`; each is loaded when
/// first asked for, `preload` at once, in order), until `shutdown` resolves; then drains
/// and returns.
/// A model whose engine fails is reported by `/v1/models`; the server goes on with the others.
pub async fn run_models(
    listener: TcpListener,
    config: ServerConfig,
    models: Arc<ModelRegistry>,
    preload: Vec<String>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServeError> {
    let limits = config.connections.clone();
    let state = AppState::new(config);
    state.set_models(Arc::clone(&models));
    let (stop_http, http_stopped) = tokio::sync::watch::channel(false);
    let grace = Duration::from_secs(2);
    let server = tokio::spawn(connections::serve(listener, router(state.clone()), limits, http_stopped, grace));
    let upkeep = tokio::spawn(metrics::upkeep_forever());
    tokio::spawn({
        let models = Arc::clone(&models);
        async move {
            for name in preload {
                if let Err(e) = models.load(&name).await {
                    tracing::error!(model = %name, reason = %e.message, "preloading failed");
                }
            }
        }
    });
    tracing::info!(models = ?models.names(), "ready");
    let idle = tokio::spawn({
        let models = Arc::clone(&models);
        async move {
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            loop {
                tick.tick().await;
                models.unload_idle();
            }
        }
    });
    shutdown.await;
    idle.abort();
    shutdown::drain(&state).await;
    let _ = stop_http.send(true);
    let _ = server.await;
    upkeep.abort();
    Ok(())
}

/// How often the server checks that the engine is still alive.
const ENGINE_WATCH_INTERVAL: Duration = Duration::from_millis(200);
/// How long in-flight responses get to deliver their error events once the engine died.
const FAILED_ENGINE_FLUSH: Duration = Duration::from_secs(2);

/// Resolves with the reason once the backend reports that it failed.
async fn engine_failure(backend: Arc<dyn Backend>) -> String {
    let mut tick = tokio::time::interval(ENGINE_WATCH_INTERVAL);
    loop {
        tick.tick().await;
        if let Health::Failed(reason) = backend.health() {
            return reason;
        }
    }
}
