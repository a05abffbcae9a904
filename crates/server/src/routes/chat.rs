//! `POST /v1/chat/completions`, streaming and not, in the OpenAI API's shapes.

use std::time::Instant;

use axum::extract::State;
use axum::response::sse::Event;
use axum::response::Response;
use rillm_backend::{ChatMessage, Completion, Prompt, TokenLogprob, Usage};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::admission::admit;
use crate::error::ApiError;
use crate::json::JsonBody;
use crate::openai::{
    openai_finish_reason, reject_if, respond, usage_json, GenerationParams, ResponseMeta, StopInput, StreamOptions,
};
use crate::sse::{json_event, StreamFormat};
use crate::state::AppState;
use crate::structured::{constrain, refuse_unknown_fields, ConstraintFields};

#[derive(Debug, Deserialize)]
pub struct ChatBody {
    model: Option<String>,
    messages: Vec<MessageInput>,
    max_tokens: Option<i64>,
    max_completion_tokens: Option<i64>,
    temperature: Option<f64>,
    top_p: Option<f64>,
    top_k: Option<i64>,
    seed: Option<i64>,
    n: Option<i64>,
    stop: Option<StopInput>,
    #[serde(default)]
    stream: bool,
    stream_options: Option<StreamOptions>,
    ignore_eos: Option<bool>,
    presence_penalty: Option<f64>,
    frequency_penalty: Option<f64>,
    #[serde(default)]
    logprobs: bool,
    top_logprobs: Option<i64>,
    tools: Option<Vec<Value>>,
    #[serde(flatten)]
    constraints: ConstraintFields,
    /// Everything else the client sent: refused by name unless it changes nothing.
    #[serde(flatten)]
    other: serde_json::Map<String, Value>,
}

#[derive(Debug, Deserialize)]
pub(crate) struct MessageInput {
    role: String,
    content: Option<ContentInput>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum ContentInput {
    Text(String),
    Parts(Vec<ContentPart>),
}

#[derive(Debug, Deserialize)]
struct ContentPart {
    #[serde(rename = "type")]
    kind: String,
    text: Option<String>,
}

const ROLES: &[&str] = &["system", "developer", "user", "assistant", "tool"];

/// Chat messages as the engine takes them; each refusal names the message and field.
pub(crate) fn messages(input: Vec<MessageInput>) -> Result<Vec<ChatMessage>, ApiError> {
    if input.is_empty() {
        return Err(ApiError::invalid("messages", "`messages` must contain at least one message"));
    }
    input
        .into_iter()
        .enumerate()
        .map(|(i, m)| {
            if !ROLES.contains(&m.role.as_str()) {
                return Err(ApiError::invalid(
                    format!("messages[{i}].role"),
                    format!("unknown role `{}`; expected one of {}", m.role, ROLES.join(", ")),
                ));
            }
            let content = match m.content {
                None => String::new(),
                Some(ContentInput::Text(t)) => t,
                Some(ContentInput::Parts(parts)) => {
                    let mut text = String::new();
                    for (j, part) in parts.into_iter().enumerate() {
                        match (part.kind.as_str(), part.text) {
                            ("text", Some(t)) => text.push_str(&t),
                            (kind, _) => {
                                return Err(ApiError::invalid(
                                    format!("messages[{i}].content[{j}]"),
                                    format!("content part of type `{kind}` is not supported; only text"),
                                ))
                            }
                        }
                    }
                    text
                }
            };
            Ok(ChatMessage::new(m.role, content))
        })
        .collect()
}

pub async fn chat_completions(
    State(state): State<AppState>,
    JsonBody(body): JsonBody<ChatBody>,
) -> Result<Response, ApiError> {
    let received = Instant::now();
    state.check_model(body.model.as_deref())?;
    let logprobs = crate::logprobs::chat_request(body.logprobs, body.top_logprobs)?;
    reject_if(body.tools.as_ref().is_some_and(|t| !t.is_empty()), "tools")?;
    refuse_unknown_fields(&body.other)?;
    let constraint = body.constraints.into_constraint()?;
    let messages = messages(body.messages)?;
    let (max_tokens, max_tokens_param) = match (body.max_completion_tokens, body.max_tokens) {
        (Some(n), _) => (Some(n), "max_completion_tokens"),
        (None, n) => (n, "max_tokens"),
    };
    let mut request = GenerationParams {
        max_tokens,
        max_tokens_param,
        // Unset means "until end of turn or the context is full", as in vLLM.
        default_max_tokens: None,
        echo: false,
        temperature: body.temperature,
        default_temperature: 1.0,
        top_p: body.top_p,
        top_k: body.top_k,
        seed: body.seed,
        n: body.n,
        stop: body.stop,
        ignore_eos: body.ignore_eos,
        presence_penalty: body.presence_penalty,
        frequency_penalty: body.frequency_penalty,
    }
    .into_request(Prompt::Chat(messages))?;
    request.logprobs = logprobs;
    let fields = constrain(&mut request, constraint, "messages");
    let admitted = admit(&state, "chat", fields, request, received).await?;
    let format = ChatFormat {
        meta: ResponseMeta::new("chatcmpl", &admitted, &state, body.stream_options),
        logprobs: logprobs.is_some(),
        choices: admitted.choices,
    };
    respond(admitted, format, body.stream, |f, whole| {
        let choices: Vec<Value> = whole
            .choices
            .iter()
            .map(|choice| {
                json!({
                    "index": choice.done.index,
                    "message": {"role": "assistant", "content": choice.text},
                    "logprobs": f.logprobs.then(|| crate::logprobs::chat(&choice.logprobs)),
                    "finish_reason": openai_finish_reason(choice.done.finish_reason),
                })
            })
            .collect();
        f.meta.object("chat.completion", json!({"choices": choices, "usage": usage_json(&whole.done.usage)}))
    })
    .await
}

struct ChatFormat {
    meta: ResponseMeta,
    /// Whether the request asked for log-probabilities.
    logprobs: bool,
    /// The request's `n`.
    choices: u32,
}

#[derive(Serialize)]
struct DeltaChoice<'a> {
    index: u32,
    delta: Delta<'a>,
    logprobs: Option<Value>,
    finish_reason: Option<&'static str>,
}

