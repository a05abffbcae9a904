//! Reads calls back from the text the model writes, piece by piece as it streams: content
//! up to a call opener, then each call's id and name as soon as they are known and its
//! arguments in fragments. Text that may be the start of an opener is held back until it is
//! decided, so no markup ever reaches the content.
//!
//! The grammar lays a call out exactly (`{"name": "f", "arguments": {...}}`), which is what
//! lets the arguments stream; a call in another shape (a list of calls in one tag, as
//! SmolLM2's own data has it, or `parameters` for `arguments`) is read whole at its close.

use serde_json::Value;

use super::grammar::{CALL_CLOSE, CALL_OPEN};

/// What a piece of text turned out to be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolEvent {
    Content(String),
    /// Call `index` opens, calling `name`.
    CallStart {
        index: u32,
        id: String,
        name: String,
    },
    /// More of call `index`'s arguments (JSON text; all fragments together are the object).
    Arguments {
        index: u32,
        fragment: String,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParsedCall {
    pub id: String,
    pub name: String,
    pub arguments: String,
    /// Its close was read: false for a call `max_tokens` cut short.
    pub complete: bool,
}

/// The exact start of a call's object as the grammar writes it.
const HEADER_START: &str = "{\"name\": \"";
const HEADER_END: &str = "\", \"arguments\": ";
/// What follows the arguments object in a call the grammar wrote.
const TRAILER: &str = "}\n</tool_call>";

#[derive(Debug)]
enum Mode {
    Content,
    /// Inside a call; `streaming` once its header was read (its arguments stream).
    Call {
        streaming: bool,
    },
}

#[derive(Debug)]
pub struct ToolCallParser {
    mode: Mode,
    /// Text not yet decided.
    pending: String,
    calls: Vec<ParsedCall>,
    /// Content is only whitespace since the last call (dropped: it separates calls).
    after_call: bool,
    id_prefix: String,
}

impl ToolCallParser {
    /// Call ids are `id_prefix` and the call's index.
    pub fn new(id_prefix: impl Into<String>) -> Self {
        Self {
            mode: Mode::Content,
            pending: String::new(),
            calls: Vec::new(),
            after_call: false,
            id_prefix: id_prefix.into(),
        }
    }

    pub fn calls(&self) -> &[ParsedCall] {
        &self.calls
    }

    pub fn push(&mut self, text: &str) -> Vec<ToolEvent> {
        self.pending.push_str(text);
        let mut events = Vec::new();
        loop {
            let progressed = match self.mode {
                Mode::Content => self.content_step(&mut events),
                Mode::Call { streaming: false } => self.header_step(&mut events),
                Mode::Call { streaming: true } => self.arguments_step(&mut events),
            };
            if !progressed {
                return events;
            }
        }
    }

    /// The stream ended: whatever is held back is what it is.
    pub fn finish(&mut self) -> Vec<ToolEvent> {
        let rest = std::mem::take(&mut self.pending);
        let mut events = Vec::new();
        match self.mode {
            Mode::Content => self.content(&rest, &mut events),
            // A call cut short (`max_tokens`) before its name: its text is content.
            Mode::Call { streaming: false } => self.content(&format!("{CALL_OPEN}{rest}"), &mut events),
            Mode::Call { streaming: true } => {
                if let Some(call) = self.calls.last_mut() {
                    call.arguments.push_str(&rest);
                    events.push(ToolEvent::Arguments { index: self.calls.len() as u32 - 1, fragment: rest });
                }
            }
        }
        self.mode = Mode::Content;
        events
    }

    fn content(&mut self, text: &str, events: &mut Vec<ToolEvent>) {
        if text.is_empty() || (self.after_call && text.trim().is_empty()) {
            return;
        }
        self.after_call = false;
        events.push(ToolEvent::Content(text.to_string()));
    }

    /// Content up to an opener, or up to what may be the start of one.
    fn content_step(&mut self, events: &mut Vec<ToolEvent>) -> bool {
        if let Some(at) = self.pending.find(CALL_OPEN) {
            let before: String = self.pending[..at].to_string();
            self.content(&before, events);
            self.pending.drain(..at + CALL_OPEN.len());
            self.mode = Mode::Call { streaming: false };
            return true;
        }
        let keep = partial_suffix(&self.pending, CALL_OPEN);
        let decided: String = self.pending.drain(..self.pending.len() - keep).collect();
        self.content(&decided, events);
        false
    }

    /// A call's header (`{"name": "f", "arguments": `), or the whole call if it is not
    /// laid out as the grammar lays it.
    fn header_step(&mut self, events: &mut Vec<ToolEvent>) -> bool {
        let body = self.pending.trim_start();
        if body.len() < HEADER_START.len() && HEADER_START.starts_with(body) {
            return false;
        }
        if let Some(after) = body.strip_prefix(HEADER_START) {
            let Some(quote) = after.find('"') else { return false };
            let (name, rest) = after.split_at(quote);
            if rest.len() < HEADER_END.len() && HEADER_END.starts_with(rest) {
                return false;
            }
            if let Some(arguments) = rest.strip_prefix(HEADER_END) {
                let (name, arguments) = (name.to_string(), arguments.to_string());
                self.start_call(name, events);
                self.pending = arguments;
                self.mode = Mode::Call { streaming: true };
                return true;
            }
        }
        // Another shape: read it whole at the close.
        let Some(at) = self.pending.find(CALL_CLOSE) else { return false };
        let body: String = self.pending[..at].to_string();
        self.pending.drain(..at + CALL_CLOSE.len());
        match serde_json::from_str::<Value>(body.trim()) {
            Ok(Value::Array(calls)) => calls.iter().for_each(|c| self.whole_call(c, &body, events)),
            Ok(call) => self.whole_call(&call, &body, events),
            Err(_) => self.content(&format!("{CALL_OPEN}{body}{CALL_CLOSE}"), events),
        }
        self.mode = Mode::Content;
        self.after_call = true;
        true
    }

    /// A call's arguments, streamed but for what may be the trailer.
    fn arguments_step(&mut self, events: &mut Vec<ToolEvent>) -> bool {
        let index = self.calls.len() as u32 - 1;
        if let Some(at) = self.pending.find(TRAILER) {
            let fragment: String = self.pending[..at].to_string();
            self.pending.drain(..at + TRAILER.len());
            self.arguments(index, fragment, events);
            if let Some(call) = self.calls.last_mut() {
                call.complete = true;
            }
            self.mode = Mode::Content;
            self.after_call = true;
            return true;
        }
        let keep = partial_suffix(&self.pending, TRAILER);
        let fragment: String = self.pending.drain(..self.pending.len() - keep).collect();
        self.arguments(index, fragment, events);
        false
    }

    fn arguments(&mut self, index: u32, fragment: String, events: &mut Vec<ToolEvent>) {
        if fragment.is_empty() {
            return;
        }
        if let Some(call) = self.calls.last_mut() {
            call.arguments.push_str(&fragment);
        }
        events.push(ToolEvent::Arguments { index, fragment });
    }

    fn start_call(&mut self, name: String, events: &mut Vec<ToolEvent>) {
        let index = self.calls.len() as u32;
        let id = format!("{}{index}", self.id_prefix);
        self.calls.push(ParsedCall { id: id.clone(), name: name.clone(), arguments: String::new(), complete: false });
        events.push(ToolEvent::CallStart { index, id, name });
    }

    fn whole_call(&mut self, call: &Value, raw: &str, events: &mut Vec<ToolEvent>) {
        let name = call.get("name").and_then(Value::as_str);
        let arguments = call.get("arguments").or_else(|| call.get("parameters"));
        match (name, arguments) {
            (Some(name), Some(arguments)) => {
                let arguments = match arguments {
                    Value::String(text) => text.clone(),
                    other => other.to_string(),
                };
                self.start_call(name.to_string(), events);
                let index = self.calls.len() as u32 - 1;
                self.arguments(index, arguments, events);
                if let Some(call) = self.calls.last_mut() {
                    call.complete = true;
                }
            }
            _ => self.content(&format!("{CALL_OPEN}{raw}{CALL_CLOSE}"), events),
        }
    }
}

/// Bytes at the end of `text` that begin `marker` (held back: they may become it).
fn partial_suffix(text: &str, marker: &str) -> usize {
    (1..marker.len().min(text.len() + 1))
        .rev()
        .find(|&n| text.is_char_boundary(text.len() - n) && marker.starts_with(&text[text.len() - n..]))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds `text` in pieces of `size` bytes (on char boundaries) and gathers the events.
    fn feed(text: &str, size: usize) -> (String, Vec<ParsedCall>, Vec<ToolEvent>) {
        let mut parser = ToolCallParser::new("call_");
        let mut events = Vec::new();
        let mut start = 0;
        while start < text.len() {
            let mut end = (start + size).min(text.len());
            while !text.is_char_boundary(end) {
                end += 1;
            }
            events.extend(parser.push(&text[start..end]));
            start = end;
        }
        events.extend(parser.finish());
        let content: String =
            events.iter().filter_map(|e| if let ToolEvent::Content(c) = e { Some(c.as_str()) } else { None }).collect();
        (content, parser.calls().to_vec(), events)
    }

    const TWO_CALLS: &str = "Let me check.<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>";

    #[test]
    fn calls_stream_out_of_any_piece_sizes_and_no_markup_reaches_the_content() {
        for size in [1, 2, 3, 5, 7, 13, 1000] {
            let (content, calls, events) = feed(TWO_CALLS, size);
            assert_eq!(content, "Let me check.", "pieces of {size}");
            assert_eq!(calls.len(), 2);
            assert!(calls.iter().all(|c| c.complete));
            assert_eq!((calls[0].name.as_str(), calls[0].arguments.as_str()), ("get_weather", "{\"city\": \"Oslo\"}"));
            assert_eq!((calls[1].name.as_str(), calls[1].arguments.as_str()), ("get_time", "{}"));
            assert_eq!(calls[1].id, "call_1");
            let first_start = events.iter().position(|e| matches!(e, ToolEvent::CallStart { index: 0, .. }));
            let first_args = events.iter().position(|e| matches!(e, ToolEvent::Arguments { index: 0, .. }));
            assert!(first_start < first_args, "id and name come before the arguments");
            if size == 1 {
                let fragments = events.iter().filter(|e| matches!(e, ToolEvent::Arguments { index: 0, .. })).count();
                assert!(fragments > 3, "arguments stream as they come: {fragments} fragments");
            }
        }
    }

    #[test]
    fn text_that_only_looks_like_an_opener_is_content_and_other_shapes_are_read_whole() {
        let (content, calls, _) = feed("a <tool x> b <tool_cal", 1);
        assert_eq!((content.as_str(), calls.len()), ("a <tool x> b <tool_cal", 0));
        let list = "<tool_call>\n[{\"name\": \"f\", \"arguments\": {\"x\": 1}}, {\"name\": \"g\", \"parameters\": {}}]\n</tool_call>";
        let (content, calls, _) = feed(list, 4);
        assert_eq!(content, "");
        assert_eq!(calls.iter().map(|c| c.name.as_str()).collect::<Vec<_>>(), ["f", "g"]);
        assert_eq!(calls[0].arguments, "{\"x\":1}");
        let (content, calls, _) = feed("<tool_call>\nnot json\n</tool_call>", 3);
        assert_eq!((content.as_str(), calls.len()), ("<tool_call>\nnot json\n</tool_call>", 0), "never lost");
        let (content, _, _) = feed("<tool_call>\n{\"na", 2);
        assert_eq!(content, "<tool_call>\n{\"na", "a call cut before its name is content");
        let (_, calls, _) = feed(&TWO_CALLS[..TWO_CALLS.len() - 14], 3);
        assert_eq!(calls.iter().map(|c| c.complete).collect::<Vec<_>>(), [true, false], "the cut call is marked");
    }
}
