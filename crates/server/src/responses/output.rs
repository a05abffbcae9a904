//! The Responses API's output items, built from the reply as the tool-call parser reads it:
//! a `reasoning` item for a reasoning model's thought, a `message` item for text, a
//! `function_call` item per call, each announced by the events
//! OpenAI streams (`response.output_item.added`, `response.output_text.delta`,
//! `response.function_call_arguments.delta`, `response.output_item.done`, ...) as it grows.
//! A whole response is built by the same calls in one pass, so a streamed and a whole answer
//! cannot disagree.

use axum::response::sse::Event;
use serde::Serialize;
use serde_json::{json, Value};

use crate::logprobs::ChatEntry;
use crate::sse::json_event;

/// The item being written.
enum OpenItem {
    Reasoning { id: String, text: String },
    Message { id: String, text: String, logprobs: Vec<Value> },
    Call { id: String, call_id: String, name: String, arguments: String },
}

/// The items so far, the one being written, and the events' sequence numbers.
pub struct OutputItems {
    /// Item ids are `msg_<response>_<index>` and `fc_<response>_<index>`.
    response: String,
    items: Vec<Value>,
    open: Option<OpenItem>,
    sequence: u64,
}

/// `response.output_text.delta` (with its `logprobs`) and `response.reasoning_text.delta`
/// (without), serialised from borrowed fields (once per token).
#[derive(Serialize)]
struct TextDelta<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    sequence_number: u64,
    item_id: &'a str,
    output_index: usize,
    content_index: u32,
    delta: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    logprobs: Option<&'a [ChatEntry]>,
}

/// `response.function_call_arguments.delta`.
#[derive(Serialize)]
struct ArgumentsDelta<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    sequence_number: u64,
    item_id: &'a str,
    output_index: usize,
    delta: &'a str,
}

const TEXT_DELTA: &str = "response.output_text.delta";
const REASONING_DELTA: &str = "response.reasoning_text.delta";
const ARGUMENTS_DELTA: &str = "response.function_call_arguments.delta";

impl OutputItems {
    pub fn new(response: &str) -> Self {
        Self { response: response.to_string(), items: Vec::new(), open: None, sequence: 0 }
    }

    /// The items written so far (the open one not among them).
    pub fn items(&self) -> &[Value] {
        &self.items
    }

    /// An event of the response: `type` (also its SSE name) and `sequence_number` added to
    /// `fields`.
    pub fn event(&mut self, kind: &'static str, mut fields: Value) -> Event {
        if let Value::Object(map) = &mut fields {
            map.insert("type".into(), kind.into());
            map.insert("sequence_number".into(), self.next_sequence().into());
        }
        json_event(&fields).event(kind)
    }

    fn next_sequence(&mut self) -> u64 {
        self.sequence += 1;
        self.sequence - 1
    }

    /// The open item's place in `output`.
    fn output_index(&self) -> usize {
        self.items.len()
    }

    /// More text of the reply, with its tokens' log-probabilities (when asked for).
    pub fn text(&mut self, text: &str, logprobs: &[ChatEntry]) -> Vec<Event> {
        if text.is_empty() && logprobs.is_empty() {
            return Vec::new();
        }
        let mut events = Vec::new();
        if !matches!(self.open, Some(OpenItem::Message { .. })) {
            let item = json!({"type": "message", "status": "in_progress", "role": "assistant", "content": []});
            let (id, opened) = self.open_with_part("msg", item, output_text("", &[]));
            events = opened;
            self.open = Some(OpenItem::Message { id, text: String::new(), logprobs: Vec::new() });
        }
        let (sequence_number, output_index) = (self.next_sequence(), self.output_index());
        if let Some(OpenItem::Message { id, text: whole, logprobs: all }) = &mut self.open {
            whole.push_str(text);
            all.extend(logprobs.iter().filter_map(|l| serde_json::to_value(l).ok()));
            let delta = TextDelta {
                kind: TEXT_DELTA,
                sequence_number,
                item_id: id,
                output_index,
                content_index: 0,
                delta: text,
                logprobs: Some(logprobs),
            };
            events.push(json_event(&delta).event(TEXT_DELTA));
        }
        events
    }

