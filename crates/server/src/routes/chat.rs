//! `POST /v1/chat/completions`, streaming and not, in the OpenAI API's shapes.

use std::time::Instant;

use axum::extract::State;
use axum::response::sse::Event;
use axum::response::Response;
use rillm_backend::{ChatOptions, Completion, FinishReason, Prompt, TokenLogprob, Usage};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::admission::admit;
use crate::error::ApiError;
use crate::json::JsonBody;
use crate::logprobs::TokenNames;
use crate::openai::{
    openai_finish_reason, respond, usage_json, GenerationParams, ResponseMeta, SamplingFields, StopFields, StopInput,
    StreamOptions,
};
use crate::reasoning::ReasoningFields;
use crate::shape::OutputShape;
use crate::sse::{json_event, CollectedChoice, StreamFormat};
use crate::state::AppState;
use crate::structured::{refuse_unknown_fields, ConstraintFields};
use crate::tools::{
    self, CallReading, HistoryCall, HistoryMessage, ToolCallParser, ToolDialect, ToolEvent, ToolRequest,
};

#[derive(Debug, Deserialize)]
pub struct ChatBody {
    model: Option<String>,
    messages: Vec<MessageInput>,
    max_tokens: Option<i64>,
    max_completion_tokens: Option<i64>,
    n: Option<i64>,
    stop: Option<StopInput>,
    #[serde(default)]
    stream: bool,
    stream_options: Option<StreamOptions>,
    ignore_eos: Option<bool>,
    #[serde(default)]
    logprobs: bool,
    top_logprobs: Option<i64>,
    /// vLLM's: log-probabilities name tokens `token_id:N`.
    return_tokens_as_token_ids: Option<bool>,
    tools: Option<Value>,
    tool_choice: Option<Value>,
    parallel_tool_calls: Option<Value>,
    /// vLLM's chat extras (`chat_options`).
    add_generation_prompt: Option<bool>,
    continue_final_message: Option<bool>,
    chat_template_kwargs: Option<serde_json::Map<String, Value>>,
    /// The deprecated spellings of `tools` and `tool_choice`: refused by name.
    functions: Option<Value>,
    function_call: Option<Value>,
    /// temperature, top_p, top_k, min_p, seed, the penalties and logit_bias.
    #[serde(flatten)]
    sampling: SamplingFields,
    /// stop_token_ids, min_tokens, include_stop_str_in_output, truncate_prompt_tokens.
    #[serde(flatten)]
    stop_fields: StopFields,
    #[serde(flatten)]
    constraints: ConstraintFields,
    /// reasoning_effort, max_reasoning_tokens, thinking_budget_tokens.
    #[serde(flatten)]
    reasoning: ReasoningFields,
    /// Everything else the client sent: refused by name unless it changes nothing.
    #[serde(flatten)]
    other: serde_json::Map<String, Value>,
}

