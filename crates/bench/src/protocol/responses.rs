//! OpenAI's Responses API (`/v1/responses`) as the bench speaks it: a chat history and its
//! tools in the API's shapes (input items, flat function tools), and its stream's events
//! read into chunks: text and reasoning deltas, function calls piece by piece as chat's
//! deltas carry them, and the end with usage and why.

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::{json, Value};

use super::chunk::{error_message, n, some_usage, Chunk, OutputDetails, PromptDetails, UsageInfo};
use crate::protocol::tool_calls::{FunctionDelta, ToolCallDelta};

/// A chat history as input items: an assistant turn's calls become `function_call` items
/// after its text, a tool message a `function_call_output`; any other message goes as it is
/// (`{"role", "content"}` is an input item too).
pub(crate) fn input_items(messages: Vec<Value>) -> Vec<Value> {
    let mut items = Vec::with_capacity(messages.len());
    for message in messages {
        match message["role"].as_str() {
            Some("assistant") if message["tool_calls"].is_array() => {
                if let Some(text) = message["content"].as_str().filter(|t| !t.is_empty()) {
                    items.push(json!({"role": "assistant", "content": text}));
                }
                for call in message["tool_calls"].as_array().into_iter().flatten() {
                    let function = &call["function"];
                    items.push(json!({"type": "function_call", "call_id": call["id"], "name": function["name"],
                        "arguments": function["arguments"]}));
                }
            }
            Some("tool") => items.push(json!({"type": "function_call_output", "call_id": message["tool_call_id"],
                "output": message["content"]})),
            _ => items.push(message),
        }
    }
    items
}

/// Chat's `tools` and `tool_choice` in the Responses API's flat shapes
/// (`{"type": "function", "name", "parameters"}`, `{"type": "function", "name"}`).
pub(crate) fn tool_fields(tools: &[Value], tool_choice: &Value) -> Value {
    let tools: Vec<Value> = tools
        .iter()
        .map(|tool| {
            let mut flat = json!({"type": "function"});
            if let (Some(flat), Some(function)) = (flat.as_object_mut(), tool["function"].as_object()) {
                flat.extend(function.clone());
            }
            flat
        })
        .collect();
    let tool_choice = match tool_choice["function"]["name"].as_str() {
        Some(name) => json!({"type": "function", "name": name}),
        None => tool_choice.clone(),
    };
    json!({"tools": tools, "tool_choice": tool_choice})
}

/// One event of the stream, told by its `type`.
#[derive(Deserialize)]
struct Event<'a> {
    #[serde(rename = "type", borrow)]
    kind: Cow<'a, str>,
    #[serde(borrow, default)]
    delta: Option<Cow<'a, str>>,
    /// Which output item an item or arguments event is about: by position (OpenAI, vLLM)
    /// or by id (OpenAI; llama-server gives only this).
    #[serde(default)]
    output_index: Option<u32>,
    #[serde(default)]
    item_id: Option<String>,
    /// The item an `output_item.added` announces.
    #[serde(default)]
    item: Option<Item>,
    /// A call's whole arguments, on `function_call_arguments.done`.
    #[serde(default)]
    arguments: Option<String>,
    /// The whole response, on the events that end the stream.
    #[serde(default)]
    response: Option<ResponseState>,
}

#[derive(Deserialize)]
struct Item {
    #[serde(rename = "type", default)]
    kind: Option<String>,
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    call_id: Option<String>,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    arguments: Option<String>,
}

#[derive(Deserialize, Default)]
struct ResponseState {
    #[serde(default)]
    status: Option<String>,
    #[serde(default)]
    incomplete_details: Option<Value>,
    #[serde(default)]
    usage: Option<ResponsesUsage>,
    #[serde(default)]
    error: Option<Value>,
}

#[derive(Deserialize)]
struct ResponsesUsage {
    input_tokens: Option<u64>,
    output_tokens: Option<u64>,
    input_tokens_details: Option<PromptDetails>,
    output_tokens_details: Option<OutputDetails>,
}

/// Decodes one Responses stream. Its calls are output items among messages; they are
/// numbered in order, as chat numbers its `tool_calls`.
#[derive(Debug, Default)]
pub(super) struct ResponsesDecoder {
    calls: Vec<CallItem>,
}

/// A call's output item, as later events name it, and whether argument pieces came.
#[derive(Debug)]
struct CallItem {
    output_index: Option<u32>,
    id: Option<String>,
    pieces_came: bool,
}

impl CallItem {
    fn is(&self, event: &Event) -> bool {
        let by_index = event.output_index.is_some() && event.output_index == self.output_index;
        by_index || (event.item_id.is_some() && event.item_id == self.id)
    }
}

