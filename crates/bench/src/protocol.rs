//! The wire protocols the benchmark speaks: how to ask for a stream, and what each SSE
//! event means (content, usage, an error, or the end).

use std::borrow::Cow;

use serde_json::{json, Value};

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Protocol {
    /// rillm's (and the prototype's) `POST /generate`.
    Generate,
    /// OpenAI `POST /v1/completions`.
    Completions,
    /// OpenAI `POST /v1/chat/completions`.
    Chat,
}

impl Protocol {
    /// Picks the protocol from the URL's path.
    pub fn from_url(url: &str) -> Option<Self> {
        let path = url.split('?').next().unwrap_or(url).trim_end_matches('/');
        if path.ends_with("/chat/completions") {
            Some(Self::Chat)
        } else if path.ends_with("/completions") {
            Some(Self::Completions)
        } else if path.ends_with("/generate") || path.ends_with("/generate_stream") {
            Some(Self::Generate)
        } else {
            None
        }
    }
}

/// What one request asks for.
#[derive(Debug, Clone)]
pub struct RequestSpec {
    pub prompt: PromptSpec,
    pub max_tokens: u32,
    /// The prompt's tokens as the benchmark counted them, when it could.
    pub prompt_tokens: Option<u32>,
}

impl RequestSpec {
    pub fn new(prompt: PromptSpec, max_tokens: u32) -> Self {
        Self { prompt, max_tokens, prompt_tokens: None }
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
            Self::Messages(m) => m
                .iter()
                .filter_map(|m| m["content"].as_str())
                .collect::<Vec<_>>()
                .join("\n"),
        }
    }

    fn as_messages(&self) -> Vec<Value> {
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
}

pub fn request_body(protocol: Protocol, spec: &RequestSpec, opts: &BodyOptions) -> Value {
    let mut body = match protocol {
        Protocol::Generate => json!({"prompt": spec.prompt.as_text(), "max_tokens": spec.max_tokens}),
        Protocol::Completions => json!({
            "prompt": spec.prompt.as_text(),
            "max_tokens": spec.max_tokens,
            "stream": true,
            "stream_options": {"include_usage": true},
        }),
        Protocol::Chat => json!({
            "messages": spec.prompt.as_messages(),
            "max_tokens": spec.max_tokens,
            "stream": true,
            "stream_options": {"include_usage": true},
        }),
    };
    if let (Some(model), false) = (&opts.model, protocol == Protocol::Generate) {
        body["model"] = json!(model);
    }
    if opts.ignore_eos {
        body["ignore_eos"] = json!(true);
    }
    if let Some(t) = opts.temperature {
        body["temperature"] = json!(t);
    }
    body
}

/// What one SSE event told us.
#[derive(Debug, Clone, PartialEq)]
pub enum Decoded {
    /// Model output. `tokens` is how many tokens it carries, when the protocol says.
    Content { text: String, tokens: Option<u32> },
    /// Token counts from the server (a usage object or `event: done`).
    Usage(UsageInfo),
    /// Content and usage in one event (llama.cpp puts usage on its last chunk).
    ContentAndUsage { text: String, usage: UsageInfo },
    /// An error reported inside the stream.
    Error(String),
    /// The stream's explicit end (`[DONE]`, `event: done` without usage).
    Done,
    /// Keep-alives, role deltas, empty chunks, events of no interest.
    Nothing,
}

/// What a server's usage object said; each count only where it said it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UsageInfo {
    pub completion_tokens: Option<u32>,
    pub prompt_tokens: Option<u32>,
    /// `prompt_tokens_details.cached_tokens`: prompt tokens the server reused from its cache.
    pub cached_tokens: Option<u32>,
}

impl UsageInfo {
    pub fn completion(n: u32) -> Self {
        Self { completion_tokens: Some(n), ..Self::default() }
    }
}

/// The fields of an SSE data payload the benchmark reads, from any of the protocols.
/// Borrowed and typed, so decoding a chunk allocates little more than its text.
#[derive(serde::Deserialize)]
struct Payload<'a> {
    #[serde(borrow, default)]
    choices: Option<Vec<Choice<'a>>>,
    #[serde(default)]
    usage: Option<UsagePayload>,
    #[serde(default)]
    error: Option<Value>,
    #[serde(borrow, default)]
    text: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    token: Option<Cow<'a, str>>,
    #[serde(default)]
    token_ids: Option<Vec<serde::de::IgnoredAny>>,
}

#[derive(serde::Deserialize)]
struct Choice<'a> {
    #[serde(borrow, default)]
    text: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    delta: Option<Delta<'a>>,
}

#[derive(serde::Deserialize)]
struct Delta<'a> {
    #[serde(borrow, default)]
    content: Option<Cow<'a, str>>,
}

#[derive(serde::Deserialize)]
struct UsagePayload {
    completion_tokens: Option<u64>,
    prompt_tokens: Option<u64>,
    prompt_tokens_details: Option<PromptDetails>,
}

