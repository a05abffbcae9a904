//! The grammar a reply with tools must follow, in llguidance's Lark dialect.
//!
//! Each call is `<tool_call>\n` + a JSON object + `\n</tool_call>`; the object is an inline
//! JSON Schema (`%json`) per callable function: `name` the function's own (a constant),
//! `arguments` its `parameters` schema. Keys come in that order and are laid out as the
//! structured outputs' JSON is (`json.dumps` separators, no other whitespace), so the
//! markup, the keys and the name are forced tokens (jump-forward) once the function is
//! chosen. Under `none` the reply is text that does not contain the call opener. Under
//! `auto` the grammar is lazy: text is free (no mask, which with many tools costs more than
//! the forward pass) until the model writes the opener, and from there calls must complete,
//! so an `auto` reply is text, or text and then valid calls, never a broken call.

use rillm_backend::Constraint;
use serde_json::{json, Value};

use super::{ToolChoice, ToolRequest};

/// Opens a call in the text the model writes.
pub const CALL_OPEN: &str = "<tool_call>";
/// Closes a call.
pub const CALL_CLOSE: &str = "</tool_call>";

/// The constraint on a reply under `request`'s `tool_choice`.
pub fn constraint(request: &ToolRequest) -> Constraint {
    match request.choice {
        // Text that never contains the opener (which has no regex metacharacters).
        ToolChoice::None => Constraint::Lark(format!("start: TEXT?\nTEXT: /(?s:.+)/ & ~/(?s:.*{CALL_OPEN}.*)/\n")),
        ToolChoice::Auto => Constraint::Lazy { trigger: CALL_OPEN.into(), grammar: calls_grammar(request) },
        ToolChoice::Required | ToolChoice::Named(_) => Constraint::Lark(calls_grammar(request)),
    }
}

/// One or more calls (one without `parallel_tool_calls`) of the callable functions.
fn calls_grammar(request: &ToolRequest) -> String {
    // A newline may follow the last call: models write one after a closing tag, and a
    // grammar that read it as the start of another call would force call after call.
    let calls = if request.parallel { "calls: call (\"\\n\" call)* \"\\n\"?" } else { "calls: call \"\\n\"?" };
    let functions: Vec<String> = request.callable().enumerate().map(|(i, _)| format!("fn_{i}")).collect();
    let mut lark = format!(
        "start: calls\n{calls}\ncall: {open} ({alternatives}) {close}\n",
        open = lark_string(&format!("{CALL_OPEN}\n")),
        close = lark_string(&format!("\n{CALL_CLOSE}")),
        alternatives = functions.join(" | "),
    );
    for (rule, tool) in functions.iter().zip(request.callable()) {
        let schema = json!({
            "type": "object",
            "properties": {"name": {"const": tool.name}, "arguments": tool.parameters},
            "required": ["name", "arguments"],
            "additionalProperties": false,
            "x-guidance": {"whitespace_flexible": false, "key_separator": ": ", "item_separator": ", "},
        });
        lark.push_str(&format!("{rule}: %json {}\n", Value::to_string(&schema)));
    }
    lark
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
        let Constraint::Lazy { trigger, grammar: auto } = constraint(&request(ToolChoice::Auto, true)) else {
            panic!("auto is lazy");
        };
        assert_eq!(trigger, "<tool_call>");
        assert!(auto.starts_with("start: calls\ncalls: call (\"\\n\" call)* \"\\n\"?\n"), "{auto}");
        assert!(auto.contains("fn_0: %json") && auto.contains("fn_1: %json"), "{auto}");
        assert!(auto.contains(r#"{"const":"get_time"}"#), "{auto}");
        let named = lark(constraint(&request(ToolChoice::Named("get_time".into()), false)));
        assert!(named.starts_with("start: calls\ncalls: call \"\\n\"?\n"), "{named}");
        assert!(named.contains("get_time") && !named.contains("get_weather"), "{named}");
        let none = lark(constraint(&request(ToolChoice::None, true)));
        assert!(none.starts_with("start: TEXT?\n") && !none.contains("%json"), "{none}");
    }
}
