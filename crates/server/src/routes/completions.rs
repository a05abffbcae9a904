//! `POST /v1/completions`, streaming and not, in the OpenAI API's shapes.

use std::time::Instant;

use axum::extract::State;
use axum::response::sse::Event;
use axum::response::Response;
use rillm_backend::{Completion, Prompt, PromptToken, TokenLogprob, Usage};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::admission::admit;
use crate::error::ApiError;
use crate::json::JsonBody;
use crate::logprobs::{prompt_text, CompletionLogprobs, TokenNames};
use crate::openai::{
    openai_finish_reason, reject_if, respond, usage_json, GenerationParams, ResponseMeta, SamplingFields, StopFields,
    StopInput, StreamOptions,
};
use crate::shape::OutputShape;
use crate::sse::{json_event, StreamFormat};
use crate::state::AppState;
use crate::structured::{refuse_unknown_fields, ConstraintFields};

#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum PromptInput {
    One(String),
    Many(Vec<String>),
    /// Token ids, as evaluation harnesses send them (lm-evaluation-harness).
    Tokens(Vec<i64>),
    ManyTokens(Vec<Vec<i64>>),
}

impl PromptInput {
    /// The one prompt of the request (a list must hold exactly one).
    fn into_prompt(self) -> Result<Prompt, ApiError> {
        let one =
            |count: usize| ApiError::invalid("prompt", format!("one prompt per request is supported, got {count}"));
        let prompt = match self {
            Self::One(text) => Prompt::Text(text),
            Self::Many(mut list) if list.len() == 1 => Prompt::Text(list.remove(0)),
            Self::Many(list) => return Err(one(list.len())),
            Self::Tokens(ids) => Prompt::Tokens(token_ids(&ids)?),
            Self::ManyTokens(list) if list.len() == 1 => Prompt::Tokens(token_ids(&list[0])?),
            Self::ManyTokens(list) => return Err(one(list.len())),
        };
        let empty = match &prompt {
            Prompt::Text(text) => text.is_empty(),
            Prompt::Tokens(ids) => ids.is_empty(),
            Prompt::Chat { messages, .. } => messages.is_empty(),
        };
        if empty {
            return Err(ApiError::invalid("prompt", "`prompt` must not be empty"));
        }
        Ok(prompt)
    }
}

fn token_ids(ids: &[i64]) -> Result<Vec<u32>, ApiError> {
    ids.iter()
        .enumerate()
        .map(|(i, &id)| {
            u32::try_from(id).map_err(|_| ApiError::invalid("prompt", format!("prompt[{i}] = {id} is not a token id")))
        })
        .collect()
}

#[derive(Debug, Deserialize)]
pub struct CompletionBody {
    model: Option<String>,
    prompt: PromptInput,
    max_tokens: Option<i64>,
    n: Option<i64>,
    stop: Option<StopInput>,
    #[serde(default)]
    stream: bool,
    stream_options: Option<StreamOptions>,
    ignore_eos: Option<bool>,
    logprobs: Option<Value>,
    /// vLLM's: log-probabilities name tokens `token_id:N`.
    return_tokens_as_token_ids: Option<bool>,
    #[serde(default)]
    echo: bool,
    best_of: Option<i64>,
    /// temperature, top_p, top_k, min_p, seed, the penalties and logit_bias.
    #[serde(flatten)]
    sampling: SamplingFields,
    /// stop_token_ids, min_tokens, include_stop_str_in_output, truncate_prompt_tokens.
    #[serde(flatten)]
    stop_fields: StopFields,
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
    let state = state.for_model(body.model.as_deref()).await?;
    let logprobs = crate::logprobs::completions_request(body.logprobs.as_ref())?;
    reject_if(body.best_of.is_some_and(|b| b != 1), "best_of")?;
    refuse_unknown_fields(&body.other)?;
    let stream_usage = StreamOptions::usage(body.stream_options, body.stream)?;
    // Completions take no tools: the shape is the answer format alone.
    let shape = OutputShape::new(None, body.constraints.into_constraint()?, state.shape_rules());
    let prompt = body.prompt.into_prompt()?;
    let echo = match (body.echo, logprobs) {
        (false, _) => Echo::Off,
        // Scores asked for: the prompt comes back as the model read and scored it.
        (true, Some(_)) => Echo::Scored,
        // Only the text: no prompt row needs its logits.
        (true, None) => Echo::Text(echo_text(&state, &prompt)?),
    };
    let mut request = GenerationParams {
        max_tokens: body.max_tokens,
        max_tokens_param: "max_tokens",
        default_max_tokens: Some(DEFAULT_MAX_TOKENS),
        echo: body.echo,
        sampling: body.sampling,
        default_temperature: 1.0,
        n: body.n,
        stop: body.stop,
        stop_fields: body.stop_fields,
        ignore_eos: body.ignore_eos,
    }
    .into_request(prompt)?;
    request.logprobs = logprobs;
    if matches!(echo, Echo::Scored) {
        request.prompt_logprobs = logprobs;
    }
    let fields = shape.apply(&mut request, "prompt");
    let admitted = admit(&state, "completions", fields, request, received).await?;
    let meta = ResponseMeta::new("cmpl", &admitted, &state, stream_usage);
    let text_offset = vec![0; admitted.choices as usize];
    let token_names = TokenNames::from_request(body.return_tokens_as_token_ids);
    let format = CompletionFormat { meta, logprobs: logprobs.is_some(), token_names, echo, text_offset };
    respond(admitted, format, body.stream, |f, whole| {
        let choices: Vec<Value> = whole
            .choices
            .iter()
            .map(|choice| {
                let mut offset = 0;
                let mut lists = CompletionLogprobs::new(f.token_names);
                let mut text = String::new();
                match &f.echo {
                    Echo::Off => {}
                    Echo::Text(prompt) => text.push_str(prompt),
                    Echo::Scored => {
                        text = prompt_text(&whole.prompt);
                        lists.add_prompt(&whole.prompt, &mut offset);
                    }
                }
                text.push_str(&choice.text);
                lists.add_generated(&choice.logprobs, &mut offset);
                json!({
                    "index": choice.done.index,
                    "text": text,
                    "logprobs": f.logprobs.then(|| lists.into_value()),
                    "finish_reason": openai_finish_reason(choice.done.finish_reason),
                })
            })
            .collect();
        f.meta.object("text_completion", json!({"choices": choices, "usage": usage_json(&whole.done.usage)}))
    })
    .await
}

