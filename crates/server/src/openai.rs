//! Request fields and validation shared by the OpenAI-style endpoints and `/generate`.

use axum::response::sse::Event;
use axum::response::{IntoResponse, Response};
use axum::Json;
use rillm_backend::{GenerateRequest, Prompt, Usage};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::admission::Admitted;
use crate::error::ApiError;
pub use crate::finish::openai_finish_reason;
pub use crate::sampling::SamplingFields;
use crate::sse::{collect, json_event, sse_response, Collected, StreamFormat};
use crate::state::AppState;
pub use crate::stop_fields::StopFields;

/// `stop` may be one string or a list.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum StopInput {
    One(String),
    Many(Vec<String>),
}

const MAX_STOP_STRINGS: usize = 16;

/// The generation knobs every endpoint accepts, before validation.
#[derive(Debug, Default)]
pub struct GenerationParams {
    pub max_tokens: Option<i64>,
    /// The field name `max_tokens` came from, for error messages.
    pub max_tokens_param: &'static str,
    pub default_max_tokens: Option<u32>,
    /// `max_tokens` may be 0: the prompt is echoed with its scores and nothing generated.
    pub echo: bool,
    pub sampling: SamplingFields,
    pub default_temperature: f32,
    pub n: Option<i64>,
    pub stop: Option<StopInput>,
    /// vLLM's stop and length controls.
    pub stop_fields: StopFields,
    pub ignore_eos: Option<bool>,
}

impl GenerationParams {
    pub fn into_request(self, prompt: Prompt) -> Result<GenerateRequest, ApiError> {
        let max_tokens = match self.max_tokens {
            None => self.default_max_tokens,
            Some(n) if n < i64::from(!self.echo) => {
                let least = if self.echo { "0" } else { "1 (0 only with `echo`)" };
                return Err(ApiError::invalid(
                    self.max_tokens_param,
                    format!("`{}` must be at least {least}, got {n}", self.max_tokens_param),
                ));
            }
            Some(n) => Some(u32::try_from(n).map_err(|_| {
                ApiError::invalid(self.max_tokens_param, format!("`{}` is too large", self.max_tokens_param))
            })?),
        };
        // The upper bound is the engine's (`--max-running`): it answers a 400 naming `n`.
        let n = match self.n {
            None => 1,
            Some(n) if n >= 1 => u32::try_from(n).unwrap_or(u32::MAX),
            Some(n) => return Err(ApiError::invalid("n", format!("`n` must be at least 1, got {n}"))),
        };
        let stop = match self.stop {
            None => Vec::new(),
            Some(StopInput::One(s)) => vec![s],
            Some(StopInput::Many(list)) if list.len() > MAX_STOP_STRINGS => {
                return Err(ApiError::invalid(
                    "stop",
                    format!("at most {MAX_STOP_STRINGS} stop strings, got {}", list.len()),
                ))
            }
            Some(StopInput::Many(list)) => list,
        };
        let sampling = self.sampling.into_params(self.default_temperature)?;
        let mut request = GenerateRequest::new(prompt).with_sampling(sampling).with_stop(stop);
        request.max_tokens = max_tokens;
        self.stop_fields.apply(&mut request, self.max_tokens_param)?;
        request.ignore_eos = self.ignore_eos.unwrap_or(false);
        request.n = n;
        Ok(request)
    }
}

pub fn usage_json(usage: &Usage) -> Value {
    json!({
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "total_tokens": usage.prompt_tokens + usage.completion_tokens,
        "prompt_tokens_details": {"cached_tokens": usage.cached_tokens},
        "completion_tokens_details": {"reasoning_tokens": usage.reasoning_tokens},
    })
}

/// `stream_options`: OpenAI's `include_usage` (a last chunk with the request's usage) and
/// vLLM's `continuous_usage_stats` (usage so far on every chunk too, which AIPerf's
/// `--per-chunk-usage` reads to count the tokens in each chunk).
#[derive(Debug, Default, Deserialize)]
pub struct StreamOptions {
    #[serde(default)]
    include_usage: bool,
    #[serde(default)]
    continuous_usage_stats: bool,
    /// Anything else: refused by name.
    #[serde(flatten)]
    other: serde_json::Map<String, Value>,
}

/// Where streamed chunks carry usage.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamUsage {
    /// Nowhere.
    Off,
    /// A last chunk with the whole request's usage; `"usage": null` on the others.
    Final,
    /// The last chunk, and every chunk its choice's usage so far.
    Continuous,
}

impl StreamOptions {
    /// What the client asked for; a field rillm does not know is a 400 naming it, and so
    /// are options for a response that is not streamed (as OpenAI and vLLM answer).
    /// `continuous_usage_stats` takes effect with `include_usage`, as in vLLM.
    pub fn usage(options: Option<Self>, stream: bool) -> Result<StreamUsage, ApiError> {
        let Some(options) = options else { return Ok(StreamUsage::Off) };
        if !stream {
            return Err(ApiError::invalid("stream_options", "`stream_options` is only allowed when `stream` is true"));
        }
        if let Some(name) = options.other.keys().next() {
            return Err(ApiError::invalid(
                format!("stream_options.{name}"),
                format!("`stream_options.{name}` is not supported by this server"),
            ));
        }
        Ok(match (options.include_usage, options.continuous_usage_stats) {
            (false, _) => StreamUsage::Off,
            (true, false) => StreamUsage::Final,
            (true, true) => StreamUsage::Continuous,
        })
    }
}

