//! `POST /v1/responses`: OpenAI's Responses API, streamed and not. The request becomes a
//! chat request (`crate::responses` reads its input, tools and `text.format`), so it is
//! admitted, constrained and generated as chat is; only its shapes differ.

use std::sync::Arc;
use std::time::Instant;

use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Map, Value};

use crate::admission::{admit, Admitted};
use crate::error::ApiError;
use crate::json::JsonBody;
use crate::logprobs::{TokenNames, MAX_TOP_LOGPROBS};
use crate::openai::{respond, GenerationParams, SamplingFields, StopFields};
use crate::reasoning::ReasoningFields;
use crate::responses::{self, Echo, Keep, NotCancelled, ResponsesFormat};
use crate::shape::OutputShape;
use crate::sse::collect;
use crate::state::AppState;
use crate::structured::refuse_unknown_fields;
use crate::tools::{self, HistoryMessage};

#[derive(Debug, Deserialize)]
pub struct ResponsesBody {
    model: Option<String>,
    input: Option<Value>,
    instructions: Option<String>,
    max_output_tokens: Option<i64>,
    #[serde(default)]
    stream: bool,
    stream_options: Option<Value>,
    tools: Option<Value>,
    tool_choice: Option<Value>,
    parallel_tool_calls: Option<Value>,
    text: Option<Value>,
    include: Option<Vec<String>>,
    top_logprobs: Option<i64>,
    metadata: Option<Value>,
    /// Keep the response for `previous_response_id` (OpenAI's default: true).
    store: Option<bool>,
    truncation: Option<String>,
    reasoning: Option<Value>,
    background: Option<bool>,
    previous_response_id: Option<String>,
    conversation: Option<Value>,
    /// vLLM's, as on chat: with `min_tokens`, AIPerf's recipe for fixed output lengths.
    ignore_eos: Option<bool>,
    /// temperature and top_p; vLLM's top_k, min_p, seed and penalties too.
    #[serde(flatten)]
    sampling: SamplingFields,
    /// vLLM's stop_token_ids, min_tokens, include_stop_str_in_output, truncate_prompt_tokens.
    #[serde(flatten)]
    stop_fields: StopFields,
    /// Everything else: refused by name unless it changes nothing.
    #[serde(flatten)]
    other: Map<String, Value>,
}

/// `stream_options` a Responses stream takes.
const STREAM_OPTIONS: &[&str] = &["include_usage", "include_obfuscation"];

/// What `include` may ask for: the output text's log-probabilities.
const LOGPROBS_INCLUDE: &str = "message.output_text.logprobs";

