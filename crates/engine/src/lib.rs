//! rillm's inference engine.
//!
//! The engine owns one model and one llama.cpp context on a dedicated thread and runs a
//! continuous-batching loop over it: every step decodes one token for every running
//! sequence and spends the rest of a per-step token budget on prompt chunks of newly
//! admitted requests. Callers talk to it only through [`Engine::submit`], which returns a
//! [`RequestStream`] of [`StreamEvent`]s; dropping that stream cancels the request.
//!
//! Nothing here knows about HTTP: the server and the CLI are both plain callers.

mod backend;
mod chat;
mod config;
mod engine;
mod error;
pub mod fetch;
mod host_cache;
mod llama;
mod prefix_cache;
mod queue;
mod request;
mod scheduler;
mod sequence;
mod stats;
mod stream;
mod text_stream;

pub use backend::{BatchToken, Executor, TokenId, Tokenizer};
pub use chat::ChatTemplate;
pub use config::{EngineConfig, DEFAULT_HOST_CACHE_MIB};
pub use engine::Engine;
pub use error::{EngineError, Rejected};
pub use queue::{PushError, WaitQueue};
pub use request::{
    ChatMessage, Completion, FinishReason, GenerateRequest, Prompt, SamplingParams, ServerTimings, StreamEvent, Usage,
};
pub use stats::{EngineStats, PrefixCacheSnapshot, StatsSnapshot};
pub use stream::RequestStream;
pub use text_stream::{TextPiece, TextStream};
