//! Counting prompt tokens as the target counts them, so that synthesised prompts have the
//! lengths a trace or distribution asks for.
//!
//! Exact when the target's tokenizer is known: a Hugging Face `tokenizer.json` given with
//! `--tokenizer`, or the target's own `/tokenize` endpoint (vLLM's shape, which SGLang and
//! rillm share, or llama.cpp's). Otherwise the count is an estimate, and results say so.

use std::path::Path;
use std::time::Duration;

use serde_json::{json, Value};

use crate::workload::spec::PromptSpec;

/// How the benchmark counts a prompt's tokens.
pub enum TokenCounter {
    /// A `tokenizer.json`. Counts text exactly; chat prompts count their message text only,
    /// because the server's chat template is unknown here.
    Local { tokenizer: Box<tokenizers::Tokenizer>, path: String },
    /// The target's `/tokenize`.
    Remote(RemoteTokenizer),
    /// Nothing to count with: one token per synthetic word is assumed.
    Estimate,
}

pub struct RemoteTokenizer {
    client: reqwest::Client,
    base: String,
    api_key: Option<String>,
    flavor: Flavor,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Flavor {
    /// vLLM, SGLang, rillm: `{"prompt"}` or `{"messages"}` → `{"count", "tokens"}`.
    Vllm,
    /// llama.cpp `llama-server`: `{"content", "add_special"}` → `{"tokens"}`; chat prompts
    /// are rendered by its `/apply-template` first.
    LlamaCpp,
}

#[derive(Debug, thiserror::Error)]
pub enum TokenizerError {
    #[error("loading tokenizer {path}: {message}")]
    Load { path: String, message: String },
    #[error("counting tokens: {0}")]
    Count(String),
}

impl TokenCounter {
    pub fn from_file(path: &Path) -> Result<Self, TokenizerError> {
        let tokenizer = tokenizers::Tokenizer::from_file(path)
            .map_err(|e| TokenizerError::Load { path: path.display().to_string(), message: e.to_string() })?;
        Ok(Self::Local { tokenizer: Box::new(tokenizer), path: path.display().to_string() })
    }

    /// The target's `/tokenize` if it answers in a shape we know; `Estimate` otherwise.
    pub async fn probe(client: &reqwest::Client, base: &str, api_key: Option<&str>) -> Self {
        for flavor in [Flavor::Vllm, Flavor::LlamaCpp] {
            let remote = RemoteTokenizer {
                client: client.clone(),
                base: base.to_string(),
                api_key: api_key.map(str::to_string),
                flavor,
            };
            if remote.count(&PromptSpec::Text("Hello world".into())).await.is_ok_and(|n| n > 0) {
                return Self::Remote(remote);
            }
        }
        Self::Estimate
    }

    /// Tokens the target will see for `prompt`; `None` when estimating.
    pub async fn count(&self, prompt: &PromptSpec) -> Result<Option<u32>, TokenizerError> {
        match self {
            Self::Local { tokenizer, .. } => {
                let text = prompt.as_text();
                let encoding =
                    tokenizer.encode(text.as_str(), true).map_err(|e| TokenizerError::Count(e.to_string()))?;
                Ok(Some(encoding.len() as u32))
            }
            Self::Remote(remote) => remote.count(prompt).await.map(Some).map_err(TokenizerError::Count),
            Self::Estimate => Ok(None),
        }
    }

    /// Tokens of generated text (no BOS), for servers that report no usage. Only a local
    /// tokenizer counts these: asking the target would add load to the measured server.
    pub fn count_output(&self, text: &str) -> Option<u32> {
        match self {
            Self::Local { tokenizer, .. } => tokenizer.encode(text, false).ok().map(|e| e.len() as u32),
            _ => None,
        }
    }

    /// Whether counts of chat prompts include the chat template's own tokens.
    pub fn counts_chat_template(&self) -> bool {
        matches!(self, Self::Remote(_))
    }