impl ResponsesDecoder {
    /// Text and reasoning deltas; calls as they are announced and their arguments piece by
    /// piece (whole, from `function_call_arguments.done`, where no piece came); the end,
    /// with usage and why, from `response.completed` (vLLM ends every finished stream so, its
    /// status saying whether `max_output_tokens` cut it) or OpenAI's `response.incomplete` /
    /// `response.failed`. Other structural events carry nothing.
    pub fn decode(&mut self, data: &str) -> Chunk {
        let Ok(event) = serde_json::from_str::<Event>(data) else { return Chunk::default() };
        let delta = || event.delta.as_deref().unwrap_or_default().to_string();
        match event.kind.as_ref() {
            "response.output_text.delta" => Chunk { text: delta(), ..Chunk::default() },
            "response.reasoning_text.delta" | "response.reasoning_summary_text.delta" => {
                Chunk { reasoning: delta(), ..Chunk::default() }
            }
            "response.output_item.added" => self.call_announced(&event),
            "response.function_call_arguments.delta" => self.arguments(&event, Some(delta()), true),
            "response.function_call_arguments.done" => self.arguments(&event, event.arguments.clone(), false),
            "response.completed" | "response.incomplete" | "response.failed" => end(event.response.unwrap_or_default()),
            _ => Chunk::default(),
        }
    }

    fn call_announced(&mut self, event: &Event) -> Chunk {
        let Some(item) = event.item.as_ref().filter(|item| item.kind.as_deref() == Some("function_call")) else {
            return Chunk::default();
        };
        let arguments = item.arguments.clone().unwrap_or_default();
        let pieces_came = !arguments.is_empty();
        self.calls.push(CallItem { output_index: event.output_index, id: item.id.clone(), pieces_came });
        call_piece(self.calls.len() - 1, item.call_id.clone(), item.name.clone(), arguments)
    }

    /// A piece of a call's arguments (`piece`), or the whole (taken only if no piece came).
    fn arguments(&mut self, event: &Event, arguments: Option<String>, piece: bool) -> Chunk {
        let found = self.calls.iter_mut().enumerate().find(|(_, call)| call.is(event));
        let (Some((index, call)), Some(arguments)) = (found, arguments) else { return Chunk::default() };
        if !piece && call.pieces_came {
            return Chunk::default();
        }
        call.pieces_came = true;
        call_piece(index, None, None, arguments)
    }
}

/// Call `index`'s piece as chat's `delta.tool_calls` carries it: the first names it.
fn call_piece(index: usize, id: Option<String>, name: Option<String>, arguments: String) -> Chunk {
    let function = FunctionDelta { name, arguments: Some(arguments) };
    let call = ToolCallDelta { index: Some(index as u32), id, function: Some(function) };
    Chunk { tool_calls: vec![call], ..Chunk::default() }
}

