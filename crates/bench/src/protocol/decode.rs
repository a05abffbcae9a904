//! What each SSE event of each engine's stream means: new answer or reasoning text, the
//! tokens it carries, usage, the end of the generation, or an error. One decoder per
//! request, because SGLang's native stream repeats the whole text so far in every event.
//!
//! Payloads are decoded into borrowed typed structs: at a thousand streams the client's
//! CPU per event matters, and this allocates little more than the text itself.

use std::borrow::Cow;

use serde::de::IgnoredAny;
use serde::Deserialize;
use serde_json::Value;

use super::chunk::{error_message, n, some_usage, Chunk, OutputDetails, PromptDetails, UsageInfo};
use super::responses::ResponsesDecoder;
use super::Protocol;

#[derive(Deserialize)]
struct Payload<'a> {
    #[serde(borrow, default)]
    choices: Option<Vec<Choice<'a>>>,
    #[serde(default)]
    usage: Option<UsagePayload>,
    /// A string (TGI, Triton) or an OpenAI error object.
    #[serde(default)]
    error: Option<Value>,
    /// rillm `/generate` (incremental), SGLang (cumulative).
    #[serde(borrow, default)]
    text: Option<Cow<'a, str>>,
    /// A string in the prototype's stream, an object in TGI's.
    #[serde(default)]
    token: Option<Value>,
    #[serde(default)]
    token_ids: Option<Vec<IgnoredAny>>,
    #[serde(default)]
    meta_info: Option<MetaInfo>,
    #[serde(borrow, default)]
    generated_text: Option<Cow<'a, str>>,
    #[serde(default)]
    details: Option<TgiDetails>,
    #[serde(borrow, default)]
    text_output: Option<Cow<'a, str>>,
    /// llama.cpp native.
    #[serde(borrow, default)]
    content: Option<Cow<'a, str>>,
    #[serde(default)]
    stop: Option<bool>,
    #[serde(default)]
    tokens: Option<Vec<IgnoredAny>>,
    #[serde(default)]
    tokens_predicted: Option<u64>,
    #[serde(default)]
    tokens_evaluated: Option<u64>,
    #[serde(default)]
    timings: Option<Timings>,
    /// rillm `/generate`'s done event.
    #[serde(default)]
    finish_reason: Option<Value>,
    /// llama.cpp native: `eos`, `word` or `limit`.
    #[serde(default)]
    stop_type: Option<String>,
}

#[derive(Deserialize)]
struct Choice<'a> {
    #[serde(default)]
    index: Option<u32>,
    #[serde(borrow, default)]
    text: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    delta: Option<Delta<'a>>,
    #[serde(default)]
    finish_reason: Option<Value>,
}

#[derive(Deserialize)]
struct Delta<'a> {
    #[serde(borrow, default)]
    content: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    reasoning_content: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    reasoning: Option<Cow<'a, str>>,
    #[serde(default)]
    tool_calls: Option<Vec<super::tool_calls::ToolCallDelta>>,
}

#[derive(Deserialize)]
struct UsagePayload {
    completion_tokens: Option<u64>,
    prompt_tokens: Option<u64>,
    prompt_tokens_details: Option<PromptDetails>,
    completion_tokens_details: Option<OutputDetails>,
}

#[derive(Deserialize)]
struct MetaInfo {
    completion_tokens: Option<u64>,
    prompt_tokens: Option<u64>,
    cached_tokens: Option<u64>,
    #[serde(default)]
    finish_reason: Option<Value>,
}

#[derive(Deserialize)]
struct TgiDetails {
    generated_tokens: Option<u64>,
}

#[derive(Deserialize)]
struct Timings {
    cache_n: Option<u64>,
}

/// A finish reason in one vocabulary: `length` for a cut by the token limit.
fn reason(value: Option<&Value>) -> Option<String> {
    let word = value?.as_str()?;
    Some(if word == "limit" { "length".into() } else { word.to_string() })
}

