//! One Responses request's answer: the response object (status, output items, usage, and
//! the request's settings echoed as OpenAI echoes them), streamed as OpenAI's events or
//! built whole from the collected reply by the same steps.

use std::sync::Arc;

use axum::response::sse::Event;
use rillm_backend::{Completion, FinishReason, TokenLogprob, Usage};
use serde_json::{json, Value};

use super::output::OutputItems;
use super::store::ResponseStore;
use crate::logprobs::{self, ChatEntry, TokenNames};
use crate::sse::{Collected, StreamFormat};
use crate::tools::{HistoryCall, HistoryMessage, ToolCallParser, ToolEvent};

/// The request's settings a response object repeats.
pub struct Echo {
    pub instructions: Option<String>,
    pub max_output_tokens: Option<i64>,
    /// `tools` and `tool_choice` as sent (`[]` and `"auto"` when not).
    pub tools: Value,
    pub tool_choice: Value,
    pub parallel_tool_calls: bool,
    pub temperature: f32,
    pub top_p: f32,
    /// `text` as sent (`{"format": {"type": "text"}}` when not).
    pub text: Value,
    pub top_logprobs: Option<i64>,
    pub metadata: Value,
    pub previous_response_id: Option<String>,
    /// Whether the response will be kept (`store`, and a store to keep it in).
    pub store: bool,
    /// Generated apart from the request that asked (`background`), to be polled.
    pub background: bool,
    /// `reasoning` as sent (`effort` and `summary`, null when not).
    pub reasoning: Value,
}

/// Where a finished response is kept, with the conversation it answers (without its
/// instructions).
pub struct Keep {
    pub store: Arc<ResponseStore>,
    pub conversation: Vec<HistoryMessage>,
}

pub struct ResponsesFormat {
    id: String,
    created_at: u64,
    model: String,
    echo: Echo,
    items: OutputItems,
    /// With tools: the reply read for calls.
    parser: Option<ToolCallParser>,
    /// Log-probabilities' names when the request asked for them.
    logprobs: Option<TokenNames>,
    /// Log-probabilities of text held back while it might open a call.
    held_logprobs: Vec<ChatEntry>,
    /// How the reply ended, once it has.
    ended: Option<Completion>,
    /// Kept once finished, when the request asked.
    keep: Option<Keep>,
}

impl ResponsesFormat {
    /// `id`: `resp_<unique>`; item ids end with its unique part.
    pub fn new(
        id: String,
        model: String,
        echo: Echo,
        parser: Option<ToolCallParser>,
        logprobs: Option<TokenNames>,
        keep: Option<Keep>,
    ) -> Self {
        Self {
            items: OutputItems::new(id.strip_prefix("resp_").unwrap_or(&id)),
            id,
            created_at: crate::openai::unix_now(),
            model,
            echo,
            parser,
            logprobs,
            held_logprobs: Vec::new(),
            ended: None,
            keep,
        }
    }

    /// The whole response, from the collected reply.
    pub fn whole(&mut self, collected: Collected) -> Value {
        if let Some(choice) = collected.choices.into_iter().next() {
            self.reasoning(0, &choice.reasoning, &[], &[]);
            self.text(0, &choice.text, &[], &choice.logprobs);
            self.choice_done(&choice.done);
        }
        let status = self.status();
        let response = self.object(status, Some(&collected.done.usage));
        self.keep(&response);
        response
    }

    /// Keeps a finished response (cut short too, as OpenAI does), its reply added to the
    /// conversation as the assistant's turn; a background one (held in the store while it
    /// runs) however it ended, in its place, for its poller to see why.
    fn keep(&mut self, response: &Value) {
        let Some(Keep { store, mut conversation }) = self.keep.take() else { return };
        let finished = matches!(self.status(), "completed" | "incomplete");
        if finished {
            conversation.push(reply_message(self.items.items()));
        }
        let conversation = finished.then_some(conversation);
        if self.echo.background {
            store.finish(&self.id, response.clone(), conversation);
        } else if conversation.is_some() {
            store.insert(self.id.clone(), response.clone(), conversation);
        }
    }

    /// The response as a background request answers at once, and as `GET` shows it until it
    /// ends.
    pub fn in_progress(&self) -> Value {
        self.object("in_progress", None)
    }