#[derive(Serialize)]
struct Delta<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    role: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    content: Option<&'a str>,
}

impl ChatFormat {
    fn chunk(&self, index: u32, delta: Delta<'_>, finish_reason: Option<&'static str>) -> Event {
        self.chunk_with(index, delta, None, finish_reason)
    }

    fn chunk_with(
        &self,
        index: u32,
        delta: Delta<'_>,
        logprobs: Option<Value>,
        finish_reason: Option<&'static str>,
    ) -> Event {
        self.meta.chunk("chat.completion.chunk", DeltaChoice { index, delta, logprobs, finish_reason })
    }
}

impl StreamFormat for ChatFormat {
    fn opening(&mut self) -> Vec<Event> {
        (0..self.choices.max(1))
            .map(|index| self.chunk(index, Delta { role: Some("assistant"), content: Some("") }, None))
            .collect()
    }

    fn text(&mut self, index: u32, text: &str, _token_ids: &[u32], logprobs: &[TokenLogprob]) -> Event {
        let logprobs = self.logprobs.then(|| crate::logprobs::chat(logprobs));
        self.chunk_with(index, Delta { role: None, content: Some(text) }, logprobs, None)
    }

    fn choice_done(&mut self, done: &Completion) -> Vec<Event> {
        let mut events = Vec::with_capacity(2);
        if let Some(error) = &done.error {
            events.push(json_event(&ApiError::internal(error.clone()).body()));
        }
        let reason = Some(openai_finish_reason(done.finish_reason));
        events.push(self.chunk(done.index, Delta { role: None, content: None }, reason));
        events
    }

    fn end(&mut self, usage: &Usage) -> Vec<Event> {
        let mut events = Vec::with_capacity(2);
        if self.meta.include_usage {
            let usage = json!({"choices": [], "usage": usage_json(usage)});
            events.push(json_event(&self.meta.object("chat.completion.chunk", usage)));
        }
        events.push(Event::default().data("[DONE]"));
        events
    }
}
