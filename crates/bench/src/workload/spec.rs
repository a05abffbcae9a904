//! What the workload hands the run: one request's prompt, length, constraint and tools
//! (`RequestSpec`), and the knobs every body carries (`BodyOptions`).

use std::sync::Arc;

use serde_json::{json, Value};

use crate::workload::structured::OutputConstraint;
use crate::workload::tools::ToolSet;

/// What one request asks for.
#[derive(Debug, Clone)]
pub struct RequestSpec {
    pub prompt: PromptSpec,
    pub max_tokens: u32,
    /// The prompt's tokens as the benchmark counted them, when it could.
    pub prompt_tokens: Option<u32>,
    /// Constraint workloads: what the output must be, asked for in the body and checked.
    pub constraint: Option<Arc<OutputConstraint>>,
    /// A replayed chat request's own tools (instead of `--tools`): offered, and its calls checked.
    pub tools: Option<Arc<ToolSet>>,
    /// The model this request names (`--model-mix`), instead of the run's `--model`.
    pub model: Option<Arc<str>>,
}

impl RequestSpec {
    pub fn new(prompt: PromptSpec, max_tokens: u32) -> Self {
        Self { prompt, max_tokens, prompt_tokens: None, constraint: None, tools: None, model: None }
    }

    /// The tools this request offers: its own, else the run's.
    pub fn tools<'a>(&'a self, opts: &'a BodyOptions) -> Option<&'a Arc<ToolSet>> {
        self.tools.as_ref().or(opts.tools.as_ref())
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum PromptSpec {
    Text(String),
    /// Chat messages as `{"role", "content"}` objects.
    Messages(Vec<Value>),
}

impl PromptSpec {
    /// The prompt for text protocols; a conversation becomes its contents, one per line.
    pub fn as_text(&self) -> String {
        match self {
            Self::Text(t) => t.clone(),
            Self::Messages(m) => m.iter().filter_map(|m| m["content"].as_str()).collect::<Vec<_>>().join("\n"),
        }
    }

    pub fn as_messages(&self) -> Vec<Value> {
        match self {
            Self::Text(t) => vec![json!({"role": "user", "content": t})],
            Self::Messages(m) => m.clone(),
        }
    }
}

/// Knobs that go into every request body.
#[derive(Debug, Clone, Default)]
pub struct BodyOptions {
    pub model: Option<String>,
    pub ignore_eos: bool,
    pub temperature: Option<f64>,
    /// `--extra-body`: merged into every body (objects merge key by key).
    pub extra: Option<Value>,
    /// Tool workloads: the tools every chat request offers (`--tools`).
    pub tools: Option<Arc<ToolSet>>,
    /// Embeddings and rerank: inputs per request (`--batch-size`; 0 is read as 1).
    pub batch_size: u32,
    /// Several models on one server: each request names one by these shares.
    pub model_mix: Option<Arc<crate::workload::model_mix::ModelMix>>,
}