pub async fn create_response(
    State(state): State<AppState>,
    JsonBody(body): JsonBody<ResponsesBody>,
) -> Result<Response, ApiError> {
    let received = Instant::now();
    let state = state.for_model(body.model.as_deref()).await?;
    refuse_unknown_fields(&body.other)?;
    refuse_unserved(&body)?;
    let logprobs = logprobs(body.include.as_deref(), body.top_logprobs)?;
    let input = body.input.ok_or_else(|| ApiError::invalid("input", "`input` is required"))?;
    let tool_request =
        responses::tools(body.tools.clone(), body.tool_choice.clone(), body.parallel_tool_calls.clone())?;
    let shape = OutputShape::new(tool_request, responses::text_format(body.text.clone())?, state.shape_rules());
    let earlier = match &body.previous_response_id {
        Some(id) => earlier_conversation(&state, id)?,
        None => Default::default(),
    };
    let conversation = responses::conversation(&earlier, input)?;
    let history = responses::with_instructions(body.instructions.as_deref(), &conversation);
    let shape = shape.after_results(tools::answered_calls(&history));
    let (thinking_fields, reasoning_echo) = ReasoningFields::from_responses(body.reasoning.clone())?;
    let mut prompt = tools::render_prompt(history, shape.tools(), state.tool_dialect())?;
    let reasoning = thinking_fields
        .for_prompt(&state, &mut prompt)
        .map_err(|e| e.renamed("reasoning_effort", "reasoning.effort"))?;
    let mut request = GenerationParams {
        max_tokens: body.max_output_tokens,
        max_tokens_param: "max_output_tokens",
        sampling: body.sampling,
        default_temperature: 1.0,
        stop_fields: body.stop_fields,
        ignore_eos: body.ignore_eos,
        ..GenerationParams::default()
    }
    .into_request(prompt)?;
    request.logprobs = logprobs;
    request.reasoning = reasoning;
    // Every call the reply makes parses and fits its function's schema; an answer, its format.
    let fields = shape.apply(&mut request, "input");
    let echo = Echo {
        instructions: body.instructions,
        max_output_tokens: body.max_output_tokens,
        tools: body.tools.unwrap_or_else(|| json!([])),
        tool_choice: body.tool_choice.unwrap_or_else(|| json!("auto")),
        parallel_tool_calls: shape.tools().is_none_or(|t| t.parallel),
        temperature: request.sampling.temperature,
        top_p: request.sampling.top_p,
        text: body.text.unwrap_or_else(|| json!({"format": {"type": "text"}})),
        top_logprobs: body.top_logprobs,
        metadata: body.metadata.unwrap_or_else(|| json!({})),
        previous_response_id: body.previous_response_id,
        store: body.store != Some(false) && state.responses.enabled(),
        background: body.background == Some(true),
        reasoning: reasoning_echo,
    };
    if echo.background && !echo.store {
        return Err(ApiError::invalid("background", background_unkept(state.responses.enabled())));
    }
    let background = echo.background;
    let keep = echo.store.then(|| Keep { store: state.responses.clone(), conversation });
    let mut admitted = admit(&state, "responses", fields, request, received).await?;
    let reading = shape.call_reading();
    admitted.repeat_watch = reading.as_ref().and_then(|r| r.repeat_watch(admitted.choices));
    // Random, not the engine's request number: a kept id must not recur after a restart.
    let unique = format!("{:032x}", rand::random::<u128>());
    let parser = reading.map(|r| r.parser(format!("call_{unique}_")));
    let names = logprobs.map(|_| TokenNames::Text);
    let id = format!("resp_{unique}");
    let format = ResponsesFormat::new(id.clone(), state.model_name(), echo, parser, names, keep);
    if background {
        return Ok(Json(run_in_background(&state, id, admitted, format)).into_response());
    }
    respond(admitted, format, body.stream, |mut format, collected| format.whole(collected)).await
}

/// Generates the response apart from the request that asked for it, held in the store
/// while it runs (a client that goes away does not stop it; `cancel` and `DELETE` do), and
/// answers with it in progress.
fn run_in_background(state: &AppState, id: String, admitted: Admitted, mut format: ResponsesFormat) -> Value {
    let response = format.in_progress();
    let stopped = state.responses.start(id, response.clone());
    tokio::spawn(async move {
        tokio::select! {
            // Keeps the ended response in the store, in the running one's place.
            collected = collect(admitted) => drop(format.whole(collected)),
            // Dropping the request's stream cancels it in the engine.
            _ = stopped => {}
        }
    });
    response
}

fn background_unkept(store_enabled: bool) -> &'static str {
    if store_enabled {
        "a background response is polled from the store: it cannot be `store: false`"
    } else {
        "this server keeps no responses (--responses-store-mib 0), so none can run in the background"
    }
}

/// The conversation a kept response ended, to go on from.
fn earlier_conversation(state: &AppState, id: &str) -> Result<Arc<Vec<HistoryMessage>>, ApiError> {
    if !state.responses.enabled() {
        return Err(ApiError::invalid(
            "previous_response_id",
            "this server keeps no responses (--responses-store-mib 0); send the whole conversation in `input`",
        ));
    }
    if let Some(conversation) = state.responses.conversation(id) {
        return Ok(conversation);
    }
    if let Some(response) = state.responses.response(id) {
        let status = response["status"].as_str().unwrap_or_default();
        return Err(ApiError::invalid(
            "previous_response_id",
            format!("Previous response with id '{id}' is {status}: only a finished response can be continued."),
        ));
    }
    Err(ApiError::invalid("previous_response_id", format!("Previous response with id '{id}' not found."))
        .with_code("previous_response_not_found"))
}

