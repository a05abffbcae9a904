//! Liveness, readiness, the model list and metrics.

use axum::extract::{Query, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

use rillm_backend::Health;

use crate::error::ApiError;
use crate::metrics;
use crate::models::ModelStatus;
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

/// `?model=` on the GET routes that are about one model.
#[derive(Debug, serde::Deserialize)]
pub struct ModelQuery {
    pub model: Option<String>,
}

/// 200 only when new requests are being accepted; with several models and `?model=`,
/// when that model is loaded.
pub async fn ready(State(state): State<AppState>, Query(query): Query<ModelQuery>) -> Response {
    if let (Some(models), Some(name), Phase::Ready) = (state.models(), query.model.as_deref(), state.phase()) {
        let known =
            models.statuses().into_iter().find(|m| m.spec.name == name || m.spec.aliases.iter().any(|a| a == name));
        return match known.map(|m| m.status) {
            Some(ModelStatus::Loaded) => (StatusCode::OK, Json(json!({"status": "ready"}))).into_response(),
            Some(ModelStatus::Failed(reason)) => unavailable("failed", Some(reason)),
            Some(status) => unavailable(status.name(), None),
            None => ApiError::model_not_found(name).into_response(),
        };
    }
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
    let data = match (state.models(), state.backend()) {
        (Some(models), _) => models
            .statuses()
            .into_iter()
            .map(|m| {
                let mut model = model_json(&m.spec.name, m.backend.as_deref());
                model["status"] = json!(m.status.name());
                model["aliases"] = json!(m.spec.aliases);
                if let Some(bytes) = m.measured_bytes {
                    model["memory_mib"] = json!(bytes >> 20);
                }
                if let ModelStatus::Failed(reason) = m.status {
                    model["failure"] = json!(reason);
                }
                model
            })
            .collect(),
        (None, Some(backend)) => vec![model_json(&state.model_name(), Some(backend.as_ref()))],
        (None, None) => Vec::new(),
    };
    Json(json!({"object": "list", "data": data})).into_response()
}

/// One model as `/v1/models` lists it; what only a loaded model can say is left out.
fn model_json(name: &str, backend: Option<&dyn rillm_backend::Backend>) -> serde_json::Value {
    let mut model = json!({"id": name, "object": "model", "created": unix_now(), "owned_by": "rillm"});
    if let Some(backend) = backend {
        model["max_model_len"] = json!(backend.context_length());
        model["task"] = json!(backend.task().name());
        model["embedding_width"] = json!(backend.embedding_width());
    }
    model
}

pub async fn prometheus(State(state): State<AppState>) -> Response {
    metrics::record_responses_store(state.responses.bytes(), state.responses.len());
    let served: Vec<(String, std::sync::Arc<dyn rillm_backend::Backend>)> = match state.models() {
        Some(models) => models.statuses().into_iter().filter_map(|m| Some((m.spec.name, m.backend?))).collect(),
        None => state.backend().map(|b| (b.model_name().to_string(), b.clone())).into_iter().collect(),
    };
    let body = metrics::render(&served);
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], body).into_response()
}

/// `POST /models/load` and `/models/unload`: `{"model"}`, as llama-server's router has them.
#[derive(Debug, serde::Deserialize)]
pub struct ModelBody {
    model: Option<String>,
}

pub async fn load_model(
    State(state): State<AppState>,
    crate::json::JsonBody(body): crate::json::JsonBody<ModelBody>,
) -> Result<Response, ApiError> {
    let (models, name) = model_command(&state, body)?;
    models.load(&name).await?;
    Ok(Json(json!({"success": true, "model": name, "status": "loaded"})).into_response())
}

pub async fn unload_model(
    State(state): State<AppState>,
    crate::json::JsonBody(body): crate::json::JsonBody<ModelBody>,
) -> Result<Response, ApiError> {
    let (models, name) = model_command(&state, body)?;
    let was_loaded = models.unload(&name)?;
    Ok(Json(json!({"success": true, "model": name, "status": "unloaded", "was_loaded": was_loaded})).into_response())
}

fn model_command(
    state: &AppState,
    body: ModelBody,
) -> Result<(std::sync::Arc<crate::models::ModelRegistry>, String), ApiError> {
    let models = state.models().cloned().ok_or_else(|| {
        ApiError::invalid("model", "this server serves one model: start it with several (--model NAME=PATH, --models-dir) to load and unload them")
    })?;
    let name = body.model.filter(|m| !m.is_empty()).ok_or_else(|| ApiError::invalid("model", "`model` is required"))?;
    Ok((models, name))
}
