//! What one SSE event of any engine's stream carried, in one shape for the client (`Chunk`),
//! and the small readers every protocol's decoder shares.

use serde::Deserialize;
use serde_json::Value;

/// What a server's usage report said; each count only where it said it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UsageInfo {
    pub completion_tokens: Option<u32>,
    pub prompt_tokens: Option<u32>,
    /// Prompt tokens the server reused from its cache.
    pub cached_tokens: Option<u32>,
    /// Completion tokens a reasoning model spent thinking (`completion_tokens_details`,
    /// the Responses API's `output_tokens_details`).
    pub reasoning_tokens: Option<u32>,
}

impl UsageInfo {
    pub fn completion(n: u32) -> Self {
        Self { completion_tokens: Some(n), ..Self::default() }
    }

    pub(super) fn is_empty(&self) -> bool {
        *self == Self::default()
    }
}

/// What one SSE event carried.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Chunk {
    /// Answer text new in this event.
    pub text: String,
    /// Reasoning text new in this event (`reasoning_content` / `reasoning` deltas).
    pub reasoning: String,
    /// Output tokens this event carries, where the protocol says.
    pub tokens: Option<u32>,
    pub usage: Option<UsageInfo>,
    /// The server said the generation is over (finish reason, `stop: true`, `generated_text`).
    pub finished: bool,
    /// Why, where the server said: `length` when `max_tokens` cut it (llama.cpp's `limit`
    /// included), else its own word (`stop`, `eos`, ...).
    pub finish_reason: Option<String>,
    /// The stream's own end marker: nothing of interest follows.
    pub end: bool,
    pub error: Option<String>,
    /// Pieces of tool calls (`delta.tool_calls`, chat).
    pub tool_calls: Vec<super::tool_calls::ToolCallDelta>,
}

impl Chunk {
    /// Model output arrived: it counts for TTFT and the gaps between events.
    pub fn is_content(&self) -> bool {
        !self.text.is_empty()
            || !self.reasoning.is_empty()
            || self.tokens.is_some_and(|t| t > 0)
            || !self.tool_calls.is_empty()
    }

    pub(super) fn end() -> Self {
        Self { finished: true, end: true, ..Self::default() }
    }
}

/// `prompt_tokens_details` / `input_tokens_details`: what the server reused from its cache.
#[derive(Deserialize)]
pub(super) struct PromptDetails {
    pub cached_tokens: Option<u64>,
}

/// `completion_tokens_details` / `output_tokens_details`.
#[derive(Deserialize)]
pub(super) struct OutputDetails {
    pub reasoning_tokens: Option<u64>,
}

/// A server's count, as the client keeps counts.
pub(super) fn n(x: Option<u64>) -> Option<u32> {
    x.map(|x| x.min(u64::from(u32::MAX)) as u32)
}

pub(super) fn some_usage(usage: UsageInfo) -> Option<UsageInfo> {
    (!usage.is_empty()).then_some(usage)
}

/// An error's message: an OpenAI error object's, or the string itself.
pub(super) fn error_message(e: &Value) -> String {
    e["message"].as_str().or(e.as_str()).map_or_else(|| e.to_string(), str::to_string)
}
