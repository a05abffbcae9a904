//! The seam between rillm's HTTP server and whatever generates tokens.
//!
//! The server depends only on this crate: the [`Backend`] trait and the types that cross
//! it (requests, stream events, rejections, statistics). The llama.cpp engine implements
//! it; so does a scripted backend in the server's tests, which reaches the error paths a
//! real model cannot be made to take (a decode failure mid-stream, the engine dying).
//! Keeping llama.cpp behind this line means building and testing the HTTP layer compiles
//! no C++.

mod embedding;
mod rejected;
mod request;
#[cfg(feature = "scripted")]
pub mod scripted;
mod stats;
mod stream;
mod thinking;
mod tool_format;

pub use embedding::{EmbedFailed, EmbedInput, EmbedReply, EmbedRequest, EmbedResponse, Embeddings, ModelTask};
pub use rejected::Rejected;
pub use request::{
    ChatMessage, ChatOptions, ChatToolCall, Completion, Constraint, FinishReason, GenerateRequest, Penalties, Prompt,
    PromptToken, Reasoning, SamplingParams, ServerTimings, StreamEvent, ThinkingStart, TokenId, TokenLogprob,
    TopLogprob, Usage,
};
pub use stats::{
    CacheLayout, ConstraintSnapshot, PrefixCacheFlush, PrefixCacheSnapshot, SpeculationSnapshot, StatsSnapshot,
    DRAFT_POSITIONS,
};
pub use stream::{ChoiceControls, RequestStream, StartSignal};
pub use thinking::TemplateThinking;
pub use tool_format::ToolCallFormat;

/// What clients that tokenize for themselves need to know of the model's tokenizer.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TokenizerInfo {
    pub bos_token: Option<String>,
    pub eos_token: Option<String>,
    /// The Jinja source of the model's chat template.
    pub chat_template: Option<String>,
    /// The chat template lists tools and writes calls and results itself, in this format
    /// (Qwen2.5's and Hermes 2/3's write Hermes, Llama 3.1's Llama 3 JSON, Mistral's
    /// `[TOOL_CALLS]`): the server passes it the tools instead of writing its own block.
    pub chat_template_tools: Option<ToolCallFormat>,
    /// The chat template writes a reasoning model's think markers (its reasoning parser is
    /// picked from this unless `--reasoning-parser` says).
    pub chat_template_thinking: Option<TemplateThinking>,
}

/// Whether the engine behind a backend can still serve.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Health {
    /// Running, and making progress whenever it has work.
    Ok,
    /// Running, but it has had work and no finished step for too long.
    Stalled,
    /// Stopped on a fault (the engine thread panicked or its runtime failed): requests in
    /// flight got an error, new ones are refused. Only a restart recovers.
    Failed(String),
}

/// What the HTTP layer needs from an inference engine. Implementations are shared by every
/// request handler, so each method must be cheap or say that it is not.
pub trait Backend: Send + Sync + 'static {
    /// Validates and queues a request, or says at once why not (before any model work).
    /// Dropping the returned stream cancels the request.
    fn submit(&self, request: GenerateRequest) -> Result<RequestStream, Rejected>;
    /// The token ids generation would see for `prompt` (chat prompts rendered with the
    /// template); `add_special` says whether a text prompt gets BOS. Costs a tokenization.
    fn tokenize(&self, prompt: &Prompt, add_special: bool) -> Result<Vec<TokenId>, Rejected>;
    fn detokenize(&self, tokens: &[TokenId]) -> Result<String, Rejected>;
    /// The name clients use in `model` and that `/v1/models` lists.
    fn model_name(&self) -> &str;
    /// Context tokens per sequence (prompt plus completion).
    fn context_length(&self) -> u32;
    fn stats(&self) -> StatsSnapshot;
    /// The tokenizer's special tokens and chat template (vLLM's `/tokenizer_info`).
    fn tokenizer_info(&self) -> TokenizerInfo {
        TokenizerInfo::default()
    }
    /// `tokenizer_info().chat_template_tools`, without copying the template (asked per chat
    /// request).
    fn chat_template_tools(&self) -> Option<ToolCallFormat> {
        self.tokenizer_info().chat_template_tools
    }
    /// `tokenizer_info().chat_template_thinking`, without copying the template.
    fn chat_template_thinking(&self) -> Option<TemplateThinking> {
        self.tokenizer_info().chat_template_thinking
    }
    /// Whether `constraint` compiles, alone: where a composed constraint (tools and an
    /// answer format in one grammar) is refused, its parts are checked one by one so the
    /// 400 names the field at fault. Compiled constraints are cached, so this is cheap for
    /// one seen before. Backends that compile nothing accept everything.
    fn check_constraint(&self, _constraint: &Constraint) -> Result<(), Rejected> {
        Ok(())
    }
    /// `None` when the engine reuses no prefixes (nothing for a prefix-aware router to score).
    fn cache_layout(&self) -> Option<CacheLayout> {
        None
    }
    /// What the model does; generation routes and `/v1/embeddings` check it.
    fn task(&self) -> ModelTask {
        ModelTask::Generate
    }
    /// The width of the vectors `embed` returns (`None` for a generating model).
    fn embedding_width(&self) -> Option<usize> {
        None
    }
    /// Queues an embedding (or rerank) request, or says at once why not. Dropping the
    /// response cancels it.
    fn embed(&self, _request: EmbedRequest) -> Result<EmbedResponse, Rejected> {
        Err(Rejected::WrongTask { served: self.task(), asked: ModelTask::Embed })
    }
    /// Forgets every cached prefix no running request uses (idle slots' KV, the host
    /// tier): a router's `/flush_cache`, a benchmark's cold start. Blocks until the engine
    /// has done it. Backends that cache nothing have nothing to drop.
    fn flush_prefix_cache(&self) -> Result<PrefixCacheFlush, Rejected> {
        Ok(PrefixCacheFlush::default())
    }
    fn health(&self) -> Health;
    /// Cancels everything and stops the engine.
    fn shutdown(&self);
}
