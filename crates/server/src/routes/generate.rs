//! `POST /generate`: rillm's own streaming protocol (the prototype's endpoint).
//!
//! Each new text piece is `data: {"text", "token_ids"}` (a reasoning model's thought:
//! `{"reasoning", "token_ids"}`); the end is `event: done` with
//! finish reason, usage and server timings; a failure mid-stream is `event: error`.

use std::time::Instant;

use axum::extract::State;
use axum::response::sse::Event;
use axum::response::Response;
use rillm_backend::{ChatMessage, Completion, Prompt, TokenLogprob};
use serde::Deserialize;
use serde_json::json;

use crate::admission::admit;
use crate::error::ApiError;
use crate::json::JsonBody;
use crate::openai::{usage_json, GenerationParams, SamplingFields, StopFields, StopInput};
use crate::reasoning::ReasoningFields;
use crate::shape::OutputShape;
use crate::sse::{json_event, sse_response, StreamFormat};
use crate::state::AppState;
use crate::structured::ConstraintFields;
use crate::tools::{self, ToolCallParser, ToolRequest};

#[derive(Debug, Deserialize)]
pub struct GenerateBody {
    /// Which model, where the server serves several.
    model: Option<String>,
    #[serde(default)]
    prompt: String,
    /// Chat messages (tool calls and results included) instead of `prompt`.
    messages: Option<Vec<crate::routes::chat::MessageInput>>,
    /// Tools, as on chat: the final event carries the parsed calls.
    tools: Option<serde_json::Value>,
    tool_choice: Option<serde_json::Value>,
    parallel_tool_calls: Option<serde_json::Value>,
    max_tokens: Option<i64>,
    max_new_tokens: Option<i64>,
    stop: Option<StopInput>,
    /// Wrap the prompt as one user message and apply the model's chat template.
    #[serde(default)]
    chat: bool,
    ignore_eos: Option<bool>,
    /// Each token's log-probability with this many alternatives (0 to 20).
    logprobs: Option<i64>,
    /// temperature, top_p, top_k, min_p, seed, the penalties and logit_bias.
    #[serde(flatten)]
    sampling: SamplingFields,
    /// stop_token_ids, min_tokens, include_stop_str_in_output, truncate_prompt_tokens.
    #[serde(flatten)]
    stop_fields: StopFields,
    /// The same constraint fields as the OpenAI endpoints.
    #[serde(flatten)]
    constraints: ConstraintFields,
    /// reasoning_effort and the budgets, as on chat (chat prompts only).
    #[serde(flatten)]
    reasoning: ReasoningFields,
    /// SGLang's own `/generate` body (which a router forwards unchanged): refused by name.
    text: Option<serde_json::Value>,
    sampling_params: Option<serde_json::Value>,
}

const DEFAULT_MAX_TOKENS: u32 = 128;

/// SGLang's `/generate` shares the path but not the body (`text`, `sampling_params`) nor
/// the stream: a clear 400 rather than a request read as an empty prompt.
fn refuse_sglang_body(body: &GenerateBody) -> Result<(), ApiError> {
    let param = match (&body.text, &body.sampling_params) {
        (Some(_), _) => "text",
        (None, Some(_)) => "sampling_params",
        (None, None) => return Ok(()),
    };
    Err(ApiError::invalid(
        param,
        format!(
            "`{param}` belongs to SGLang's /generate, which rillm does not serve: rillm's /generate takes `prompt` \
             (or `messages`) with `max_tokens` and the sampling fields at the top level; or send /v1/completions"
        ),
    ))
}

