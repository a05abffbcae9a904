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

use rillm_backend::{Constraint, ToolCallFormat};
use serde_json::{json, Value};

use super::format::{syntax, CallSyntax};
use super::{ToolChoice, ToolRequest};

/// The constraint on a reply under `request`'s `tool_choice`, calls written in `format`.
pub fn constraint(request: &ToolRequest, format: ToolCallFormat) -> Constraint {
    let syntax = syntax(format);
    match request.choice {
        // Text that never contains the trigger (escaped as a regex).
        ToolChoice::None => Constraint::Lark(format!(
            "start: TEXT?\nTEXT: /(?s:.+)/ & ~/(?s:.*{}.*)/\n",
            regex_syntax::escape(syntax.trigger).replace('/', "\\/")
        )),
        ToolChoice::Auto => {
            Constraint::Lazy { trigger: syntax.trigger.into(), grammar: calls_grammar(request, syntax) }
        }
        ToolChoice::Required | ToolChoice::Named(_) => Constraint::Lark(calls_grammar(request, syntax)),
    }
}

/// One or more calls (one without `parallel_tool_calls`) of the callable functions.
fn calls_grammar(request: &ToolRequest, syntax: &CallSyntax) -> String {
    // A newline may follow the calls: models write one after a closing tag, and a grammar
    // that read it as the start of another call would force call after call.
    let more = if request.parallel { format!(" ({} call)*", lark_string(syntax.separator)) } else { String::new() };
    let functions: Vec<String> = request.callable().enumerate().map(|(i, _)| format!("fn_{i}")).collect();
    let mut lark = format!(
        "start: calls\ncalls: {open}call{more}{close} \"\\n\"?\ncall: {call_open}({alternatives}){call_close}\n",
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
            "x-guidance": {"whitespace_flexible": false, "key_separator": ": ", "item_separator": ", "},
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
        let Constraint::Lazy { trigger, grammar: auto } = constraint(&request(ToolChoice::Auto, true), hermes) else {
            panic!("auto is lazy");
        };
        assert_eq!(trigger, "<tool_call>");
        assert!(auto.starts_with("start: calls\ncalls: call (\"\\n\" call)* \"\\n\"?\n"), "{auto}");
        assert!(auto.contains("call: \"<tool_call>\\n\" (fn_0 | fn_1) \"\\n</tool_call>\"\n"), "{auto}");
        assert!(auto.contains("fn_0: %json") && auto.contains("fn_1: %json"), "{auto}");
        assert!(auto.contains(r#"{"const":"get_time"}"#), "{auto}");
        let named = lark(constraint(&request(ToolChoice::Named("get_time".into()), false), hermes));
        assert!(named.starts_with("start: calls\ncalls: call \"\\n\"?\n"), "{named}");
        assert!(named.contains("get_time") && !named.contains("get_weather"), "{named}");
        let none = lark(constraint(&request(ToolChoice::None, true), hermes));
        assert!(none.starts_with("start: TEXT?\n") && !none.contains("%json"), "{none}");
    }

    #[test]
    fn each_format_lays_its_calls_out_and_names_its_arguments() {
        let llama = lark(constraint(&request(ToolChoice::Required, true), ToolCallFormat::Llama3Json));
        assert!(
            llama.starts_with("start: calls\ncalls: call (\"; \" call)* \"\\n\"?\ncall: (fn_0 | fn_1)\n"),
            "{llama}"
        );
        assert!(llama.contains(r#""required":["name","parameters"]"#), "{llama}");
        let mistral = lark(constraint(&request(ToolChoice::Required, false), ToolCallFormat::Mistral));
        assert!(mistral.starts_with("start: calls\ncalls: \"[TOOL_CALLS][\" call \"]\" \"\\n\"?\n"), "{mistral}");
        let Constraint::Lazy { trigger, .. } = constraint(&request(ToolChoice::Auto, true), ToolCallFormat::Llama3Json)
        else {
            panic!("auto is lazy")
        };
        assert_eq!(trigger, "{\"name\": \"");
        // `none` shuts out the trigger, its regex metacharacters escaped.
        let none = lark(constraint(&request(ToolChoice::None, true), ToolCallFormat::Mistral));
        assert!(none.contains(r"~/(?s:.*\[TOOL_CALLS\].*)/"), "{none}");
    }
}
