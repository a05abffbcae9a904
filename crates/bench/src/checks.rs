//! What the benchmark found when it checked one reply: a constrained output against its
//! shape, a reply's tool calls against the tools offered. The run stage records them per
//! request; the results stage sums them.

use serde::{Deserialize, Serialize};

/// What the check found in one output.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutputCheck {
    /// JSON formats: the text parses as JSON. Regex and choice: always true.
    pub parses: bool,
    /// It matches the constraint: schema-valid, an object, the regex, one of the choices.
    pub valid: bool,
}

/// What the check of one reply's calls found.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CallCheck {
    pub calls: u32,
    /// Arguments that parse as a JSON object.
    pub parsed: u32,
    /// Names among the offered tools (and the named one, for a named `tool_choice`).
    pub allowed: u32,
    /// All three: allowed, parsed, and valid for the tool's `parameters`.
    pub valid: u32,
    /// Calls `max_tokens` cut short (the last of a reply that ended at `length`, its arguments
    /// unfinished): not counted in `calls`, and not sent back.
    #[serde(default)]
    pub cut: u32,
    /// Calls identical (name, arguments as JSON) to an earlier call of the same reply.
    #[serde(default)]
    pub repeated: u32,
    /// Calls whose arguments carry keys their tool's `parameters` do not declare.
    #[serde(default)]
    pub undeclared: u32,
}
