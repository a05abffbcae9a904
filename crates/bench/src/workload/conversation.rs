//! Conversations as a workload holds them: the turns a session sends, each after the
//! previous reply. Read from files (`dataset`), made up (`synth`), played by `session`.

use std::sync::Arc;

use serde_json::Value;

/// A conversation: each turn is sent after the previous reply, with that live reply in
/// the history.
#[derive(Debug, Clone)]
pub struct Session {
    pub id: Arc<str>,
    pub turns: Vec<Turn>,
}

#[derive(Debug, Clone)]
pub struct Turn {
    /// Appended to the history before the turn is sent (usually one user message).
    pub messages: Vec<Value>,
    pub max_tokens: u32,
    /// Think time after the previous reply.
    pub delay_ms: f64,
}
