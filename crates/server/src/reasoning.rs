//! Reasoning models: which parser reads their thought (`--reasoning-parser`), the names the
//! thought goes out under (`--reasoning-field`), and a request's switch and budget
//! (`reasoning_effort`, `max_reasoning_tokens`, `chat_template_kwargs.enable_thinking`)
//! turned into the engine's [`Reasoning`].
//!
//! Clients read one name or the other: llama-server, SGLang and mistral.rs send
//! `reasoning_content`, vLLM renamed it `reasoning` (and reads only that on input), Ollama
//! sends `reasoning`. rillm sends both by default and reads both.

use serde::Deserialize;
use serde_json::{Map, Value};

use crate::error::ApiError;
use crate::state::AppState;
use rillm_backend::{Prompt, Reasoning, TemplateThinking, ThinkingStart};

/// Which rule reads output that has no opening marker (`--reasoning-parser`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ReasoningParser {
    /// From the chat template: none if it writes no think markers; Qwen3's if it reads
    /// `enable_thinking`, else DeepSeek-R1's.
    #[default]
    Auto,
    /// Output is thinking until `</think>`, marker or not (the template opens it).
    DeepSeekR1,
    /// Output is thinking only after a `<think>` (the prompt's or the model's own).
    Qwen3,
    /// The text as generated, markers and all.
    None,
}

impl ReasoningParser {
    pub fn parse(name: &str) -> Result<Self, String> {
        Ok(match name {
            "auto" => Self::Auto,
            "deepseek_r1" => Self::DeepSeekR1,
            "qwen3" => Self::Qwen3,
            "none" => Self::None,
            other => {
                return Err(format!("unknown reasoning parser `{other}`; expected auto, deepseek_r1, qwen3, none"))
            }
        })
    }

    /// How unmarked output reads for a model with this template (`None`: not split).
    pub fn unmarked_start(self, template: Option<TemplateThinking>) -> Option<ThinkingStart> {
        match self {
            Self::Auto => template.map(|t| match t.switch {
                Some(_) => ThinkingStart::Answer,
                None => ThinkingStart::Thinking,
            }),
            Self::DeepSeekR1 => Some(ThinkingStart::Thinking),
            Self::Qwen3 => Some(ThinkingStart::Answer),
            Self::None => None,
        }
    }
}

/// The names a thought goes out under (`--reasoning-field`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ReasoningField {
    #[default]
    Both,
    ReasoningContent,
    Reasoning,
}

impl ReasoningField {
    pub fn parse(name: &str) -> Result<Self, String> {
        Ok(match name {
            "both" => Self::Both,
            "reasoning_content" => Self::ReasoningContent,
            "reasoning" => Self::Reasoning,
            other => {
                return Err(format!("unknown reasoning field `{other}`; expected both, reasoning_content, reasoning"))
            }
        })
    }

    /// The field names to write a thought under.
    pub fn names(self) -> &'static [&'static str] {
        match self {
            Self::Both => &["reasoning_content", "reasoning"],
            Self::ReasoningContent => &["reasoning_content"],
            Self::Reasoning => &["reasoning"],
        }
    }
}

/// Thinking tokens for `reasoning_effort` low, medium and high (`--reasoning-budgets`);
/// `None`: unbounded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EffortBudgets {
    pub low: Option<u32>,
    pub medium: Option<u32>,
    pub high: Option<u32>,
}

impl Default for EffortBudgets {
    fn default() -> Self {
        Self { low: Some(256), medium: Some(1024), high: None }
    }
}

impl EffortBudgets {
    /// `low=256,medium=1024,high=none`: any of the three, in any order.
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut budgets = Self::default();
        for item in text.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let (effort, value) = item.split_once('=').ok_or_else(|| format!("`{item}`: expected EFFORT=TOKENS"))?;
            let value = match value.trim() {
                "none" | "unlimited" => None,
                n => Some(n.parse::<u32>().map_err(|_| format!("`{item}`: a token count or `none`"))?),
            };
            match effort.trim() {
                "low" => budgets.low = value,
                "medium" => budgets.medium = value,
                "high" => budgets.high = value,
                other => return Err(format!("unknown effort `{other}`; expected low, medium, high")),
            }
        }
        Ok(budgets)
    }
}

