//! Agent loops: every request offers OpenAI `tools`, and the benchmark plays the tools.
//! When a reply calls some, the next round sends the assistant's calls and a result of
//! `--tool-result-tokens` tokens for each, up to `--max-tool-rounds` rounds; then the
//! conversation goes on with its next user turn. Every call is checked: a name among the
//! tools, arguments that parse and validate against that tool's `parameters`, keys the
//! parameters do not declare, and calls identical to an earlier one of the same reply.
//! With `--final-schema` every request also asks for its answer in a schema: a reply
//! without calls is the session's typed answer, checked as structured outputs are.

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::Arc;

use serde_json::{json, Value};

use crate::checks::CallCheck;
use crate::protocol::tool_calls::ToolCall;
use crate::workload::structured::OutputConstraint;

/// The tools every request offers, and how the benchmark answers their calls.
pub struct ToolSet {
    pub tools: Vec<Value>,
    pub tool_choice: Value,
    pub result_tokens: usize,
    pub max_rounds: u32,
    /// `--final-schema`: what a reply without calls must be.
    pub final_answer: Option<Arc<OutputConstraint>>,
    validators: HashMap<String, jsonschema::Validator>,
    /// Each tool's declared argument names, where its parameters name them.
    declared: HashMap<String, HashSet<String>>,
}

impl std::fmt::Debug for ToolSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolSet").field("tools", &self.tools.len()).field("tool_choice", &self.tool_choice).finish()
    }
}

impl ToolSet {
    /// `path` holds an OpenAI `tools` array; `choice` is `auto`, `required`, `none` or a
    /// function's name. The error names the argument.
    pub fn load(path: &Path, choice: &str, result_tokens: usize, max_rounds: u32) -> Result<Arc<Self>, String> {
        let bad = |m: String| format!("--tools {}: {m}", path.display());
        let text = std::fs::read_to_string(path).map_err(|e| bad(e.to_string()))?;
        let tools: Vec<Value> =
            serde_json::from_str(&text).map_err(|e| bad(format!("not a JSON array of tools: {e}")))?;
        let names: Vec<&str> = tools.iter().filter_map(|t| t["function"]["name"].as_str()).collect();
        let tool_choice = match choice {
            "auto" | "required" | "none" => json!(choice),
            name if names.contains(&name) => json!({"type": "function", "function": {"name": name}}),
            other => return Err(bad(format!("--tool-choice `{other}` is not auto, required, none or a tool's name"))),
        };
        Self::new(tools, tool_choice, result_tokens, max_rounds).map(Arc::new).map_err(bad)
    }

    /// A recorded request's own tools and `tool_choice` (as the request sent them).
    pub fn new(tools: Vec<Value>, tool_choice: Value, result_tokens: usize, max_rounds: u32) -> Result<Self, String> {
        let (mut validators, mut declared) = (HashMap::new(), HashMap::new());
        for (i, tool) in tools.iter().enumerate() {
            let name = tool["function"]["name"].as_str().ok_or_else(|| format!("tool {i} has no function.name"))?;
            let schema = tool["function"].get("parameters").cloned().unwrap_or_else(|| json!({"type": "object"}));
            let validator = jsonschema::options()
                .should_validate_formats(true)
                .build(&schema)
                .map_err(|e| format!("tool `{name}`: {e}"))?;
            validators.insert(name.to_string(), validator);
            if let Some(properties) = schema["properties"].as_object() {
                declared.insert(name.to_string(), properties.keys().cloned().collect());
            }
        }
        let max_rounds = max_rounds.max(1);
        Ok(Self { tools, tool_choice, result_tokens, max_rounds, final_answer: None, validators, declared })
    }

    /// `tools`, each request also asking its answer in the JSON Schema of `path`.
    pub fn answering_in(tools: Arc<Self>, path: &Path) -> Result<Arc<Self>, String> {
        let answer = crate::workload::structured::schema_file(path).map_err(|e| format!("--final-schema {e}"))?;
        let mut tools = Arc::try_unwrap(tools).map_err(|_| "--final-schema: tools in use".to_string())?;
        tools.final_answer = Some(answer);
        Ok(Arc::new(tools))
    }

    /// The body fields that offer the tools.
    pub fn body_fields(&self) -> Value {
        json!({"tools": self.tools, "tool_choice": self.tool_choice})
    }

    /// Checks a reply's calls; a reply cut by `max_tokens` loses its last call when that
    /// call's arguments are unfinished (not a JSON object). A server that holds a call back
    /// until it completes (rillm) sends only finished ones, and its last is a real call.
    pub fn check(&self, calls: &mut Vec<ToolCall>, cut_by_length: bool) -> CallCheck {
        let unfinished = |c: &ToolCall| serde_json::from_str::<Value>(&c.arguments).map_or(true, |v| !v.is_object());
        let last_unfinished = calls.last().is_some_and(unfinished);
        let cut = u32::from(cut_by_length && last_unfinished && calls.pop().is_some());
        let named = self.tool_choice["function"]["name"].as_str();
        let mut check = CallCheck { calls: calls.len() as u32, cut, ..CallCheck::default() };
        let mut seen: Vec<(&str, Value)> = Vec::new();
        for call in calls.iter() {
            let validator = self.validators.get(&call.name).filter(|_| named.is_none_or(|n| n == call.name));
            let arguments = serde_json::from_str::<Value>(&call.arguments).ok().filter(Value::is_object);
            check.allowed += u32::from(validator.is_some());
            check.parsed += u32::from(arguments.is_some());
            if let (Some(validator), Some(arguments)) = (validator, &arguments) {
                check.valid += u32::from(validator.is_valid(arguments));
            }
            let Some(arguments) = arguments else { continue };
            let keys = arguments.as_object().into_iter().flat_map(|o| o.keys());
            let declared = self.declared.get(&call.name);
            check.undeclared += u32::from(declared.is_some_and(|d| keys.clone().any(|k| !d.contains(k))));
            let key = (call.name.as_str(), arguments);
            check.repeated += u32::from(seen.contains(&key));
            seen.push(key);
        }
        check
    }