    /// More of the reply's thought (a reasoning model's): a `reasoning` item whose content
    /// is its `reasoning_text`, its summary empty (none is written).
    pub fn reasoning(&mut self, text: &str) -> Vec<Event> {
        if text.is_empty() {
            return Vec::new();
        }
        let mut events = Vec::new();
        if !matches!(self.open, Some(OpenItem::Reasoning { .. })) {
            let item = json!({"type": "reasoning", "summary": [], "content": [], "status": "in_progress"});
            let (id, opened) = self.open_with_part("rs", item, reasoning_text(""));
            events = opened;
            self.open = Some(OpenItem::Reasoning { id, text: String::new() });
        }
        let (sequence_number, output_index) = (self.next_sequence(), self.output_index());
        if let Some(OpenItem::Reasoning { id, text: whole }) = &mut self.open {
            whole.push_str(text);
            let delta = TextDelta {
                kind: REASONING_DELTA,
                sequence_number,
                item_id: id,
                output_index,
                content_index: 0,
                delta: text,
                logprobs: None,
            };
            events.push(json_event(&delta).event(REASONING_DELTA));
        }
        events
    }

    /// Closes the open item and announces one whose content is a single part (a message's
    /// `output_text`, a thought's `reasoning_text`): its id (`PREFIX_<response>_<index>`)
    /// and the events so far (`response.output_item.added`, `response.content_part.added`).
    fn open_with_part(&mut self, prefix: &str, mut item: Value, part: Value) -> (String, Vec<Event>) {
        let mut events = self.close(true);
        let id = format!("{prefix}_{}_{}", self.response, self.items.len());
        let output_index = self.output_index();
        item["id"] = Value::from(id.as_str());
        events.push(self.event("response.output_item.added", json!({"output_index": output_index, "item": item})));
        let added = json!({"item_id": id, "output_index": output_index, "content_index": 0, "part": part});
        events.push(self.event("response.content_part.added", added));
        (id, events)
    }

    /// A call opens: `call_id` is what the client answers with its output.
    pub fn call_start(&mut self, call_id: &str, name: &str) -> Vec<Event> {
        let mut events = self.close(true);
        let id = format!("fc_{}_{}", self.response, self.items.len());
        let item = call_item(&id, call_id, name, "", "in_progress");
        let output_index = self.output_index();
        events.push(self.event("response.output_item.added", json!({"output_index": output_index, "item": item})));
        self.open = Some(OpenItem::Call { id, call_id: call_id.into(), name: name.into(), arguments: String::new() });
        events
    }

    /// More of the open call's arguments (JSON text).
    pub fn arguments(&mut self, fragment: &str) -> Vec<Event> {
        let (sequence_number, output_index) = (self.next_sequence(), self.output_index());
        let Some(OpenItem::Call { id, arguments, .. }) = &mut self.open else { return Vec::new() };
        arguments.push_str(fragment);
        let delta =
            ArgumentsDelta { kind: ARGUMENTS_DELTA, sequence_number, item_id: id, output_index, delta: fragment };
        vec![json_event(&delta).event(ARGUMENTS_DELTA)]
    }