/// The server's reasoning settings.
#[derive(Debug, Clone, Copy, Default)]
pub struct ReasoningOptions {
    pub parser: ReasoningParser,
    pub field: ReasoningField,
    pub budgets: EffortBudgets,
}

/// A request's thinking fields, as chat completions take them.
#[derive(Debug, Default, Deserialize)]
pub struct ReasoningFields {
    /// OpenAI's: `none`, `minimal`, `low`, `medium`, `high`.
    reasoning_effort: Option<Value>,
    /// A per-request budget, in four spellings: rillm's own,
    max_reasoning_tokens: Option<Value>,
    /// llama-server's two,
    thinking_budget_tokens: Option<Value>,
    reasoning_budget_tokens: Option<Value>,
    /// and vLLM's (with its `--reasoning-config`).
    thinking_token_budget: Option<Value>,
}

/// What the Responses API's `reasoning` may hold: `effort`, and `summary` (accepted; rillm
/// writes no summary, the thought itself is the reasoning item's content).
const RESPONSES_REASONING: &[&str] = &["effort", "summary", "generate_summary"];

impl ReasoningFields {
    /// The Responses API's `reasoning` object: its fields, and what the response echoes.
    pub fn from_responses(reasoning: Option<Value>) -> Result<(Self, Value), ApiError> {
        let reasoning = match reasoning {
            None | Some(Value::Null) => Map::new(),
            Some(Value::Object(reasoning)) => reasoning,
            Some(_) => return Err(ApiError::invalid("reasoning", "`reasoning` must be an object")),
        };
        if let Some(key) = reasoning.keys().find(|k| !RESPONSES_REASONING.contains(&k.as_str())) {
            return Err(ApiError::invalid(format!("reasoning.{key}"), format!("`reasoning.{key}` is not supported")));
        }
        let effort = reasoning.get("effort").cloned().filter(|v| !v.is_null());
        let echo = serde_json::json!({"effort": effort, "summary": reasoning.get("summary")});
        Ok((Self { reasoning_effort: effort, ..Self::default() }, echo))
    }

    /// `into_reasoning` for a prompt the bound model's chat template renders (`None` for
    /// any other prompt): the switch goes into the prompt's template variables.
    pub fn for_prompt(self, state: &AppState, prompt: &mut Prompt) -> Result<Option<Reasoning>, ApiError> {
        let Prompt::Chat { options, .. } = prompt else { return Ok(None) };
        let (unmarked, template) = state.reasoning_reading();
        self.into_reasoning(&mut options.template_kwargs, unmarked, template, &state.config.reasoning.budgets)
    }

    /// The engine's reading of the reply (`None` where the model's output is not split),
    /// and the template's off switch set in `template_kwargs` when thinking is off.
    /// `unmarked` is the model's parser rule (`ReasoningParser::unmarked_start`).
    pub fn into_reasoning(
        self,
        template_kwargs: &mut Map<String, Value>,
        unmarked: Option<ThinkingStart>,
        template: Option<TemplateThinking>,
        budgets: &EffortBudgets,
    ) -> Result<Option<Reasoning>, ApiError> {
        let budget = self.budget(template_kwargs, budgets)?;
        // The effort reaches the template too, as llama-server and vLLM pass it (gpt-oss's
        // template reads it); templates that do not ignore it.
        if let Some(Value::String(effort)) = &self.reasoning_effort {
            if effort != "none" {
                template_kwargs.entry("reasoning_effort").or_insert_with(|| Value::from(effort.as_str()));
            }
        }
        let Some(unmarked_start) = unmarked else { return Ok(None) };
        // Set either way, as llama-server does: some templates read an unset switch as off.
        // A budget of 0 is thinking off.
        if let Some(switch) = template.and_then(|t| t.switch) {
            template_kwargs.entry(switch).or_insert(Value::Bool(budget != Some(0)));
        }
        Ok(Some(Reasoning { unmarked_start, budget }))
    }

