//! Errors as the OpenAI API shapes them: `{"error": {"message", "type", "param", "code"}}`.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

#[derive(Debug, Clone)]
pub struct ApiError {
    pub status: StatusCode,
    pub message: String,
    pub kind: &'static str,
    pub param: Option<String>,
    pub code: Option<&'static str>,
    /// Seconds, sent as `Retry-After`.
    pub retry_after: Option<u32>,
}

impl ApiError {
    fn new(status: StatusCode, kind: &'static str, message: impl Into<String>) -> Self {
        Self { status, message: message.into(), kind, param: None, code: None, retry_after: None }
    }

    /// 400 naming the offending field.
    pub fn invalid(param: impl Into<String>, message: impl Into<String>) -> Self {
        let mut e = Self::new(StatusCode::BAD_REQUEST, "invalid_request_error", message);
        e.param = Some(param.into());
        e
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "invalid_request_error", message)
    }

    /// The same refusal, its `param` spelled as another API names the field: the chat
    /// checks' `tools[0].function.name` is the Responses API's `tools[0].name`.
    pub fn renamed(mut self, from: &str, to: &str) -> Self {
        if let Some(param) = &mut self.param {
            *param = param.replace(from, to);
        }
        self
    }

    pub fn with_code(mut self, code: &'static str) -> Self {
        self.code = Some(code);
        self
    }

    pub fn model_not_found(model: &str) -> Self {
        let mut e =
            Self::new(StatusCode::NOT_FOUND, "invalid_request_error", format!("The model `{model}` does not exist."));
        e.param = Some("model".into());
        e.code = Some("model_not_found");
        e
    }

    pub fn payload_too_large(limit: usize) -> Self {
        Self::new(StatusCode::PAYLOAD_TOO_LARGE, "invalid_request_error", format!("request body exceeds {limit} bytes"))
            .with_code("request_too_large")
    }

    pub fn overloaded(message: impl Into<String>) -> Self {
        let mut e = Self::new(StatusCode::TOO_MANY_REQUESTS, "rate_limit_error", message).with_code("queue_full");
        e.retry_after = Some(1);
        e
    }

    pub fn unavailable(message: impl Into<String>) -> Self {
        let mut e = Self::new(StatusCode::SERVICE_UNAVAILABLE, "service_unavailable", message);
        e.retry_after = Some(5);
        e
    }

    /// Every connection place has a request in flight (see `connections`).
    pub fn connections_busy() -> Self {
        let mut e = Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "service_unavailable",
            "every connection has a request in flight; retry shortly",
        )
        .with_code("connections_busy");
        e.retry_after = Some(1);
        e
    }

    pub fn unauthorized() -> Self {
        Self::new(
            StatusCode::UNAUTHORIZED,
            "invalid_request_error",
            "Missing or incorrect API key; send `Authorization: Bearer <key>`.",
        )
        .with_code("invalid_api_key")
    }

    pub fn not_found() -> Self {
        Self::new(StatusCode::NOT_FOUND, "invalid_request_error", "no such endpoint").with_code("not_found")
    }

    /// 404 for a thing the request names (a kept response), naming the field.
    pub fn not_found_param(param: &str, message: impl Into<String>) -> Self {
        let mut e = Self::new(StatusCode::NOT_FOUND, "invalid_request_error", message);
        e.param = Some(param.into());
        e
    }

    pub fn method_not_allowed() -> Self {
        Self::new(StatusCode::METHOD_NOT_ALLOWED, "invalid_request_error", "this endpoint does not take that method")
            .with_code("method_not_allowed")
    }

    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, "internal_error", message)
    }

    pub fn body(&self) -> serde_json::Value {
        json!({"error": {
            "message": self.message,
            "type": self.kind,
            "param": self.param,
            "code": self.code,
        }})
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response = (self.status, Json(self.body())).into_response();
        if let Some(secs) = self.retry_after {
            response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        response
    }
}
