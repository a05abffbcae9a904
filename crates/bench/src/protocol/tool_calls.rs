//! Tool calls as OpenAI streams deliver them: pieces (`delta.tool_calls[]`) put back
//! together into whole calls. The Responses API's events are turned into the same pieces.

use serde::Deserialize;

/// One call as the stream delivered it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    pub arguments: String,
}

/// A piece of a streamed call (`delta.tool_calls[]`): the first names it, the rest add
/// argument text.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct ToolCallDelta {
    #[serde(default)]
    pub index: Option<u32>,
    #[serde(default)]
    pub id: Option<String>,
    #[serde(default)]
    pub function: Option<FunctionDelta>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct FunctionDelta {
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub arguments: Option<String>,
}

/// Adds one streamed piece to the calls assembled so far.
pub fn assemble(calls: &mut Vec<ToolCall>, delta: ToolCallDelta) {
    // Each call's pieces carry its index; a piece without one continues the last call.
    let index = delta.index.map_or(calls.len().saturating_sub(1), |i| i as usize);
    if calls.len() <= index {
        calls.resize(index + 1, ToolCall::default());
    }
    let call = &mut calls[index];
    if let Some(id) = delta.id {
        call.id = id;
    }
    if let Some(function) = delta.function {
        call.name.push_str(&function.name.unwrap_or_default());
        call.arguments.push_str(&function.arguments.unwrap_or_default());
    }
}
