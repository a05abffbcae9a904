//! Requests answered with pooled vectors rather than a stream: `/v1/embeddings` and
//! `/v1/rerank`. Both go through [`compute`]: admission (the backend's queue makes the 429,
//! before any body is sent), the wait (dropped with the connection, which cancels what is
//! not computed yet), metrics.

pub mod input;
pub mod vectors;

use std::time::Instant;

use rillm_backend::{EmbedRequest, Embeddings};

use crate::admission::{off_runtime, rejection_error, rejection_reason};
use crate::error::ApiError;
use crate::fields::Fields;
use crate::metrics;
use crate::state::AppState;

/// How the server treats embedding requests (`rillm serve`'s flags).
#[derive(Debug, Clone)]
pub struct EmbeddingOptions {
    /// Scale vectors to unit length (`--no-normalize` turns it off; a request's
    /// `normalize` overrides).
    pub normalize: bool,
    /// Sizes the model was trained to be cut to (`--matryoshka-dims`): the `dimensions`
    /// a request may ask for.
    pub matryoshka_dims: Vec<usize>,
    /// Most inputs (or documents) in one request (`--max-embedding-inputs`).
    pub max_inputs: usize,
}

impl Default for EmbeddingOptions {
    fn default() -> Self {
        // OpenAI's own limit on inputs per request.
        Self { normalize: true, matryoshka_dims: Vec::new(), max_inputs: 2048 }
    }
}

/// Inputs up to this many bytes together are tokenized on the async worker.
const INLINE_INPUT_BYTES: usize = 16 * 1024;

/// Runs `request` on the served model; `endpoint` and `task` label its metrics.
pub async fn compute(state: &AppState, endpoint: &'static str, request: EmbedRequest) -> Result<Embeddings, ApiError> {
    let received = Instant::now();
    let backend = state.ready_backend().inspect_err(|_| metrics::record_rejected("unavailable"))?.clone();
    let inputs = request.inputs.len();
    let bytes: usize = request.inputs.iter().map(input_bytes).sum();
    let submitted = if bytes <= INLINE_INPUT_BYTES {
        backend.embed(request)
    } else {
        let backend = backend.clone();
        off_runtime(move || backend.embed(request)).await?
    };
    let response = submitted.map_err(|rejected| {
        let fields = Fields { prompt: "input", constraint: None, constraint_parts: Vec::new() };
        let error = rejection_error(&rejected, &fields);
        metrics::record_rejected(rejection_reason(&rejected));
        tracing::info!(endpoint, status = error.status.as_u16(), reason = %rejected, "request rejected");
        error
    })?;
    let embeddings = response.await.map_err(|failed| {
        tracing::error!(endpoint, reason = %failed, "embedding request failed");
        ApiError::internal(failed.to_string())
    })?;
    let seconds = received.elapsed().as_secs_f64();
    metrics::record_pooled(&state.model_name(), backend.task().name(), inputs, embeddings.prompt_tokens, seconds);
    tracing::info!(endpoint, inputs, prompt_tokens = embeddings.prompt_tokens, ms = seconds * 1e3, "pooled");
    Ok(embeddings)
}

fn input_bytes(input: &rillm_backend::EmbedInput) -> usize {
    match input {
        rillm_backend::EmbedInput::Text(text) => text.len(),
        rillm_backend::EmbedInput::Tokens(tokens) => tokens.len(),
        rillm_backend::EmbedInput::Pair { query, document } => query.len() + document.len(),
    }
}
