//! The grammar a reply with tools must follow, in llguidance's Lark dialect.
//!
//! Calls are laid out as the format writes them (`format::CallSyntax`: Hermes
//! `<tool_call>` tags, Llama 3 JSON objects joined by `; `, Mistral's `[TOOL_CALLS]` list);
//! each call object is an inline JSON Schema (`%json`) per callable function: `name` the
//! function's own (a constant), then its `parameters` schema under the format's arguments
//! key. Keys come in that order and are laid out as the structured outputs' JSON is
//! (`json.dumps` separators, no other whitespace), so the markup, the keys and the name are
//! forced tokens (jump-forward) once the function is chosen. Under `none` the reply is text
//! that does not contain the format's trigger. Under `auto` the grammar is lazy: text is
//! free (no mask, which with many tools costs more than the forward pass) until the model
//! writes the trigger, and from there calls must complete, so an `auto` reply is text, or
//! text and then valid calls, never a broken call.
//!
//! With an answer format (`response_format`, `text.format`, ...) beside the tools, `auto`
//! is one grammar instead: calls, or the format's answer, never prose; `none` is the
//! format alone; `required` and a named function are calls only (the format shapes a later
//! turn's answer).

use rillm_backend::{Constraint, ToolCallFormat};
use serde_json::{json, Value};

use super::format::{syntax, CallSyntax};
use super::{ToolChoice, ToolRequest};

/// The constraint on a reply under `request`'s `tool_choice`, calls written in `format`;
/// `answer` is the format a reply that calls nothing must take, if the request gave one.
pub fn constraint(request: &ToolRequest, format: ToolCallFormat, answer: Option<&Constraint>) -> Constraint {
    let syntax = syntax(format);
    match (&request.choice, answer) {
        (ToolChoice::None, _) => without_calls(format, answer),
        (ToolChoice::Auto, None) => Constraint::Lazy {
            trigger: syntax.trigger.into(),
            grammar: format!("start: calls\n{}", calls_grammar(request, syntax)),
        },
        (ToolChoice::Auto, Some(answer)) => Constraint::Lark(format!(
            "start: calls | answer\n{}answer: {}\n",
            calls_grammar(request, syntax),
            answer_rule(answer)
        )),
        (ToolChoice::Required | ToolChoice::Named(_), _) => {
            Constraint::Lark(format!("start: calls\n{}", calls_grammar(request, syntax)))
        }
    }
}

/// A reply to the results of calls under `auto` with an answer format: calls if the model
/// opens one as it would without a mask, else `answer` (`Constraint::CallsOrAnswer`).
pub fn calls_or_answer(request: &ToolRequest, format: ToolCallFormat, answer: &Constraint) -> Constraint {
    let syntax = syntax(format);
    Constraint::CallsOrAnswer {
        trigger: syntax.trigger.into(),
        calls: format!("start: calls\n{}", calls_grammar(request, syntax)),
        answer: Box::new(answer.clone()),
    }
}

/// A reply that calls nothing: `answer`'s format, else text that never contains the call
/// trigger (escaped as a regex).
pub fn without_calls(format: ToolCallFormat, answer: Option<&Constraint>) -> Constraint {
    match answer {
        Some(answer) => answer.clone(),
        None => Constraint::Lark(format!(
            "start: TEXT?\nTEXT: /(?s:.+)/ & ~/(?s:.*{}.*)/\n",
            regex_escape(syntax(format).trigger)
        )),
    }
}

/// The separators `json.dumps` writes and no other whitespace, as structured outputs lay
/// JSON out (the engine's default for a schema of its own): keys and punctuation are then
/// forced tokens.
fn json_layout() -> Value {
    json!({"whitespace_flexible": false, "key_separator": ": ", "item_separator": ", "})
}

/// The body of a Lark rule that generates what `format` constrains an output to.
fn answer_rule(format: &Constraint) -> String {
    let schema = |mut schema: Value| {
        if let Some(object) = schema.as_object_mut() {
            object.entry("x-guidance").or_insert_with(json_layout);
        }
        format!("%json {schema}")
    };
    match format {
        Constraint::JsonSchema(value) => schema(value.clone()),
        Constraint::JsonObject => schema(json!({"type": "object"})),
        Constraint::Regex(regex) => format!("/{}/", regex.replace('/', "\\/")),
        Constraint::Choice(choices) => choices.iter().map(|c| lark_string(c)).collect::<Vec<_>>().join(" | "),
        Constraint::Lark(grammar) => format!("%lark {{\n{grammar}\n}}"),
        // Not formats a request gives: what they first generate stands for them.
        Constraint::Lazy { grammar, .. } => format!("%lark {{\n{grammar}\n}}"),
        Constraint::Restartable { constraint, .. } => answer_rule(constraint),
        Constraint::CallsOrAnswer { answer, .. } => answer_rule(answer),
    }
}

/// `text` as a regex matching it literally, inside a Lark `/.../`.
fn regex_escape(text: &str) -> String {
    regex_syntax::escape(text).replace('/', "\\/")
}