/// Decodes one request's stream, event by event.
pub struct StreamDecoder {
    protocol: Protocol,
    /// SGLang: the text and token count reported so far (each event repeats them); OpenAI
    /// protocols with per-chunk usage: the tokens counted so far.
    seen_text: String,
    seen_tokens: u32,
    /// The Responses API's calls so far.
    responses: ResponsesDecoder,
}

impl StreamDecoder {
    pub fn new(protocol: Protocol) -> Self {
        Self { protocol, seen_text: String::new(), seen_tokens: 0, responses: ResponsesDecoder::default() }
    }

    /// Never panics on garbage: data that is not JSON is ignored.
    pub fn decode(&mut self, event_type: &str, data: &str) -> Chunk {
        let data = data.trim();
        if event_type == "error" {
            // Recognised before parsing: an error event's data need not be JSON.
            let message = serde_json::from_str::<Value>(data)
                .map_or_else(|_| data.to_string(), |v| error_message(v.get("error").unwrap_or(&v)));
            return Chunk { error: Some(message), ..Chunk::default() };
        }
        if data == "[DONE]" {
            return Chunk::end();
        }
        if self.protocol == Protocol::Responses {
            return self.responses.decode(data);
        }
        let Ok(p) = serde_json::from_str::<Payload>(data) else {
            return Chunk::default();
        };
        if let Some(e) = p.error.as_ref().filter(|e| !e.is_null()) {
            return Chunk { error: Some(error_message(e)), ..Chunk::default() };
        }
        match self.protocol {
            Protocol::Generate => generate(event_type, p),
            Protocol::Completions | Protocol::Chat => self.openai(p),
            // Decoded above, from the raw event: its events are told apart by `type`.
            Protocol::Responses => Chunk::default(),
            Protocol::Sglang => self.sglang(p),
            Protocol::Tgi => tgi(p),
            Protocol::Triton => Chunk { text: p.text_output.unwrap_or_default().into_owned(), ..Chunk::default() },
            Protocol::Llamacpp => llamacpp(p),
            // Answered as one JSON body (`run::client` reads it), never as events.
            Protocol::Embeddings | Protocol::Rerank => Chunk::default(),
        }
    }

    fn sglang(&mut self, p: Payload) -> Chunk {
        let text = p.text.unwrap_or_default();
        // Cumulative by default; with incremental streaming turned on, each text is new.
        let new = if let Some(suffix) = text.strip_prefix(self.seen_text.as_str()) {
            let new = suffix.to_string();
            self.seen_text = text.into_owned();
            new
        } else {
            self.seen_text.push_str(&text);
            text.into_owned()
        };
        let mut chunk = Chunk { text: new, ..Chunk::default() };
        if let Some(meta) = p.meta_info {
            if let Some(total) = n(meta.completion_tokens) {
                chunk.tokens = Some(total.saturating_sub(self.seen_tokens));
                self.seen_tokens = total;
            }
            chunk.finished = meta.finish_reason.is_some_and(|f| !f.is_null());
            chunk.usage = some_usage(UsageInfo {
                completion_tokens: n(meta.completion_tokens),
                prompt_tokens: n(meta.prompt_tokens),
                cached_tokens: n(meta.cached_tokens),
                reasoning_tokens: None,
            });
        }
        chunk
    }
}

fn usage(u: Option<UsagePayload>) -> Option<UsageInfo> {
    let u = u?;
    some_usage(UsageInfo {
        completion_tokens: n(u.completion_tokens),
        prompt_tokens: n(u.prompt_tokens),
        cached_tokens: n(u.prompt_tokens_details.and_then(|d| d.cached_tokens)),
        reasoning_tokens: n(u.completion_tokens_details.and_then(|d| d.reasoning_tokens)),
    })
}

fn generate(event_type: &str, p: Payload) -> Chunk {
    if event_type == "done" {
        return Chunk { usage: usage(p.usage), finish_reason: reason(p.finish_reason.as_ref()), ..Chunk::end() };
    }
    let tokens = p.token_ids.map(|ids| ids.len() as u32);
    let text = p.text.map(Cow::into_owned).or_else(|| p.token.as_ref().and_then(Value::as_str).map(str::to_string));
    Chunk { text: text.unwrap_or_default(), tokens, ..Chunk::default() }
}

