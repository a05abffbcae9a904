//! Liveness, readiness, the model list and metrics.

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

use crate::metrics;
use crate::openai::unix_now;
use crate::state::{AppState, Phase};

/// 200 while the engine thread is alive and making progress (also while loading: the
/// process is healthy, just not ready).
pub async fn health(State(state): State<AppState>) -> Response {
    match state.backend() {
        Some(backend) if !backend.is_healthy() => {
            (StatusCode::SERVICE_UNAVAILABLE, Json(json!({"status": "engine not making progress"}))).into_response()
        }
        _ => (StatusCode::OK, Json(json!({"status": "ok"}))).into_response(),
    }
}

/// 200 only when new requests are being accepted.
pub async fn ready(State(state): State<AppState>) -> Response {
    let (status, text) = match state.phase() {
        Phase::Ready => (StatusCode::OK, "ready"),
        Phase::Loading => (StatusCode::SERVICE_UNAVAILABLE, "loading"),
        Phase::Draining => (StatusCode::SERVICE_UNAVAILABLE, "draining"),
    };
    (status, Json(json!({"status": text}))).into_response()
}

pub async fn models(State(state): State<AppState>) -> Response {
    let data = match state.backend() {
        Some(backend) => vec![json!({
            "id": state.model_name(),
            "object": "model",
            "created": unix_now(),
            "owned_by": "rillm",
            "max_model_len": backend.context_length(),
        })],
        None => Vec::new(),
    };
    Json(json!({"object": "list", "data": data})).into_response()
}

pub async fn prometheus(State(state): State<AppState>) -> Response {
    let body = metrics::render(state.backend().map(|b| b.as_ref()));
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], body).into_response()
}