/// `GET /v1/responses/{id}`: a kept response.
pub async fn retrieve(State(state): State<AppState>, Path(id): Path<String>) -> Result<Response, ApiError> {
    let response = state.responses.response(&id).ok_or_else(|| response_not_found(&id))?;
    Ok(Json(response.as_ref()).into_response())
}

/// `POST /v1/responses/{id}/cancel`: stop a background response that is still running; it
/// is kept, `cancelled`. One that ran in the foreground or has ended is a 400, as in vLLM.
pub async fn cancel(State(state): State<AppState>, Path(id): Path<String>) -> Result<Response, ApiError> {
    match state.responses.cancel(&id) {
        Ok(response) => Ok(Json(response.as_ref()).into_response()),
        Err(NotCancelled::NotFound) => Err(response_not_found(&id)),
        Err(NotCancelled::Synchronous) => {
            Err(ApiError::invalid("response_id", "Cannot cancel a synchronous response."))
        }
        Err(NotCancelled::Ended(status)) => {
            Err(ApiError::invalid("response_id", format!("Cannot cancel a response that is already {status}.")))
        }
    }
}

/// `DELETE /v1/responses/{id}`: forget a kept response (a running one is stopped).
pub async fn delete(State(state): State<AppState>, Path(id): Path<String>) -> Result<Response, ApiError> {
    if !state.responses.delete(&id) {
        return Err(response_not_found(&id));
    }
    Ok(Json(json!({"id": id, "object": "response", "deleted": true})).into_response())
}

fn response_not_found(id: &str) -> ApiError {
    ApiError::not_found_param("response_id", format!("Response with id '{id}' not found."))
}

/// Fields asking for what rillm does not do (conversations, truncation, a
/// streamed background response): each a 400 naming it.
fn refuse_unserved(body: &ResponsesBody) -> Result<(), ApiError> {
    if body.conversation.as_ref().is_some_and(|v| !v.is_null()) {
        return Err(ApiError::invalid(
            "conversation",
            "conversations are not kept; continue one with `previous_response_id` or send it whole in `input`",
        ));
    }
    if body.background == Some(true) && body.stream {
        return Err(ApiError::invalid(
            "background",
            "a background response is polled (GET /v1/responses/{id}), not streamed: send `stream: false`",
        ));
    }
    if body.truncation.as_deref().is_some_and(|t| t != "disabled") {
        return Err(ApiError::invalid(
            "truncation",
            "only `truncation: \"disabled\"` is supported: a prompt too long is a 400",
        ));
    }
    if let Some(Value::Object(options)) = &body.stream_options {
        // Usage is always in the last event (AIPerf asks for it anyway); obfuscation pads
        // deltas against length side channels, and rillm sends none, which changes
        // nothing a client reads.
        if let Some((key, _)) = options.iter().find(|(k, _)| !STREAM_OPTIONS.contains(&k.as_str())) {
            return Err(ApiError::invalid(
                format!("stream_options.{key}"),
                format!("`stream_options.{key}` is not supported by this server"),
            ));
        }
    }
    Ok(())
}

/// `include: ["message.output_text.logprobs"]` or `top_logprobs` asks for log-probabilities.
fn logprobs(include: Option<&[String]>, top_logprobs: Option<i64>) -> Result<Option<u32>, ApiError> {
    let mut asked = top_logprobs.is_some();
    for (i, item) in include.unwrap_or_default().iter().enumerate() {
        if item != LOGPROBS_INCLUDE {
            return Err(ApiError::invalid(
                format!("include[{i}]"),
                format!("`{item}` cannot be included; only `{LOGPROBS_INCLUDE}`"),
            ));
        }
        asked = true;
    }
    match top_logprobs.unwrap_or(0) {
        n @ 0..=MAX_TOP_LOGPROBS if asked => Ok(Some(n as u32)),
        _ if !asked => Ok(None),
        n => Err(ApiError::invalid(
            "top_logprobs",
            format!("`top_logprobs` must be between 0 and {MAX_TOP_LOGPROBS}, got {n}"),
        )),
    }
}
