//! How each engine frames its stream, for the mock: the same tokens written as rillm,
//! OpenAI (with or without reasoning), SGLang, TGI, Triton or llama.cpp would write them,
//! including their error events. Written from each engine's own source, so parsers can be
//! checked against it.

use axum::response::sse::Event;
use serde_json::{json, Value};

/// Which stream the mock writes on `/generate` and the chat endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Framing {
    /// rillm's `/generate`; plain OpenAI chat.
    #[default]
    Openai,
    /// Chat deltas start with `reasoning_content` for the first half of the tokens.
    OpenaiReasoning,
    /// SGLang's native `/generate` (cumulative text, `meta_info`, `[DONE]`).
    Sglang,
    /// TGI: served on `/generate_stream` whatever the framing.
    Tgi,
    /// Triton: served on `/v2/models/{model}/generate_stream` whatever the framing.
    Triton,
    /// llama.cpp: served on `/completion` whatever the framing.
    Llamacpp,
}

/// One endpoint's stream format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flavor {
    Generate,
    Completions,
    Chat,
    ChatReasoning,
    Sglang,
    Tgi,
    Triton,
    Llamacpp,
}

impl Flavor {
    /// The output limit the request asked for, where this engine reads it.
    pub fn max_tokens(self, body: &Value) -> Option<u64> {
        match self {
            Self::Generate => body["max_tokens"].as_u64().or(body["max_new_tokens"].as_u64()),
            Self::Sglang => body["sampling_params"]["max_new_tokens"].as_u64(),
            Self::Tgi => body["parameters"]["max_new_tokens"].as_u64(),
            Self::Llamacpp => body["n_predict"].as_u64(),
            _ => body["max_tokens"].as_u64(),
        }
    }
}

fn data(v: Value) -> Event {
    Event::default().data(v.to_string())
}

/// The event for token `i` of `total`.
pub fn token(flavor: Flavor, i: u32, total: u32) -> Event {
    let piece = format!(" t{i}");
    match flavor {
        Flavor::Generate => Event::default().data(format!(r#"{{"text":"{piece}","token_ids":[{i}]}}"#)),
        Flavor::Completions => Event::default().data(format!(r#"{{"object":"text_completion","choices":[{{"index":0,"text":"{piece}","finish_reason":null}}]}}"#)),
        Flavor::Chat => Event::default().data(format!(r#"{{"object":"chat.completion.chunk","choices":[{{"index":0,"delta":{{"content":"{piece}"}},"finish_reason":null}}]}}"#)),
        Flavor::ChatReasoning => {
            let field = if i < total.div_ceil(2) { "reasoning_content" } else { "content" };
            data(json!({"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {field: piece}, "finish_reason": null}]}))
        }
        Flavor::Sglang => {
            let text: String = (0..=i).map(|k| format!(" t{k}")).collect();
            let finish = if i + 1 == total { json!({"type": "length", "length": total}) } else { Value::Null };
            data(json!({"text": text, "meta_info": {"prompt_tokens": 1, "completion_tokens": i + 1, "cached_tokens": 0, "finish_reason": finish}, "index": 0}))
        }
        Flavor::Tgi => {
            let last = i + 1 == total;
            let generated: Option<String> = last.then(|| (0..total).map(|k| format!(" t{k}")).collect());
            let details = last.then(|| json!({"finish_reason": "length", "generated_tokens": total, "seed": null}));
            data(json!({"index": i + 1, "token": {"id": i, "text": piece, "logprob": -0.1, "special": false}, "generated_text": generated, "details": details}))
        }
        Flavor::Triton => data(json!({"model_name": "ensemble", "model_version": "1", "sequence_end": false, "sequence_id": 0, "text_output": piece})),
        Flavor::Llamacpp => data(json!({"index": 0, "content": piece, "tokens": [i], "stop": false, "id_slot": 0, "tokens_predicted": i + 1, "tokens_evaluated": 1})),
    }
}

/// What follows the last token: usage and the end marker, as each engine sends them.
pub fn finish(flavor: Flavor, tokens: u32, prompt_tokens: u32, include_usage: bool) -> Vec<Event> {
    let usage =
        json!({"prompt_tokens": prompt_tokens, "completion_tokens": tokens, "total_tokens": tokens + prompt_tokens});
    match flavor {
        Flavor::Generate => {
            vec![Event::default().event("done").data(json!({"finish_reason": "length", "usage": usage}).to_string())]
        }
        Flavor::Completions | Flavor::Chat | Flavor::ChatReasoning => {
            let mut events = Vec::new();
            if include_usage {
                events.push(data(json!({"choices": [], "usage": usage})));
            }
            events.push(Event::default().data("[DONE]"));
            events
        }
        Flavor::Sglang => vec![Event::default().data("[DONE]")],
        // TGI's last token event carried `generated_text`; Triton just closes the stream.
        Flavor::Tgi | Flavor::Triton => Vec::new(),
        Flavor::Llamacpp => vec![data(json!({
            "index": 0, "content": "", "stop": true, "stop_type": "limit", "tokens_predicted": tokens,
            "tokens_evaluated": prompt_tokens, "timings": {"cache_n": 0, "prompt_n": prompt_tokens, "predicted_n": tokens},
        }))],
    }
}

/// An error in the middle of the stream, in the engine's own framing.
pub fn error(flavor: Flavor, message: &str) -> Event {
    let openai = json!({"error": {"message": message, "type": "server_error", "param": null, "code": 500}});
    match flavor {
        Flavor::Generate => Event::default().event("error").data(openai.to_string()),
        Flavor::Tgi => data(json!({"error": message, "error_type": "generation"})),
        Flavor::Triton => data(json!({"error": message})),
        _ => data(openai),
    }
}