    /// The next round's messages after a reply that made `calls`: the assistant's calls,
    /// then a result for each, about `result_tokens` tokens of plausible JSON.
    pub fn round_messages(&self, text: &str, calls: &[ToolCall], round: u32) -> Vec<Value> {
        let assistant_calls: Vec<Value> = calls
            .iter()
            .map(|c| json!({"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}))
            .collect();
        let content = if text.is_empty() { Value::Null } else { json!(text) };
        let mut messages = vec![json!({"role": "assistant", "content": content, "tool_calls": assistant_calls})];
        for (i, call) in calls.iter().enumerate() {
            messages.push(json!({"role": "tool", "tool_call_id": call.id, "content": self.result(call, round, i)}));
        }
        messages
    }

    /// A tool result of about `result_tokens` tokens (a word is about a token).
    fn result(&self, call: &ToolCall, round: u32, i: usize) -> String {
        const WORDS: &[&str] = &["ok", "value", "item", "north", "record", "status", "ready", "total", "note", "entry"];
        let words: Vec<&str> =
            (0..self.result_tokens.saturating_sub(12)).map(|k| WORDS[(k + i) % WORDS.len()]).collect();
        json!({"tool": call.name, "round": round, "result": "done", "details": words.join(" ")}).to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::tool_calls::{assemble, FunctionDelta, ToolCallDelta};

    fn delta(index: u32, id: Option<&str>, name: Option<&str>, arguments: &str) -> ToolCallDelta {
        ToolCallDelta {
            index: Some(index),
            id: id.map(str::to_string),
            function: Some(FunctionDelta { name: name.map(str::to_string), arguments: Some(arguments.into()) }),
        }
    }

    #[test]
    fn streamed_pieces_assemble_into_calls_and_calls_are_checked() {
        let mut calls = Vec::new();
        assemble(&mut calls, delta(0, Some("a"), Some("add"), ""));
        assemble(&mut calls, delta(0, None, None, "{\"a\": 1, "));
        assemble(&mut calls, delta(0, None, None, "\"b\": 2}"));
        assemble(&mut calls, delta(1, Some("b"), Some("add"), "{\"a\": \"x\"}"));
        assert_eq!(calls.len(), 2);
        assert_eq!(calls[0], ToolCall { id: "a".into(), name: "add".into(), arguments: "{\"a\": 1, \"b\": 2}".into() });
        let tools = json!([{"type": "function", "function": {"name": "add", "parameters": {"type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"]}}}]);
        let path = crate::workload::test_file("tools.json", &tools.to_string());
        let set = ToolSet::load(&path, "required", 40, 3).expect("loads");
        calls.push(ToolCall { id: "c".into(), name: "rm".into(), arguments: "{}".into() });
        let check = set.check(&mut calls.clone(), false);
        assert_eq!(check, CallCheck { calls: 3, parsed: 3, allowed: 2, valid: 1, ..CallCheck::default() });
        // Cut by `max_tokens`: a finished last call stays a call; an unfinished one is cut.
        let mut finished = calls.clone();
        assert_eq!(set.check(&mut finished, true), check);
        let mut cut = calls.clone();
        cut.push(ToolCall { id: "d".into(), name: "add".into(), arguments: "{\"a\": 1, \"b".into() });
        let expected = CallCheck { calls: 3, parsed: 3, allowed: 2, valid: 1, cut: 1, ..CallCheck::default() };
        assert_eq!(set.check(&mut cut, true), expected);
        assert_eq!(cut.len(), 3, "the cut call is not sent back");
        let next = set.round_messages("", &calls[..1], 1);
        assert_eq!(next[0]["tool_calls"][0]["function"]["name"], "add");
        assert_eq!(next[1]["tool_call_id"], "a");
        let words = next[1]["content"].as_str().expect("result").split_whitespace().count();
        assert!((25..=45).contains(&words), "about 40 tokens: {words} words");
    }

    #[test]
    fn repeated_calls_and_undeclared_keys_are_counted() {
        let tools = json!([{"type": "function", "function": {"name": "add", "parameters": {"type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}}}},
            {"type": "function", "function": {"name": "free", "parameters": {"type": "object"}}}]);
        let path = crate::workload::test_file("tools.json", &tools.to_string());
        let set = ToolSet::load(&path, "required", 40, 3).expect("loads");
        let call = |name: &str, arguments: &str| ToolCall {
            id: String::new(),
            name: name.into(),
            arguments: arguments.into(),
        };
        let mut calls = vec![
            call("add", "{\"a\": 1, \"b\": 2}"),
            call("add", "{\"b\": 2, \"a\": 1}"),
            call("add", "{\"a\": 1, \"type\": \"function\"}"),
            call("free", "{\"anything\": 1}"),
        ];
        let check = set.check(&mut calls, false);
        assert_eq!((check.repeated, check.undeclared), (1, 1), "{check:?}");
    }
}