pub async fn generate(
    State(state): State<AppState>,
    JsonBody(body): JsonBody<GenerateBody>,
) -> Result<Response, ApiError> {
    let received = Instant::now();
    refuse_sglang_body(&body)?;
    let state = state.for_model(body.model.as_deref()).await?;
    if body.prompt.is_empty() && body.messages.is_none() {
        return Err(ApiError::invalid("prompt", "`prompt` must not be empty"));
    }
    if !body.prompt.is_empty() && body.messages.is_some() {
        return Err(ApiError::invalid("messages", "give `prompt` or `messages`, not both"));
    }
    if body.max_tokens.is_some() && body.max_new_tokens.is_some() {
        return Err(ApiError::invalid("max_new_tokens", "give `max_tokens` or `max_new_tokens`, not both"));
    }
    let (max_tokens, max_tokens_param) = match (body.max_tokens, body.max_new_tokens) {
        (None, Some(n)) => (Some(n), "max_new_tokens"),
        (n, _) => (n, "max_tokens"),
    };
    let tools = ToolRequest::from_fields(body.tools, body.tool_choice, body.parallel_tool_calls)?;
    let shape = OutputShape::new(tools, body.constraints.into_constraint()?, state.shape_rules());
    let dialect = state.tool_dialect();
    let mut prompt = match body.messages {
        Some(messages) => crate::routes::chat::render(messages, shape.tools(), dialect, Default::default())?,
        None if shape.tools().is_some() => {
            tools::render_prompt(vec![tools::HistoryMessage::user(body.prompt)], shape.tools(), dialect)?
        }
        None if body.chat => Prompt::chat(vec![ChatMessage::new("user", body.prompt)]),
        None => Prompt::Text(body.prompt),
    };
    let reasoning = body.reasoning.for_prompt(&state, &mut prompt)?;
    let mut request = GenerationParams {
        max_tokens,
        max_tokens_param,
        default_max_tokens: Some(DEFAULT_MAX_TOKENS),
        sampling: body.sampling,
        // Greedy unless asked: the same prompt gives the same answer, as in the prototype.
        default_temperature: 0.0,
        stop: body.stop,
        stop_fields: body.stop_fields,
        ignore_eos: body.ignore_eos,
        ..GenerationParams::default()
    }
    .into_request(prompt)?;
    request.reasoning = reasoning;
    request.logprobs = match body.logprobs {
        None => None,
        Some(n) if (0..=crate::logprobs::MAX_TOP_LOGPROBS).contains(&n) => Some(n as u32),
        Some(n) => return Err(ApiError::invalid("logprobs", format!("`logprobs` must be between 0 and 20, got {n}"))),
    };
    let fields = shape.apply(&mut request, "prompt");
    let mut admitted = admit(&state, "generate", fields, request, received).await?;
    let reading = shape.call_reading();
    admitted.repeat_watch = reading.as_ref().and_then(|r| r.repeat_watch(admitted.choices));
    let calls = reading.map(|r| r.parser(format!("call_{}_", admitted.stream.id())));
    Ok(sse_response(admitted, GenerateFormat { calls }))
}

/// With tools, the text is also read for calls; the final event carries them.
struct GenerateFormat {
    calls: Option<ToolCallParser>,
}

/// A text piece: the answer's (`text`) or, from a reasoning model, its thought's (`reasoning`).
#[derive(serde::Serialize)]
struct TextEvent<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    text: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reasoning: Option<&'a str>,
    token_ids: &'a [u32],
    #[serde(skip_serializing_if = "Option::is_none")]
    logprobs: Option<serde_json::Value>,
}

impl StreamFormat for GenerateFormat {
    fn text(&mut self, _index: u32, text: &str, token_ids: &[u32], logprobs: &[TokenLogprob]) -> Vec<Event> {
        if let Some(parser) = self.calls.as_mut() {
            parser.push(text);
        }
        let logprobs = (!logprobs.is_empty()).then(|| crate::logprobs::generate(logprobs));
        vec![json_event(&TextEvent { text: Some(text), reasoning: None, token_ids, logprobs })]
    }

    fn reasoning(&mut self, _index: u32, text: &str, token_ids: &[u32], logprobs: &[TokenLogprob]) -> Vec<Event> {
        let logprobs = (!logprobs.is_empty()).then(|| crate::logprobs::generate(logprobs));
        vec![json_event(&TextEvent { text: None, reasoning: Some(text), token_ids, logprobs })]
    }

    fn choice_done(&mut self, done: &Completion) -> Vec<Event> {
        let t = &done.timings;
        let mut body = json!({
            "finish_reason": done.finish_reason.as_str(),
            "usage": usage_json(&done.usage),
            "timings": {
                "queue_ms": t.queue_ms,
                "prefill_ms": t.prefill_ms,
                "ttft_ms": t.ttft_ms,
                "decode_ms": t.decode_ms,
            },
        });
        if let Some(parser) = self.calls.as_mut() {
            parser.finish();
            // Complete calls only: one `max_tokens` cut short is not a call.
            let calls: Vec<serde_json::Value> = parser
                .calls()
                .iter()
                .filter(|c| c.complete)
                .map(|c| json!({"id": c.id, "name": c.name, "arguments": c.arguments}))
                .collect();
            body["tool_calls"] = json!(calls);
        }
        let mut events = Vec::with_capacity(2);
        if let Some(error) = &done.error {
            let error = ApiError::internal(error.clone());
            events.push(Event::default().event("error").data(error.body().to_string()));
        }
        events.push(Event::default().event("done").data(body.to_string()));
        events
    }
}