impl StreamDecoder {
    /// A chunk of OpenAI's completions or chat stream. Where the server reports usage on
    /// every chunk (vLLM's `stream_options.continuous_usage_stats`, which vLLM, SGLang and
    /// rillm honour), its completion tokens so far tell how many tokens this event carries.
    /// Only the first choice's are counted: with `n` > 1 each choice has its own count.
    fn openai(&mut self, p: Payload) -> Chunk {
        let mut chunk = Chunk { usage: usage(p.usage), ..Chunk::default() };
        if let Some(choice) = p.choices.and_then(|c| c.into_iter().next()) {
            chunk.finished = choice.finish_reason.as_ref().is_some_and(|f| !f.is_null());
            chunk.finish_reason = reason(choice.finish_reason.as_ref());
            if let Some(text) = choice.text {
                chunk.text = text.into_owned();
            }
            if let Some(delta) = choice.delta {
                chunk.text = delta.content.unwrap_or_default().into_owned();
                chunk.reasoning = delta.reasoning_content.or(delta.reasoning).unwrap_or_default().into_owned();
                chunk.tool_calls = delta.tool_calls.unwrap_or_default();
            }
            let so_far = chunk.usage.as_ref().and_then(|u| u.completion_tokens);
            if let Some(total) = so_far.filter(|_| choice.index.unwrap_or(0) == 0) {
                chunk.tokens = Some(total.saturating_sub(self.seen_tokens));
                self.seen_tokens = total;
            }
        }
        chunk
    }
}

fn tgi(p: Payload) -> Chunk {
    let mut chunk = Chunk::default();
    if let Some(token) = &p.token {
        // Special tokens (end of sequence) are counted by `details`, not shown as text.
        if !token["special"].as_bool().unwrap_or(false) {
            chunk.text = token["text"].as_str().unwrap_or_default().to_string();
            chunk.tokens = Some(1);
        }
    }
    if p.generated_text.is_some() {
        chunk.finished = true;
        chunk.end = true;
        chunk.usage = n(p.details.and_then(|d| d.generated_tokens)).map(UsageInfo::completion);
    }
    chunk
}

