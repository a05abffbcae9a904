//! Reads calls back from the text the model writes, piece by piece as it streams: content
//! up to the format's trigger, then each call's id and name as soon as they are known and
//! its arguments in fragments. Text that may be the start of a trigger is held back until
//! it is decided, so no markup ever reaches the content.
//!
//! The grammar lays a call out exactly (`{"name": "f", "arguments": {...}}`), which is what
//! lets the arguments stream: they end where the call object's braces balance. A call in
//! another shape (a list of calls in one Hermes tag, as SmolLM2's own data has it, or the
//! keys in another order) is read whole once its JSON value closes.
//!
//! A call identical (name and arguments, as JSON values) to one the reply already made, or
//! to one the conversation's last round made and has the result of (where the reply may do
//! without calls: `OutputShape` passes none under `required`), ends the reply, and is
//! dropped (small models loop: the same call until `max_tokens`, or the call they were just
//! answered): a call of a function already called is held back until it completes.
//! `keeping_repeats` turns that off.

use rillm_backend::ToolCallFormat;
use serde_json::Value;

use super::format::{syntax, CallSyntax};
use super::json_scan::{partial_suffix, JsonScan};

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
    /// Its arguments object closed: false for a call `max_tokens` cut short.
    pub complete: bool,
}

/// The exact start of a call object as the grammar writes it.
const HEADER_START: &str = "{\"name\": \"";
/// Between the name and the arguments object, under either key models use.
const HEADER_ENDS: [&str; 2] = ["\", \"arguments\": ", "\", \"parameters\": "];

#[derive(Debug)]
enum Mode {
    Content,
    /// A call object is next (after markup, or a separator).
    Header,
    /// Inside a call's arguments; the scan started inside the call object, so it ends at
    /// the object's closing brace.
    Arguments(JsonScan),
    /// A call in another shape, read whole once its value closes; it starts at this
    /// offset of `held`.
    Whole(JsonScan, usize),
    /// After a call object: its closing markup, then another call or the block's end.
    AfterCall {
        close_read: bool,
    },
    /// The reply repeated a call: it is over, and nothing after is read.
    Repeated(Repeat),
}

/// What a dropped call repeated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Repeat {
    /// A call the reply made before.
    InReply,
    /// A call the conversation's last round made and has the result of; `alone`: it is
    /// the reply's first call and nothing came before it (the reply could be made again
    /// as an answer without anything having been sent).
    Answered { alone: bool },
}

/// A call the conversation has the result of.
#[derive(Debug, Clone, PartialEq)]
pub struct AnsweredCall {
    pub name: String,
    pub arguments: Value,
}

#[derive(Debug)]
pub struct ToolCallParser {
    syntax: &'static CallSyntax,
    mode: Mode,
    /// Text not yet decided.
    pending: String,
    /// Markup and text read since the calls opened but not yet part of a call: content
    /// again if no call comes of it.
    held: String,
    calls: Vec<ParsedCall>,
    /// Content is only whitespace since the last call (dropped: it separates calls).
    after_call: bool,
    id_prefix: String,
    /// Repeated calls end the reply (the default).
    drop_repeats: bool,
    /// Events of the call being read while it may repeat an earlier one.
    held_events: Option<Vec<ToolEvent>>,
    /// Calls the conversation's last round made and has results of.
    answered: Vec<AnsweredCall>,
    /// Content came before the calls.
    had_content: bool,
}

impl ToolCallParser {
    /// Reads calls written in `format`; call ids are `id_prefix` and the call's index.
    pub fn new(id_prefix: impl Into<String>, format: ToolCallFormat) -> Self {
        Self {
            syntax: syntax(format),
            mode: Mode::Content,
            pending: String::new(),
            held: String::new(),
            calls: Vec::new(),
            after_call: false,
            id_prefix: id_prefix.into(),
            drop_repeats: true,
            held_events: None,
            answered: Vec::new(),
            had_content: false,
        }
    }