    /// What the request asks of the model's thinking: a budget (0: off: the `none` effort,
    /// the template's switch false, or a budget of 0), or the model's own (`None`).
    fn budget(&self, template_kwargs: &Map<String, Value>, budgets: &EffortBudgets) -> Result<Option<u32>, ApiError> {
        let switched_off = switched_off(template_kwargs)?;
        let (effort_off, effort_budget) = self.effort_budget(budgets)?;
        let off = switched_off || effort_off;
        let explicit = budget_field(&self.max_reasoning_tokens, "max_reasoning_tokens")?
            .or(budget_field(&self.thinking_budget_tokens, "thinking_budget_tokens")?)
            .or(budget_field(&self.reasoning_budget_tokens, "reasoning_budget_tokens")?)
            .or(budget_field(&self.thinking_token_budget, "thinking_token_budget")?);
        Ok(if off { Some(0) } else { explicit.or(effort_budget) })
    }

    /// `reasoning_effort` read: whether it turns thinking off, and its budget.
    fn effort_budget(&self, budgets: &EffortBudgets) -> Result<(bool, Option<u32>), ApiError> {
        let effort = match &self.reasoning_effort {
            None | Some(Value::Null) => return Ok((false, None)),
            Some(Value::String(effort)) => effort.as_str(),
            Some(other) => return Err(unknown_effort(other)),
        };
        Ok(match effort {
            "none" => (true, None),
            "minimal" | "low" => (false, budgets.low),
            "medium" => (false, budgets.medium),
            "high" => (false, budgets.high),
            other => return Err(unknown_effort(&Value::String(other.to_owned()))),
        })
    }
}

/// Whether the client's template switch (`enable_thinking` or `thinking`) turns thinking
/// off; a switch that is not a boolean is a 400 naming it.
fn switched_off(template_kwargs: &Map<String, Value>) -> Result<bool, ApiError> {
    let mut off = false;
    for switch in ["enable_thinking", "thinking"] {
        match template_kwargs.get(switch) {
            None | Some(Value::Null) | Some(Value::Bool(true)) => {}
            Some(Value::Bool(false)) => off = true,
            Some(other) => {
                return Err(ApiError::invalid(
                    format!("chat_template_kwargs.{switch}"),
                    format!("`{switch}` must be a boolean, not {other}"),
                ))
            }
        }
    }
    Ok(off)
}

fn unknown_effort(value: &Value) -> ApiError {
    ApiError::invalid(
        "reasoning_effort",
        format!("unknown `reasoning_effort` {value}; expected one of none, minimal, low, medium, high"),
    )
}

