//! A Responses request's input in the shapes the chat path takes: `instructions` and the
//! `input` items (messages, earlier function calls and their outputs) become the chat
//! history; function tools, `tool_choice` and `text.format` become their chat forms. Each
//! refusal names the Responses field it is about (`input[2].content[0].type`, `tools[0].name`).

use serde_json::{json, Map, Value};

use crate::error::ApiError;
use crate::structured::{schema_value, RequestedConstraint};
use crate::tools::{HistoryCall, HistoryMessage, ToolRequest};
use rillm_backend::Constraint;

const ROLES: &[&str] = &["system", "developer", "user", "assistant"];

/// The prompt's history: `instructions` (as a system message) before the conversation.
pub fn with_instructions(instructions: Option<&str>, conversation: &[HistoryMessage]) -> Vec<HistoryMessage> {
    let system = instructions.filter(|t| !t.is_empty()).map(|text| HistoryMessage::new("system", text.to_string()));
    system.into_iter().chain(conversation.iter().cloned()).collect()
}

/// The conversation so far (`earlier`: a kept response's), then every input item.
/// Consecutive function calls join the assistant turn before them, as chat writes them.
pub fn conversation(earlier: &[HistoryMessage], input: Value) -> Result<Vec<HistoryMessage>, ApiError> {
    let mut history = earlier.to_vec();
    let items = match input {
        Value::String(text) => {
            history.push(HistoryMessage::user(text));
            return Ok(history);
        }
        Value::Array(items) if !items.is_empty() => items,
        Value::Array(_) => return Err(ApiError::invalid("input", "`input` must contain at least one item")),
        _ => return Err(ApiError::invalid("input", "`input` must be a string or a list of items")),
    };
    for (i, item) in items.into_iter().enumerate() {
        let Value::Object(item) = item else {
            return Err(ApiError::invalid(format!("input[{i}]"), "an input item must be an object"));
        };
        let kind = item.get("type").and_then(Value::as_str).unwrap_or("message");
        match kind {
            "message" => {
                let message = input_message(i, &item)?;
                match history.last_mut() {
                    // The answer after its thought: one assistant turn.
                    Some(last) if is_thought_alone(last) && message.role == "assistant" => {
                        last.content = message.content
                    }
                    _ => history.push(message),
                }
            }
            "reasoning" => {
                let thought =
                    HistoryMessage { reasoning: Some(item_thought(&item)), ..HistoryMessage::new("assistant", "") };
                history.push(thought);
            }
            "function_call" => {
                let call = function_call(i, &item)?;
                match history.last_mut() {
                    Some(last) if last.role == "assistant" => last.tool_calls.push(call),
                    _ => {
                        history.push(HistoryMessage { tool_calls: vec![call], ..HistoryMessage::new("assistant", "") })
                    }
                }
            }
            "function_call_output" => {
                let output = function_call_output(i, &item)?;
                let answered = output.tool_call_id.as_deref();
                if !history.iter().flat_map(|m| &m.tool_calls).any(|c| Some(c.id.as_str()) == answered) {
                    return Err(ApiError::invalid(
                        format!("input[{i}].call_id"),
                        "this `call_id` answers no function call earlier in the conversation",
                    ));
                }
                history.push(output);
            }
            other => {
                return Err(ApiError::invalid(
                    format!("input[{i}].type"),
                    format!(
                        "input items of type `{other}` are not supported; send messages, function_call and \
                         function_call_output items (rillm keeps no earlier responses to refer to)"
                    ),
                ))
            }
        }
    }
    Ok(history)
}

/// An assistant turn holding a reasoning item only, so far.
fn is_thought_alone(message: &HistoryMessage) -> bool {
    message.role == "assistant"
        && message.reasoning.is_some()
        && message.content.is_empty()
        && message.tool_calls.is_empty()
}