    /// `completed`, or why not.
    fn status(&self) -> &'static str {
        match self.ended.as_ref().map(|e| e.finish_reason) {
            None => "in_progress",
            Some(FinishReason::Stop | FinishReason::Eos) => "completed",
            Some(FinishReason::Length) => "incomplete",
            Some(FinishReason::Cancelled) => "cancelled",
            Some(FinishReason::Error) => "failed",
        }
    }

    fn object(&self, status: &str, usage: Option<&Usage>) -> Value {
        let echo = &self.echo;
        let incomplete = (status == "incomplete").then(|| json!({"reason": "max_output_tokens"}));
        let error = self
            .ended
            .as_ref()
            .and_then(|e| e.error.as_ref())
            .map(|message| json!({"code": "server_error", "message": message}));
        json!({
            "id": self.id,
            "object": "response",
            "created_at": self.created_at,
            "status": status,
            "background": echo.background,
            "error": error,
            "incomplete_details": incomplete,
            "instructions": echo.instructions,
            "max_output_tokens": echo.max_output_tokens,
            "metadata": echo.metadata,
            "model": self.model,
            "output": self.items.items(),
            "parallel_tool_calls": echo.parallel_tool_calls,
            "previous_response_id": echo.previous_response_id,
            "reasoning": echo.reasoning,
            "store": echo.store,
            "temperature": echo.temperature,
            "text": echo.text,
            "tool_choice": echo.tool_choice,
            "tools": echo.tools,
            "top_logprobs": echo.top_logprobs,
            "top_p": echo.top_p,
            "truncation": "disabled",
            "usage": usage.map(usage_json),
        })
    }

    fn tool_event(&mut self, event: ToolEvent) -> Vec<Event> {
        match event {
            ToolEvent::Content(text) => {
                let logprobs = std::mem::take(&mut self.held_logprobs);
                self.items.text(&text, &logprobs)
            }
            ToolEvent::CallStart { id, name, .. } => {
                // What was held back was the call's markup.
                self.held_logprobs.clear();
                self.items.call_start(&id, &name)
            }
            ToolEvent::Arguments { fragment, .. } => {
                self.held_logprobs.clear();
                self.items.arguments(&fragment)
            }
        }
    }
}

/// A reply's output items as the assistant's turn of a chat history: its text, its calls.
fn reply_message(items: &[Value]) -> HistoryMessage {
    let text = |item: &Value| -> String {
        let parts = item["content"].as_array().into_iter().flatten();
        parts.filter_map(|part| part["text"].as_str()).collect()
    };
    let field = |item: &Value, key: &str| item[key].as_str().unwrap_or_default().to_string();
    let thought: String = items.iter().filter(|i| i["type"] == "reasoning").map(text).collect();
    HistoryMessage {
        role: "assistant".into(),
        content: items.iter().filter(|i| i["type"] == "message").map(text).collect(),
        tool_calls: items
            .iter()
            .filter(|i| i["type"] == "function_call")
            .map(|i| HistoryCall { id: field(i, "call_id"), name: field(i, "name"), arguments: field(i, "arguments") })
            .collect(),
        tool_call_id: None,
        reasoning: (!thought.is_empty()).then_some(thought),
    }
}

/// The Responses API's usage: input and output tokens, cached input among them.
fn usage_json(usage: &Usage) -> Value {
    json!({
        "input_tokens": usage.prompt_tokens,
        "input_tokens_details": {"cached_tokens": usage.cached_tokens},
        "output_tokens": usage.completion_tokens,
        "output_tokens_details": {"reasoning_tokens": usage.reasoning_tokens},
        "total_tokens": usage.prompt_tokens + usage.completion_tokens,
    })
}

impl StreamFormat for ResponsesFormat {
    fn opening(&mut self) -> Vec<Event> {
        let response = self.object("in_progress", None);
        vec![
            self.items.event("response.created", json!({"response": response})),
            self.items.event("response.in_progress", json!({"response": response})),
        ]
    }

    fn text(&mut self, _index: u32, text: &str, _token_ids: &[u32], logprobs: &[TokenLogprob]) -> Vec<Event> {
        let entries = self.logprobs.map(|names| logprobs::entries(logprobs, names)).unwrap_or_default();
        let Some(parser) = self.parser.as_mut() else { return self.items.text(text, &entries) };
        let events = parser.push(text);
        self.held_logprobs.extend(entries);
        events.into_iter().flat_map(|event| self.tool_event(event)).collect()
    }

    fn reasoning(&mut self, _index: u32, text: &str, _token_ids: &[u32], _logprobs: &[TokenLogprob]) -> Vec<Event> {
        self.items.reasoning(text)
    }

    fn restarted(&mut self, _index: u32) {
        if let Some(parser) = self.parser.as_mut() {
            parser.start_over();
        }
        self.held_logprobs.clear();
    }

    fn choice_done(&mut self, done: &Completion) -> Vec<Event> {
        let rest = self.parser.as_mut().map(ToolCallParser::finish).unwrap_or_default();
        let mut events: Vec<Event> = rest.into_iter().flat_map(|event| self.tool_event(event)).collect();
        let complete = if self.items.call_open() {
            self.parser.as_ref().and_then(|p| p.calls().last()).is_some_and(|call| call.complete)
        } else {
            done.finish_reason != FinishReason::Length
        };
        events.extend(self.items.close(complete));
        self.ended = Some(done.clone());
        events
    }

    /// As vLLM ends every stream that finished, cut short or not: `response.completed`,
    /// the response's `status` and `incomplete_details` saying whether `max_output_tokens`
    /// cut it (OpenAI sends `response.incomplete` then, but AIPerf reads usage from
    /// `response.completed` only, and its fixed-length runs all end so). A failure is
    /// `response.failed`.
    fn end(&mut self, usage: &Usage) -> Vec<Event> {
        let status = self.status();
        let kind = match status {
            "completed" | "incomplete" => "response.completed",
            _ => "response.failed",
        };
        let response = self.object(status, Some(usage));
        self.keep(&response);
        vec![self.items.event(kind, json!({"response": response}))]
    }
}
