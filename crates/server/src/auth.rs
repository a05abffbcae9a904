//! `--api-key`: the generation endpoints want `Authorization: Bearer <key>`.

use axum::extract::{Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::error::ApiError;
use crate::state::AppState;

pub async fn require_api_key(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let Some(expected) = state.config.api_key.as_deref() else {
        return next.run(request).await;
    };
    let presented = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    match presented {
        Some(key) if constant_time_eq(key.as_bytes(), expected.as_bytes()) => next.run(request).await,
        _ => ApiError::unauthorized().into_response(),
    }
}

/// Compares without an early exit, so response time does not reveal the key's prefix.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}
