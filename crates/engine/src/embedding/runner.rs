//! The llama.cpp context an embedding model runs in: one decode per batch of whole
//! inputs, one pooled vector per input read back.

use std::num::NonZeroU32;

use llama_cpp_2::context::params::LlamaContextParams;
use llama_cpp_2::context::LlamaContext;
use llama_cpp_2::llama_batch::LlamaBatch;
use llama_cpp_2::model::LlamaModel;
use llama_cpp_2::token::LlamaToken;

use crate::embedding::pooling::Pooling;
use crate::error::EngineError;
use crate::runtime::llama_context::backend;
use crate::runtime::TokenId;

/// Computes pooled vectors for a batch of inputs. A trait so the engine thread's loop is
/// tested without a model.
pub(crate) trait PoolRunner {
    /// One vector per input, in order; every input is whole in this one batch.
    fn pool(&mut self, inputs: &[&[TokenId]]) -> Result<Vec<Vec<f32>>, String>;
}

/// How big a batch may be: inputs side by side, and their tokens together.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BatchLimits {
    pub max_inputs: usize,
    /// Tokens inputs are packed up to; one input alone may go over, up to `max_tokens`.
    /// An encoder's attention spans its whole batch (masked per input), so its cost per
    /// token grows with the batch: short batches are the cheaper ones on a CPU.
    pub target_tokens: usize,
    /// The context's size: the longest input, alone.
    pub max_tokens: usize,
}

pub(crate) struct LlamaPoolRunner<'m> {
    ctx: LlamaContext<'m>,
    batch: LlamaBatch<'static>,
}

impl<'m> LlamaPoolRunner<'m> {
    /// A context that holds one batch: `limits.max_tokens` cells in one ubatch (an
    /// encoder attends over its whole batch at once), `limits.max_inputs` sequences, its
    /// KV (a decoder's) cleared after every batch.
    pub(crate) fn new(
        model: &'m LlamaModel,
        pooling: Pooling,
        limits: BatchLimits,
        threads: usize,
    ) -> Result<Self, EngineError> {
        let tokens = u32::try_from(limits.max_tokens).ok().and_then(NonZeroU32::new);
        let tokens = tokens.ok_or_else(|| EngineError::Config("the embedding batch must hold a token".into()))?;
        let threads = i32::try_from(threads).unwrap_or(i32::MAX);
        let params = LlamaContextParams::default()
            .with_n_ctx(Some(tokens))
            .with_n_batch(tokens.get())
            .with_n_ubatch(tokens.get())
            .with_n_seq_max(limits.max_inputs as u32)
            .with_kv_unified(true)
            .with_embeddings(true)
            .with_pooling_type(pooling.llama())
            .with_n_threads(threads)
            .with_n_threads_batch(threads);
        let ctx = model
            .new_context(backend()?, params)
            .map_err(|e| EngineError::Backend(format!("creating the embedding context: {e}")))?;
        let batch = LlamaBatch::new(limits.max_tokens, 1);
        Ok(Self { ctx, batch })
    }
}

impl PoolRunner for LlamaPoolRunner<'_> {
    fn pool(&mut self, inputs: &[&[TokenId]]) -> Result<Vec<Vec<f32>>, String> {
        self.batch.clear();
        for (seq, input) in inputs.iter().enumerate() {
            for (pos, &token) in input.iter().enumerate() {
                // Every token is an output: pooling reads them all.
                self.batch
                    .add(LlamaToken(token as i32), pos as i32, &[seq as i32], true)
                    .map_err(|e| format!("building the batch: {e}"))?;
            }
        }
        let decoded = self.ctx.decode(&mut self.batch).map_err(|e| format!("llama.cpp decode: {e}"));
        let vectors = decoded.and_then(|()| {
            (0..inputs.len())
                .map(|seq| {
                    self.ctx
                        .embeddings_seq_ith(seq as i32)
                        .map(<[f32]>::to_vec)
                        .map_err(|_| format!("llama.cpp pooled no vector for sequence {seq}"))
                })
                .collect()
        });
        // A decoder keeps KV cells per sequence; the next batch reuses the ids.
        self.ctx.clear_kv_cache();
        vectors
    }
}
