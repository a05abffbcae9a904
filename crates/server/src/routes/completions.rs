//! `POST /v1/completions`, streaming and not, in the OpenAI API's shapes.

use std::time::Instant;

use axum::extract::State;
use axum::response::sse::Event;
use axum::response::Response;
use rillm_backend::{Completion, Prompt, TokenLogprob};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::admission::admit;
use crate::error::ApiError;
use crate::json::JsonBody;
use crate::openai::{
    openai_finish_reason, reject_if, respond, usage_json, GenerationParams, ResponseMeta, StopInput, StreamOptions,
};
use crate::sse::{json_event, StreamFormat};
use crate::state::AppState;
use crate::structured::{constrain, refuse_unknown_fields, ConstraintFields};

#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum PromptInput {
    One(String),
    Many(Vec<String>),
    /// Recognised only to be refused with a clear message.
    #[allow(dead_code)]
    Tokens(Vec<i64>),
}

#[derive(Debug, Deserialize)]
pub struct CompletionBody {
    model: Option<String>,
    prompt: PromptInput,
    max_tokens: Option<i64>,
    temperature: Option<f64>,
    top_p: Option<f64>,
    top_k: Option<i64>,
    seed: Option<i64>,
    n: Option<i64>,
    stop: Option<StopInput>,
    #[serde(default)]
    stream: bool,
    stream_options: Option<StreamOptions>,
    ignore_eos: Option<bool>,
    presence_penalty: Option<f64>,
    frequency_penalty: Option<f64>,
    logprobs: Option<Value>,
    #[serde(default)]
    echo: bool,
    best_of: Option<i64>,
    #[serde(flatten)]
    constraints: ConstraintFields,
    /// Everything else the client sent: refused by name unless it changes nothing.
    #[serde(flatten)]
    other: serde_json::Map<String, Value>,
}

/// OpenAI's default for completions.
const DEFAULT_MAX_TOKENS: u32 = 16;

pub async fn completions(
    State(state): State<AppState>,
    JsonBody(body): JsonBody<CompletionBody>,
) -> Result<Response, ApiError> {
    let received = Instant::now();
    state.check_model(body.model.as_deref())?;
    let logprobs = crate::logprobs::completions_request(body.logprobs.as_ref())?;
    reject_if(body.echo, "echo")?;
    reject_if(body.best_of.is_some_and(|b| b != 1), "best_of")?;
    refuse_unknown_fields(&body.other)?;
    let constraint = body.constraints.into_constraint()?;
    let prompt = match body.prompt {
        PromptInput::One(p) => p,
        PromptInput::Many(mut list) if list.len() == 1 => list.remove(0),
        PromptInput::Many(list) => {
            return Err(ApiError::invalid("prompt", format!("one prompt per request is supported, got {}", list.len())))
        }
        PromptInput::Tokens(_) => {
            return Err(ApiError::invalid("prompt", "token-id prompts are not supported; send text"))
        }
    };
    if prompt.is_empty() {
        return Err(ApiError::invalid("prompt", "`prompt` must not be empty"));
    }
    let mut request = GenerationParams {
        max_tokens: body.max_tokens,
        max_tokens_param: "max_tokens",
        default_max_tokens: Some(DEFAULT_MAX_TOKENS),
        temperature: body.temperature,
        default_temperature: 1.0,
        top_p: body.top_p,
        top_k: body.top_k,
        seed: body.seed,
        n: body.n,
        stop: body.stop,
        ignore_eos: body.ignore_eos,
        presence_penalty: body.presence_penalty,
        frequency_penalty: body.frequency_penalty,
    }
    .into_request(Prompt::Text(prompt))?;
    request.logprobs = logprobs;
    let fields = constrain(&mut request, constraint, "prompt");
    let admitted = admit(&state, "completions", fields, request, received).await?;
    let meta = ResponseMeta::new("cmpl", &admitted, &state, body.stream_options);
    let format = CompletionFormat { meta, logprobs: logprobs.is_some(), text_offset: 0 };
    respond(admitted, format, body.stream, |f, whole| {
        let logprobs = f.logprobs.then(|| crate::logprobs::completions(&whole.logprobs, &mut 0));
        let reason = openai_finish_reason(whole.done.finish_reason);
        f.meta.object(
            "text_completion",
            json!({
                "choices": [{"index": 0, "text": whole.text, "logprobs": logprobs, "finish_reason": reason}],
                "usage": usage_json(&whole.done.usage),
            }),
        )
    })
    .await
}

struct CompletionFormat {
    meta: ResponseMeta,
    /// Whether the request asked for log-probabilities.
    logprobs: bool,
    /// Bytes of completion text streamed so far: where the next chunk's tokens start.
    text_offset: usize,
}

#[derive(Serialize)]
struct TextChoice<'a> {
    index: u32,
    text: &'a str,
    logprobs: Option<Value>,
    finish_reason: Option<&'static str>,
}

impl CompletionFormat {
    fn chunk(&self, text: &str, logprobs: Option<Value>, finish_reason: Option<&'static str>) -> Event {
        self.meta.chunk("text_completion", TextChoice { index: 0, text, logprobs, finish_reason })
    }
}

impl StreamFormat for CompletionFormat {
    fn text(&mut self, text: &str, _token_ids: &[u32], logprobs: &[TokenLogprob]) -> Event {
        let logprobs = self.logprobs.then(|| crate::logprobs::completions(logprobs, &mut self.text_offset));
        self.chunk(text, logprobs, None)
    }

    fn finish(&mut self, done: &Completion) -> Vec<Event> {
        let mut events = Vec::with_capacity(4);
        if let Some(error) = &done.error {
            events.push(json_event(&ApiError::internal(error.clone()).body()));
        }
        let reason = openai_finish_reason(done.finish_reason);
        events.push(self.chunk("", None, Some(reason)));
        if self.meta.include_usage {
            let usage = json!({"choices": [], "usage": usage_json(&done.usage)});
            events.push(json_event(&self.meta.object("text_completion", usage)));
        }
        events.push(Event::default().data("[DONE]"));
        events
    }
}