fn end(state: ResponseState) -> Chunk {
    if let Some(error) = state.error.as_ref().filter(|e| !e.is_null()) {
        return Chunk { error: Some(error_message(error)), ..Chunk::default() };
    }
    let cut = state.incomplete_details.as_ref().and_then(|d| d["reason"].as_str()).map(|reason| {
        if reason == "max_output_tokens" {
            "length".to_string()
        } else {
            reason.to_string()
        }
    });
    let finish_reason = match state.status.as_deref() {
        Some("incomplete") => cut.or(Some("length".into())),
        Some("completed") => Some("stop".into()),
        other => other.map(str::to_string),
    };
    let usage = state.usage.and_then(|u| {
        some_usage(UsageInfo {
            completion_tokens: n(u.output_tokens),
            prompt_tokens: n(u.input_tokens),
            cached_tokens: n(u.input_tokens_details.and_then(|d| d.cached_tokens)),
            reasoning_tokens: n(u.output_tokens_details.and_then(|d| d.reasoning_tokens)),
        })
    });
    Chunk { usage, finish_reason, ..Chunk::end() }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::tool_calls::{assemble, ToolCall};

    fn one(data: &str) -> Chunk {
        ResponsesDecoder::default().decode(data)
    }

    fn text(t: &str) -> Chunk {
        Chunk { text: t.into(), ..Chunk::default() }
    }

    #[test]
    fn responses_deltas_and_the_end_with_usage_and_why() {
        let created =
            r#"{"type":"response.created","sequence_number":0,"response":{"status":"in_progress","usage":null}}"#;
        assert_eq!(one(created), Chunk::default(), "structural events carry nothing");
        let delta = r#"{"type":"response.output_text.delta","item_id":"m","output_index":0,"content_index":0,"delta":" Hi","sequence_number":4}"#;
        assert_eq!(one(delta), text(" Hi"));
        let done = r#"{"type":"response.output_text.done","text":" Hi","sequence_number":5}"#;
        assert_eq!(one(done), Chunk::default(), "the whole text again is not new");
        let cut = r#"{"type":"response.completed","response":{"status":"incomplete","incomplete_details":{"reason":"max_output_tokens"},
            "usage":{"input_tokens":9,"input_tokens_details":{"cached_tokens":4},"output_tokens":3,"total_tokens":12},"error":null}}"#;
        let end = one(cut);
        assert!(end.finished && end.end);
        assert_eq!(end.finish_reason.as_deref(), Some("length"));
        assert_eq!(
            end.usage,
            Some(UsageInfo {
                completion_tokens: Some(3),
                prompt_tokens: Some(9),
                cached_tokens: Some(4),
                reasoning_tokens: None
            })
        );
        let whole = r#"{"type":"response.completed","response":{"status":"completed","usage":{"output_tokens":7}}}"#;
        assert_eq!(one(whole).finish_reason.as_deref(), Some("stop"));
        let failed = r#"{"type":"response.failed","response":{"status":"failed","error":{"code":"server_error","message":"boom"}}}"#;
        assert_eq!(one(failed).error.as_deref(), Some("boom"));
    }

    #[test]
    fn calls_are_numbered_among_output_items_and_assembled_from_their_pieces() {
        let mut d = ResponsesDecoder::default();
        let mut calls: Vec<ToolCall> = Vec::new();
        let events = [
            r#"{"type":"response.output_item.added","output_index":0,"item":{"type":"message","id":"m"}}"#,
            r#"{"type":"response.output_item.added","output_index":1,"item":{"type":"function_call","call_id":"c1","name":"get_weather","arguments":""}}"#,
            r#"{"type":"response.function_call_arguments.delta","output_index":1,"delta":"{\"city\": "}"#,
            r#"{"type":"response.function_call_arguments.delta","output_index":1,"delta":"\"Paris\"}"}"#,
            r#"{"type":"response.function_call_arguments.done","output_index":1,"arguments":"{\"city\": \"Paris\"}"}"#,
            // A server that sends a call's arguments whole, without pieces.
            r#"{"type":"response.output_item.added","output_index":2,"item":{"type":"function_call","call_id":"c2","name":"add"}}"#,
            r#"{"type":"response.function_call_arguments.done","output_index":2,"arguments":"{\"a\": 1}"}"#,
            r#"{"type":"response.function_call_arguments.delta","output_index":7,"delta":"lost"}"#,
        ];
        for event in events {
            let chunk = d.decode(event);
            assert_eq!(chunk.is_content(), !chunk.tool_calls.is_empty(), "{event}");
            chunk.tool_calls.into_iter().for_each(|delta| assemble(&mut calls, delta));
        }
        assert_eq!(
            calls,
            [
                ToolCall { id: "c1".into(), name: "get_weather".into(), arguments: r#"{"city": "Paris"}"#.into() },
                ToolCall { id: "c2".into(), name: "add".into(), arguments: r#"{"a": 1}"#.into() },
            ]
        );
    }

    #[test]
    fn calls_named_by_item_id_alone_as_llama_server_sends_them() {
        let mut d = ResponsesDecoder::default();
        let mut calls: Vec<ToolCall> = Vec::new();
        for event in [
            r#"{"type":"response.output_item.added","item":{"id":"fc_1","arguments":"","call_id":"call_1","name":"add","type":"function_call"}}"#,
            r#"{"type":"response.function_call_arguments.delta","delta":"{\"a\": ","item_id":"fc_1"}"#,
            r#"{"type":"response.function_call_arguments.delta","delta":"2}","item_id":"fc_1"}"#,
            r#"{"type":"response.function_call_arguments.delta","delta":"lost","item_id":"fc_9"}"#,
        ] {
            d.decode(event).tool_calls.into_iter().for_each(|delta| assemble(&mut calls, delta));
        }
        assert_eq!(calls, [ToolCall { id: "call_1".into(), name: "add".into(), arguments: r#"{"a": 2}"#.into() }]);
    }

    #[test]
    fn a_chat_history_and_tools_in_the_responses_shapes() {
        let history = vec![
            json!({"role": "system", "content": "Be brief."}),
            json!({"role": "user", "content": "Weather in Paris?"}),
            json!({"role": "assistant", "content": null, "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}]}),
            json!({"role": "tool", "tool_call_id": "c1", "content": "sunny"}),
        ];
        let items = input_items(history.clone());
        assert_eq!(items[..2], history[..2], "messages go as they are");
        assert_eq!(
            items[2],
            json!({"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": "{}"})
        );
        assert_eq!(items[3], json!({"type": "function_call_output", "call_id": "c1", "output": "sunny"}));
        assert_eq!(items.len(), 4, "an assistant turn without text adds no message");
        let tools = [json!({"type": "function", "function": {"name": "add", "parameters": {"type": "object"}}})];
        let named = tool_fields(&tools, &json!({"type": "function", "function": {"name": "add"}}));
        assert_eq!(
            named,
            json!({"tools": [{"type": "function", "name": "add", "parameters": {"type": "object"}}],
                "tool_choice": {"type": "function", "name": "add"}})
        );
        assert_eq!(tool_fields(&tools, &json!("required"))["tool_choice"], "required");
    }
}