/// `echo`: each choice's text starts with the prompt.
enum Echo {
    Off,
    /// The prompt's text, known before generation (no scores asked for).
    Text(String),
    /// The prompt as the model scored it, from the stream (`logprobs` asked for).
    Scored,
}

/// The text an unscored echo returns: a text prompt as sent, token ids decoded.
fn echo_text(state: &AppState, prompt: &Prompt) -> Result<String, ApiError> {
    match prompt {
        Prompt::Text(text) => Ok(text.clone()),
        Prompt::Tokens(ids) => {
            let backend = state.backend().ok_or_else(|| ApiError::unavailable("the model is still loading"))?;
            backend.detokenize(ids).map_err(|rejected| ApiError::invalid("prompt", rejected.to_string()))
        }
        Prompt::Chat { .. } => Err(ApiError::invalid("echo", "`echo` repeats a completions prompt")),
    }
}

struct CompletionFormat {
    meta: ResponseMeta,
    /// Whether the request asked for log-probabilities.
    logprobs: bool,
    /// How they name tokens.
    token_names: TokenNames,
    /// Whether, and how, each choice's text starts with the prompt.
    echo: Echo,
    /// Per choice, bytes of its text streamed so far: where its next chunk's tokens start.
    text_offset: Vec<usize>,
}

#[derive(Serialize)]
struct TextChoice<'a> {
    index: u32,
    text: &'a str,
    logprobs: Option<Value>,
    finish_reason: Option<&'static str>,
}

impl CompletionFormat {
    fn chunk(&self, index: u32, text: &str, logprobs: Option<Value>, finish_reason: Option<&'static str>) -> Event {
        self.meta.chunk("text_completion", index, TextChoice { index, text, logprobs, finish_reason })
    }

    fn offset(&mut self, index: u32) -> &mut usize {
        let i = index as usize;
        if self.text_offset.len() <= i {
            self.text_offset.resize(i + 1, 0);
        }
        &mut self.text_offset[i]
    }
}

impl StreamFormat for CompletionFormat {
    /// Unscored echo: each choice's first chunk is the prompt.
    fn opening(&mut self) -> Vec<Event> {
        let Echo::Text(prompt) = &self.echo else { return Vec::new() };
        (0..self.text_offset.len() as u32).map(|index| self.chunk(index, prompt, None, None)).collect()
    }

    /// Scored echo: each choice's first chunk is the prompt with its scores.
    fn prompt(&mut self, prompt: &[PromptToken]) -> Vec<Event> {
        if !matches!(self.echo, Echo::Scored) {
            return Vec::new();
        }
        let text = prompt_text(prompt);
        (0..self.text_offset.len() as u32)
            .map(|index| {
                let mut lists = CompletionLogprobs::new(self.token_names);
                lists.add_prompt(prompt, self.offset(index));
                let logprobs = self.logprobs.then(|| lists.into_value());
                self.chunk(index, &text, logprobs, None)
            })
            .collect()
    }

    fn text(&mut self, index: u32, text: &str, token_ids: &[u32], logprobs: &[TokenLogprob]) -> Vec<Event> {
        self.meta.streamed(index, token_ids.len());
        let names = self.token_names;
        let logprobs = self.logprobs.then(|| crate::logprobs::completions(logprobs, self.offset(index), names));
        vec![self.chunk(index, text, logprobs, None)]
    }

    fn choice_done(&mut self, done: &Completion) -> Vec<Event> {
        let mut events = Vec::with_capacity(2);
        if let Some(error) = &done.error {
            events.push(json_event(&ApiError::internal(error.clone()).body()));
        }
        let reason = openai_finish_reason(done.finish_reason);
        events.push(self.chunk(done.index, "", None, Some(reason)));
        events
    }

    fn end(&mut self, usage: &Usage) -> Vec<Event> {
        self.meta.closing_events("text_completion", usage)
    }
}