#[derive(serde::Deserialize)]
struct PromptDetails {
    cached_tokens: Option<u64>,
}

impl UsagePayload {
    fn info(self) -> Option<UsageInfo> {
        let n = |x: Option<u64>| x.map(|x| x.min(u64::from(u32::MAX)) as u32);
        let info = UsageInfo {
            completion_tokens: n(self.completion_tokens),
            prompt_tokens: n(self.prompt_tokens),
            cached_tokens: n(self.prompt_tokens_details.and_then(|d| d.cached_tokens)),
        };
        (info != UsageInfo::default()).then_some(info)
    }
}

/// Decodes one SSE event. Never panics on garbage: unparseable data is `Nothing`.
pub fn decode(protocol: Protocol, event_type: &str, data: &str) -> Decoded {
    let data = data.trim();
    if data == "[DONE]" {
        return Decoded::Done;
    }
    let Ok(p) = serde_json::from_str::<Payload>(data) else {
        return Decoded::Nothing;
    };
    if let Some(e) = p.error.filter(|e| !e.is_null()) {
        let message = e["message"].as_str().map_or_else(|| e.to_string(), str::to_string);
        return Decoded::Error(message);
    }
    if event_type == "error" {
        return Decoded::Error(data.to_string());
    }
    let usage = p.usage.and_then(UsagePayload::info);
    let first = p.choices.and_then(|c| c.into_iter().next());
    let text = match protocol {
        Protocol::Generate => {
            if event_type == "done" {
                return usage.map_or(Decoded::Done, Decoded::Usage);
            }
            let tokens = p.token_ids.map(|ids| ids.len() as u32);
            let text = p.text.or(p.token).unwrap_or_default();
            if text.is_empty() && tokens.unwrap_or(0) == 0 {
                return Decoded::Nothing;
            }
            return Decoded::Content { text: text.into_owned(), tokens };
        }
        Protocol::Completions => first.and_then(|c| c.text),
        Protocol::Chat => first.and_then(|c| c.delta).and_then(|d| d.content),
    }
    .unwrap_or_default();
    match (text.is_empty(), usage) {
        (false, Some(usage)) => Decoded::ContentAndUsage { text: text.into_owned(), usage },
        (false, None) => Decoded::Content { text: text.into_owned(), tokens: None },
        (true, Some(usage)) => Decoded::Usage(usage),
        (true, None) => Decoded::Nothing,
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
        assert_eq!(Protocol::from_url("http://h/other"), None);
    }

    #[test]
    fn decodes_each_protocols_content_usage_and_end() {
        use Decoded::*;
        let g = Protocol::Generate;
        assert_eq!(decode(g, "message", r#"{"text":"hi","token_ids":[1,2]}"#), Content { text: "hi".into(), tokens: Some(2) });
        assert_eq!(decode(g, "done", r#"{"finish_reason":"length","usage":{"completion_tokens":9}}"#), Usage(UsageInfo::completion(9)));
        assert_eq!(decode(g, "error", r#"{"error":{"message":"boom"}}"#), Error("boom".into()));
        let c = Protocol::Completions;
        assert_eq!(decode(c, "message", r#"{"choices":[{"text":" a"}]}"#), Content { text: " a".into(), tokens: None });
        assert_eq!(decode(c, "message", r#"{"choices":[],"usage":{"completion_tokens":4}}"#), Usage(UsageInfo::completion(4)));
        assert_eq!(decode(c, "message", r#"{"choices":[{"text":"z"}],"usage":{"completion_tokens":4}}"#), ContentAndUsage { text: "z".into(), usage: UsageInfo::completion(4) });
        let cached = r#"{"choices":[],"usage":{"prompt_tokens":50,"completion_tokens":4,"prompt_tokens_details":{"cached_tokens":32}}}"#;
        assert_eq!(decode(c, "message", cached), Usage(UsageInfo { completion_tokens: Some(4), prompt_tokens: Some(50), cached_tokens: Some(32) }));
        assert_eq!(decode(c, "message", "[DONE]"), Done);
        let ch = Protocol::Chat;
        assert_eq!(decode(ch, "message", r#"{"choices":[{"delta":{"role":"assistant","content":""}}]}"#), Nothing);
        assert_eq!(decode(ch, "message", r#"{"choices":[{"delta":{"content":"x"}}],"usage":null}"#), Content { text: "x".into(), tokens: None });
    }

    #[test]
    fn garbage_is_ignored_not_fatal() {
        for data in ["", "{", "null", "[1,2", "\u{0}\u{1}", "{\"choices\": 5}"] {
            for p in [Protocol::Generate, Protocol::Completions, Protocol::Chat] {
                assert_eq!(decode(p, "message", data), Decoded::Nothing, "{data:?}");
            }
        }
    }
}
