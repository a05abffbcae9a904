//! The fields of a request a refusal may name: where its prompt and its output constraint
//! came from. Routes fill them in (`shape` the constraint's); admission names them in a 400.

use rillm_backend::Constraint;

/// The request fields a rejection may be about.
pub struct Fields {
    /// Where the prompt came from: `prompt` or `messages`.
    pub prompt: &'static str,
    /// Where the output constraint came from (`response_format`, `structured_outputs.json`, ...).
    pub constraint: Option<String>,
    /// A composed constraint's parts, each with its own field: where the whole is refused,
    /// the first part refused alone is the field named.
    pub constraint_parts: Vec<(String, Constraint)>,
}
