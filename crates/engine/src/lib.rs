//! rillm's inference engine.
//!
//! The engine owns one model and one llama.cpp context on a dedicated thread and runs a
//! continuous-batching loop over it: every step decodes one token for every running
//! sequence and spends the rest of a per-step token budget on prompt chunks of newly
//! admitted requests. Callers talk to it only through [`Engine::submit`], which returns a
//! [`RequestStream`] of [`StreamEvent`]s; dropping that stream cancels the request.
//!
//! Nothing here knows about HTTP: the server and the CLI are both plain callers.

mod attention_cost;
mod chat;
mod config;
mod constraint;
mod draft_acceptance;
mod draft_lengths;
mod engine;
mod error;
mod forecast;
mod host_cache;
mod llama;
mod llama_context;
mod llama_draft;
mod log_softmax;
mod logit_adjust;
mod model_drafts;
mod ngram_pool;
mod prefill_plan;
mod prefix_cache;
mod queue;
mod runtime;
mod scheduler;
mod sequence;
mod serve_backend;
mod speculate;
mod stats;
mod supervise;
mod text_stream;
mod ubatch_passes;

pub use chat::ChatTemplate;
pub use config::{EngineConfig, Speculative, DEFAULT_HOST_CACHE_MIB};
pub use engine::Engine;
pub use error::EngineError;
pub use logit_adjust::LogitAdjust;
pub use queue::{PushError, WaitQueue};
pub use runtime::{BatchToken, Executor, RuntimeError, Tokenizer};
pub use stats::{EngineStats, STALL_AFTER};
pub use text_stream::{TextPiece, TextStream};

// The request, event and statistics types are the backend seam's; callers of the engine
// alone (the CLI, benchmarks, tests) find them here too.
pub use rillm_backend::{
    Backend, ChatMessage, Completion, Constraint, ConstraintSnapshot, FinishReason, GenerateRequest, Health, Penalties,
    PrefixCacheSnapshot, Prompt, Rejected, RequestStream, SamplingParams, ServerTimings, StatsSnapshot, StreamEvent,
    TokenId, TokenLogprob, TopLogprob, Usage,
};