#[derive(Debug, Deserialize)]
pub(crate) struct MessageInput {
    role: String,
    content: Option<ContentInput>,
    tool_calls: Option<Vec<Value>>,
    tool_call_id: Option<String>,
    /// An earlier reply's thought, under either name clients send it.
    reasoning_content: Option<String>,
    reasoning: Option<String>,
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

/// The chat prompt, tools offered when given; each refusal names the message and field.
pub(crate) fn render(
    input: Vec<MessageInput>,
    tools: Option<&ToolRequest>,
    dialect: ToolDialect,
    chat_options: ChatOptions,
) -> Result<Prompt, ApiError> {
    render_history(history(input)?, tools, dialect, chat_options)
}

/// `render`, from the messages already read.
fn render_history(
    history: Vec<HistoryMessage>,
    tools: Option<&ToolRequest>,
    dialect: ToolDialect,
    chat_options: ChatOptions,
) -> Result<Prompt, ApiError> {
    let mut prompt = tools::render_prompt(history, tools, dialect)?;
    if let Prompt::Chat { options, .. } = &mut prompt {
        *options = chat_options;
    }
    Ok(prompt)
}

/// Template variables the server sets itself: not to be set through `chat_template_kwargs`.
const SET_BY_THE_SERVER: &[&str] =
    &["messages", "tools", "add_generation_prompt", "continue_final_message", "bos_token", "eos_token"];

/// vLLM's chat extras, as chat and `/tokenize` take them: open the assistant's turn (the
/// default) or continue the last message, and extra template variables.
pub(crate) fn chat_options(
    add_generation_prompt: Option<bool>,
    continue_final_message: Option<bool>,
    template_kwargs: Option<serde_json::Map<String, Value>>,
) -> Result<ChatOptions, ApiError> {
    let continue_final_message = continue_final_message.unwrap_or(false);
    if continue_final_message && add_generation_prompt == Some(true) {
        return Err(ApiError::invalid(
            "continue_final_message",
            "`continue_final_message` and `add_generation_prompt` cannot both be true",
        ));
    }
    let template_kwargs = template_kwargs.unwrap_or_default();
    if let Some(key) = template_kwargs.keys().find(|k| SET_BY_THE_SERVER.contains(&k.as_str())) {
        return Err(ApiError::invalid(
            format!("chat_template_kwargs.{key}"),
            format!("`{key}` is set by the server; use the request's own fields"),
        ));
    }
    Ok(ChatOptions {
        add_generation_prompt: add_generation_prompt.unwrap_or(true),
        continue_final_message,
        template_kwargs,
    })
}

/// The messages as sent, tool calls and results included.
fn history(input: Vec<MessageInput>) -> Result<Vec<HistoryMessage>, ApiError> {
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
            let calls = m.tool_calls.unwrap_or_default();
            if !calls.is_empty() && m.role != "assistant" {
                return Err(ApiError::invalid(
                    format!("messages[{i}].tool_calls"),
                    "only assistant messages carry calls",
                ));
            }
            let tool_calls = calls
                .iter()
                .enumerate()
                .map(|(j, c)| HistoryCall::from_value(c, &format!("messages[{i}].tool_calls[{j}]")))
                .collect::<Result<_, _>>()?;
            let reasoning = m.reasoning_content.or(m.reasoning).filter(|r| !r.is_empty());
            if reasoning.is_some() && m.role != "assistant" {
                return Err(ApiError::invalid(
                    format!("messages[{i}].reasoning_content"),
                    "only assistant messages carry a thought",
                ));
            }
            Ok(HistoryMessage { role: m.role, content, tool_calls, tool_call_id: m.tool_call_id, reasoning })
        })
        .collect()
}

