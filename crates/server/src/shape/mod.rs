//! What shapes a reply, validated in one place: the tools it may call (`tools`,
//! `tool_choice`, `parallel_tool_calls`) and the format its answer takes (`response_format`,
//! `text.format`, `structured_outputs`, `guided_*`, `json_schema`), composed into the one
//! constraint the engine runs, as TGI's `Validation` turns a request into a
//! `ValidGenerateRequest`. Chat, completions, `/generate` and Responses all build an
//! [`OutputShape`]; no route composes constraints itself, and no shape is dropped:
//!
//! | `tool_choice` | no format | a format |
//! | --- | --- | --- |
//! | none | text without call markup | the format |
//! | auto (or absent) | text, then calls once the model opens one | calls, or the format's answer |
//! | required, named | calls | calls (the format shapes a later turn) |
//!
//! JSON Schemas, the format's and each function's `parameters`, are read as `SchemaReading`
//! says (by default only what they name is generated).
//!
//! Under `auto`, right after the results of calls (`answered`), a reply that would only
//! repeat one of those calls is made again as the answer (the engine restarts it under the
//! no-calls constraint, the format or plain text), where the route holds calls back until
//! they complete, so nothing of the repeat was sent. With a format there, the model also
//! chooses between calling and answering as it would without one
//! (`Constraint::CallsOrAnswer`): a reply that does not open a call is the answer, where
//! the mask of `calls | answer` alone makes a model about to answer open a call (and
//! repeat the one just answered). Under `required` or a named function the reply must
//! call: a repeat of an answered call is kept.

use std::sync::Arc;

use rillm_backend::{Constraint, GenerateRequest, ToolCallFormat};

use crate::fields::Fields;
use crate::schema_reading::SchemaReading;
use crate::structured::RequestedConstraint;
use crate::tools::{self, AnsweredCall, CallReading, ToolRequest};

/// How a server lays out and reads what shapes output.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ShapeRules {
    /// The format calls are constrained to and read back in.
    pub call_format: ToolCallFormat,
    pub schemas: SchemaReading,
    /// A call identical to one the reply made is kept (`--keep-repeated-calls`); by
    /// default it ends the reply.
    pub keep_repeated_calls: bool,
}

/// One request's tools and answer format, validated.
#[derive(Debug, Clone, PartialEq)]
pub struct OutputShape {
    tools: Option<ToolRequest>,
    format: Option<RequestedConstraint>,
    rules: ShapeRules,
    /// The conversation's last round's calls with their results in it.
    answered: Vec<AnsweredCall>,
    /// A reply repeating only an answered call may restart as the answer.
    restartable: bool,
}

/// The constraint a shape comes to, the field a refusal names, and its parts with their
/// own fields (checked one by one where the whole is refused).
#[derive(Debug, Clone, PartialEq)]
pub struct ShapedConstraint {
    pub constraint: Constraint,
    pub param: String,
    pub parts: Vec<(String, Constraint)>,
}

impl OutputShape {
    pub fn new(tools: Option<ToolRequest>, format: Option<RequestedConstraint>, rules: ShapeRules) -> Self {
        Self { tools, format, rules, answered: Vec::new(), restartable: false }
    }

    /// The conversation ends with the results of `answered` calls: a reply that only
    /// repeats one is made again as the answer (for routes that hold calls back until they
    /// complete: chat and Responses).
    pub fn after_results(mut self, answered: Vec<AnsweredCall>) -> Self {
        self.restartable = !answered.is_empty();
        self.answered = answered;
        self
    }

    /// The tools offered (for the prompt and for reading calls back), as the client sent
    /// them.
    pub fn tools(&self) -> Option<&ToolRequest> {
        self.tools.as_ref()
    }

    /// How calls are read back from the reply, when it may make any.
    pub fn call_reading(&self) -> Option<CallReading> {
        self.tools.as_ref().map(|_| CallReading {
            format: self.rules.call_format,
            keep_repeats: self.rules.keep_repeated_calls,
            answered: Arc::new(self.answered_repeats_end()),
            can_restart: self.restarts(),
        })
    }

