//! What crosses the seam for models that do not generate: embedding models (a vector per
//! input) and rerankers (a score per query-document pair).
//!
//! A request is answered whole, not streamed: its inputs are computed, possibly over
//! several batches shared with other requests, and the vectors come back together, in
//! input order. Dropping the [`EmbedResponse`] cancels what is not computed yet.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::sync::oneshot;

use crate::request::TokenId;

/// What a served model does; read from its GGUF (or set by `--pooling`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ModelTask {
    /// Generates text (chat, completions, `/generate`, Responses).
    Generate,
    /// Turns each input into one vector (`/v1/embeddings`).
    Embed,
    /// Scores query-document pairs (`/v1/rerank`).
    Rerank,
}

impl ModelTask {
    /// The name `/v1/models` and `/tokenize` report.
    pub fn name(self) -> &'static str {
        match self {
            Self::Generate => "generate",
            Self::Embed => "embed",
            Self::Rerank => "rerank",
        }
    }

    /// The endpoint that serves this task, for error messages that point the client there.
    pub fn endpoint(self) -> &'static str {
        match self {
            Self::Generate => "/v1/chat/completions",
            Self::Embed => "/v1/embeddings",
            Self::Rerank => "/v1/rerank",
        }
    }
}

/// One input: text (tokenized with the model's special tokens, as the model was trained),
/// token ids taken as they are, or a query-document pair for a reranker.
#[derive(Debug, Clone, PartialEq)]
pub enum EmbedInput {
    Text(String),
    Tokens(Vec<TokenId>),
    Pair { query: String, document: String },
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct EmbedRequest {
    pub inputs: Vec<EmbedInput>,
    /// Keep each input's last N tokens (vLLM's `truncate_prompt_tokens`) instead of
    /// refusing one longer than the context.
    pub truncate_prompt_tokens: Option<u32>,
}

/// The answer: one pooled vector per input, in input order, as the model computed it (not
/// normalised: the server does that after any `dimensions` cut). A reranker's vector holds
/// its classifier's outputs (one score for the usual cross-encoder).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Embeddings {
    pub vectors: Vec<Vec<f32>>,
    /// Tokens of every input together (`usage.prompt_tokens`).
    pub prompt_tokens: usize,
}

/// Why an admitted embedding request failed (the runtime's error, in words).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{0}")]
pub struct EmbedFailed(pub String);

/// The pending answer to one embedding request. Dropping it cancels the request: inputs
/// not yet in a batch are never computed.
#[derive(Debug)]
pub struct EmbedResponse {
    answer: oneshot::Receiver<Result<Embeddings, EmbedFailed>>,
}

/// The backend's end of an [`EmbedResponse`].
pub type EmbedReply = oneshot::Sender<Result<Embeddings, EmbedFailed>>;

impl EmbedResponse {
    /// A response and the sender the backend answers it through.
    pub fn channel() -> (EmbedReply, Self) {
        let (reply, answer) = oneshot::channel();
        (reply, Self { answer })
    }

    /// Blocking variant for callers outside an async runtime (the CLI, tests).
    pub fn blocking_wait(self) -> Result<Embeddings, EmbedFailed> {
        self.answer.blocking_recv().unwrap_or_else(|_| Err(EmbedFailed("the engine dropped the request".into())))
    }
}

impl Future for EmbedResponse {
    type Output = Result<Embeddings, EmbedFailed>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Pin::new(&mut self.answer)
            .poll(cx)
            .map(|answer| answer.unwrap_or_else(|_| Err(EmbedFailed("the engine dropped the request".into()))))
    }
}
