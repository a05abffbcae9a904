//! The text of calls in each format, as the grammar makes the model write them and as the
//! parser reads them back. One table, so the two cannot drift apart.

use rillm_backend::ToolCallFormat;

/// How one format lays calls out. A reply's calls are `block_open`, then calls joined by
/// `separator`, then `block_close`; each call is `call_open`, the call object
/// (`{"name": "f", "<arguments_key>": {...}}`), `call_close`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CallSyntax {
    /// Text whose appearance opens calls: the lazy grammar's trigger and what the parser
    /// looks for in content. Llama 3's is the start of the call object itself.
    pub trigger: &'static str,
    /// Whether the trigger is markup (dropped) rather than the call's own first bytes.
    pub trigger_is_markup: bool,
    pub block_open: &'static str,
    pub call_open: &'static str,
    pub call_close: &'static str,
    pub separator: &'static str,
    pub block_close: &'static str,
    pub arguments_key: &'static str,
    /// Punctuation of the list of calls, skipped before a call object when reading.
    pub list_punctuation: &'static [char],
}

const HERMES: CallSyntax = CallSyntax {
    trigger: "<tool_call>",
    trigger_is_markup: true,
    block_open: "",
    call_open: "<tool_call>\n",
    call_close: "\n</tool_call>",
    separator: "\n",
    block_close: "",
    arguments_key: "arguments",
    list_punctuation: &[],
};

/// vLLM's `llama3_json` splits calls on `;`; Llama 3.1's template asks for `parameters`.
const LLAMA3_JSON: CallSyntax = CallSyntax {
    trigger: "{\"name\": \"",
    trigger_is_markup: false,
    block_open: "",
    call_open: "",
    call_close: "",
    separator: "; ",
    block_close: "",
    arguments_key: "parameters",
    list_punctuation: &[';'],
};

const MISTRAL: CallSyntax = CallSyntax {
    trigger: "[TOOL_CALLS]",
    trigger_is_markup: true,
    block_open: "[TOOL_CALLS][",
    call_open: "",
    call_close: "",
    separator: ", ",
    block_close: "]",
    arguments_key: "arguments",
    list_punctuation: &['[', ','],
};

pub fn syntax(format: ToolCallFormat) -> &'static CallSyntax {
    match format {
        ToolCallFormat::Hermes => &HERMES,
        ToolCallFormat::Llama3Json => &LLAMA3_JSON,
        ToolCallFormat::Mistral => &MISTRAL,
    }
}

impl CallSyntax {
    /// Calls written out, as the model would write them. `calls` are (name, arguments as
    /// compact JSON text).
    pub fn write(&self, calls: &[(&str, &str)]) -> String {
        let written: Vec<String> = calls
            .iter()
            .map(|(name, arguments)| {
                format!(
                    "{}{{\"name\": {}, \"{}\": {arguments}}}{}",
                    self.call_open,
                    serde_json::Value::from(*name),
                    self.arguments_key,
                    self.call_close
                )
            })
            .collect();
        format!("{}{}{}", self.block_open, written.join(self.separator), self.block_close)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_format_writes_calls_that_begin_with_its_trigger() {
        for format in ToolCallFormat::ALL {
            let text = syntax(format).write(&[("f", "{\"x\":1}"), ("g", "{}")]);
            assert!(text.starts_with(syntax(format).trigger), "{format}: {text}");
        }
        let llama = syntax(ToolCallFormat::Llama3Json).write(&[("f", "{}"), ("g", "{}")]);
        assert_eq!(llama, "{\"name\": \"f\", \"parameters\": {}}; {\"name\": \"g\", \"parameters\": {}}");
        let mistral = syntax(ToolCallFormat::Mistral).write(&[("f", "{}")]);
        assert_eq!(mistral, "[TOOL_CALLS][{\"name\": \"f\", \"arguments\": {}}]");
    }
}
