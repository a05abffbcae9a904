//! A JSON body extractor whose every failure is an OpenAI-style error naming the field.

use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use axum::http::StatusCode;
use serde::de::DeserializeOwned;

use crate::error::ApiError;

pub struct JsonBody<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for JsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        let limit = req.extensions().get::<BodyLimit>().map_or(usize::MAX, |l| l.0);
        let bytes = Bytes::from_request(req, state).await.map_err(|rejection| {
            if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
                ApiError::payload_too_large(limit)
            } else {
                ApiError::bad_request(format!("could not read the request body: {}", rejection.body_text()))
            }
        })?;
        parse(&bytes).map(JsonBody)
    }
}

/// Refuses a request whose declared `Content-Length` exceeds the body limit before a byte
/// of the body is read: a client sending 10 MB (or waiting on `Expect: 100-continue`)
/// learns at once, and the server neither buffers nor waits for the body.
pub async fn refuse_declared_oversize(request: Request, next: axum::middleware::Next) -> axum::response::Response {
    use axum::response::IntoResponse;
    let limit = request.extensions().get::<BodyLimit>().map_or(usize::MAX, |l| l.0);
    let declared = request
        .headers()
        .get(axum::http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    match declared {
        Some(length) if length > limit as u64 => ApiError::payload_too_large(limit).into_response(),
        _ => next.run(request).await,
    }
}

/// The configured body limit, put in request extensions so errors can state it.
#[derive(Clone, Copy)]
pub struct BodyLimit(pub usize);

pub fn parse<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err(ApiError::bad_request("the request body is empty; expected a JSON object"));
    }
    let de = &mut serde_json::Deserializer::from_slice(bytes);
    let value = serde_path_to_error::deserialize(&mut *de).map_err(|err| {
        let path = err.path().to_string();
        let inner = err.into_inner();
        if inner.is_syntax() || inner.is_eof() {
            ApiError::bad_request(format!("malformed JSON: {inner}")).with_code("invalid_json")
        } else if let Some(field) = missing_field(&inner.to_string()) {
            let param = if path == "." { field } else { format!("{path}.{field}") };
            ApiError::invalid(param, format!("invalid request: {inner}")).with_code("missing_field")
        } else if path == "." {
            ApiError::bad_request(format!("invalid request: {inner}"))
        } else {
            ApiError::invalid(path.clone(), format!("invalid `{path}`: {inner}")).with_code("invalid_type")
        }
    })?;
    // One JSON value and nothing after it: `{...} xyz` or two objects is not a request.
    de.end().map_err(|e| {
        ApiError::bad_request(format!("malformed JSON: unexpected data after the JSON value ({e})"))
            .with_code("invalid_json")
    })?;
    Ok(value)
}

/// serde reports a missing field only in its message: "missing field `prompt` at ...".
fn missing_field(message: &str) -> Option<String> {
    let rest = message.strip_prefix("missing field `")?;
    Some(rest[..rest.find('`')?].to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(serde::Deserialize, Debug)]
    #[allow(dead_code)]
    struct Req {
        prompt: String,
        max_tokens: Option<u32>,
    }

    #[test]
    fn wrong_type_names_the_field() {
        let err = parse::<Req>(br#"{"prompt": "x", "max_tokens": "many"}"#).unwrap_err();
        assert_eq!(err.param.as_deref(), Some("max_tokens"));
        assert_eq!(err.status, StatusCode::BAD_REQUEST);
    }

    #[test]
    fn data_after_the_json_value_is_refused() {
        for body in [&br#"{"prompt": "Hi"} xyz"#[..], br#"{"prompt": "Hi"}{"prompt": "again"}"#] {
            let err = parse::<Req>(body).unwrap_err();
            assert_eq!((err.status, err.code), (StatusCode::BAD_REQUEST, Some("invalid_json")), "{}", err.message);
        }
        assert!(parse::<Req>(b"{\"prompt\": \"Hi\"}  \n").is_ok(), "trailing whitespace is fine");
    }

    #[test]
    fn malformed_json_and_missing_fields_are_400() {
        let err = parse::<Req>(b"{\"prompt\": ").unwrap_err();
        assert_eq!(err.code, Some("invalid_json"));
        let err = parse::<Req>(b"{}").unwrap_err();
        assert_eq!(err.param.as_deref(), Some("prompt"), "{}", err.message);
        let err = parse::<Req>(b"  ").unwrap_err();
        assert!(err.message.contains("empty"));
    }
}
