//! The wire protocols the benchmark speaks, the vocabulary every stage shares: which API
//! a URL serves (here), what each of its SSE events means (`decode`, `chunk`), the Responses
//! API's items and events (`responses`), and tool calls put back together from their
//! streamed pieces (`tool_calls`). How a request spec becomes each engine's body is the
//! workload's (`workload::body`). Formats follow each engine's source.

mod chunk;
mod decode;
pub(crate) mod responses;
pub mod tool_calls;

pub use chunk::{Chunk, UsageInfo};
pub use decode::StreamDecoder;

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
    /// OpenAI `POST /v1/embeddings` (rillm, llama-server, vLLM, TEI): one JSON answer, a
    /// vector per input.
    Embeddings,
    /// Jina's and Cohere's `POST /v1/rerank` (rillm, llama-server, vLLM): one JSON answer,
    /// a score per document.
    Rerank,
}

impl Protocol {
    /// Picks the protocol from the URL's path. `/generate` is rillm's; SGLang's native
    /// endpoint has the same path and needs `--protocol sglang`.
    pub fn from_url(url: &str) -> Option<Self> {
        let path = url.split('?').next().unwrap_or(url).trim_end_matches('/');
        if path.ends_with("/embeddings") {
            Some(Self::Embeddings)
        } else if path.ends_with("/rerank") {
            Some(Self::Rerank)
        } else if path.ends_with("/chat/completions") {
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

    /// Whether the answer is one JSON body of pooled vectors or scores, not a token stream:
    /// its latency is the whole answer's, and each input answered counts.
    pub fn is_pooled(self) -> bool {
        matches!(self, Self::Embeddings | Self::Rerank)
    }

    /// Whether prompts go as chat messages (a conversation's turns as they are), not text.
    pub fn takes_messages(self) -> bool {
        matches!(self, Self::Chat | Self::Responses)
    }
}

/// `scheme://host:port` of a URL.
pub(crate) fn origin(url: &str) -> &str {
    let after_scheme = url.find("://").map_or(0, |i| i + 3);
    url[after_scheme..].find('/').map_or(url, |i| &url[..after_scheme + i])
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
        assert_eq!(Protocol::from_url("http://h/v1/embeddings"), Some(Protocol::Embeddings));
        assert_eq!(Protocol::from_url("http://h/rerank"), Some(Protocol::Rerank));
        assert_eq!(Protocol::from_url("http://h/other"), None);
    }
}
