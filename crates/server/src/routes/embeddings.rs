//! `POST /v1/embeddings` in OpenAI's shape (vLLM's and llama-server's too): one vector per
//! input, in input order, as floats or base64.

use axum::extract::State;
use axum::Json;
use rillm_backend::EmbedRequest;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::error::ApiError;
use crate::json::JsonBody;
use crate::pooled::input::embedding_inputs;
use crate::pooled::vectors::{checked_dimensions, finish_vector, Encoding};
use crate::pooled::{compute, EmbeddingOptions};
use crate::state::AppState;

#[derive(Debug, Deserialize)]
pub struct EmbeddingsBody {
    model: Option<String>,
    /// Read by hand: its four shapes each get their own 400.
    input: Option<Value>,
    encoding_format: Option<String>,
    dimensions: Option<i64>,
    /// vLLM's: keep each input's last N tokens rather than refuse a long one.
    truncate_prompt_tokens: Option<u32>,
    /// vLLM's per-request switch; the server's `--no-normalize` otherwise.
    normalize: Option<bool>,
    /// OpenAI's end-user id: accepted, not used.
    #[allow(dead_code)]
    user: Option<String>,
}

pub async fn embeddings(
    State(state): State<AppState>,
    JsonBody(body): JsonBody<EmbeddingsBody>,
) -> Result<Json<Value>, ApiError> {
    let state = state.for_model(body.model.as_deref()).await?;
    let options: &EmbeddingOptions = &state.config.embeddings;
    let inputs = embedding_inputs(body.input, options.max_inputs)?;
    let encoding = Encoding::from_field(body.encoding_format.as_deref())?;
    let backend = state.ready_backend()?;
    let width = backend.embedding_width().unwrap_or(0);
    let dimensions = checked_dimensions(body.dimensions, width, &options.matryoshka_dims)?;
    let normalize = body.normalize.unwrap_or(options.normalize);
    let request = EmbedRequest { inputs, truncate_prompt_tokens: body.truncate_prompt_tokens };
    let embeddings = compute(&state, "/v1/embeddings", request).await?;
    let data: Vec<Value> = embeddings
        .vectors
        .into_iter()
        .enumerate()
        .map(|(index, vector)| {
            let vector = finish_vector(vector, dimensions, normalize);
            json!({"object": "embedding", "index": index, "embedding": encoding.encode(&vector)})
        })
        .collect();
    let tokens = embeddings.prompt_tokens;
    Ok(Json(json!({
        "object": "list",
        "data": data,
        "model": state.model_name(),
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    })))
}