pub fn unix_now() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// Rejects fields rillm accepts syntactically but cannot honour, instead of ignoring them.
pub fn reject_if(present: bool, param: &'static str) -> Result<(), ApiError> {
    if present {
        Err(ApiError::invalid(param, format!("`{param}` is not supported by this server")))
    } else {
        Ok(())
    }
}

/// One streamed chunk, serialised from borrowed fields straight into its event: the
/// per-token path builds no JSON tree and copies no strings.
#[derive(Serialize)]
struct Chunk<'a, C> {
    id: &'a str,
    object: &'static str,
    created: u64,
    model: &'a str,
    choices: [C; 1],
    /// `"usage": null` on every chunk when the client asked for usage, as vLLM sends; the
    /// choice's usage so far with `continuous_usage_stats`.
    #[serde(skip_serializing_if = "Option::is_none")]
    usage: Option<Option<ChunkUsage>>,
}

#[derive(Serialize)]
struct ChunkUsage {
    prompt_tokens: usize,
    completion_tokens: u32,
    total_tokens: usize,
}

/// What every chunk and the whole response of one OpenAI request share.
pub struct ResponseMeta {
    pub id: String,
    pub created: u64,
    pub model: String,
    usage: StreamUsage,
    prompt_tokens: usize,
    /// Tokens each choice has streamed so far (for continuous usage).
    completion_tokens: Vec<u32>,
}

impl ResponseMeta {
    pub fn new(id_prefix: &str, admitted: &Admitted, state: &AppState, usage: StreamUsage) -> Self {
        Self {
            id: format!("{id_prefix}-{}", admitted.stream.id()),
            created: unix_now(),
            model: state.model_name(),
            usage,
            prompt_tokens: admitted.stream.prompt_tokens(),
            completion_tokens: vec![0; admitted.choices.max(1) as usize],
        }
    }

    /// Choice `index` streamed `tokens` more tokens: its next chunk's usage counts them.
    pub fn streamed(&mut self, index: u32, tokens: usize) {
        if let Some(count) = self.completion_tokens.get_mut(index as usize) {
            *count += u32::try_from(tokens).unwrap_or(u32::MAX);
        }
    }

    /// A streamed chunk with one choice, choice `index`.
    pub fn chunk<C: Serialize>(&self, object: &'static str, index: u32, choice: C) -> Event {
        let usage = match self.usage {
            StreamUsage::Off => None,
            StreamUsage::Final => Some(None),
            StreamUsage::Continuous => {
                let completion_tokens = self.completion_tokens.get(index as usize).copied().unwrap_or(0);
                Some(Some(ChunkUsage {
                    prompt_tokens: self.prompt_tokens,
                    completion_tokens,
                    total_tokens: self.prompt_tokens + completion_tokens as usize,
                }))
            }
        };
        let chunk = Chunk { id: &self.id, object, created: self.created, model: &self.model, choices: [choice], usage };
        json_event(&chunk)
    }

    /// Whether the client asked for a last chunk with the request's usage.
    pub fn include_usage(&self) -> bool {
        self.usage != StreamUsage::Off
    }

    /// What ends an OpenAI stream: the usage chunk when the client asked for it (no
    /// choices, the whole request's usage), then `[DONE]`.
    pub fn closing_events(&self, object: &str, usage: &Usage) -> Vec<Event> {
        let mut events = Vec::with_capacity(2);
        if self.include_usage() {
            let usage = json!({"choices": [], "usage": usage_json(usage)});
            events.push(json_event(&self.object(object, usage)));
        }
        events.push(Event::default().data("[DONE]"));
        events
    }

    /// `{"id", "object", "created", "model"}` followed by `fields`' own keys.
    pub fn object(&self, object: &str, fields: Value) -> Value {
        let mut v = json!({"id": self.id, "object": object, "created": self.created, "model": self.model});
        if let (Some(map), Value::Object(extra)) = (v.as_object_mut(), fields) {
            map.extend(extra);
        }
        v
    }
}

/// Streams the request, or waits for it and answers with `whole(collected)`.
pub async fn respond<F: StreamFormat>(
    admitted: Admitted,
    format: F,
    stream: bool,
    whole: impl FnOnce(F, Collected) -> Value,
) -> Result<Response, ApiError> {
    if stream {
        return Ok(sse_response(admitted, format));
    }
    let collected = collect(admitted).await;
    if let Some(error) = collected.choices.iter().find_map(|c| c.done.error.as_ref()) {
        return Err(ApiError::internal(error.clone()));
    }
    Ok(Json(whole(format, collected)).into_response())
}