    /// Reads a reply again from its start (it restarted): what was read is void.
    pub fn start_over(&mut self) {
        let fresh = Self::new(std::mem::take(&mut self.id_prefix), ToolCallFormat::Hermes);
        let (syntax, drop_repeats, answered) = (self.syntax, self.drop_repeats, std::mem::take(&mut self.answered));
        *self = Self { syntax, drop_repeats, answered, ..fresh };
    }

    /// A call identical to one of `answered` is a repeat too.
    pub fn after(mut self, answered: Vec<AnsweredCall>) -> Self {
        self.answered = answered;
        self
    }

    /// Keeps calls that repeat earlier ones, and reads on after them.
    pub fn keeping_repeats(mut self) -> Self {
        self.drop_repeats = false;
        self
    }

    pub fn calls(&self) -> &[ParsedCall] {
        &self.calls
    }

    /// The reply repeated a call (dropped): it is over.
    pub fn repeated(&self) -> bool {
        self.repeat().is_some()
    }

    /// What the reply repeated, once it has.
    pub fn repeat(&self) -> Option<Repeat> {
        match self.mode {
            Mode::Repeated(repeat) => Some(repeat),
            _ => None,
        }
    }

    pub fn push(&mut self, text: &str) -> Vec<ToolEvent> {
        self.pending.push_str(text);
        let mut events = Vec::new();
        loop {
            let progressed = match self.mode {
                Mode::Content => self.content_step(&mut events),
                Mode::Header => self.header_step(&mut events),
                Mode::Arguments(_) => self.arguments_step(&mut events),
                Mode::Whole(..) => self.whole_step(&mut events),
                Mode::AfterCall { close_read } => self.after_call_step(close_read),
                Mode::Repeated(_) => false,
            };
            if !progressed {
                return events;
            }
        }
    }

    /// The stream ended: whatever is held back is what it is.
    pub fn finish(&mut self) -> Vec<ToolEvent> {
        let rest = std::mem::take(&mut self.pending);
        let held = std::mem::take(&mut self.held);
        let mut events = Vec::new();
        // Right after a call, the start of another one cut short (`max_tokens`) is markup.
        let after_call = self.after_call;
        let opens_a_call = |text: &str| self.syntax.trigger.starts_with(text.trim_start());
        match std::mem::replace(&mut self.mode, Mode::Content) {
            Mode::Content if after_call && opens_a_call(&rest) => {}
            Mode::Content => self.content(&rest, &mut events),
            Mode::Header | Mode::Whole(..) if after_call => {}
            // A call cut short before its name, or never closed: its text is content.
            Mode::Header | Mode::Whole(..) => self.content(&format!("{held}{rest}"), &mut events),
            Mode::Arguments(_) => {
                let index = self.calls.len() as u32 - 1;
                self.arguments(index, rest, &mut events);
            }
            // Closing markup cut short is still markup; after a repeat nothing counts.
            Mode::AfterCall { .. } | Mode::Repeated(_) => {}
        }
        events
    }

    fn content(&mut self, text: &str, events: &mut Vec<ToolEvent>) {
        if text.is_empty() || (self.after_call && text.trim().is_empty()) {
            return;
        }
        self.after_call = false;
        self.had_content |= !text.trim().is_empty();
        events.push(ToolEvent::Content(text.to_string()));
    }

    /// Content up to a trigger, or up to what may be the start of one.
    fn content_step(&mut self, events: &mut Vec<ToolEvent>) -> bool {
        let trigger = self.syntax.trigger;
        if let Some(at) = self.pending.find(trigger) {
            let before: String = self.pending.drain(..at).collect();
            self.content(&before, events);
            if self.syntax.trigger_is_markup {
                self.held = self.pending.drain(..trigger.len()).collect();
            }
            self.mode = Mode::Header;
            return true;
        }
        let keep = partial_suffix(&self.pending, trigger);
        let decided: String = self.pending.drain(..self.pending.len() - keep).collect();
        self.content(&decided, events);
        false
    }

