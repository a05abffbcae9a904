//! The sampling fields every generating endpoint takes, in OpenAI's and vLLM's spellings,
//! checked into the engine's `SamplingParams`. Out-of-range values are a 400 naming the
//! field, with the range OpenAI or vLLM documents for it.

use rillm_backend::{Penalties, SamplingParams, TokenId};
use serde::Deserialize;
use serde_json::Value;

use crate::error::ApiError;

/// Flattened into each endpoint's body. Each value is taken as any JSON and its type
/// checked here: inside a flattened struct serde's errors lose the field's name.
#[derive(Debug, Default, Deserialize)]
pub struct SamplingFields {
    temperature: Option<Value>,
    top_p: Option<Value>,
    top_k: Option<Value>,
    /// vLLM's and llama.cpp's: a floor relative to the most likely token's probability.
    min_p: Option<Value>,
    seed: Option<Value>,
    presence_penalty: Option<Value>,
    frequency_penalty: Option<Value>,
    /// vLLM's (Hugging Face's): scales the logits of prompt and output tokens.
    repetition_penalty: Option<Value>,
    /// OpenAI's `{"token id": bias}`, bias from -100 to 100.
    logit_bias: Option<Value>,
    /// vLLM's: the only tokens that may be sampled.
    allowed_token_ids: Option<Value>,
}

impl SamplingFields {
    /// The sampler settings; `temperature` unset is `default_temperature`.
    pub fn into_params(self, default_temperature: f32) -> Result<SamplingParams, ApiError> {
        let temperature = match number("temperature", self.temperature)? {
            None => default_temperature,
            Some(t) => in_range("temperature", t, 0.0, 2.0)?,
        };
        let top_p = match number("top_p", self.top_p)? {
            None => 1.0,
            Some(p) if p > 0.0 && p <= 1.0 => p as f32,
            Some(p) => return Err(ApiError::invalid("top_p", format!("`top_p` must be in (0, 1], got {p}"))),
        };
        let top_k = match integer("top_k", self.top_k)? {
            None | Some(-1) | Some(0) => 0,
            Some(k) if k > 0 => u32::try_from(k).unwrap_or(u32::MAX),
            Some(k) => {
                return Err(ApiError::invalid(
                    "top_k",
                    format!("`top_k` must be -1, 0 (disabled) or positive, got {k}"),
                ))
            }
        };
        let ranged = |param, value, low, high| match number(param, value)? {
            None => Ok(None),
            Some(v) => in_range(param, v, low, high).map(Some),
        };
        let min_p = ranged("min_p", self.min_p, 0.0, 1.0)?.unwrap_or(0.0);
        let presence = ranged("presence_penalty", self.presence_penalty, -2.0, 2.0)?.unwrap_or(0.0);
        let frequency = ranged("frequency_penalty", self.frequency_penalty, -2.0, 2.0)?.unwrap_or(0.0);
        let repetition = match number("repetition_penalty", self.repetition_penalty)? {
            None => 1.0,
            Some(r) if r.is_finite() && r > 0.0 => r as f32,
            Some(r) => {
                return Err(ApiError::invalid(
                    "repetition_penalty",
                    format!("`repetition_penalty` must be above 0 (1 disables it), got {r}"),
                ))
            }
        };
        Ok(SamplingParams {
            temperature,
            top_p,
            top_k,
            // Any 64-bit seed, negative ones as their two's complement.
            seed: integer("seed", self.seed)?.map(|s| s as u64),
            min_p,
            logit_bias: logit_bias(self.logit_bias)?,
            allowed_token_ids: allowed_token_ids(self.allowed_token_ids)?,
            penalties: Penalties { presence, frequency, repetition },
        })
    }
}

/// A number field: `null` is unset; anything but a number is refused by name.
fn number(param: &'static str, value: Option<Value>) -> Result<Option<f64>, ApiError> {
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) => Ok(n.as_f64()),
        Some(other) => Err(wrong_type(param, "a number", &other)),
    }
}

/// An integer field, as `number`.
pub(crate) fn integer(param: &'static str, value: Option<Value>) -> Result<Option<i64>, ApiError> {
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) if n.is_i64() => Ok(n.as_i64()),
        Some(other) => Err(wrong_type(param, "an integer", &other)),
    }
}

pub(crate) fn wrong_type(param: &'static str, expected: &str, got: &Value) -> ApiError {
    ApiError::invalid(param, format!("invalid `{param}`: expected {expected}, got {got}")).with_code("invalid_type")
}

fn in_range(param: &'static str, value: f64, low: f64, high: f64) -> Result<f32, ApiError> {
    if value.is_finite() && (low..=high).contains(&value) {
        Ok(value as f32)
    } else {
        Err(ApiError::invalid(param, format!("`{param}` must be between {low} and {high}, got {value}")))
    }
}

