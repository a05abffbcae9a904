//! Log-probabilities in the shapes clients parse: chat's `logprobs.content[]` entries,
//! completions' parallel `tokens` / `token_logprobs` / `top_logprobs` / `text_offset` lists,
//! and `/generate`'s own per-token entries; and the limits on what a request may ask.
//!
//! The values are the engine's: the raw model distribution (log-softmax of the logits,
//! before temperature, top-k/top-p and constraint masks), as vLLM reports by default.

use rillm_backend::{PromptToken, TokenId, TokenLogprob, TopLogprob};
use serde::Serialize;
use serde_json::{Map, Value};

use crate::error::ApiError;

/// Most alternatives a chat request may ask for (OpenAI's limit).
pub const MAX_TOP_LOGPROBS: i64 = 20;
/// Most alternatives a completions request may ask for (OpenAI's legacy limit).
pub const MAX_COMPLETION_LOGPROBS: i64 = 5;

/// Chat's `logprobs` + `top_logprobs` into the engine's alternatives count.
pub fn chat_request(logprobs: bool, top_logprobs: Option<i64>) -> Result<Option<u32>, ApiError> {
    match (logprobs, top_logprobs) {
        (false, None) => Ok(None),
        (false, Some(_)) => Err(ApiError::invalid("top_logprobs", "`top_logprobs` needs `logprobs: true`")),
        (true, top) => Ok(Some(in_range(top.unwrap_or(0), MAX_TOP_LOGPROBS, "top_logprobs")?)),
    }
}

/// Completions' `logprobs` (an integer: alternatives per token) into the engine's count.
pub fn completions_request(logprobs: Option<&Value>) -> Result<Option<u32>, ApiError> {
    match logprobs {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) if n.as_i64().is_some() => {
            Ok(Some(in_range(n.as_i64().unwrap_or(-1), MAX_COMPLETION_LOGPROBS, "logprobs")?))
        }
        Some(_) => Err(ApiError::invalid("logprobs", "`logprobs` must be an integer from 0 to 5")),
    }
}

fn in_range(n: i64, max: i64, param: &'static str) -> Result<u32, ApiError> {
    if (0..=max).contains(&n) {
        Ok(n as u32)
    } else {
        Err(ApiError::invalid(param, format!("`{param}` must be between 0 and {max}, got {n}")))
    }
}

fn text_of(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// How chat and completions name a token in their log-probabilities: by its text, or as
/// `token_id:N` (vLLM's `return_tokens_as_token_ids`, for clients that need the exact ids;
/// a token's text can be part of a character, or the same as another token's).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum TokenNames {
    #[default]
    Text,
    Ids,
}

impl TokenNames {
    pub fn from_request(return_tokens_as_token_ids: Option<bool>) -> Self {
        if return_tokens_as_token_ids.unwrap_or(false) {
            Self::Ids
        } else {
            Self::Text
        }
    }

    fn name(self, token: TokenId, bytes: &[u8]) -> String {
        match self {
            Self::Text => text_of(bytes),
            Self::Ids => format!("token_id:{token}"),
        }
    }

    /// Chat's `bytes` are those of the name, as vLLM sends them.
    fn bytes(self, token: TokenId, bytes: &[u8]) -> Vec<u8> {
        match self {
            Self::Text => bytes.to_vec(),
            Self::Ids => self.name(token, bytes).into_bytes(),
        }
    }
}

#[derive(Serialize)]
pub struct ChatTop {
    token: String,
    logprob: f32,
    bytes: Vec<u8>,
}

/// One entry of chat's `logprobs.content`.
#[derive(Serialize)]
pub struct ChatEntry {
    token: String,
    logprob: f32,
    bytes: Vec<u8>,
    top_logprobs: Vec<ChatTop>,
}

/// Chat's `{"content": [...]}` for these tokens.
pub fn chat(logprobs: &[TokenLogprob], names: TokenNames) -> Value {
    serde_json::json!({ "content": entries(logprobs, names) })
}