    /// A call's header (`{"name": "f", "arguments": `), after the markup before it; or a
    /// value in another shape, read whole.
    fn header_step(&mut self, events: &mut Vec<ToolEvent>) -> bool {
        // Markup before the object: whitespace, and the format's list punctuation.
        let lead = self.pending.len()
            - self
                .pending
                .trim_start_matches(|c: char| c.is_whitespace() || self.syntax.list_punctuation.contains(&c))
                .len();
        let lead: String = self.pending.drain(..lead).collect();
        self.held.push_str(&lead);
        let body = self.pending.as_str();
        if body.is_empty() || (body.len() < HEADER_START.len() && HEADER_START.starts_with(body)) {
            return false;
        }
        if let Some(after) = body.strip_prefix(HEADER_START) {
            let Some(quote) = after.find('"') else { return false };
            let rest = &after[quote..];
            if HEADER_ENDS.iter().any(|end| rest.len() < end.len() && end.starts_with(rest)) {
                return false;
            }
            if let Some(end) = HEADER_ENDS.iter().find(|end| rest.starts_with(**end)) {
                let name = after[..quote].to_string();
                let arguments_at = HEADER_START.len() + quote + end.len();
                self.pending.drain(..arguments_at);
                self.held.clear();
                self.start_call(name, events);
                self.mode = Mode::Arguments(JsonScan::inside_object());
                return true;
            }
        }
        if body.starts_with(['{', '[']) {
            self.mode = Mode::Whole(JsonScan::default(), self.held.len());
        } else {
            // Not a call after all: the markup and what follows are content.
            let held = std::mem::take(&mut self.held);
            self.content(&held, events);
            self.mode = Mode::Content;
        }
        true
    }

    /// A call's arguments, streamed up to the brace that closes the call object.
    fn arguments_step(&mut self, events: &mut Vec<ToolEvent>) -> bool {
        let Mode::Arguments(scan) = &mut self.mode else { return false };
        let index = self.calls.len() as u32 - 1;
        match scan.feed(&self.pending) {
            Some(end) => {
                // `end` is just past the call object's `}`, which is not the arguments'.
                let fragment: String = self.pending.drain(..end - 1).collect();
                self.pending.drain(..1);
                self.arguments(index, fragment, events);
                if let Some(call) = self.calls.last_mut() {
                    call.complete = true;
                }
                self.mode = Mode::AfterCall { close_read: false };
                self.settle_held(events);
                true
            }
            None => {
                let fragment = std::mem::take(&mut self.pending);
                self.arguments(index, fragment, events);
                false
            }
        }
    }

    /// A value in another shape: a call object, or a list of them.
    fn whole_step(&mut self, events: &mut Vec<ToolEvent>) -> bool {
        let Mode::Whole(scan, start) = &mut self.mode else { return false };
        let start = *start;
        let end = scan.feed(&self.pending);
        let Some(end) = end else {
            let text = std::mem::take(&mut self.pending);
            self.held.push_str(&text);
            return false;
        };
        let value: String = self.pending.drain(..end).collect();
        self.held.push_str(&value);
        let before = self.calls.len();
        match serde_json::from_str::<Value>(&self.held[start..]) {
            Ok(Value::Array(calls)) => calls.iter().for_each(|c| self.whole_call(c, events)),
            Ok(call) => self.whole_call(&call, events),
            Err(_) => {}
        }
        if self.repeated() {
            self.held.clear();
        } else if self.calls.len() == before {
            // Nothing callable in it: never lost, it is content.
            let held = std::mem::take(&mut self.held);
            self.content(&held, events);
            self.mode = Mode::Content;
        } else {
            self.held.clear();
            self.mode = Mode::AfterCall { close_read: false };
        }
        true
    }