/// A reasoning item's thought: its `reasoning_text` content, else its summary's text.
fn item_thought(item: &serde_json::Map<String, Value>) -> String {
    let texts = |key: &str| -> String {
        let parts = item.get(key).and_then(Value::as_array).into_iter().flatten();
        parts.filter_map(|part| part.get("text").and_then(Value::as_str)).collect()
    };
    let content = texts("content");
    if content.is_empty() {
        texts("summary")
    } else {
        content
    }
}

/// `{"role", "content"}`: content as a string or a list of text parts.
fn input_message(i: usize, item: &Map<String, Value>) -> Result<HistoryMessage, ApiError> {
    let role = item.get("role").and_then(Value::as_str).unwrap_or_default();
    if !ROLES.contains(&role) {
        return Err(ApiError::invalid(
            format!("input[{i}].role"),
            format!("unknown role `{role}`; expected one of {}", ROLES.join(", ")),
        ));
    }
    Ok(HistoryMessage::new(role, text_content(item.get("content"), &format!("input[{i}].content"))?))
}

/// A string, or parts of which only text ones are served (`input_text`, and the
/// `output_text` and `refusal` of an earlier reply given back).
fn text_content(content: Option<&Value>, param: &str) -> Result<String, ApiError> {
    match content {
        None | Some(Value::Null) => Ok(String::new()),
        Some(Value::String(text)) => Ok(text.clone()),
        Some(Value::Array(parts)) => {
            let mut text = String::new();
            for (j, part) in parts.iter().enumerate() {
                let kind = part.get("type").and_then(Value::as_str).unwrap_or_default();
                let piece = match kind {
                    "input_text" | "output_text" | "text" => part.get("text"),
                    "refusal" => part.get("refusal"),
                    _ => {
                        return Err(ApiError::invalid(
                            format!("{param}[{j}].type"),
                            format!("content of type `{kind}` is not supported; only text"),
                        ))
                    }
                };
                match piece.and_then(Value::as_str) {
                    Some(piece) => text.push_str(piece),
                    None => return Err(ApiError::invalid(format!("{param}[{j}]"), "a text part needs its text")),
                }
            }
            Ok(text)
        }
        Some(_) => Err(ApiError::invalid(param, format!("`{param}` must be a string or a list of parts"))),
    }
}

/// An earlier call: `{"call_id", "name", "arguments"}`.
fn function_call(i: usize, item: &Map<String, Value>) -> Result<HistoryCall, ApiError> {
    let call_id = required_string(item, "call_id", i)?;
    let chat_form = json!({"id": call_id, "function": {"name": item.get("name"), "arguments": item.get("arguments")}});
    HistoryCall::from_value(&chat_form, &format!("input[{i}]"))
        .map_err(|e| e.renamed(&format!("input[{i}].function."), &format!("input[{i}].")))
}

/// What an earlier call returned: `{"call_id", "output"}`.
fn function_call_output(i: usize, item: &Map<String, Value>) -> Result<HistoryMessage, ApiError> {
    let call_id = required_string(item, "call_id", i)?;
    let output = text_content(item.get("output"), &format!("input[{i}].output"))?;
    Ok(HistoryMessage { tool_call_id: Some(call_id), ..HistoryMessage::new("tool", output) })
}

fn required_string(item: &Map<String, Value>, key: &str, i: usize) -> Result<String, ApiError> {
    match item.get(key) {
        Some(Value::String(s)) if !s.is_empty() => Ok(s.clone()),
        _ => Err(ApiError::invalid(format!("input[{i}].{key}"), format!("`{key}` must be a non-empty string"))),
    }
}

/// Function tools (`{"type": "function", "name", "description", "parameters"}`),
/// `tool_choice` and `parallel_tool_calls`, validated as chat's are.
pub fn tools(
    tools: Option<Value>,
    tool_choice: Option<Value>,
    parallel: Option<Value>,
) -> Result<Option<ToolRequest>, ApiError> {
    let tools = match tools {
        Some(Value::Array(list)) => Some(Value::Array(
            list.into_iter().enumerate().map(|(i, tool)| chat_tool(i, tool)).collect::<Result<_, _>>()?,
        )),
        other => other,
    };
    let tool_choice = tool_choice.map(|choice| match choice {
        Value::Object(mut o) if o.get("type").and_then(Value::as_str) == Some("function") => {
            json!({"type": "function", "function": {"name": o.remove("name")}})
        }
        other => other,
    });
    ToolRequest::from_fields(tools, tool_choice, parallel).map_err(|e| e.renamed(".function.", "."))
}