/// A budget field: a whole number of tokens, 0 or more.
fn budget_field(value: &Option<Value>, param: &str) -> Result<Option<u32>, ApiError> {
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(v) => match v.as_u64() {
            Some(n) => Ok(Some(u32::try_from(n).unwrap_or(u32::MAX))),
            None => {
                Err(ApiError::invalid(param, format!("`{param}` must be a whole number of tokens, 0 or more; got {v}")))
            }
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn read(
        body: Value,
        kwargs: Value,
        template: Option<TemplateThinking>,
    ) -> Result<(Option<Reasoning>, Value), ApiError> {
        let fields: ReasoningFields = serde_json::from_value(body).expect("fields");
        let mut kwargs = kwargs.as_object().cloned().unwrap_or_default();
        let unmarked = ReasoningParser::Auto.unmarked_start(template);
        let reasoning = fields.into_reasoning(&mut kwargs, unmarked, template, &EffortBudgets::default())?;
        Ok((reasoning, Value::Object(kwargs)))
    }

    const QWEN3: Option<TemplateThinking> = Some(TemplateThinking { switch: Some("enable_thinking") });
    const R1: Option<TemplateThinking> = Some(TemplateThinking { switch: None });

    fn budget(body: Value, kwargs: Value, template: Option<TemplateThinking>) -> Option<u32> {
        read(body, kwargs, template).expect("accepted").0.expect("split").budget
    }

    #[test]
    fn effort_and_budgets_map_to_the_engine_s_budget() {
        assert_eq!(budget(json!({}), json!({}), R1), None, "the model's own");
        assert_eq!(budget(json!({"reasoning_effort": "low"}), json!({}), R1), Some(256));
        assert_eq!(budget(json!({"reasoning_effort": "medium"}), json!({}), R1), Some(1024));
        assert_eq!(budget(json!({"reasoning_effort": "high"}), json!({}), R1), None);
        assert_eq!(budget(json!({"reasoning_effort": "none"}), json!({}), R1), Some(0));
        assert_eq!(budget(json!({"max_reasoning_tokens": 40, "reasoning_effort": "low"}), json!({}), R1), Some(40));
        assert_eq!(budget(json!({"thinking_budget_tokens": 7}), json!({}), R1), Some(7));
        assert_eq!(budget(json!({"thinking_token_budget": 9}), json!({}), R1), Some(9));
        assert_eq!(budget(json!({"reasoning_budget_tokens": 11}), json!({}), R1), Some(11));
        assert_eq!(budget(json!({}), json!({"enable_thinking": false}), QWEN3), Some(0));
    }

    #[test]
    fn thinking_off_sets_the_template_s_own_switch_unless_the_client_did() {
        let (reasoning, kwargs) = read(json!({"reasoning_effort": "none"}), json!({}), QWEN3).expect("accepted");
        assert_eq!(kwargs, json!({"enable_thinking": false}));
        assert_eq!(reasoning.map(|r| r.unmarked_start), Some(ThinkingStart::Answer), "Qwen3's rule");
        let (_, kwargs) = read(json!({"reasoning_effort": "none"}), json!({}), R1).expect("accepted");
        assert_eq!(kwargs, json!({}), "no switch: the engine closes the thought in the prompt");
        let (_, kwargs) = read(json!({}), json!({}), QWEN3).expect("accepted");
        assert_eq!(kwargs, json!({"enable_thinking": true}), "set either way, as llama-server does");
        let (_, kwargs) = read(json!({"reasoning_effort": "high"}), json!({}), R1).expect("accepted");
        assert_eq!(kwargs, json!({"reasoning_effort": "high"}), "the effort reaches the template");
        let read_back = read(json!({"reasoning_effort": "none"}), json!({"enable_thinking": true}), QWEN3);
        assert_eq!(read_back.expect("accepted").1, json!({"enable_thinking": true}), "the client's own value stays");
        let (reasoning, _) = read(json!({"reasoning_effort": "high"}), json!({}), None).expect("accepted");
        assert_eq!(reasoning, None, "a model that does not think is not split");
    }

    #[test]
    fn bad_fields_are_refused_by_name() {
        for (body, kwargs, param) in [
            (json!({"reasoning_effort": "extreme"}), json!({}), "reasoning_effort"),
            (json!({"reasoning_effort": 3}), json!({}), "reasoning_effort"),
            (json!({"max_reasoning_tokens": -1}), json!({}), "max_reasoning_tokens"),
            (json!({"thinking_budget_tokens": 1.5}), json!({}), "thinking_budget_tokens"),
            (json!({}), json!({"enable_thinking": "no"}), "chat_template_kwargs.enable_thinking"),
        ] {
            let error = read(body.clone(), kwargs, R1).expect_err("refused");
            assert_eq!(error.param.as_deref(), Some(param), "{body}");
        }
    }

    #[test]
    fn server_settings_parse() {
        let budgets = EffortBudgets::parse("high=9000, low=10").expect("parses");
        assert_eq!(budgets, EffortBudgets { low: Some(10), medium: Some(1024), high: Some(9000) });
        assert!(EffortBudgets::parse("huge=1").is_err() && EffortBudgets::parse("low=x").is_err());
        assert_eq!(ReasoningParser::parse("qwen3"), Ok(ReasoningParser::Qwen3));
        assert_eq!(ReasoningField::parse("reasoning").map(ReasoningField::names), Ok(&["reasoning"][..]));
    }
}
