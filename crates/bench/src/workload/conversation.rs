//! Conversations as a workload holds them: the turns a session sends, each after the
//! previous reply. Read from files (`dataset`), made up (`synth`), played by `session`.

use std::sync::Arc;

use serde_json::Value;

use crate::workload::structured::OutputConstraint;
use crate::workload::tools::ToolSet;

/// A conversation: each turn is sent after the previous reply, with that live reply in
/// the history.
#[derive(Debug, Clone)]
pub struct Session {
    pub id: Arc<str>,
    pub turns: Vec<Turn>,
}

#[derive(Debug, Clone)]
pub struct Turn {
    /// Appended to the history before the turn is sent (usually one user message); for a
    /// recorded turn, the whole history as it was sent.
    pub messages: Vec<Value>,
    pub max_tokens: u32,
    /// Think time after the previous reply.
    pub delay_ms: f64,
    /// Replayed from a recording (`--save-sessions`): sent as recorded, whatever the server
    /// replied before, so every server gets the same requests.
    pub recorded: Option<RecordedTurn>,
}

impl Turn {
    /// A turn sent with the server's live replies as history.
    pub fn live(messages: Vec<Value>, max_tokens: u32, delay_ms: f64) -> Self {
        Self { messages, max_tokens, delay_ms, recorded: None }
    }
}

/// Where a recorded request stood in its conversation, and the tools it offered.
#[derive(Debug, Clone)]
pub struct RecordedTurn {
    pub tools: Option<Arc<ToolSet>>,
    /// The answer format it asked for (`response_format: json_schema`), sent again and
    /// checked in a reply without calls.
    pub answer: Option<Arc<OutputConstraint>>,
    /// The user turn it answers (1-based): the history's user messages.
    pub turn: u32,
    /// 1 for the user's turn, 2 and on for replies to tool results: the assistant messages
    /// with calls after the last user message, plus one.
    pub round: u32,
}

impl RecordedTurn {
    pub fn new(messages: &[Value], tools: Option<Arc<ToolSet>>, answer: Option<Arc<OutputConstraint>>) -> Self {
        let role = |m: &Value| m["role"].as_str().unwrap_or("").to_string();
        let turn = messages.iter().filter(|m| role(m) == "user").count() as u32;
        let since_user = messages.iter().rev().take_while(|m| role(m) != "user");
        let calls = since_user
            .filter(|m| role(m) == "assistant" && m["tool_calls"].as_array().is_some_and(|c| !c.is_empty()))
            .count() as u32;
        Self { tools, answer, turn: turn.max(1), round: calls + 1 }
    }
}
