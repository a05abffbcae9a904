//! rillm's inference engine.
//!
//! The engine owns one model and one llama.cpp context on a dedicated thread and runs a
//! continuous-batching loop over it: every step feeds each running sequence its next token
//! (and the drafts or grammar-forced tokens worth feeding with it) and spends the rest of a
//! per-step token budget on prompt chunks of newly admitted requests. Callers talk to it
//! only through [`Engine::submit`], which returns a [`RequestStream`] of [`StreamEvent`]s;
//! dropping that stream cancels the request.
//!
//! Its rooms, each with a module doc that says what it owns:
//! - `runtime`: the model runtime behind the `Executor` and `Tokenizer` traits (llama.cpp,
//!   its contexts, a draft model's) and the facts of its kernels that price a step;
//! - `request`: one request's generation state (`Sequence`), its text stream, its output
//!   constraint, its events;
//! - `logits`: math over a row of logits (a request's adjustments, log-softmax), shared by
//!   the runtime and the requests;
//! - `kv`: which prefixes the KV cache and host memory hold, and reusing them;
//! - `speculation`: drafts (prompt lookup, the n-gram pool, a draft model), their
//!   acceptance, and how long each is fed;
//! - `cost`: what steps cost, the wait forecast admission reads, the prefill plan and the
//!   TPOT budget;
//! - `scheduler`: the continuous-batching loop, a step read as its phases;
//! - `embedding`: the engine for models that do not generate (embedding models,
//!   rerankers): inputs packed into batches, a pooled vector per input.
//!
//! Nothing here knows about HTTP: the server and the CLI are both plain callers.

mod chat;
mod config;
mod control;
mod cost;
mod embedding;
mod engine;
mod error;
mod kv;
mod logits;
mod queue;
mod request;
mod runtime;
mod scheduler;
mod serve_backend;
mod speculation;
mod stats;
mod supervise;

pub use chat::ChatTemplate;
pub use config::{EngineConfig, Inherited, SpeculationConfig, Speculative, DEFAULT_HOST_CACHE_MIB};
pub use embedding::{Embedder, Pooling};
pub use engine::Engine;
pub use error::EngineError;
pub use kv::kept_prefixes::KeptPrefixes;
pub use logits::logit_adjust::LogitAdjust;
pub use queue::{PushError, WaitQueue};
pub use request::text_stream::{TextPiece, TextStream};
pub use runtime::{BatchToken, Executor, RuntimeError, Tokenizer};
pub use serve_backend::start_backend;
pub use stats::{EngineStats, HostCacheCounts, STALL_AFTER};

// The request, event and statistics types are the backend seam's; callers of the engine
// alone (the CLI, benchmarks, tests) find them here too.
pub use rillm_backend::{
    Backend, ChatMessage, Completion, Constraint, ConstraintSnapshot, EmbedInput, EmbedRequest, EmbedResponse,
    Embeddings, FinishReason, GenerateRequest, Health, ModelTask, Penalties, PrefixCacheSnapshot, Prompt, Reasoning,
    Rejected, RequestStream, SamplingParams, ServerTimings, StatsSnapshot, StreamEvent, TemplateThinking,
    ThinkingStart, TokenId, TokenLogprob, TopLogprob, Usage,
};