    /// For `run_context` and `limits`: where the counts came from.
    pub fn describe(&self) -> String {
        match self {
            Self::Local { path, .. } => format!("exact for text prompts: tokenizer {path}"),
            Self::Remote(r) => format!(
                "exact: the target's {}/tokenize ({})",
                r.base,
                if r.flavor == Flavor::Vllm { "vLLM shape" } else { "llama.cpp shape" }
            ),
            Self::Estimate => {
                "approximate: no tokenizer given and the target has no /tokenize; one token per synthetic word assumed"
                    .into()
            }
        }
    }

    pub fn is_exact(&self) -> bool {
        !matches!(self, Self::Estimate)
    }
}

impl RemoteTokenizer {
    async fn post(&self, path: &str, body: Value) -> Result<Value, String> {
        let mut request = self.client.post(format!("{}{path}", self.base)).json(&body).timeout(Duration::from_secs(30));
        if let Some(key) = &self.api_key {
            request = request.bearer_auth(key);
        }
        let response = request.send().await.map_err(|e| e.to_string())?;
        let status = response.status();
        if !status.is_success() {
            return Err(format!("{path}: HTTP {status}"));
        }
        response.json().await.map_err(|e| format!("{path}: {e}"))
    }

    async fn count(&self, prompt: &PromptSpec) -> Result<u32, String> {
        let tokens = |v: &Value| v["tokens"].as_array().map(|t| t.len() as u32);
        match self.flavor {
            Flavor::Vllm => {
                let body = match prompt {
                    PromptSpec::Text(text) => json!({"prompt": text}),
                    PromptSpec::Messages(messages) => json!({"messages": messages}),
                };
                let v = self.post("/tokenize", body).await?;
                v["count"]
                    .as_u64()
                    .map(|n| n as u32)
                    .or_else(|| tokens(&v))
                    .ok_or_else(|| "no count in /tokenize's answer".into())
            }
            Flavor::LlamaCpp => {
                let text = match prompt {
                    PromptSpec::Text(text) => text.clone(),
                    PromptSpec::Messages(messages) => {
                        let v = self.post("/apply-template", json!({"messages": messages})).await?;
                        v["prompt"].as_str().ok_or("no prompt in /apply-template's answer")?.to_string()
                    }
                };
                let v = self.post("/tokenize", json!({"content": text, "add_special": true})).await?;
                tokens(&v).ok_or_else(|| "no tokens in /tokenize's answer".into())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A word-level tokenizer with BOS, written as a `tokenizer.json` would be.
    pub fn word_tokenizer_json() -> String {
        json!({
            "version": "1.0",
            "truncation": null,
            "padding": null,
            "added_tokens": [{"id": 0, "content": "<s>", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true}],
            "normalizer": null,
            "pre_tokenizer": {"type": "Whitespace"},
            "post_processor": {
                "type": "TemplateProcessing",
                "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
                "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
                "special_tokens": {"<s>": {"id": "<s>", "ids": [0], "tokens": ["<s>"]}}
            },
            "decoder": null,
            "model": {"type": "WordLevel", "vocab": {"<s>": 0, "<unk>": 1, "hello": 2, "world": 3}, "unk_token": "<unk>"}
        })
        .to_string()
    }

    #[tokio::test]
    async fn a_tokenizer_json_counts_words_and_bos() {
        let path = tempfile::Builder::new().suffix(".json").tempfile().unwrap().into_temp_path();
        std::fs::write(&path, word_tokenizer_json()).unwrap();
        let counter = TokenCounter::from_file(&path).unwrap();
        assert_eq!(counter.count(&PromptSpec::Text("hello world hello".into())).await.unwrap(), Some(4));
        assert!(counter.describe().contains("exact"));
        assert!(TokenCounter::from_file(Path::new("/nonexistent/tokenizer.json")).is_err());
        assert_eq!(TokenCounter::Estimate.count(&PromptSpec::Text("x".into())).await.unwrap(), None);
    }
}