fn llamacpp(p: Payload) -> Chunk {
    let mut chunk = Chunk {
        text: p.content.unwrap_or_default().into_owned(),
        tokens: p.tokens.map(|t| t.len() as u32).filter(|&t| t > 0),
        ..Chunk::default()
    };
    if p.stop == Some(true) {
        chunk.finished = true;
        chunk.end = true;
        chunk.finish_reason = reason(p.stop_type.map(Value::String).as_ref());
        chunk.usage = some_usage(UsageInfo {
            completion_tokens: n(p.tokens_predicted),
            prompt_tokens: n(p.tokens_evaluated),
            cached_tokens: n(p.timings.and_then(|t| t.cache_n)),
            reasoning_tokens: None,
        });
    }
    chunk
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(protocol: Protocol, event: &str, data: &str) -> Chunk {
        StreamDecoder::new(protocol).decode(event, data)
    }

    fn text(t: &str) -> Chunk {
        Chunk { text: t.into(), ..Chunk::default() }
    }

    #[test]
    fn rillm_and_openai_content_usage_and_end() {
        let g = Protocol::Generate;
        assert_eq!(one(g, "message", r#"{"text":"hi","token_ids":[1,2]}"#), Chunk { tokens: Some(2), ..text("hi") });
        assert_eq!(
            one(g, "done", r#"{"finish_reason":"length","usage":{"completion_tokens":9}}"#),
            Chunk { usage: Some(UsageInfo::completion(9)), finish_reason: Some("length".into()), ..Chunk::end() }
        );
        assert_eq!(one(g, "error", r#"{"error":{"message":"boom"}}"#).error.as_deref(), Some("boom"));
        assert_eq!(one(g, "error", "not json at all").error.as_deref(), Some("not json at all"));
        let responses_error = one(Protocol::Responses, "error", r#"{"type":"error","message":"bad"}"#);
        assert_eq!(responses_error.error.as_deref(), Some("bad"));
        let c = Protocol::Completions;
        assert_eq!(one(c, "message", r#"{"choices":[{"text":" a"}]}"#), text(" a"));
        assert_eq!(
            one(c, "message", r#"{"choices":[],"usage":{"completion_tokens":4}}"#).usage,
            Some(UsageInfo::completion(4))
        );
        let cached = r#"{"choices":[],"usage":{"prompt_tokens":50,"completion_tokens":4,"prompt_tokens_details":{"cached_tokens":32}}}"#;
        assert_eq!(
            one(c, "message", cached).usage,
            Some(UsageInfo {
                completion_tokens: Some(4),
                prompt_tokens: Some(50),
                cached_tokens: Some(32),
                reasoning_tokens: None
            })
        );
        let thought =
            r#"{"choices":[],"usage":{"completion_tokens":9,"completion_tokens_details":{"reasoning_tokens":6}}}"#;
        assert_eq!(one(c, "message", thought).usage.and_then(|u| u.reasoning_tokens), Some(6));
        assert_eq!(one(c, "message", "[DONE]"), Chunk::end());
        let cut = one(c, "message", r#"{"choices":[{"text":"","finish_reason":"length"}]}"#);
        assert!(cut.finished && cut.finish_reason.as_deref() == Some("length"));
        let ch = Protocol::Chat;
        assert!(!one(ch, "message", r#"{"choices":[{"delta":{"role":"assistant","content":""}}]}"#).is_content());
        assert_eq!(one(ch, "message", r#"{"choices":[{"delta":{"content":"x"}}],"usage":null}"#), text("x"));
        assert_eq!(
            one(ch, "message", r#"{"error":{"message":"overloaded","type":"x"}}"#).error.as_deref(),
            Some("overloaded")
        );
    }

    #[test]
    fn per_chunk_usage_counts_each_events_tokens() {
        let mut d = StreamDecoder::new(Protocol::Chat);
        let ev = |content: &str, index: u32, so_far: u32| {
            format!(
                r#"{{"choices":[{{"index":{index},"delta":{{"content":"{content}"}}}}],"usage":{{"prompt_tokens":9,"completion_tokens":{so_far},"total_tokens":{}}}}}"#,
                9 + so_far
            )
        };
        assert_eq!(d.decode("message", &ev("", 0, 0)).tokens, Some(0), "the role chunk");
        assert_eq!(d.decode("message", &ev("Hi", 0, 1)).tokens, Some(1));
        assert_eq!(d.decode("message", &ev(" there, you", 0, 4)).tokens, Some(3), "three kept drafts at once");
        assert_eq!(d.decode("message", &ev("x", 1, 1)).tokens, None, "another choice counts its own");
        assert_eq!(d.decode("message", &ev("!", 0, 5)).tokens, Some(1));
        // Usage only at the end (the default): no count per event.
        let mut plain = StreamDecoder::new(Protocol::Completions);
        assert_eq!(plain.decode("message", r#"{"choices":[{"text":"a"}],"usage":null}"#).tokens, None);
    }

    #[test]
    fn reasoning_deltas_are_content_kept_apart_from_the_answer() {
        for field in ["reasoning_content", "reasoning"] {
            let c =
                one(Protocol::Chat, "message", &format!(r#"{{"choices":[{{"delta":{{"{field}":"Let me think"}}}}]}}"#));
            assert!(c.is_content() && c.text.is_empty());
            assert_eq!(c.reasoning, "Let me think");
        }
    }

    #[test]
    fn sglang_takes_the_suffix_of_cumulative_text_and_counts_tokens() {
        let mut d = StreamDecoder::new(Protocol::Sglang);
        let ev = |t: &str, c: u32, fin: &str| {
            format!(
                r#"{{"text":"{t}","meta_info":{{"prompt_tokens":7,"completion_tokens":{c},"cached_tokens":3,"finish_reason":{fin}}},"index":0}}"#
            )
        };
        let a = d.decode("message", &ev("Hello", 1, "null"));
        assert_eq!((a.text.as_str(), a.tokens, a.finished), ("Hello", Some(1), false));
        let b = d.decode("message", &ev("Hello world", 3, "null"));
        assert_eq!((b.text.as_str(), b.tokens), (" world", Some(2)));
        let c = d.decode("message", &ev("Hello world!", 4, r#"{"type":"length","length":4}"#));
        assert_eq!((c.text.as_str(), c.finished), ("!", true));
        assert_eq!(
            c.usage,
            Some(UsageInfo {
                completion_tokens: Some(4),
                prompt_tokens: Some(7),
                cached_tokens: Some(3),
                reasoning_tokens: None
            })
        );
        assert!(d.decode("message", "[DONE]").end);
    }

    #[test]
    fn tgi_tokens_are_objects_and_generated_text_ends_the_stream() {
        let mut d = StreamDecoder::new(Protocol::Tgi);
        let a = d.decode("", r#"{"index":1,"token":{"id":5,"text":" The","logprob":-0.1,"special":false},"generated_text":null,"details":null}"#);
        assert_eq!((a.text.as_str(), a.tokens, a.end), (" The", Some(1), false));
        let eos = d.decode("", r#"{"index":2,"token":{"id":2,"text":"</s>","special":true},"generated_text":" The","details":{"finish_reason":"eos_token","generated_tokens":2}}"#);
        assert!(!eos.is_content() && eos.end && eos.finished);
        assert_eq!(eos.usage, Some(UsageInfo::completion(2)));
        assert_eq!(
            d.decode("", r#"{"error":"Input validation error","error_type":"validation"}"#).error.as_deref(),
            Some("Input validation error")
        );
    }

    #[test]
    fn triton_and_llamacpp_native() {
        let t = one(Protocol::Triton, "", r#"{"model_name":"ensemble","model_version":"1","text_output":" hi"}"#);
        assert_eq!(t, text(" hi"));
        assert_eq!(
            one(Protocol::Triton, "", r#"{"error":"in ensemble 'ensemble'"}"#).error.as_deref(),
            Some("in ensemble 'ensemble'")
        );
        let l = Protocol::Llamacpp;
        assert_eq!(
            one(l, "", r#"{"index":0,"content":" Paris","tokens":[12],"stop":false,"tokens_predicted":1}"#),
            Chunk { tokens: Some(1), ..text(" Paris") }
        );
        let last = one(
            l,
            "",
            r#"{"content":"","stop":true,"tokens_predicted":8,"tokens_evaluated":20,"timings":{"cache_n":16,"prompt_n":4}}"#,
        );
        assert!(last.end && last.finished && !last.is_content());
        assert_eq!(
            last.usage,
            Some(UsageInfo {
                completion_tokens: Some(8),
                prompt_tokens: Some(20),
                cached_tokens: Some(16),
                reasoning_tokens: None
            })
        );
        let limit = one(l, "", r#"{"content":"","stop":true,"stop_type":"limit","tokens_predicted":8}"#);
        assert_eq!(limit.finish_reason.as_deref(), Some("length"), "llama.cpp's limit is a cut by n_predict");
    }

    #[test]
    fn garbage_is_ignored_not_fatal() {
        for data in ["", "{", "null", "[1,2", "\u{0}\u{1}", "{\"choices\": 5}"] {
            for p in [
                Protocol::Generate,
                Protocol::Completions,
                Protocol::Chat,
                Protocol::Responses,
                Protocol::Sglang,
                Protocol::Tgi,
                Protocol::Triton,
                Protocol::Llamacpp,
            ] {
                assert_eq!(StreamDecoder::new(p).decode("message", data), Chunk::default(), "{p:?} {data:?}");
            }
        }
    }
}
