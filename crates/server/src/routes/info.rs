//! Liveness, readiness, the model list and metrics.

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

use rillm_backend::Health;

use crate::metrics;
use crate::openai::unix_now;
use crate::state::{AppState, Phase};

/// 200 while the engine thread is alive and making progress (also while loading: the
/// process is healthy, just not ready). 503 once it stalls or dies: a liveness probe
/// then restarts the process.
pub async fn health(State(state): State<AppState>) -> Response {
    match state.backend().map(|b| b.health()) {
        Some(Health::Stalled) => unavailable("engine not making progress", None),
        Some(Health::Failed(reason)) => unavailable("engine failed", Some(reason)),
        Some(Health::Ok) | None => (StatusCode::OK, Json(json!({"status": "ok"}))).into_response(),
    }
}

/// 200 only when new requests are being accepted.
pub async fn ready(State(state): State<AppState>) -> Response {
    if let Some(Health::Failed(reason)) = state.backend().map(|b| b.health()) {
        return unavailable("engine failed", Some(reason));
    }
    match state.phase() {
        Phase::Ready => (StatusCode::OK, Json(json!({"status": "ready"}))).into_response(),
        Phase::Loading => unavailable("loading", None),
        Phase::Draining => unavailable("draining", None),
    }
}

fn unavailable(status: &str, reason: Option<String>) -> Response {
    let body = match reason {
        Some(reason) => json!({"status": status, "reason": reason}),
        None => json!({"status": status}),
    };
    (StatusCode::SERVICE_UNAVAILABLE, Json(body)).into_response()
}

pub async fn models(State(state): State<AppState>) -> Response {
    let data = match state.backend() {
        Some(backend) => vec![json!({
            "id": state.model_name(),
            "object": "model",
            "created": unix_now(),
            "owned_by": "rillm",
            "max_model_len": backend.context_length(),
            "task": backend.task().name(),
            "embedding_width": backend.embedding_width(),
        })],
        None => Vec::new(),
    };
    Json(json!({"object": "list", "data": data})).into_response()
}

pub async fn prometheus(State(state): State<AppState>) -> Response {
    metrics::record_responses_store(state.responses.bytes(), state.responses.len());
    let body = metrics::render(state.backend().map(|b| b.as_ref()));
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], body).into_response()
}
