//! Tool calling: OpenAI's `tools`, `tool_choice` and `parallel_tool_calls`, validated into
//! a [`ToolRequest`]; the prompt the model sees (`prompt`), the constraint its output must
//! follow (`grammar`), and the calls read back from the text it writes (`parse`).
//!
//! Calls are written in one of three formats (`format`): Hermes (Qwen2.5, Hermes,
//! SmolLM's function-calling data; the default), Llama 3 JSON or Mistral's `[TOOL_CALLS]`,
//! the one the model's chat template writes unless `--tool-call-parser` says otherwise. The
//! grammar makes every call rillm emits parse and fit its function's schema: with
//! `required` or a named function the output is calls only; with `auto` it is free text
//! that, once the model opens a call, must complete a valid one.

mod format;
mod grammar;
mod json_scan;
mod parse;
mod prompt;
mod watch;

pub use grammar::{calls_or_answer, constraint, without_calls};
pub use parse::{AnsweredCall, Repeat, ToolCallParser, ToolEvent};
pub use prompt::{answered_calls, render_prompt, HistoryCall, HistoryMessage};
pub use watch::{CallReading, RepeatWatch, Verdict};

use rillm_backend::ToolCallFormat;
use serde_json::{json, Value};

use crate::error::ApiError;

/// How the served model is told of tools and writes its calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ToolDialect {
    /// The format calls are asked for, constrained to and read back in.
    pub format: ToolCallFormat,
    /// The format the chat template writes calls in, when it lists tools and writes
    /// earlier calls itself (it may differ from `format` under `--tool-call-parser`).
    pub template: Option<ToolCallFormat>,
}

/// One function the model may call.
#[derive(Debug, Clone, PartialEq)]
pub struct Tool {
    pub name: String,
    pub description: Option<String>,
    /// A JSON Schema for the arguments object.
    pub parameters: Value,
}

/// `tool_choice`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolChoice {
    /// No calls: the call markup cannot be produced.
    None,
    /// Text, or calls, as the model decides.
    Auto,
    /// One or more calls, nothing else.
    Required,
    /// Calls of this function only.
    Named(String),
}

#[derive(Debug, Clone, PartialEq)]
pub struct ToolRequest {
    pub tools: Vec<Tool>,
    pub choice: ToolChoice,
    /// More than one call per reply (`parallel_tool_calls`, true unless set false).
    pub parallel: bool,
}