    /// The answered calls whose repeat ends the reply. Under `required` or a named function
    /// the reply must call, and a call repeating an answered one is still the call the client
    /// asked for: dropped, it would leave a reply with no call at all (the agent loop's next
    /// round then has nothing to act on). Only where a reply may do without calls is such a
    /// repeat a loop to cut.
    fn answered_repeats_end(&self) -> Vec<AnsweredCall> {
        let may_skip_calls =
            self.tools.as_ref().is_some_and(|t| matches!(t.choice, tools::ToolChoice::Auto | tools::ToolChoice::None));
        if may_skip_calls {
            self.answered.clone()
        } else {
            Vec::new()
        }
    }

    /// Whether a reply that only repeats an answered call is made again as the answer.
    fn restarts(&self) -> bool {
        let auto = self.tools.as_ref().is_some_and(|t| t.choice == tools::ToolChoice::Auto);
        self.restartable && auto && !self.rules.keep_repeated_calls
    }

    /// The one constraint the reply follows, if anything shapes it.
    pub fn constraint(&self) -> Option<ShapedConstraint> {
        let format = self.format.as_ref().map(|f| (f.param.clone(), self.read(&f.constraint)));
        let Some(tools) = &self.tools else {
            return format.map(|(param, constraint)| ShapedConstraint { constraint, param, parts: Vec::new() });
        };
        let tools = self.read_tools(tools);
        let answer = format.as_ref().map(|(_, c)| c);
        let constraint = match (self.restarts(), answer) {
            (true, Some(answer)) => tools::calls_or_answer(&tools, self.rules.call_format, answer),
            (true, None) => Constraint::Restartable {
                constraint: Box::new(tools::constraint(&tools, self.rules.call_format, None)),
                restart: Box::new(tools::without_calls(self.rules.call_format, None)),
            },
            (false, _) => tools::constraint(&tools, self.rules.call_format, answer),
        };
        let mut parts: Vec<(String, Constraint)> = format.iter().cloned().collect();
        parts.extend(tools.tools.iter().enumerate().map(|(i, tool)| {
            (format!("tools[{i}].function.parameters"), Constraint::JsonSchema(tool.parameters.clone()))
        }));
        let param = match (&tools.choice, &format) {
            // The format alone, or the format beside calls: a refusal is most likely its.
            (tools::ToolChoice::None | tools::ToolChoice::Auto, Some((param, _))) => param.clone(),
            _ => "tools".to_string(),
        };
        Some(ShapedConstraint { constraint, param, parts })
    }

    /// Puts the constraint on `request`; says which fields a refusal may name (`prompt`:
    /// where its prompt came from).
    pub fn apply(&self, request: &mut GenerateRequest, prompt: &'static str) -> Fields {
        let shaped = self.constraint();
        request.constraint = shaped.as_ref().map(|s| s.constraint.clone());
        let (constraint, constraint_parts) = match shaped {
            Some(s) => (Some(s.param), s.parts),
            None => (None, Vec::new()),
        };
        Fields { prompt, constraint, constraint_parts }
    }

    /// A format's JSON Schema as the rules read it; other formats as they are.
    fn read(&self, format: &Constraint) -> Constraint {
        match format {
            Constraint::JsonSchema(schema) => Constraint::JsonSchema(self.rules.schemas.read(schema.clone())),
            other => other.clone(),
        }
    }

    /// The tools with their `parameters` as the rules read them (the prompt shows them as
    /// sent).
    fn read_tools(&self, tools: &ToolRequest) -> ToolRequest {
        let mut read = tools.clone();
        for tool in &mut read.tools {
            tool.parameters = self.rules.schemas.read(std::mem::take(&mut tool.parameters));
        }
        read
    }
}

#[cfg(test)]
mod tests;
