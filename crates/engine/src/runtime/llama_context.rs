//! What every llama.cpp context of the engine shares: the process's backend, and how a
//! context with one KV stream per slot is laid out (the target's and a draft model's).

use std::num::NonZeroU32;
use std::sync::OnceLock;

use llama_cpp_2::context::params::LlamaContextParams;
use llama_cpp_2::llama_backend::LlamaBackend;

use crate::config::EngineConfig;
use crate::error::EngineError;

/// llama.cpp's global state may be initialised once per process; every engine shares it.
pub(crate) fn backend() -> Result<&'static LlamaBackend, EngineError> {
    static BACKEND: OnceLock<Result<LlamaBackend, String>> = OnceLock::new();
    BACKEND
        .get_or_init(|| {
            llama_cpp_2::send_logs_to_tracing(llama_cpp_2::LogOptions::default());
            LlamaBackend::init().map_err(|e| e.to_string())
        })
        .as_ref()
        .map_err(|e| EngineError::Backend(e.clone()))
}

/// A context of `config.max_running` slots of `ctx_per_sequence` cells, decode calls of up
/// to `n_batch` tokens in ubatches of `n_ubatch`, on `config.threads` threads. One KV
/// stream per slot (not unified): each token attends only over its own sequence's cells,
/// which keeps batched decode cheap as sequences grow.
pub(crate) fn slot_context_params(
    config: &EngineConfig,
    ctx_per_sequence: u32,
    n_batch: u32,
    n_ubatch: u32,
) -> Result<LlamaContextParams, EngineError> {
    let n_seq = config.max_running as u32;
    let n_ctx = ctx_per_sequence
        .checked_mul(n_seq)
        .and_then(NonZeroU32::new)
        .ok_or_else(|| EngineError::Backend("context size overflows".into()))?;
    let threads = i32::try_from(config.threads).unwrap_or(i32::MAX);
    Ok(LlamaContextParams::default()
        .with_n_ctx(Some(n_ctx))
        .with_n_seq_max(n_seq)
        .with_kv_unified(false)
        .with_n_batch(n_batch)
        .with_n_ubatch(n_ubatch)
        .with_n_threads(threads)
        .with_n_threads_batch(threads))
}
