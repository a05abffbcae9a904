//! The grammar a reply with tools must follow, in llguidance's Lark dialect.
//!
//! Each call is `<tool_call>\n` + a JSON object + `\n</tool_call>`; the object is an inline
//! JSON Schema (`%json`) per callable function: `name` the function's own (a constant),
//! `arguments` its `parameters` schema. Keys come in that order and are laid out as the
//! structured outputs' JSON is (`json.dumps` separators, no other whitespace), so the
//! markup, the keys and the name are forced tokens (jump-forward) once the function is
//! chosen. Free text (`auto`, `none`) is any text that does not contain the call opener: so
//! an `auto` reply is text, or text and then calls that must complete, never a broken call.

use serde_json::{json, Value};

use super::{ToolChoice, ToolRequest};

/// Opens a call in the text the model writes.
pub const CALL_OPEN: &str = "<tool_call>";
/// Closes a call.
pub const CALL_CLOSE: &str = "</tool_call>";

/// The Lark grammar for a reply under `request`'s `tool_choice`.
pub fn grammar(request: &ToolRequest) -> String {
    // Text that never contains the opener, so a call is the only way to write it.
    // (The opener has no regex metacharacters.)
    let text = format!("TEXT: /(?s:.+)/ & ~/(?s:.*{CALL_OPEN}.*)/");
    let start = match request.choice {
        ToolChoice::None => return format!("start: TEXT?\n{text}\n"),
        ToolChoice::Auto => "start: TEXT? calls?",
        ToolChoice::Required | ToolChoice::Named(_) => "start: calls",
    };
    // A newline may follow the last call: models write one after a closing tag, and a
    // grammar that read it as the start of another call would force call after call.
    let calls = if request.parallel { "calls: call (\"\\n\" call)* \"\\n\"?" } else { "calls: call \"\\n\"?" };
    let functions: Vec<String> = request.callable().enumerate().map(|(i, _)| format!("fn_{i}")).collect();
    let mut lark = format!(
        "{start}\n{calls}\ncall: {open} ({alternatives}) {close}\n{text}\n",
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

    #[test]
    fn the_grammar_follows_the_choice() {
        let auto = grammar(&request(ToolChoice::Auto, true));
        assert!(auto.starts_with("start: TEXT? calls?\ncalls: call (\"\\n\" call)* \"\\n\"?\n"), "{auto}");
        assert!(auto.contains("fn_0: %json") && auto.contains("fn_1: %json"), "{auto}");
        assert!(auto.contains(r#"{"const":"get_time"}"#), "{auto}");
        let named = grammar(&request(ToolChoice::Named("get_time".into()), false));
        assert!(named.starts_with("start: calls\ncalls: call \"\\n\"?\n"), "{named}");
        assert!(named.contains("get_time") && !named.contains("get_weather"), "{named}");
        let none = grammar(&request(ToolChoice::None, true));
        assert!(none.starts_with("start: TEXT?\n") && !none.contains("%json"), "{none}");
    }
}