/// One entry per token, with its alternatives: chat's `logprobs.content` and the Responses
/// API's `output_text.logprobs`.
pub fn entries(logprobs: &[TokenLogprob], names: TokenNames) -> Vec<ChatEntry> {
    logprobs
        .iter()
        .map(|l| ChatEntry {
            token: names.name(l.token, &l.bytes),
            logprob: l.logprob,
            bytes: names.bytes(l.token, &l.bytes),
            top_logprobs: l
                .top
                .iter()
                .map(|t| ChatTop {
                    token: names.name(t.token, &t.bytes),
                    logprob: t.logprob,
                    bytes: names.bytes(t.token, &t.bytes),
                })
                .collect(),
        })
        .collect()
}

/// Completions' parallel lists (`tokens`, `token_logprobs`, `top_logprobs`,
/// `text_offset`), built token by token: the echoed prompt's, then the completion's.
#[derive(Default, Serialize)]
pub struct CompletionLogprobs {
    #[serde(skip)]
    names: TokenNames,
    tokens: Vec<String>,
    /// `null` for the first prompt token: nothing before it predicts it.
    token_logprobs: Vec<Option<f32>>,
    top_logprobs: Vec<Option<Map<String, Value>>>,
    text_offset: Vec<usize>,
}

impl CompletionLogprobs {
    pub fn new(names: TokenNames) -> Self {
        Self { names, ..Self::default() }
    }

    /// `offset`: where the next token's text starts in the choice's text (streams carry it
    /// from chunk to chunk); the text's, whatever names the tokens have.
    fn push(
        &mut self,
        (token, bytes): (TokenId, &[u8]),
        logprob: Option<f32>,
        top: Option<&[TopLogprob]>,
        offset: &mut usize,
    ) {
        self.text_offset.push(*offset);
        *offset += text_of(bytes).len();
        self.tokens.push(self.names.name(token, bytes));
        self.token_logprobs.push(logprob);
        let names = self.names;
        self.top_logprobs
            .push(top.map(|top| top.iter().map(|t| (names.name(t.token, &t.bytes), Value::from(t.logprob))).collect()));
    }

    pub fn add_prompt(&mut self, prompt: &[PromptToken], offset: &mut usize) {
        for p in prompt {
            let top = p.logprob.is_some().then_some(p.top.as_slice());
            self.push((p.token, &p.bytes), p.logprob, top, offset);
        }
    }

    pub fn add_generated(&mut self, logprobs: &[TokenLogprob], offset: &mut usize) {
        for l in logprobs {
            self.push((l.token, &l.bytes), Some(l.logprob), Some(&l.top), offset);
        }
    }

    pub fn into_value(self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }
}

/// Completions' lists for these generated tokens.
pub fn completions(logprobs: &[TokenLogprob], offset: &mut usize, names: TokenNames) -> Value {
    let mut lists = CompletionLogprobs::new(names);
    lists.add_generated(logprobs, offset);
    lists.into_value()
}

/// The text of an echoed prompt: its tokens' bytes, as the model read them.
pub fn prompt_text(prompt: &[PromptToken]) -> String {
    let bytes: Vec<u8> = prompt.iter().flat_map(|p| p.bytes.iter().copied()).collect();
    text_of(&bytes)
}