/// A Responses function tool in chat's form (`{"type", "function": {...}}`).
fn chat_tool(i: usize, tool: Value) -> Result<Value, ApiError> {
    let Value::Object(mut tool) = tool else {
        return Err(ApiError::invalid(format!("tools[{i}]"), "a tool must be an object"));
    };
    match tool.remove("type") {
        Some(Value::String(kind)) if kind == "function" => {}
        Some(Value::String(kind)) => {
            return Err(ApiError::invalid(
                format!("tools[{i}].type"),
                format!("tool type `{kind}` is not supported; only `function` (built-in tools are OpenAI's own)"),
            ))
        }
        _ => return Err(ApiError::invalid(format!("tools[{i}].type"), "a tool needs `\"type\": \"function\"`")),
    }
    Ok(json!({"type": "function", "function": tool}))
}

/// `text.format`: `text`, `json_object`, or `json_schema` with its `schema` beside `name`.
/// `text.verbosity` asks for shorter or longer answers than the model gives: refused.
pub fn text_format(text: Option<Value>) -> Result<Option<RequestedConstraint>, ApiError> {
    let Some(text) = text.filter(|t| !t.is_null()) else { return Ok(None) };
    let Value::Object(mut text) = text else {
        return Err(ApiError::invalid("text", "`text` must be an object"));
    };
    if let Some((key, _)) = text.iter().find(|(k, v)| k.as_str() != "format" && !v.is_null()) {
        return Err(ApiError::invalid(format!("text.{key}"), format!("`text.{key}` is not supported by this server")));
    }
    let Some(Value::Object(mut format)) = text.remove("format").filter(|f| !f.is_null()) else {
        return Ok(None);
    };
    let constraint = |constraint, param: &str| Ok(Some(RequestedConstraint { constraint, param: param.into() }));
    match format.get("type").and_then(Value::as_str).unwrap_or_default() {
        "text" => Ok(None),
        "json_object" => constraint(Constraint::JsonObject, "text.format"),
        "json_schema" => {
            let param = "text.format.schema";
            let schema = format.remove("schema").filter(|s| !s.is_null()).ok_or_else(|| {
                ApiError::invalid(param, "`text.format.schema` is required: the JSON Schema the output must match")
            })?;
            constraint(Constraint::JsonSchema(schema_value(schema, param)?), param)
        }
        other => Err(ApiError::invalid(
            "text.format.type",
            format!("`text.format.type` `{other}` is not supported; use text, json_object or json_schema"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::ToolChoice;

    fn param<T: std::fmt::Debug>(result: Result<T, ApiError>) -> String {
        result.expect_err("refused").param.unwrap_or_default()
    }

    #[test]
    fn items_become_the_chat_history() {
        let input = json!([
            {"role": "user", "content": "Weather in Paris?"},
            {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": "{\"city\":\"Paris\"}"},
            {"type": "function_call", "call_id": "call_2", "name": "get_weather", "arguments": "{\"city\":\"Nice\"}"},
            {"type": "function_call_output", "call_id": "call_1", "output": "sunny"},
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Sunny."}]},
            {"role": "user", "content": [{"type": "input_text", "text": "And "}, {"type": "input_text", "text": "now?"}]},
        ]);
        let history = with_instructions(Some("Be brief."), &conversation(&[], input).expect("read"));
        let roles: Vec<&str> = history.iter().map(|m| m.role.as_str()).collect();
        assert_eq!(roles, ["system", "user", "assistant", "tool", "assistant", "user"]);
        assert_eq!(history[0].content, "Be brief.");
        let calls: Vec<(&str, &str)> =
            history[2].tool_calls.iter().map(|c| (c.id.as_str(), c.arguments.as_str())).collect();
        assert_eq!(calls, [("call_1", "{\"city\":\"Paris\"}"), ("call_2", "{\"city\":\"Nice\"}")]);
        assert_eq!((history[3].tool_call_id.as_deref(), history[3].content.as_str()), (Some("call_1"), "sunny"));
        assert_eq!(history[5].content, "And now?");
        let plain = conversation(&[], json!("Hi")).expect("read");
        assert_eq!((plain.len(), plain[0].role.as_str(), plain[0].content.as_str()), (1, "user", "Hi"));
        let resumed = conversation(&history[1..4], json!("And Nice?")).expect("read");
        let roles: Vec<&str> = resumed.iter().map(|m| m.role.as_str()).collect();
        assert_eq!(roles, ["user", "assistant", "tool", "user"], "the kept conversation, then the new input");
    }

    #[test]
    fn input_it_cannot_serve_is_refused_by_name() {
        let refused = |input: Value| param(conversation(&[], input));
        assert_eq!(refused(json!([])), "input");
        assert_eq!(refused(json!(3)), "input");
        assert_eq!(refused(json!([{"role": "tool", "content": "x"}])), "input[0].role");
        assert_eq!(
            refused(json!([{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}])),
            "input[0].content[0].type"
        );
        assert_eq!(refused(json!(["hi"])), "input[0]");
        assert_eq!(refused(json!([{"type": "item_reference", "id": "msg_1"}])), "input[0].type");
        assert_eq!(refused(json!([{"type": "function_call", "name": "f", "arguments": "{}"}])), "input[0].call_id");
        assert_eq!(refused(json!([{"type": "function_call", "call_id": "c", "arguments": "{}"}])), "input[0].name");
        assert_eq!(refused(json!([{"type": "function_call_output", "output": "x"}])), "input[0].call_id");
        let unanswerable = json!([{"type": "function_call_output", "call_id": "call_9", "output": "x"}]);
        assert_eq!(refused(unanswerable), "input[0].call_id", "a result must answer a call");
    }

    #[test]
    fn function_tools_and_choices_are_read_in_their_responses_form() {
        let weather = json!({"type": "function", "name": "get_weather", "strict": true,
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}});
        let named = json!({"type": "function", "name": "get_weather"});
        let request = tools(Some(json!([weather.clone()])), Some(named), None).expect("ok").expect("tools");
        assert_eq!(request.choice, ToolChoice::Named("get_weather".into()));
        assert_eq!(request.tools[0].parameters["properties"]["city"]["type"], "string");
        assert_eq!(tools(Some(json!([])), None, None).expect("ok"), None);
        assert_eq!(param(tools(Some(json!([{"type": "web_search"}])), None, None)), "tools[0].type");
        assert_eq!(param(tools(Some(json!([{"type": "function"}])), None, None)), "tools[0].name");
        let missing = json!({"type": "function", "name": "nope"});
        assert_eq!(param(tools(Some(json!([weather])), Some(missing), None)), "tool_choice");
    }

    #[test]
    fn text_format_becomes_the_output_constraint() {
        let schema = json!({"type": "object", "properties": {"a": {"type": "integer"}}});
        let format = json!({"format": {"type": "json_schema", "name": "x", "schema": schema, "strict": true}});
        let got = text_format(Some(format)).expect("ok").expect("constraint");
        assert_eq!((got.constraint, got.param.as_str()), (Constraint::JsonSchema(schema), "text.format.schema"));
        let object = text_format(Some(json!({"format": {"type": "json_object"}}))).expect("ok").expect("c");
        assert_eq!(object.constraint, Constraint::JsonObject);
        assert_eq!(text_format(Some(json!({"format": {"type": "text"}}))).expect("ok"), None);
        assert_eq!(
            param(text_format(Some(json!({"format": {"type": "json_schema", "name": "x"}})))),
            "text.format.schema"
        );
        assert_eq!(param(text_format(Some(json!({"format": {"type": "grammar"}})))), "text.format.type");
        assert_eq!(param(text_format(Some(json!({"verbosity": "low"})))), "text.verbosity");
    }
}
