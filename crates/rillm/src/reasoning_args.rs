//! `rillm serve`'s options for reasoning models (docs/reasoning.md).

use rillm_server::{EffortBudgets, ReasoningField, ReasoningOptions, ReasoningParser};

#[derive(clap::Args, Debug, Clone)]
pub struct ReasoningArgs {
    /// How a reasoning model's thought is read apart from its answer: deepseek_r1 (output
    /// is thinking until `</think>`), qwen3 (thinking only after a `<think>`), none (text
    /// as generated) or auto: from the chat template (none unless it writes think markers;
    /// qwen3 if it reads `enable_thinking`, else deepseek_r1).
    #[arg(long, default_value = "auto", value_parser = ReasoningParser::parse)]
    reasoning_parser: ReasoningParser,
    /// The field the thought goes out in: both (`reasoning_content`, as llama-server and
    /// SGLang send it, and `reasoning`, as vLLM and Ollama do), reasoning_content or reasoning.
    #[arg(long, default_value = "both", value_parser = ReasoningField::parse)]
    reasoning_field: ReasoningField,
    /// Thinking tokens for `reasoning_effort` low (and minimal), medium and high; `none`
    /// is unbounded. At the budget the closing marker is forced and the model answers.
    #[arg(long, default_value = "low=256,medium=1024,high=none", value_parser = EffortBudgets::parse)]
    reasoning_budgets: EffortBudgets,
}

impl ReasoningArgs {
    pub fn options(&self) -> ReasoningOptions {
        ReasoningOptions { parser: self.reasoning_parser, field: self.reasoning_field, budgets: self.reasoning_budgets }
    }
}