    /// After a call: its closing markup (Hermes' tag), then the separator and another
    /// call, the block's close, or content.
    fn after_call_step(&mut self, close_read: bool) -> bool {
        let body = self.pending.trim_start();
        let skipped = self.pending.len() - body.len();
        let close = self.syntax.call_close.trim();
        if !close_read && !close.is_empty() {
            if body.len() < close.len() && close.starts_with(body) {
                return false;
            }
            if body.starts_with(close) {
                self.pending.drain(..skipped + close.len());
            }
            self.mode = Mode::AfterCall { close_read: true };
            return true;
        }
        let separator = self.syntax.separator.trim();
        let block_close = self.syntax.block_close;
        if body.is_empty() && !(separator.is_empty() && block_close.is_empty()) {
            // Another call may follow.
            return false;
        }
        if !separator.is_empty() && body.starts_with(separator) {
            self.pending.drain(..skipped + separator.len());
            self.mode = Mode::Header;
            self.after_call = true;
            return true;
        }
        if !block_close.is_empty() && body.starts_with(block_close) {
            self.pending.drain(..skipped + block_close.len());
        }
        self.mode = Mode::Content;
        self.after_call = true;
        true
    }

    fn arguments(&mut self, index: u32, fragment: String, events: &mut Vec<ToolEvent>) {
        if fragment.is_empty() {
            return;
        }
        if let Some(call) = self.calls.last_mut() {
            call.arguments.push_str(&fragment);
        }
        self.emit(ToolEvent::Arguments { index, fragment }, events);
    }

    fn start_call(&mut self, name: String, events: &mut Vec<ToolEvent>) {
        let index = self.calls.len() as u32;
        let id = format!("{}{index}", self.id_prefix);
        let may_repeat = self.drop_repeats
            && (self.calls.iter().any(|c| c.complete && c.name == name)
                || self.answered.iter().any(|c| c.name == name));
        self.calls.push(ParsedCall { id: id.clone(), name: name.clone(), arguments: String::new(), complete: false });
        if may_repeat {
            self.held_events = Some(Vec::new());
        }
        self.emit(ToolEvent::CallStart { index, id, name }, events);
    }

    /// Sends `event`, or holds it while the call may repeat an earlier one.
    fn emit(&mut self, event: ToolEvent, events: &mut Vec<ToolEvent>) {
        match self.held_events.as_mut() {
            Some(held) => held.push(event),
            None => events.push(event),
        }
    }

    /// What the last (complete) call repeats, if anything: an earlier call of the reply's,
    /// or one the conversation has the result of; arguments compared as JSON values.
    fn repeat_of_last(&self) -> Option<Repeat> {
        let (last, earlier) = self.calls.split_last()?;
        let arguments: Value = serde_json::from_str(&last.arguments).ok()?;
        let same = |name: &str, other: &str| {
            name == last.name && serde_json::from_str::<Value>(other).ok() == Some(arguments.clone())
        };
        if earlier.iter().any(|c| c.complete && same(&c.name, &c.arguments)) {
            return Some(Repeat::InReply);
        }
        self.answered
            .iter()
            .any(|c| c.name == last.name && c.arguments == arguments)
            .then_some(Repeat::Answered { alone: earlier.is_empty() && !self.had_content })
    }

    /// The last call is complete: a repeat ends the reply without it; otherwise what was
    /// held of it goes out.
    fn settle_held(&mut self, events: &mut Vec<ToolEvent>) {
        let Some(held) = self.held_events.take() else { return };
        match self.repeat_of_last() {
            Some(repeat) => {
                self.calls.pop();
                self.mode = Mode::Repeated(repeat);
            }
            None => events.extend(held),
        }
    }

    /// A call read whole; a value without a name and arguments is not one.
    fn whole_call(&mut self, call: &Value, events: &mut Vec<ToolEvent>) {
        let name = call.get("name").and_then(Value::as_str);
        let arguments = call.get("arguments").or_else(|| call.get("parameters"));
        let (Some(name), Some(arguments)) = (name, arguments) else { return };
        let arguments = match arguments {
            Value::String(text) => text.clone(),
            other => other.to_string(),
        };
        if self.repeated() {
            return;
        }
        self.start_call(name.to_string(), events);
        let index = self.calls.len() as u32 - 1;
        self.arguments(index, arguments, events);
        if let Some(call) = self.calls.last_mut() {
            call.complete = true;
        }
        self.settle_held(events);
    }
}

#[cfg(test)]
#[path = "parse_tests.rs"]
mod tests;
