//! vLLM's stop and length controls, which chat, completions and `/generate` all take:
//! `stop_token_ids`, `min_tokens`, `include_stop_str_in_output`, `truncate_prompt_tokens`;
//! and SGLang's `no_stop_trim`, which routers in front of rillm add to every request.
//! Typed by hand, as `SamplingFields`: flattened, serde's errors would lose the field name.

use rillm_backend::GenerateRequest;
use serde::Deserialize;
use serde_json::Value;

use crate::error::ApiError;
use crate::sampling::{integer, token_ids, wrong_type};

/// Flattened into each endpoint's body.
#[derive(Debug, Default, Deserialize)]
pub struct StopFields {
    /// Tokens that end the output.
    stop_token_ids: Option<Value>,
    /// How long the output is before anything may end it.
    min_tokens: Option<Value>,
    /// The matched stop string ends the text.
    include_stop_str_in_output: Option<Value>,
    /// SGLang's name for the same: either one set keeps the stop string (a router sends
    /// `no_stop_trim: false` beside whatever the client asked).
    no_stop_trim: Option<Value>,
    /// Only the prompt's last N tokens (-1: as many as the context holds).
    truncate_prompt_tokens: Option<Value>,
}

impl StopFields {
    /// Sets them on `request`, whose `max_tokens` (named `max_param` in the body) is known.
    pub fn apply(self, request: &mut GenerateRequest, max_param: &str) -> Result<(), ApiError> {
        request.stop_token_ids = token_ids("stop_token_ids", self.stop_token_ids)?;
        request.min_tokens = match integer("min_tokens", self.min_tokens)? {
            None => 0,
            Some(n) if n < 0 => {
                return Err(ApiError::invalid("min_tokens", format!("`min_tokens` must be at least 0, got {n}")))
            }
            // vLLM's bound, where `max_tokens` is known.
            Some(n) if request.max_tokens.is_some_and(|max| n > i64::from(max)) => {
                return Err(ApiError::invalid(
                    "min_tokens",
                    format!("`min_tokens` ({n}) must not exceed `{max_param}`"),
                ))
            }
            Some(n) => u32::try_from(n).unwrap_or(u32::MAX),
        };
        request.include_stop_str = flag("include_stop_str_in_output", self.include_stop_str_in_output)?
            || flag("no_stop_trim", self.no_stop_trim)?;
        request.truncate_prompt_tokens = match integer("truncate_prompt_tokens", self.truncate_prompt_tokens)? {
            None => None,
            Some(-1) => Some(u32::MAX),
            Some(n) if n >= 1 => Some(u32::try_from(n).unwrap_or(u32::MAX)),
            Some(n) => {
                return Err(ApiError::invalid(
                    "truncate_prompt_tokens",
                    format!("`truncate_prompt_tokens` must be -1 (the context) or at least 1, got {n}"),
                ))
            }
        };
        Ok(())
    }
}

/// A boolean field; absent or null is false.
fn flag(param: &'static str, value: Option<Value>) -> Result<bool, ApiError> {
    match value {
        None | Some(Value::Null) => Ok(false),
        Some(Value::Bool(b)) => Ok(b),
        Some(other) => Err(wrong_type(param, "a boolean", &other)),
    }
}
