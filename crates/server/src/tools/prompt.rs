//! What the model reads. A chat template that lists tools and writes calls itself (Qwen2.5's,
//! Hermes', Llama 3.1's, Mistral's) gets the tools and the calls as they are; for any other
//! template (SmolLM2's knows nothing of tools) rillm lists the tools in a system block, in
//! the wording of the format's own models (Qwen2.5's for Hermes, Llama 3.1's, Mistral's
//! markup), and writes earlier calls in the format the model is asked to answer in, their
//! results in `<tool_response>` tags.

use rillm_backend::{ChatMessage, ChatToolCall, Prompt, ToolCallFormat};
use serde_json::{json, Value};

use super::format::syntax;
use super::{ToolChoice, ToolDialect, ToolRequest};
use crate::error::ApiError;

/// A chat message as the request gave it, its tool fields included.
#[derive(Debug, Clone, PartialEq)]
pub struct HistoryMessage {
    pub role: String,
    pub content: String,
    /// An assistant message's calls.
    pub tool_calls: Vec<HistoryCall>,
    /// A `tool` message: the call it answers.
    pub tool_call_id: Option<String>,
    /// An assistant message's thought (`reasoning_content` or `reasoning` as sent).
    pub reasoning: Option<String>,
}

impl HistoryMessage {
    pub fn user(content: impl Into<String>) -> Self {
        Self::new("user", content)
    }

