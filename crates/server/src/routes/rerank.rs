//! `POST /v1/rerank` (also `/rerank`) in Jina's and Cohere's shape, as vLLM and
//! llama-server serve it: each document scored against the query by a cross-encoder,
//! best first; and vLLM's `POST /score` (also `/v1/score`): pairs scored in order.

use axum::extract::State;
use axum::Json;
use rillm_backend::EmbedRequest;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::error::ApiError;
use crate::json::JsonBody;
use crate::pooled::compute;
use crate::pooled::input::{rerank_pairs, score_pairs};
use crate::pooled::vectors::relevance;
use crate::state::AppState;

#[derive(Debug, Deserialize)]
pub struct RerankBody {
    model: Option<String>,
    query: Option<Value>,
    documents: Option<Value>,
    /// The best `top_n` only; all by default.
    top_n: Option<i64>,
    /// Each result carries its document (`{"text"}`); true by default, as in vLLM.
    return_documents: Option<bool>,
    truncate_prompt_tokens: Option<u32>,
}

pub async fn rerank(
    State(state): State<AppState>,
    JsonBody(body): JsonBody<RerankBody>,
) -> Result<Json<Value>, ApiError> {
    let state = state.for_model(body.model.as_deref()).await?;
    let (pairs, documents) = rerank_pairs(body.query, body.documents, state.config.embeddings.max_inputs)?;
    let top_n = match body.top_n {
        None => documents.len(),
        Some(n) if n >= 1 => usize::try_from(n).unwrap_or(usize::MAX).min(documents.len()),
        Some(_) => return Err(ApiError::invalid("top_n", "`top_n` must be a positive integer")),
    };
    let request = EmbedRequest { inputs: pairs, truncate_prompt_tokens: body.truncate_prompt_tokens };
    let scored = compute(&state, "/v1/rerank", request).await?;
    let mut ranked: Vec<(usize, f64)> = scored.vectors.iter().map(|v| relevance(v)).enumerate().collect();
    // Stable: equal scores keep document order.
    ranked.sort_by(|a, b| b.1.total_cmp(&a.1));
    let with_documents = body.return_documents.unwrap_or(true);
    let results: Vec<Value> = ranked
        .into_iter()
        .take(top_n)
        .map(|(index, score)| {
            let mut result = json!({"index": index, "relevance_score": score});
            if with_documents {
                result["document"] = json!({"text": documents[index]});
            }
            result
        })
        .collect();
    let tokens = scored.prompt_tokens;
    Ok(Json(json!({
        "model": state.model_name(),
        "results": results,
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    })))
}

#[derive(Debug, Deserialize)]
pub struct ScoreBody {
    model: Option<String>,
    text_1: Option<Value>,
    text_2: Option<Value>,
    truncate_prompt_tokens: Option<u32>,
}

pub async fn score(
    State(state): State<AppState>,
    JsonBody(body): JsonBody<ScoreBody>,
) -> Result<Json<Value>, ApiError> {
    let state = state.for_model(body.model.as_deref()).await?;
    let pairs = score_pairs(body.text_1, body.text_2, state.config.embeddings.max_inputs)?;
    let request = EmbedRequest { inputs: pairs, truncate_prompt_tokens: body.truncate_prompt_tokens };
    let scored = compute(&state, "/score", request).await?;
    let data: Vec<Value> = scored
        .vectors
        .iter()
        .enumerate()
        .map(|(index, v)| json!({"index": index, "object": "score", "score": relevance(v)}))
        .collect();
    let tokens = scored.prompt_tokens;
    Ok(Json(json!({
        "object": "list",
        "model": state.model_name(),
        "data": data,
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    })))
}