/// One or more calls (one without `parallel_tool_calls`) of the callable functions: the
/// rule `calls` and the rules it uses.
fn calls_grammar(request: &ToolRequest, syntax: &CallSyntax) -> String {
    // A newline may follow the calls: models write one after a closing tag, and a grammar
    // that read it as the start of another call would force call after call.
    let more = if request.parallel { format!(" ({} call)*", lark_string(syntax.separator)) } else { String::new() };
    let functions: Vec<String> = request.callable().enumerate().map(|(i, _)| format!("fn_{i}")).collect();
    let mut lark = format!(
        "calls: {open}call{more}{close} \"\\n\"?\ncall: {call_open}({alternatives}){call_close}\n",
        open = lark_prefix(syntax.block_open),
        close = lark_suffix(syntax.block_close),
        call_open = lark_prefix(syntax.call_open),
        call_close = lark_suffix(syntax.call_close),
        alternatives = functions.join(" | "),
    );
    for (rule, tool) in functions.iter().zip(request.callable()) {
        let schema = json!({
            "type": "object",
            "properties": {"name": {"const": tool.name}, syntax.arguments_key: tool.parameters},
            "required": ["name", syntax.arguments_key],
            "additionalProperties": false,
            "x-guidance": json_layout(),
        });
        lark.push_str(&format!("{rule}: %json {}\n", Value::to_string(&schema)));
    }
    lark
}

/// `text` as a Lark literal and a space, or nothing when it is empty.
fn lark_prefix(text: &str) -> String {
    if text.is_empty() {
        String::new()
    } else {
        format!("{} ", lark_string(text))
    }
}

/// A space and `text` as a Lark literal, or nothing when it is empty.
fn lark_suffix(text: &str) -> String {
    if text.is_empty() {
        String::new()
    } else {
        format!(" {}", lark_string(text))
    }
}

/// A Lark string literal.
fn lark_string(s: &str) -> String {
    Value::String(s.to_string()).to_string()
}

#[cfg(test)]
mod tests {
    use super::super::Tool;
    use super::*;

    fn request(choice: ToolChoice, parallel: bool) -> ToolRequest {
        let tool = |name: &str| Tool {
            name: name.into(),
            description: None,
            parameters: json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}),
        };
        ToolRequest { tools: vec![tool("get_weather"), tool("get_time")], choice, parallel }
    }

    fn lark(c: Constraint) -> String {
        match c {
            Constraint::Lark(g) => g,
            other => panic!("not a grammar: {other:?}"),
        }
    }

    #[test]
    fn the_grammar_follows_the_choice() {
        let hermes = ToolCallFormat::Hermes;
        let Constraint::Lazy { trigger, grammar: auto } = constraint(&request(ToolChoice::Auto, true), hermes, None)
        else {
            panic!("auto is lazy");
        };
        assert_eq!(trigger, "<tool_call>");
        assert!(auto.starts_with("start: calls\ncalls: call (\"\\n\" call)* \"\\n\"?\n"), "{auto}");
        assert!(auto.contains("call: \"<tool_call>\\n\" (fn_0 | fn_1) \"\\n</tool_call>\"\n"), "{auto}");
        assert!(auto.contains("fn_0: %json") && auto.contains("fn_1: %json"), "{auto}");
        assert!(auto.contains(r#"{"const":"get_time"}"#), "{auto}");
        let named = lark(constraint(&request(ToolChoice::Named("get_time".into()), false), hermes, None));
        assert!(named.starts_with("start: calls\ncalls: call \"\\n\"?\n"), "{named}");
        assert!(named.contains("get_time") && !named.contains("get_weather"), "{named}");
        let none = lark(constraint(&request(ToolChoice::None, true), hermes, None));
        assert!(none.starts_with("start: TEXT?\n") && !none.contains("%json"), "{none}");
    }

    #[test]
    fn each_format_lays_its_calls_out_and_names_its_arguments() {
        let llama = lark(constraint(&request(ToolChoice::Required, true), ToolCallFormat::Llama3Json, None));
        assert!(
            llama.starts_with("start: calls\ncalls: call (\"; \" call)* \"\\n\"?\ncall: (fn_0 | fn_1)\n"),
            "{llama}"
        );
        assert!(llama.contains(r#""required":["name","parameters"]"#), "{llama}");
        let mistral = lark(constraint(&request(ToolChoice::Required, false), ToolCallFormat::Mistral, None));
        assert!(mistral.starts_with("start: calls\ncalls: \"[TOOL_CALLS][\" call \"]\" \"\\n\"?\n"), "{mistral}");
        let Constraint::Lazy { trigger, .. } =
            constraint(&request(ToolChoice::Auto, true), ToolCallFormat::Llama3Json, None)
        else {
            panic!("auto is lazy")
        };
        assert_eq!(trigger, "{\"name\": \"");
        // `none` shuts out the trigger, its regex metacharacters escaped.
        let none = lark(constraint(&request(ToolChoice::None, true), ToolCallFormat::Mistral, None));
        assert!(none.contains(r"~/(?s:.*\[TOOL_CALLS\].*)/"), "{none}");
    }
}
