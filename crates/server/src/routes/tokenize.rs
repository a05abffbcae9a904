//! `POST /tokenize` and `POST /detokenize` in vLLM's shapes, so clients (the benchmark
//! first) can build prompts of exact token lengths against rillm as against vLLM or SGLang.
//!
//! Tokenizing a long prompt takes milliseconds of CPU: it runs on the blocking pool, not on
//! the async workers that stream tokens.

use axum::extract::{Query, State};
use axum::response::{IntoResponse, Response};
use axum::Json;
use rillm_backend::Prompt;
use serde::Deserialize;
use serde_json::json;

use crate::admission::off_runtime;
use crate::error::ApiError;
use crate::json::JsonBody;
use crate::routes::chat::{chat_options, render, MessageInput};
use crate::state::AppState;

/// vLLM's `TokenizeCompletionRequest` or `TokenizeChatRequest`.
#[derive(Debug, Deserialize)]
pub struct TokenizeBody {
    model: Option<String>,
    prompt: Option<String>,
    messages: Option<Vec<MessageInput>>,
    /// Chat prompts: the tools, listed as a chat request with `tool_choice: auto` lists them.
    tools: Option<serde_json::Value>,
    /// Text prompts: add BOS as generation does (vLLM's default). Chat prompts always get
    /// exactly what generation would see.
    #[serde(default = "yes")]
    add_special_tokens: bool,
    /// Chat prompts: as on chat completions.
    add_generation_prompt: Option<bool>,
    continue_final_message: Option<bool>,
    chat_template_kwargs: Option<serde_json::Map<String, serde_json::Value>>,
}

fn yes() -> bool {
    true
}

#[derive(Debug, Deserialize)]
pub struct DetokenizeBody {
    model: Option<String>,
    tokens: Vec<i64>,
}

pub async fn tokenize(
    State(state): State<AppState>,
    JsonBody(body): JsonBody<TokenizeBody>,
) -> Result<Response, ApiError> {
    let state = state.for_model(body.model.as_deref()).await?;
    let backend = state.backend().ok_or_else(|| ApiError::unavailable("the model is still loading"))?.clone();
    let (prompt, param) = match (body.prompt, body.messages) {
        (Some(_), None)
            if body.add_generation_prompt.is_some()
                || body.continue_final_message.is_some()
                || body.chat_template_kwargs.is_some() =>
        {
            return Err(ApiError::invalid("prompt", "chat layout fields go with `messages`, not `prompt`"))
        }
        (Some(text), None) => (Prompt::Text(text), "prompt"),
        (None, Some(input)) => {
            let tools = crate::tools::ToolRequest::from_fields(body.tools, None, None)?;
            let options =
                chat_options(body.add_generation_prompt, body.continue_final_message, body.chat_template_kwargs)?;
            (render(input, tools.as_ref(), state.tool_dialect(), options)?, "messages")
        }
        (Some(_), Some(_)) => return Err(ApiError::invalid("messages", "give `prompt` or `messages`, not both")),
        (None, None) => return Err(ApiError::invalid("prompt", "`prompt` or `messages` is required")),
    };
    let add_special = body.add_special_tokens;
    let tokens = off_runtime(move || backend.tokenize(&prompt, add_special))
        .await?
        .map_err(|rejected| ApiError::invalid(param, rejected.to_string()))?;
    let (max_model_len, task) = state.backend().map_or((0, "generate"), |b| (b.context_length(), b.task().name()));
    Ok(Json(json!({
        "count": tokens.len(),
        "max_model_len": max_model_len,
        "tokens": tokens,
        "token_strs": null,
        "task": task,
    }))
    .into_response())
}

/// `GET /tokenizer_info` in vLLM's shape: the special tokens and chat template, which
/// lm-evaluation-harness's `tokenizer_backend=remote` reads before tokenizing through
/// `/tokenize`.
pub async fn tokenizer_info(
    State(state): State<AppState>,
    Query(query): Query<crate::routes::info::ModelQuery>,
) -> Result<Response, ApiError> {
    let state = state.for_model(query.model.as_deref()).await?;
    let backend = state.backend().ok_or_else(|| ApiError::unavailable("the model is still loading"))?;
    let info = backend.tokenizer_info();
    Ok(Json(json!({
        "tokenizer_class": "LlamaCppTokenizer",
        "bos_token": info.bos_token,
        "eos_token": info.eos_token,
        "pad_token": null,
        "chat_template": info.chat_template,
        "model_max_length": backend.context_length(),
    }))
    .into_response())
}

pub async fn detokenize(
    State(state): State<AppState>,
    JsonBody(body): JsonBody<DetokenizeBody>,
) -> Result<Response, ApiError> {
    let state = state.for_model(body.model.as_deref()).await?;
    let backend = state.backend().ok_or_else(|| ApiError::unavailable("the model is still loading"))?;
    let tokens = body
        .tokens
        .iter()
        .enumerate()
        .map(|(i, &t)| {
            u32::try_from(t)
                .map_err(|_| ApiError::invalid(format!("tokens[{i}]"), format!("token id {t} is not a valid token id")))
        })
        .collect::<Result<Vec<u32>, _>>()?;
    let text = backend.detokenize(&tokens).map_err(|rejected| ApiError::invalid("tokens", rejected.to_string()))?;
    Ok(Json(json!({"prompt": text})).into_response())
}