    /// A message of `role` with only its text.
    pub fn new(role: impl Into<String>, content: impl Into<String>) -> Self {
        Self { role: role.into(), content: content.into(), tool_calls: Vec::new(), tool_call_id: None, reasoning: None }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct HistoryCall {
    pub id: String,
    pub name: String,
    /// The arguments object, as JSON text.
    pub arguments: String,
}

impl HistoryCall {
    /// An assistant message's `tool_calls[j]`; refusals name `param`.
    pub fn from_value(value: &Value, param: &str) -> Result<Self, ApiError> {
        let function = value.get("function").ok_or_else(|| ApiError::invalid(param, "a tool call needs `function`"))?;
        let name = function.get("name").and_then(Value::as_str).ok_or_else(|| {
            ApiError::invalid(format!("{param}.function.name"), "a tool call needs a function `name`")
        })?;
        let arguments = match function.get("arguments") {
            None | Some(Value::Null) => "{}".to_string(),
            Some(Value::String(text)) => text.clone(),
            // Some clients send the object itself.
            Some(object @ Value::Object(_)) => object.to_string(),
            Some(_) => {
                return Err(ApiError::invalid(
                    format!("{param}.function.arguments"),
                    "`arguments` must be a JSON object in a string",
                ))
            }
        };
        let id = value.get("id").and_then(Value::as_str).unwrap_or_default().to_string();
        Ok(Self { id, name: name.to_string(), arguments })
    }
}

/// The chat prompt: tools offered unless `tool_choice` is `none`, earlier calls and
/// results included, as `dialect` says. A `tool` message must answer an earlier call.
pub fn render_prompt(
    history: Vec<HistoryMessage>,
    tools: Option<&ToolRequest>,
    dialect: ToolDialect,
) -> Result<Prompt, ApiError> {
    check_results(&history)?;
    let offered = tools.filter(|t| t.choice != ToolChoice::None);
    if let Some(template) = dialect.template {
        let messages = history.into_iter().map(|m| template_message(m, template)).collect();
        let tools = offered.map(|t| t.tools.iter().map(openai_tool).collect()).unwrap_or_default();
        return Ok(Prompt::Chat { messages, tools, options: Default::default() });
    }
    Ok(Prompt::chat(written_messages(history, offered, dialect.format)))
}

/// Every `tool` message answers a call made earlier in the conversation.
fn check_results(history: &[HistoryMessage]) -> Result<(), ApiError> {
    let mut call_ids: Vec<&str> = Vec::new();
    for (i, message) in history.iter().enumerate() {
        call_ids.extend(message.tool_calls.iter().map(|c| c.id.as_str()).filter(|id| !id.is_empty()));
        if message.role != "tool" {
            continue;
        }
        let id = message.tool_call_id.as_deref().filter(|id| !id.is_empty()).ok_or_else(|| {
            ApiError::invalid(format!("messages[{i}].tool_call_id"), "a `tool` message needs `tool_call_id`")
        })?;
        if !call_ids.contains(&id) {
            return Err(ApiError::invalid(
                format!("messages[{i}].tool_call_id"),
                format!("`{id}` answers no earlier tool call"),
            ));
        }
    }
    Ok(())
}

/// A message for a template that writes calls itself (in `template`'s format): arguments as
/// the object they encode; for Mistral's, ids as the nine characters its template demands.
fn template_message(message: HistoryMessage, template: ToolCallFormat) -> ChatMessage {
    let id = |id: String| if template == ToolCallFormat::Mistral { mistral_id(&id) } else { id };
    let tool_calls = message
        .tool_calls
        .into_iter()
        .map(|call| ChatToolCall {
            arguments: serde_json::from_str(&call.arguments).unwrap_or(Value::String(call.arguments)),
            id: id(call.id),
            name: call.name,
        })
        .collect();
    let tool_call_id = message.tool_call_id.map(id);
    ChatMessage {
        role: message.role,
        content: message.content,
        tool_calls,
        tool_call_id,
        reasoning_content: message.reasoning,
    }
}

/// Mistral's templates refuse call ids that are not nine characters; as vLLM does, the last
/// nine letters and digits of the client's id stand for it (padded with zeros), the same
/// for the call and the result that answers it.
fn mistral_id(id: &str) -> String {
    let alphanumeric: Vec<char> = id.chars().filter(char::is_ascii_alphanumeric).collect();
    let tail = &alphanumeric[alphanumeric.len().saturating_sub(9)..];
    format!("{:0>9}", tail.iter().collect::<String>())
}

/// A tool as OpenAI clients send it and as templates list it.
fn openai_tool(tool: &super::Tool) -> Value {
    let mut function = json!({"name": tool.name});
    if let Some(description) = &tool.description {
        function["description"] = Value::from(description.as_str());
    }
    function["parameters"] = tool.parameters.clone();
    json!({"type": "function", "function": function})
}

/// The messages for a template that knows nothing of tools: the tools listed in the system
/// message, calls and results written out as text.
fn written_messages(
    history: Vec<HistoryMessage>,
    tools: Option<&ToolRequest>,
    format: ToolCallFormat,
) -> Vec<ChatMessage> {
    let mut out: Vec<ChatMessage> = Vec::with_capacity(history.len() + 1);
    let mut results_open = false;
    for message in history {
        if message.role == "tool" {
            // Results of one round go back together, in one user turn, as Qwen2.5 renders them.
            let block = format!("<tool_response>\n{}\n</tool_response>", message.content);
            match out.last_mut().filter(|_| results_open) {
                Some(turn) => {
                    turn.content.push('\n');
                    turn.content.push_str(&block);
                }
                None => out.push(ChatMessage::new("user", block)),
            }
            results_open = true;
            continue;
        }
        results_open = false;
        let mut content = message.content;
        if !message.tool_calls.is_empty() {
            if !content.is_empty() {
                content.push('\n');
            }
            content.push_str(&written_calls(&message.tool_calls, format));
        }
        out.push(ChatMessage { reasoning_content: message.reasoning, ..ChatMessage::new(message.role, content) });
    }
    if let Some(tools) = tools {
        let block = tools_block(tools, format);
        match out.first_mut().filter(|m| m.role == "system" || m.role == "developer") {
            Some(system) => {
                system.content.push_str("\n\n");
                system.content.push_str(&block);
            }
            None => out.insert(0, ChatMessage::new("system", block)),
        }
    }
    out
}

/// Calls as the model writes them (and as the grammar makes it write them).
fn written_calls(calls: &[HistoryCall], format: ToolCallFormat) -> String {
    // Arguments a client sent are re-serialised compactly when they parse.
    let arguments: Vec<String> = calls
        .iter()
        .map(|c| serde_json::from_str::<Value>(&c.arguments).map_or_else(|_| c.arguments.clone(), |v| v.to_string()))
        .collect();
    let pairs: Vec<(&str, &str)> = calls.iter().zip(&arguments).map(|(c, a)| (c.name.as_str(), a.as_str())).collect();
    syntax(format).write(&pairs)
}

/// The system block that lists the tools and says how to call them, in the words of the
/// format's own models.
fn tools_block(tools: &ToolRequest, format: ToolCallFormat) -> String {
    let listed: Vec<String> = tools.tools.iter().map(|t| openai_tool(t).to_string()).collect();
    match format {
        ToolCallFormat::Hermes => format!(
            "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n\
             You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n{}\n</tools>\n\n\
             For each function call, return a json object with function name and arguments within \
             <tool_call></tool_call> XML tags:\n<tool_call>\n{{\"name\": <function-name>, \"arguments\": \
             <args-json-object>}}\n</tool_call>",
            listed.join("\n")
        ),
        // Llama 3.1's template, tools in the system turn.
        ToolCallFormat::Llama3Json => format!(
            "You have access to the following functions. To call a function, please respond with JSON for a \
             function call. Respond in the format {{\"name\": function name, \"parameters\": dictionary of \
             argument name and its value}}. Do not use variables.\n\n{}",
            listed.join("\n\n")
        ),
        ToolCallFormat::Mistral => format!(
            "[AVAILABLE_TOOLS][{}][/AVAILABLE_TOOLS]\n\nTo call functions, answer with [TOOL_CALLS] and a JSON list \
             of calls: [TOOL_CALLS][{{\"name\": <function-name>, \"arguments\": <args-json-object>}}]",
            listed.join(", ")
        ),
    }
}

/// The calls of the conversation's last round that it has the results of: the last
/// assistant message's calls, where only `tool` messages (answering them) follow it. Empty
/// where the conversation does not end with results.
pub fn answered_calls(history: &[HistoryMessage]) -> Vec<super::AnsweredCall> {
    let Some(last) = history.iter().rposition(|m| m.role == "assistant") else { return Vec::new() };
    let results = &history[last + 1..];
    if results.is_empty() || results.iter().any(|m| m.role != "tool") {
        return Vec::new();
    }
    let answered = |id: &str| results.iter().any(|m| m.tool_call_id.as_deref() == Some(id));
    history[last]
        .tool_calls
        .iter()
        .filter(|call| answered(&call.id))
        .filter_map(|call| {
            let arguments = serde_json::from_str(&call.arguments).ok()?;
            Some(super::AnsweredCall { name: call.name.clone(), arguments })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::super::Tool;
    use super::*;

    const WRITTEN: ToolDialect = ToolDialect { format: ToolCallFormat::Hermes, template: None };
    const TEMPLATE: ToolDialect =
        ToolDialect { format: ToolCallFormat::Hermes, template: Some(ToolCallFormat::Hermes) };

    fn msg(role: &str, content: &str) -> HistoryMessage {
        HistoryMessage::new(role, content)
    }

    fn tools(choice: ToolChoice) -> ToolRequest {
        let parameters = json!({"type": "object", "properties": {"city": {"type": "string"}}});
        let tool = Tool { name: "get_weather".into(), description: Some("Weather now".into()), parameters };
        ToolRequest { tools: vec![tool], choice, parallel: true }
    }

    #[test]
    fn the_last_round_s_calls_are_answered_when_the_conversation_ends_with_their_results() {
        let round = tool_round();
        let answered = answered_calls(&round);
        assert_eq!(answered.len(), 1);
        assert_eq!((answered[0].name.as_str(), &answered[0].arguments), ("get_weather", &json!({"city": "Oslo"})));
        // A user message after the results opens a new round; no results, nothing answered.
        let mut asked_again = round.clone();
        asked_again.push(msg("user", "And tomorrow?"));
        assert!(answered_calls(&asked_again).is_empty());
        assert!(answered_calls(&round[..2]).is_empty());
        assert!(answered_calls(&[msg("user", "hi")]).is_empty());
    }

    /// A question, a call of `get_weather` and its result.
    fn tool_round() -> Vec<HistoryMessage> {
        let mut call = msg("assistant", "");
        call.tool_calls.push(HistoryCall {
            id: "c1".into(),
            name: "get_weather".into(),
            arguments: "{\"city\":\"Oslo\"}".into(),
        });
        let mut result = msg("tool", "{\"temp\": 3}");
        result.tool_call_id = Some("c1".into());
        vec![msg("user", "Weather in Oslo?"), call, result]
    }

    #[test]
    fn a_tool_round_is_written_in_the_format_the_model_answers_in() {
        let mut history = tool_round();
        history.push(msg("user", "Thanks"));
        let out = written(render_prompt(history, Some(&tools(ToolChoice::Auto)), WRITTEN));
        assert_eq!(out[0].role, "system", "a system block is added");
        assert!(
            out[0].content.contains("<tools>\n{\"type\":\"function\",\"function\":{")
                && out[0].content.contains("Weather now")
        );
        assert_eq!(
            out[2].content,
            "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\":\"Oslo\"}}\n</tool_call>"
        );
        assert_eq!(
            (out[3].role.as_str(), out[3].content.as_str()),
            ("user", "<tool_response>\n{\"temp\": 3}\n</tool_response>")
        );
        assert_eq!(out[4].content, "Thanks");
        // `none`: the history still renders, no tools are offered.
        let plain =
            render_prompt(vec![msg("system", "Be brief."), msg("user", "Hi")], Some(&tools(ToolChoice::None)), WRITTEN);
        assert_eq!(written(plain)[0].content, "Be brief.");
    }

    #[test]
    fn a_result_must_answer_an_earlier_call() {
        let mut orphan = msg("tool", "42");
        orphan.tool_call_id = Some("nope".into());
        for dialect in [WRITTEN, TEMPLATE] {
            let error = render_prompt(vec![msg("user", "x"), orphan.clone()], None, dialect).expect_err("refused");
            assert_eq!(error.param.as_deref(), Some("messages[1].tool_call_id"));
            let error = render_prompt(vec![msg("tool", "42")], None, dialect).expect_err("refused");
            assert_eq!(error.param.as_deref(), Some("messages[0].tool_call_id"));
        }
    }

    #[test]
    fn a_template_that_writes_tools_gets_them_and_the_calls_as_they_are() {
        let history = tool_round();
        let prompt = render_prompt(history.clone(), Some(&tools(ToolChoice::Auto)), TEMPLATE).expect("renders");
        let Prompt::Chat { messages, tools: listed, .. } = prompt else { panic!("a chat prompt") };
        assert_eq!(messages.len(), 3, "no system block is added");
        assert_eq!(
            listed,
            [json!({"type": "function", "function": {"name": "get_weather", "description": "Weather now",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}})]
        );
        assert_eq!(
            messages[1].tool_calls,
            [ChatToolCall { id: "c1".into(), name: "get_weather".into(), arguments: json!({"city": "Oslo"}) }]
        );
        assert_eq!((messages[2].role.as_str(), messages[2].tool_call_id.as_deref()), ("tool", Some("c1")));
        // `none`: the calls still render, no tools are offered.
        let Ok(Prompt::Chat { tools: listed, .. }) = render_prompt(history, Some(&tools(ToolChoice::None)), TEMPLATE)
        else {
            panic!("a chat prompt")
        };
        assert!(listed.is_empty());
    }

    fn written(prompt: Result<Prompt, ApiError>) -> Vec<ChatMessage> {
        match prompt.expect("renders") {
            Prompt::Chat { messages, tools, .. } if tools.is_empty() => messages,
            other => panic!("messages with the tools written in: {other:?}"),
        }
    }

    #[test]
    fn each_format_asks_for_its_calls_and_writes_earlier_ones_its_way() {
        let llama = ToolDialect { format: ToolCallFormat::Llama3Json, template: None };
        let out = written(render_prompt(tool_round(), Some(&tools(ToolChoice::Auto)), llama));
        assert!(out[0].content.contains("\"parameters\": dictionary of argument name"), "{}", out[0].content);
        assert_eq!(out[2].content, "{\"name\": \"get_weather\", \"parameters\": {\"city\":\"Oslo\"}}");
        let mistral = ToolDialect { format: ToolCallFormat::Mistral, template: None };
        let out = written(render_prompt(tool_round(), Some(&tools(ToolChoice::Auto)), mistral));
        assert!(out[0].content.starts_with("[AVAILABLE_TOOLS][{\"type\":\"function\""), "{}", out[0].content);
        assert_eq!(out[2].content, "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\":\"Oslo\"}}]");
        // Mistral's own template gets nine-character ids, the same for a call and its result.
        let mut history = tool_round();
        history[1].tool_calls[0].id = "call_chatcmpl-7f3a_0_0".into();
        history[2].tool_call_id = Some("call_chatcmpl-7f3a_0_0".into());
        let own = ToolDialect { template: Some(ToolCallFormat::Mistral), ..mistral };
        let Ok(Prompt::Chat { messages, .. }) = render_prompt(history, None, own) else { panic!("a chat prompt") };
        assert_eq!(messages[1].tool_calls[0].id, "mpl7f3a00");
        assert_eq!(messages[2].tool_call_id.as_deref(), Some("mpl7f3a00"));
        assert_eq!(mistral_id("c1"), "0000000c1");
    }
}
