//! The wire protocols the benchmark speaks: how to ask each engine for a stream (here),
//! and what each of its SSE events means (`decode`). Formats follow each engine's source.

mod chunk;
mod decode;
mod responses;

pub use chunk::{Chunk, UsageInfo};
pub use decode::StreamDecoder;
use serde_json::{json, Value};

use crate::workload::structured::{OutputConstraint, ResponseFormat};

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Protocol {
    /// rillm's (and the prototype's) `POST /generate`: incremental `text`, `event: done`.
    Generate,
    /// OpenAI `POST /v1/completions` (vLLM, SGLang, TensorRT-LLM, llama.cpp, TGI, rillm).
    Completions,
    /// OpenAI `POST /v1/chat/completions`, reasoning deltas included.
    Chat,
    /// OpenAI's Responses API, `POST /v1/responses` (vLLM, SGLang, rillm): text deltas,
    /// usage in the `response.completed` that ends the stream.
    Responses,
    /// SGLang's native `POST /generate`: cumulative `text`, `meta_info`, `[DONE]`.
    Sglang,
    /// TGI's `POST /generate_stream`: one `token` object per event, `generated_text` last.
    Tgi,
    /// Triton / TensorRT-LLM `POST /v2/models/{model}/generate_stream`: `text_output`.
    Triton,
    /// llama.cpp's native `POST /completion`: `content`, final `stop: true` with timings.
    Llamacpp,
}

impl Protocol {
    /// Picks the protocol from the URL's path. `/generate` is rillm's; SGLang's native
    /// endpoint has the same path and needs `--protocol sglang`.
    pub fn from_url(url: &str) -> Option<Self> {
        let path = url.split('?').next().unwrap_or(url).trim_end_matches('/');
        if path.ends_with("/chat/completions") {
            Some(Self::Chat)
        } else if path.ends_with("/v1/responses") {
            Some(Self::Responses)
        } else if path.ends_with("/completions") {
            Some(Self::Completions)
        } else if path.ends_with("/completion") {
            Some(Self::Llamacpp)
        } else if path.contains("/v2/models/") && path.ends_with("/generate_stream") {
            Some(Self::Triton)
        } else if path.ends_with("/generate_stream") {
            Some(Self::Tgi)
        } else if path.ends_with("/generate") {
            Some(Self::Generate)
        } else {
            None
        }
    }

    /// Whether the protocol has an explicit end of stream, so a cut-off stream can be told
    /// from a finished one.
    pub fn has_end_marker(self) -> bool {
        self != Self::Triton
    }

    /// Whether prompts go as chat messages (a conversation's turns as they are), not text.
    pub fn takes_messages(self) -> bool {
        matches!(self, Self::Chat | Self::Responses)
    }
}

/// What one request asks for.
#[derive(Debug, Clone)]
pub struct RequestSpec {
    pub prompt: PromptSpec,
    pub max_tokens: u32,
    /// The prompt's tokens as the benchmark counted them, when it could.
    pub prompt_tokens: Option<u32>,
    /// Constraint workloads: what the output must be, asked for in the body and checked.
    pub constraint: Option<std::sync::Arc<OutputConstraint>>,
    /// A replayed chat request's own tools (instead of `--tools`): offered, and its calls checked.
    pub tools: Option<std::sync::Arc<crate::workload::tools::ToolSet>>,
}

impl RequestSpec {
    pub fn new(prompt: PromptSpec, max_tokens: u32) -> Self {
        Self { prompt, max_tokens, prompt_tokens: None, constraint: None, tools: None }
    }