/// A list of token ids; `null` is none. Whether each is in the vocabulary is the engine's
/// to say.
pub(crate) fn token_ids(param: &'static str, value: Option<Value>) -> Result<Vec<TokenId>, ApiError> {
    let invalid = || ApiError::invalid(param, format!("`{param}` must be a list of token ids"));
    match value {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(ids)) => {
            ids.iter().map(|id| id.as_u64().and_then(|id| TokenId::try_from(id).ok()).ok_or_else(invalid)).collect()
        }
        Some(_) => Err(invalid()),
    }
}

/// A non-empty list of token ids; `null` is none.
fn allowed_token_ids(value: Option<Value>) -> Result<Vec<TokenId>, ApiError> {
    let present = value.as_ref().is_some_and(|v| !v.is_null());
    let ids = token_ids("allowed_token_ids", value)?;
    if present && ids.is_empty() {
        return Err(ApiError::invalid("allowed_token_ids", "`allowed_token_ids` must not be empty"));
    }
    Ok(ids)
}

/// OpenAI's map of token ids (as strings) to a bias; `null` or `{}` is none. Whether each
/// id is in the vocabulary is the engine's to say.
fn logit_bias(value: Option<Value>) -> Result<Vec<(TokenId, f32)>, ApiError> {
    let invalid = |message: String| ApiError::invalid("logit_bias", message);
    let map = match value {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Object(map)) => map,
        Some(_) => return Err(invalid("`logit_bias` must be an object of token ids to biases".into())),
    };
    map.into_iter()
        .map(|(key, bias)| {
            let token = key
                .trim()
                .parse::<TokenId>()
                .map_err(|_| invalid(format!("`logit_bias` keys are token ids, got \"{key}\"")))?;
            match bias.as_f64() {
                Some(b) if (-100.0..=100.0).contains(&b) => Ok((token, b as f32)),
                _ => Err(invalid(format!("`logit_bias[\"{key}\"]` must be a number from -100 to 100, got {bias}"))),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn params(body: Value) -> Result<SamplingParams, ApiError> {
        serde_json::from_value::<SamplingFields>(body).expect("fields").into_params(1.0)
    }

    fn refused(body: Value) -> String {
        params(body).expect_err("refused").param.unwrap_or_default()
    }

    #[test]
    fn every_field_reaches_the_sampler() {
        let p = params(json!({
            "temperature": 0.5, "top_p": 0.9, "top_k": 40, "min_p": 0.1, "seed": 3,
            "presence_penalty": 0.5, "frequency_penalty": -0.5, "repetition_penalty": 1.2,
            "logit_bias": {"7": 100, " 12": -100, "3": 0.5}, "allowed_token_ids": [3, 7]
        }))
        .expect("valid");
        assert_eq!((p.temperature, p.top_p, p.top_k, p.min_p, p.seed), (0.5, 0.9, 40, 0.1, Some(3)));
        assert_eq!(p.penalties, Penalties { presence: 0.5, frequency: -0.5, repetition: 1.2 });
        let mut bias = p.logit_bias.clone();
        bias.sort_by_key(|b| b.0);
        assert_eq!(bias, vec![(3, 0.5), (7, 100.0), (12, -100.0)]);
        assert_eq!(p.allowed_token_ids, vec![3, 7]);
    }

    #[test]
    fn unset_and_null_change_nothing() {
        let p = params(json!({"logit_bias": null, "presence_penalty": null})).expect("valid");
        assert_eq!(p, SamplingParams::default());
        assert!(params(json!({"logit_bias": {}})).expect("valid").logit_bias.is_empty());
    }

    #[test]
    fn out_of_range_values_name_their_field() {
        for (body, param) in [
            (json!({"temperature": 2.5}), "temperature"),
            (json!({"top_p": 0}), "top_p"),
            (json!({"top_k": -2}), "top_k"),
            (json!({"min_p": 1.5}), "min_p"),
            (json!({"presence_penalty": 2.1}), "presence_penalty"),
            (json!({"frequency_penalty": -3}), "frequency_penalty"),
            (json!({"repetition_penalty": 0}), "repetition_penalty"),
            (json!({"logit_bias": [1, 2]}), "logit_bias"),
            (json!({"logit_bias": {"cat": 1}}), "logit_bias"),
            (json!({"logit_bias": {"-1": 1}}), "logit_bias"),
            (json!({"logit_bias": {"5": 101}}), "logit_bias"),
            (json!({"logit_bias": {"5": "high"}}), "logit_bias"),
            (json!({"temperature": "hot"}), "temperature"),
            (json!({"top_k": 2.5}), "top_k"),
            (json!({"seed": "7"}), "seed"),
            (json!({"allowed_token_ids": []}), "allowed_token_ids"),
            (json!({"allowed_token_ids": [1, -2]}), "allowed_token_ids"),
        ] {
            assert_eq!(refused(body.clone()), param, "{body}");
        }
    }
}