/// `/generate`'s entries: chat's, with the token ids.
pub fn generate(logprobs: &[TokenLogprob]) -> Value {
    let entries: Vec<Value> = logprobs
        .iter()
        .map(|l| {
            let top: Vec<Value> = l
                .top
                .iter()
                .map(|t| serde_json::json!({"token_id": t.token, "token": text_of(&t.bytes), "logprob": t.logprob}))
                .collect();
            serde_json::json!({"token_id": l.token, "token": text_of(&l.bytes), "logprob": l.logprob, "top_logprobs": top})
        })
        .collect();
    Value::Array(entries)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn token(bytes: &[u8], logprob: f32) -> TokenLogprob {
        let top = vec![
            TopLogprob { token: 1, bytes: bytes.to_vec(), logprob },
            TopLogprob { token: 2, bytes: b"x".to_vec(), logprob: logprob - 1.0 },
        ];
        TokenLogprob { token: 1, bytes: bytes.to_vec(), logprob, top }
    }

    #[test]
    fn requests_are_bounded_as_openai_bounds_them() {
        assert_eq!(chat_request(false, None).expect("ok"), None);
        assert_eq!(chat_request(true, None).expect("ok"), Some(0));
        assert_eq!(chat_request(true, Some(20)).expect("ok"), Some(20));
        assert_eq!(chat_request(true, Some(21)).expect_err("over").param.as_deref(), Some("top_logprobs"));
        assert_eq!(chat_request(false, Some(2)).expect_err("no logprobs").param.as_deref(), Some("top_logprobs"));
        assert_eq!(completions_request(Some(&Value::from(5))).expect("ok"), Some(5));
        assert_eq!(completions_request(Some(&Value::Null)).expect("ok"), None);
        for bad in [Value::from(6), Value::from(-1), Value::from(true)] {
            assert_eq!(completions_request(Some(&bad)).expect_err("bad").param.as_deref(), Some("logprobs"));
        }
    }

    #[test]
    fn completions_lists_run_in_parallel_with_offsets_across_chunks() {
        let mut offset = 0;
        let first = completions(&[token(b" Hello", -0.5)], &mut offset, TokenNames::Text);
        let second = completions(&[token(b" world", -1.5)], &mut offset, TokenNames::Text);
        assert_eq!(first["text_offset"], serde_json::json!([0]));
        assert_eq!(second["text_offset"], serde_json::json!([6]));
        assert_eq!(second["tokens"], serde_json::json!([" world"]));
        assert_eq!(second["top_logprobs"][0]["x"], -2.5);
        let prompt = [
            PromptToken { token: 7, bytes: b"Hi".to_vec(), logprob: None, top: Vec::new() },
            PromptToken { token: 8, bytes: b" there".to_vec(), logprob: Some(-3.0), top: token(b" there", -3.0).top },
        ];
        let (mut echoed, mut offset) = (CompletionLogprobs::default(), 0);
        echoed.add_prompt(&prompt, &mut offset);
        echoed.add_generated(&[token(b"!", -0.5)], &mut offset);
        let echoed = echoed.into_value();
        assert_eq!(echoed["tokens"], serde_json::json!(["Hi", " there", "!"]));
        assert_eq!(echoed["token_logprobs"], serde_json::json!([null, -3.0, -0.5]));
        assert_eq!(echoed["top_logprobs"][0], Value::Null, "the first prompt token has no alternatives");
        assert_eq!(echoed["text_offset"], serde_json::json!([0, 2, 8]));
        assert_eq!(prompt_text(&prompt), "Hi there");
        let entry = &chat(&[token(b"\xe2\x82", -0.25)], TokenNames::Text)["content"][0];
        assert_eq!(entry["bytes"], serde_json::json!([0xe2, 0x82]), "partial UTF-8 keeps its bytes");
        assert_eq!(entry["top_logprobs"].as_array().map(Vec::len), Some(2));
    }

    #[test]
    fn tokens_named_by_id_keep_the_text_offsets() {
        let mut offset = 0;
        let lists = completions(&[token(b" Hello", -0.5), token(b"!", -1.0)], &mut offset, TokenNames::Ids);
        assert_eq!(lists["tokens"], serde_json::json!(["token_id:1", "token_id:1"]));
        assert_eq!(lists["top_logprobs"][0]["token_id:2"], -1.5);
        assert_eq!(lists["text_offset"], serde_json::json!([0, 6]), "offsets still index the text");
        let entry = &chat(&[token(b"\xe2\x82", -0.25)], TokenNames::Ids)["content"][0];
        assert_eq!((&entry["token"], &entry["bytes"]), (&Value::from("token_id:1"), &serde_json::json!(b"token_id:1")));
        assert_eq!(entry["top_logprobs"][1]["token"], "token_id:2");
    }
}