    /// The tools this request offers: its own, else the run's.
    pub fn tools<'a>(&'a self, opts: &'a BodyOptions) -> Option<&'a std::sync::Arc<crate::workload::tools::ToolSet>> {
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
    pub tools: Option<std::sync::Arc<crate::workload::tools::ToolSet>>,
}

pub fn request_body(protocol: Protocol, spec: &RequestSpec, opts: &BodyOptions) -> Value {
    let n = spec.max_tokens;
    let mut body = match protocol {
        Protocol::Generate => json!({"prompt": spec.prompt.as_text(), "max_tokens": n}),
        Protocol::Completions => json!({
            "prompt": spec.prompt.as_text(),
            "max_tokens": n,
            "stream": true,
            "stream_options": {"include_usage": true},
        }),
        Protocol::Chat => json!({
            "messages": spec.prompt.as_messages(),
            "max_tokens": n,
            "stream": true,
            "stream_options": {"include_usage": true},
        }),
        // Usage comes in the last event without asking.
        Protocol::Responses => {
            json!({"input": responses::input_items(spec.prompt.as_messages()), "max_output_tokens": n, "stream": true})
        }
        Protocol::Sglang => {
            json!({"text": spec.prompt.as_text(), "sampling_params": {"max_new_tokens": n}, "stream": true})
        }
        // `details` makes the last event carry the generated token count.
        Protocol::Tgi => json!({"inputs": spec.prompt.as_text(), "parameters": {"max_new_tokens": n, "details": true}}),
        Protocol::Triton => json!({"text_input": spec.prompt.as_text(), "max_tokens": n, "stream": true}),
        Protocol::Llamacpp => {
            json!({"prompt": spec.prompt.as_text(), "n_predict": n, "stream": true, "cache_prompt": true})
        }
    };
    if let (Some(model), Protocol::Completions | Protocol::Chat | Protocol::Responses) = (&opts.model, protocol) {
        body["model"] = json!(model);
    }
    // Sampling knobs sit where each engine reads them.
    let sampling = match protocol {
        Protocol::Sglang => &mut body["sampling_params"],
        Protocol::Tgi => &mut body["parameters"],
        _ => &mut body,
    };
    if opts.ignore_eos && protocol != Protocol::Tgi {
        sampling["ignore_eos"] = json!(true);
    }
    match (opts.temperature, protocol) {
        // TGI refuses temperature 0: greedy is `do_sample: false`, its default.
        (Some(t), Protocol::Tgi) if t <= 0.0 => sampling["do_sample"] = json!(false),
        (Some(t), Protocol::Tgi) => {
            sampling["temperature"] = json!(t);
            sampling["do_sample"] = json!(true);
        }
        (Some(t), _) => sampling["temperature"] = json!(t),
        (None, _) => {}
    }
    // The run checked at its start that the protocol can carry the constraint.
    if let Some(fields) = spec.constraint.as_ref().and_then(|c| constraint_fields(c, protocol).ok()) {
        merge(&mut body, &fields);
    }
    match (spec.tools(opts), protocol) {
        (Some(tools), Protocol::Chat) => merge(&mut body, &tools.body_fields()),
        (Some(tools), Protocol::Responses) => {
            merge(&mut body, &responses::tool_fields(&tools.tools, &tools.tool_choice))
        }
        _ => {}
    }
    if let Some(extra) = &opts.extra {
        merge(&mut body, extra);
    }
    body
}

/// The body fields that ask `protocol`'s engine for an output constraint, or why it can't.
/// OpenAI protocols get OpenAI's `response_format` for JSON and vLLM's `structured_outputs`
/// for regex and choice (rillm reads both, on `/generate` too); llama.cpp's native endpoint
/// its `json_schema`; TGI its `grammar`; the Responses API its `text.format`.
pub fn constraint_fields(c: &OutputConstraint, protocol: Protocol) -> Result<Value, String> {
    Ok(match (protocol, c.format()) {
        (Protocol::Chat | Protocol::Completions | Protocol::Generate, format) => match format {
            ResponseFormat::JsonSchema => json!({"response_format": {"type": "json_schema",
                "json_schema": {"name": c.name, "schema": c.schema(), "strict": true}}}),
            ResponseFormat::JsonObject => json!({"response_format": {"type": "json_object"}}),
            ResponseFormat::Regex => json!({"structured_outputs": {"regex": c.pattern()}}),
            ResponseFormat::Choice => json!({"structured_outputs": {"choice": c.choices()}}),
        },
        (Protocol::Responses, ResponseFormat::JsonSchema) => {
            json!({"text": {"format": {"type": "json_schema", "name": c.name, "schema": c.schema(), "strict": true}}})
        }
        (Protocol::Responses, ResponseFormat::JsonObject) => json!({"text": {"format": {"type": "json_object"}}}),
        (Protocol::Llamacpp, ResponseFormat::JsonSchema) => json!({"json_schema": c.schema()}),
        (Protocol::Llamacpp, ResponseFormat::JsonObject) => json!({"json_schema": {"type": "object"}}),
        (Protocol::Tgi, ResponseFormat::JsonSchema) => {
            json!({"parameters": {"grammar": {"type": "json", "value": c.schema()}}})
        }
        (Protocol::Tgi, ResponseFormat::Regex) => {
            json!({"parameters": {"grammar": {"type": "regex", "value": c.pattern()}}})
        }
        (_, format) => {
            return Err(format!("--response-format {format:?} is not supported over the {protocol:?} protocol"))
        }
    })
}

/// Merges `extra` into `base`: objects key by key, anything else replaces.
fn merge(base: &mut Value, extra: &Value) {
    match (base, extra) {
        (Value::Object(base), Value::Object(extra)) => {
            for (k, v) in extra {
                merge(base.entry(k.clone()).or_insert(Value::Null), v);
            }
        }
        (base, extra) => *base = extra.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn protocol_from_url_path() {
        assert_eq!(Protocol::from_url("http://h:1/generate"), Some(Protocol::Generate));
        assert_eq!(Protocol::from_url("http://h/v1/completions/"), Some(Protocol::Completions));
        assert_eq!(Protocol::from_url("http://h/v1/chat/completions?x=1"), Some(Protocol::Chat));
        assert_eq!(Protocol::from_url("http://h/v1/responses"), Some(Protocol::Responses));
        assert_eq!(Protocol::from_url("http://h/completion"), Some(Protocol::Llamacpp));
        assert_eq!(Protocol::from_url("http://h/generate_stream"), Some(Protocol::Tgi));
        assert_eq!(Protocol::from_url("http://h/v2/models/ensemble/generate_stream"), Some(Protocol::Triton));
        assert_eq!(Protocol::from_url("http://h/other"), None);
    }

    #[test]
    fn bodies_put_each_knob_where_the_engine_reads_it() {
        let spec = RequestSpec::new(PromptSpec::Text("hi".into()), 7);
        let opts = BodyOptions {
            model: Some("m".into()),
            ignore_eos: true,
            temperature: Some(0.0),
            extra: Some(json!({"sampling_params": {"top_k": 5}, "x": 1})),
            tools: None,
        };
        let sg = request_body(Protocol::Sglang, &spec, &opts);
        assert_eq!(
            sg,
            json!({"text": "hi", "stream": true, "x": 1, "sampling_params": {"max_new_tokens": 7, "ignore_eos": true, "temperature": 0.0, "top_k": 5}})
        );
        let tgi = request_body(Protocol::Tgi, &spec, &BodyOptions { extra: None, ..opts.clone() });
        assert_eq!(
            tgi,
            json!({"inputs": "hi", "parameters": {"max_new_tokens": 7, "details": true, "do_sample": false}})
        );
        let tr = request_body(Protocol::Triton, &spec, &BodyOptions { extra: None, ..opts.clone() });
        assert_eq!(tr["text_input"], "hi");
        assert_eq!(tr["max_tokens"], 7);
        let lc = request_body(Protocol::Llamacpp, &spec, &BodyOptions { extra: None, ..opts.clone() });
        assert_eq!((lc["n_predict"].as_u64(), lc["ignore_eos"].as_bool()), (Some(7), Some(true)));
        let chat = request_body(
            Protocol::Chat,
            &spec,
            &BodyOptions { extra: Some(json!({"chat_template_kwargs": {"enable_thinking": false}})), ..opts.clone() },
        );
        assert_eq!(
            (chat["model"].as_str(), chat["chat_template_kwargs"]["enable_thinking"].as_bool()),
            (Some("m"), Some(false))
        );
        let responses = request_body(Protocol::Responses, &spec, &BodyOptions { extra: None, ..opts });
        assert_eq!(
            responses,
            json!({"input": [{"role": "user", "content": "hi"}], "max_output_tokens": 7, "stream": true, "model": "m",
                "ignore_eos": true, "temperature": 0.0})
        );
    }
}
