//! How a model writes tool calls. The engine learns which one its chat template writes;
//! the server's grammar, prompt and parser speak each.

/// A tool-call format, named as vLLM's `--tool-call-parser` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum ToolCallFormat {
    /// `<tool_call>\n{"name": …, "arguments": {…}}\n</tool_call>`, one tag per call
    /// (Qwen2.5, Hermes 2/3, SmolLM's function-calling data).
    #[default]
    Hermes,
    /// `{"name": …, "parameters": {…}}`, calls separated by `; ` (Llama 3.1–3.3; the
    /// `<|python_tag|>` control token that may lead it is not text).
    Llama3Json,
    /// `[TOOL_CALLS][{"name": …, "arguments": {…}}, …]` (Mistral v0.3, Nemo).
    Mistral,
}

impl ToolCallFormat {
    pub const ALL: [Self; 3] = [Self::Hermes, Self::Llama3Json, Self::Mistral];

    /// vLLM's name for it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Hermes => "hermes",
            Self::Llama3Json => "llama3_json",
            Self::Mistral => "mistral",
        }
    }

    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|f| f.name() == name)
    }
}

impl std::fmt::Display for ToolCallFormat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_format_is_found_by_its_name() {
        for format in ToolCallFormat::ALL {
            assert_eq!(ToolCallFormat::from_name(format.name()), Some(format));
        }
        assert_eq!(ToolCallFormat::from_name("pythonic"), None);
    }
}