/// OpenAI's rule for function names.
fn valid_name(name: &str) -> bool {
    !name.is_empty() && name.len() <= 64 && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

impl ToolRequest {
    /// From a chat request's fields; `None` when no tools are in play. Every refusal names
    /// its field.
    pub fn from_fields(
        tools: Option<Value>,
        tool_choice: Option<Value>,
        parallel_tool_calls: Option<Value>,
    ) -> Result<Option<Self>, ApiError> {
        let tools = match tools.filter(|t| !t.is_null()) {
            None => Vec::new(),
            Some(Value::Array(list)) => {
                list.into_iter().enumerate().map(|(i, t)| tool(i, t)).collect::<Result<_, _>>()?
            }
            Some(_) => return Err(ApiError::invalid("tools", "`tools` must be an array of function tools")),
        };
        for (i, tool) in tools.iter().enumerate() {
            if tools[..i].iter().any(|t| t.name == tool.name) {
                return Err(ApiError::invalid(
                    format!("tools[{i}].function.name"),
                    format!("the function name `{}` is given twice", tool.name),
                ));
            }
        }
        let parallel = match parallel_tool_calls.filter(|v| !v.is_null()) {
            None => true,
            Some(Value::Bool(b)) => b,
            Some(_) => return Err(ApiError::invalid("parallel_tool_calls", "`parallel_tool_calls` must be a boolean")),
        };
        let choice = match tool_choice.filter(|v| !v.is_null()) {
            None if tools.is_empty() => return Ok(None),
            None => ToolChoice::Auto,
            Some(value) => choice(value, &tools)?,
        };
        if tools.is_empty() {
            if matches!(choice, ToolChoice::None | ToolChoice::Auto) {
                return Ok(None);
            }
            return Err(ApiError::invalid("tool_choice", "`tool_choice` names a call but `tools` is empty"));
        }
        Ok(Some(Self { tools, choice, parallel }))
    }

    /// The tools the model may call under its `tool_choice`.
    pub fn callable(&self) -> impl Iterator<Item = &Tool> {
        self.tools.iter().filter(move |t| match &self.choice {
            ToolChoice::None => false,
            ToolChoice::Auto | ToolChoice::Required => true,
            ToolChoice::Named(name) => &t.name == name,
        })
    }
}

fn tool(i: usize, value: Value) -> Result<Tool, ApiError> {
    let field = |f: &str| format!("tools[{i}]{f}");
    let Value::Object(mut tool) = value else {
        return Err(ApiError::invalid(field(""), "a tool must be an object"));
    };
    match tool.get("type").and_then(Value::as_str) {
        Some("function") => {}
        Some(other) => {
            return Err(ApiError::invalid(
                field(".type"),
                format!("tool type `{other}` is not supported; only `function`"),
            ))
        }
        None => return Err(ApiError::invalid(field(".type"), "a tool needs `\"type\": \"function\"`")),
    }
    let Some(Value::Object(mut function)) = tool.remove("function") else {
        return Err(ApiError::invalid(field(".function"), "a function tool needs a `function` object"));
    };
    let name = match function.remove("name") {
        Some(Value::String(name)) if valid_name(&name) => name,
        Some(Value::String(name)) => {
            return Err(ApiError::invalid(
                field(".function.name"),
                format!("`{name}` is not a valid function name (1-64 of a-z, A-Z, 0-9, _ and -)"),
            ))
        }
        _ => return Err(ApiError::invalid(field(".function.name"), "a function needs a `name`")),
    };
    let description = function.remove("description").and_then(|d| d.as_str().map(str::to_string));
    let parameters = match function.remove("parameters") {
        None | Some(Value::Null) => json!({"type": "object", "properties": {}, "additionalProperties": false}),
        Some(Value::Object(schema)) if schema.get("type").is_none_or(|t| t == "object") => Value::Object(schema),
        Some(_) => {
            return Err(ApiError::invalid(
                field(".function.parameters"),
                "`parameters` must be a JSON Schema of an object (`\"type\": \"object\"`)",
            ))
        }
    };
    Ok(Tool { name, description, parameters })
}

fn choice(value: Value, tools: &[Tool]) -> Result<ToolChoice, ApiError> {
    let named = |name: &str| {
        if tools.iter().any(|t| t.name == name) {
            Ok(ToolChoice::Named(name.to_string()))
        } else {
            Err(ApiError::invalid("tool_choice", format!("`tool_choice` names `{name}`, which is not in `tools`")))
        }
    };
    match &value {
        Value::String(s) => match s.as_str() {
            "none" => Ok(ToolChoice::None),
            "auto" => Ok(ToolChoice::Auto),
            "required" => Ok(ToolChoice::Required),
            other => Err(ApiError::invalid(
                "tool_choice",
                format!("`tool_choice` must be none, auto, required or a function, got `{other}`"),
            )),
        },
        Value::Object(object) if object.get("type").and_then(Value::as_str) == Some("function") => {
            match object.get("function").and_then(|f| f.get("name")).and_then(Value::as_str) {
                Some(name) => named(name),
                None => Err(ApiError::invalid("tool_choice", "a function `tool_choice` needs `function.name`")),
            }
        }
        _ => Err(ApiError::invalid("tool_choice", "`tool_choice` must be a string or {\"type\": \"function\", ...}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn weather() -> Value {
        json!({"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
            "properties": {"city": {"type": "string"}}, "required": ["city"]}}})
    }

    fn param(result: Result<Option<ToolRequest>, ApiError>) -> String {
        result.expect_err("refused").param.unwrap_or_default()
    }

    #[test]
    fn tools_and_choices_are_read_as_openai_defines_them() {
        let request = ToolRequest::from_fields(Some(json!([weather()])), None, None).expect("ok").expect("tools");
        assert_eq!((request.choice.clone(), request.parallel), (ToolChoice::Auto, true));
        assert_eq!(request.tools[0].name, "get_weather");
        let named = json!({"type": "function", "function": {"name": "get_weather"}});
        let request = ToolRequest::from_fields(Some(json!([weather()])), Some(named), Some(json!(false)))
            .expect("ok")
            .expect("t");
        assert_eq!((request.choice, request.parallel), (ToolChoice::Named("get_weather".into()), false));
        assert_eq!(ToolRequest::from_fields(None, None, None).expect("ok"), None);
        assert_eq!(ToolRequest::from_fields(Some(json!([])), Some(json!("auto")), None).expect("ok"), None);
        let bare = json!([{"type": "function", "function": {"name": "ping"}}]);
        let request = ToolRequest::from_fields(Some(bare), Some(json!("required")), None).expect("ok").expect("t");
        assert_eq!(request.tools[0].parameters["additionalProperties"], false, "no parameters: an empty object");
    }

    #[test]
    fn bad_tools_are_refused_naming_the_field() {
        let tools = |t: Value| ToolRequest::from_fields(Some(t), None, None);
        assert_eq!(param(tools(json!({"a": 1}))), "tools");
        assert_eq!(param(tools(json!([{"type": "retrieval"}]))), "tools[0].type");
        assert_eq!(param(tools(json!([{"type": "function"}]))), "tools[0].function");
        assert_eq!(param(tools(json!([{"type": "function", "function": {}}]))), "tools[0].function.name");
        assert_eq!(param(tools(json!([{"type": "function", "function": {"name": "a b"}}]))), "tools[0].function.name");
        let bad_params = json!([{"type": "function", "function": {"name": "f", "parameters": {"type": "string"}}}]);
        assert_eq!(param(tools(bad_params)), "tools[0].function.parameters");
        assert_eq!(param(tools(json!([weather(), weather()]))), "tools[1].function.name");
        let choice = |c: Value| ToolRequest::from_fields(Some(json!([weather()])), Some(c), None);
        assert_eq!(param(choice(json!("sometimes"))), "tool_choice");
        assert_eq!(param(choice(json!({"type": "function", "function": {"name": "nope"}}))), "tool_choice");
        assert_eq!(param(ToolRequest::from_fields(None, Some(json!("required")), None)), "tool_choice");
        let named = json!({"type": "function", "function": {"name": "get_weather"}});
        assert_eq!(param(ToolRequest::from_fields(None, Some(named), None)), "tool_choice");
        assert_eq!(
            param(ToolRequest::from_fields(Some(json!([weather()])), None, Some(json!("yes")))),
            "parallel_tool_calls"
        );
    }
}