pub async fn chat_completions(
    State(state): State<AppState>,
    JsonBody(body): JsonBody<ChatBody>,
) -> Result<Response, ApiError> {
    let received = Instant::now();
    let state = state.for_model(body.model.as_deref()).await?;
    let logprobs = crate::logprobs::chat_request(body.logprobs, body.top_logprobs)?;
    let token_names = TokenNames::from_request(body.return_tokens_as_token_ids);
    for (present, param) in [(&body.functions, "functions"), (&body.function_call, "function_call")] {
        if present.as_ref().is_some_and(|v| !v.is_null()) {
            return Err(ApiError::invalid(param, format!("`{param}` is deprecated; send `tools` and `tool_choice`")));
        }
    }
    refuse_unknown_fields(&body.other)?;
    let stream_usage = StreamOptions::usage(body.stream_options, body.stream)?;
    let tools = ToolRequest::from_fields(body.tools, body.tool_choice, body.parallel_tool_calls)?;
    let shape = OutputShape::new(tools, body.constraints.into_constraint()?, state.shape_rules());
    let options = chat_options(body.add_generation_prompt, body.continue_final_message, body.chat_template_kwargs)?;
    let history = history(body.messages)?;
    let shape = shape.after_results(tools::answered_calls(&history));
    let mut prompt = render_history(history, shape.tools(), state.tool_dialect(), options)?;
    let reasoning = body.reasoning.for_prompt(&state, &mut prompt)?;
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
        sampling: body.sampling,
        default_temperature: 1.0,
        n: body.n,
        stop: body.stop,
        stop_fields: body.stop_fields,
        ignore_eos: body.ignore_eos,
    }
    .into_request(prompt)?;
    request.logprobs = logprobs;
    request.reasoning = reasoning;
    // Every call the reply makes parses and fits its function's schema; an answer, its format.
    let fields = shape.apply(&mut request, "messages");
    let mut admitted = admit(&state, "chat", fields, request, received).await?;
    let meta = ResponseMeta::new("chatcmpl", &admitted, &state, stream_usage);
    let reading = shape.call_reading();
    admitted.repeat_watch = reading.as_ref().and_then(|r| r.repeat_watch(admitted.choices));
    let parsers = reading.as_ref().map(|r| (0..admitted.choices).map(|i| call_parser(&meta.id, i, r)).collect());
    let reasoning_names = state.config.reasoning.field.names();
    let format = ChatFormat {
        meta,
        logprobs: logprobs.is_some(),
        token_names,
        choices: admitted.choices,
        parsers,
        reading,
        reasoning_names,
    };
    respond(admitted, format, body.stream, |f, whole| {
        let choices: Vec<Value> = whole
            .choices
            .iter()
            .map(|choice| {
                let mut message = json!({"role": "assistant", "content": choice.text});
                let mut reason = openai_finish_reason(choice.done.finish_reason);
                if let Some(reading) = &f.reading {
                    (message, reason) = message_with_calls(&f.meta.id, choice, reading);
                }
                if !choice.reasoning.is_empty() {
                    for name in f.reasoning_names {
                        message[*name] = Value::from(choice.reasoning.as_str());
                    }
                }
                json!({
                    "index": choice.done.index,
                    "message": message,
                    "logprobs": f.logprobs.then(|| crate::logprobs::chat(&choice.logprobs, f.token_names)),
                    "finish_reason": reason,
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
    /// How they name tokens.
    token_names: TokenNames,
    /// The request's `n`.
    choices: u32,
    /// With tools: each choice's text read for calls.
    parsers: Option<Vec<ToolCallParser>>,
    /// How calls are read back, with tools.
    reading: Option<CallReading>,
    /// The names a reasoning model's thought goes out under (`--reasoning-field`).
    reasoning_names: &'static [&'static str],
}

/// Call ids unique to the response and choice: `call_<response>_<choice>_<call>`.
fn call_parser(response_id: &str, choice: u32, reading: &CallReading) -> ToolCallParser {
    let response = response_id.strip_prefix("chatcmpl-").unwrap_or(response_id);
    reading.parser(format!("call_{response}_{choice}_"))
}

/// A whole reply read for calls: its message and finish reason. A call `max_tokens` cut
/// short is not a call (`finish_reason` says `length`; streamed, its fragments went out as
/// they came), and call markup is never content.
fn message_with_calls(response_id: &str, choice: &CollectedChoice, reading: &CallReading) -> (Value, &'static str) {
    let mut parser = call_parser(response_id, choice.done.index, reading);
    let mut events = parser.push(&choice.text);
    events.extend(parser.finish());
    let content: String =
        events.iter().filter_map(|e| if let ToolEvent::Content(c) = e { Some(c.as_str()) } else { None }).collect();
    let calls: Vec<Value> = parser
        .calls()
        .iter()
        .filter(|c| c.complete)
        .map(|c| json!({"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}))
        .collect();
    if calls.is_empty() {
        return (json!({"role": "assistant", "content": content}), openai_finish_reason(choice.done.finish_reason));
    }
    let content = (!content.is_empty()).then_some(content);
    (
        json!({"role": "assistant", "content": content, "tool_calls": calls}),
        tool_calls_reason(choice.done.finish_reason),
    )
}

/// A reply that called tools ended because its calls were complete.
fn tool_calls_reason(reason: FinishReason) -> &'static str {
    match reason {
        FinishReason::Stop | FinishReason::Eos => "tool_calls",
        other => openai_finish_reason(other),
    }
}

#[derive(Serialize)]
struct DeltaChoice<'a> {
    index: u32,
    delta: Delta<'a>,
    logprobs: Option<Value>,
    finish_reason: Option<&'static str>,
}

#[derive(Serialize, Default)]
struct Delta<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    role: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    content: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_calls: Option<[Value; 1]>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reasoning_content: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reasoning: Option<&'a str>,
}

impl ChatFormat {
    /// One event of a reply with tools: content, a call's start (id and name), or more of
    /// its arguments.
    fn call_chunk(&self, index: u32, event: ToolEvent, logprobs: Option<Value>) -> Event {
        let delta = match &event {
            ToolEvent::Content(text) => {
                return self.chunk_with(index, Delta { content: Some(text), ..Delta::default() }, logprobs, None)
            }
            ToolEvent::CallStart { index: call, id, name } => {
                json!({"index": call, "id": id, "type": "function", "function": {"name": name, "arguments": ""}})
            }
            ToolEvent::Arguments { index: call, fragment } => {
                json!({"index": call, "function": {"arguments": fragment}})
            }
        };
        self.chunk_with(index, Delta { tool_calls: Some([delta]), ..Delta::default() }, logprobs, None)
    }

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
        self.meta.chunk("chat.completion.chunk", index, DeltaChoice { index, delta, logprobs, finish_reason })
    }
}

impl StreamFormat for ChatFormat {
    fn opening(&mut self) -> Vec<Event> {
        (0..self.choices.max(1))
            .map(|index| {
                self.chunk(index, Delta { role: Some("assistant"), content: Some(""), ..Delta::default() }, None)
            })
            .collect()
    }

    fn text(&mut self, index: u32, text: &str, token_ids: &[u32], logprobs: &[TokenLogprob]) -> Vec<Event> {
        self.meta.streamed(index, token_ids.len());
        let mut logprobs = self.logprobs.then(|| crate::logprobs::chat(logprobs, self.token_names));
        let Some(parser) = self.parsers.as_mut().and_then(|p| p.get_mut(index as usize)) else {
            return vec![self.chunk_with(index, Delta { content: Some(text), ..Delta::default() }, logprobs, None)];
        };
        let calls = parser.push(text);
        if calls.is_empty() {
            // Held back (it may open a call); its log-probabilities still go out.
            return logprobs
                .map(|l| self.chunk_with(index, Delta { content: Some(""), ..Delta::default() }, Some(l), None))
                .into_iter()
                .collect();
        }
        calls.into_iter().map(|event| self.call_chunk(index, event, logprobs.take())).collect()
    }

    fn reasoning(&mut self, index: u32, text: &str, token_ids: &[u32], logprobs: &[TokenLogprob]) -> Vec<Event> {
        self.meta.streamed(index, token_ids.len());
        let logprobs = self.logprobs.then(|| crate::logprobs::chat(logprobs, self.token_names));
        if text.is_empty() && logprobs.is_none() {
            return Vec::new();
        }
        let named = |name: &str| self.reasoning_names.contains(&name).then_some(text);
        let delta =
            Delta { reasoning_content: named("reasoning_content"), reasoning: named("reasoning"), ..Delta::default() };
        vec![self.chunk_with(index, delta, logprobs, None)]
    }

    fn restarted(&mut self, index: u32) {
        if let Some(parser) = self.parsers.as_mut().and_then(|p| p.get_mut(index as usize)) {
            parser.start_over();
        }
    }

    fn choice_done(&mut self, done: &Completion) -> Vec<Event> {
        let mut events = Vec::with_capacity(2);
        let mut reason = openai_finish_reason(done.finish_reason);
        if let Some(parser) = self.parsers.as_mut().and_then(|p| p.get_mut(done.index as usize)) {
            let rest = parser.finish();
            if !parser.calls().is_empty() {
                reason = tool_calls_reason(done.finish_reason);
            }
            events.extend(rest.into_iter().map(|event| self.call_chunk(done.index, event, None)));
        }
        if let Some(error) = &done.error {
            events.push(json_event(&ApiError::internal(error.clone()).body()));
        }
        events.push(self.chunk(done.index, Delta::default(), Some(reason)));
        events
    }

    fn end(&mut self, usage: &Usage) -> Vec<Event> {
        self.meta.closing_events("chat.completion.chunk", usage)
    }
}