    /// Ends the open item: `complete` unless the reply was cut short inside it (a call
    /// whose arguments never closed, text cut by `max_output_tokens`).
    pub fn close(&mut self, complete: bool) -> Vec<Event> {
        let Some(open) = self.open.take() else { return Vec::new() };
        let status = if complete { "completed" } else { "incomplete" };
        let output_index = self.output_index();
        let mut events = Vec::with_capacity(3);
        let item = match open {
            OpenItem::Reasoning { id, text } => {
                let part = reasoning_text(&text);
                let at = json!({"item_id": id, "output_index": output_index, "content_index": 0});
                let mut done = at.clone();
                done["text"] = text.clone().into();
                events.push(self.event("response.reasoning_text.done", done));
                let mut part_done = at;
                part_done["part"] = part.clone();
                events.push(self.event("response.content_part.done", part_done));
                json!({"id": id, "type": "reasoning", "summary": [], "content": [part], "status": status})
            }
            OpenItem::Message { id, text, logprobs } => {
                let part = output_text(&text, &logprobs);
                let at = |mut fields: Value| {
                    fields["item_id"] = id.clone().into();
                    fields["output_index"] = output_index.into();
                    fields["content_index"] = 0.into();
                    fields
                };
                events.push(self.event("response.output_text.done", at(json!({"text": text, "logprobs": logprobs}))));
                events.push(self.event("response.content_part.done", at(json!({"part": part}))));
                json!({"id": id, "type": "message", "status": status, "role": "assistant", "content": [part]})
            }
            OpenItem::Call { id, call_id, name, arguments } => {
                let done = json!({"item_id": id, "output_index": output_index, "name": name, "arguments": arguments});
                events.push(self.event("response.function_call_arguments.done", done));
                call_item(&id, &call_id, &name, &arguments, status)
            }
        };
        events.push(self.event("response.output_item.done", json!({"output_index": output_index, "item": item})));
        self.items.push(item);
        events
    }

    /// Whether the open item is a call (its completeness is the parser's to say).
    pub fn call_open(&self) -> bool {
        matches!(self.open, Some(OpenItem::Call { .. }))
    }
}

fn reasoning_text(text: &str) -> Value {
    json!({"type": "reasoning_text", "text": text})
}

fn output_text(text: &str, logprobs: &[Value]) -> Value {
    json!({"type": "output_text", "text": text, "annotations": [], "logprobs": logprobs})
}

fn call_item(id: &str, call_id: &str, name: &str, arguments: &str, status: &str) -> Value {
    json!({"id": id, "type": "function_call", "status": status, "call_id": call_id, "name": name, "arguments": arguments})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_then_calls_become_items_in_order() {
        let mut output = OutputItems::new("r1");
        assert!(output.text("", &[]).is_empty(), "nothing to say opens no item");
        assert_eq!(output.text("Let me ", &[]).len(), 3, "item added, part added, delta");
        assert_eq!(output.text("check.", &[]).len(), 1);
        assert_eq!(output.call_start("call_a", "get_weather").len(), 4, "text and part done, item done, call added");
        output.arguments("{\"city\": ");
        output.arguments("\"Paris\"}");
        output.call_start("call_b", "get_time");
        output.arguments("{}");
        assert!(output.call_open());
        assert_eq!(output.close(false).len(), 2, "arguments done, item done");
        let items = output.items();
        assert_eq!(items.len(), 3);
        assert_eq!(items[0]["content"][0]["text"], "Let me check.");
        assert_eq!((items[0]["id"].as_str(), items[0]["status"].as_str()), (Some("msg_r1_0"), Some("completed")));
        assert_eq!(items[1]["arguments"], "{\"city\": \"Paris\"}");
        assert_eq!((items[1]["call_id"].as_str(), items[1]["id"].as_str()), (Some("call_a"), Some("fc_r1_1")));
        assert_eq!(items[2]["status"], "incomplete", "a call cut short says so");
        assert!(output.close(true).is_empty(), "nothing is open any more");
    }

    #[test]
    fn a_thought_is_a_reasoning_item_before_the_answer() {
        let mut output = OutputItems::new("r2");
        assert!(output.reasoning("").is_empty());
        assert_eq!(output.reasoning("Two and ").len(), 3, "item added, part added, delta");
        assert_eq!(output.reasoning("two.").len(), 1);
        assert_eq!(output.text("4", &[]).len(), 6, "thought done, part done, item done; message added, part, delta");
        output.close(true);
        let items = output.items();
        assert_eq!(items[0]["type"], "reasoning");
        assert_eq!(items[0]["content"], json!([{"type": "reasoning_text", "text": "Two and two."}]));
        assert_eq!(items[0]["summary"], json!([]));
        assert_eq!(items[1]["content"][0]["text"], "4");
    }
}
