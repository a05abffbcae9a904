//! The seam between the scheduler and a model runtime, and the runtime behind it: the
//! llama.cpp executor (`llama`) with its context (`llama_context`) and a draft model's
//! (`llama_draft`), and the facts of llama.cpp's kernels that shape what a step costs
//! (`attention_cost`: when a wider prefill is cheaper; `ubatch_passes`: how a batch is cut
//! into passes over the weights; `widening_verdicts`: what the start-up probe found, kept per
//! model, keyed by `model_fingerprint`). Nothing here decides what runs: that is the scheduler's.
//!
//! Two traits because the two halves live on different threads: a [`Tokenizer`] is shared
//! by every caller (tokenizing at `submit` keeps that work off the engine thread and lets
//! context overflows be rejected before queueing), while the [`Executor`] owns the mutable
//! inference state and never leaves the engine thread.

pub(crate) mod attention_cost;
pub(crate) mod llama;
pub(crate) mod llama_context;
pub(crate) mod llama_draft;
pub(crate) mod model_fingerprint;
pub(crate) mod ubatch_passes;
pub(crate) mod widening_verdicts;

use crate::chat::ChatTemplate;
use rillm_backend::SamplingParams;
use toktrie::SimpleVob;

pub use rillm_backend::TokenId;

/// A model runtime's failure, by what it was doing; the runtime's own message inside.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RuntimeError {
    #[error("decode failed: {0}")]
    Decode(String),
    #[error("saving a sequence's KV state failed: {0}")]
    Save(String),
    #[error("restoring a sequence's KV state failed: {0}")]
    Restore(String),
}

pub trait Tokenizer: Send + Sync + 'static {
    /// `add_special` adds BOS/EOS as the model asks; `parse_special` turns special-token
    /// text (`<|im_end|>`) into its control token, else it stays literal text.
    fn tokenize(&self, text: &str, add_special: bool, parse_special: bool) -> Vec<TokenId>;
    /// Appends the bytes of one token's text (not always whole UTF-8) to `out`.
    fn append_token_bytes(&self, token: TokenId, out: &mut Vec<u8>);
    /// End of generation: EOS, end of turn and similar.
    fn is_end_of_generation(&self, token: TokenId) -> bool;
    /// The model's chat template, if it ships one.
    fn chat_template(&self) -> Option<&ChatTemplate>;
    /// Token ids run from 0 to this, exclusive.
    fn vocab_size(&self) -> u32;
}

/// One token of a batch: `seq` is the slot index, `logits` asks for an output row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchToken {
    pub token: TokenId,
    pub pos: u32,
    pub seq: usize,
    pub logits: bool,
}

/// One sequence's call on a draft model: up to `count` tokens to follow `history` (its
/// prompt and output so far), for the slot `seq`.
#[derive(Debug, Clone, Copy)]
pub struct DraftWant<'a> {
    pub seq: usize,
    pub history: &'a [TokenId],
    pub count: usize,
}

pub trait Executor {
    /// A saved copy of one sequence's KV state, kept in host memory.
    type Snapshot;
    /// Context cells available to each sequence slot.
    fn ctx_per_sequence(&self) -> u32;
    /// Most tokens one `decode` call accepts (the scheduler's step budget may be less).
    fn max_batch_tokens(&self) -> usize;
    /// Most rows one pass over the weights computes (llama.cpp's `n_ubatch`): a batch is
    /// cut into passes of at most so many (`ubatch_passes`).
    fn ubatch_rows(&self) -> usize {
        self.max_batch_tokens()
    }
    /// Query rows of one sequence that the runtime's attention computes as one tile, where
    /// a row past whole tiles costs about a one-row step by itself (llama.cpp's CPU flash
    /// attention: `attention_cost::TILE_QUERY_ROWS`); `None` where no such step exists.
    fn attention_tile_rows(&self) -> Option<usize> {
        None
    }
    /// How many prompt tokens to compute in a step that would compute the `left` last
    /// ones of a prompt whose `cached` earlier ones are in KV: at least `left`; more
    /// (computing some cached tokens again) where the runtime's kernels make the wider
    /// prefill cheaper. `beside_others`: other sequences prefill in the same step.
    fn prefill_width(&self, cached: usize, left: usize, beside_others: bool) -> usize {
        let _ = (cached, beside_others);
        left
    }
    /// Runs the model over `batch`. On error no sequence in it advanced.
    fn decode(&mut self, batch: &[BatchToken]) -> Result<(), RuntimeError>;
    /// Prepares `seq`'s sampler. Called once when a request gets the slot.
    fn start_sequence(&mut self, seq: usize, sampling: &SamplingParams, ban_eog: bool);
    /// Samples from the output row of batch entry `batch_index` of the last decode, with
    /// `adjust`'s bias and penalties added to it; with a `mask`, only among the tokens it
    /// allows (a constraint's), every sampler setting applied within them.
    fn sample(
        &mut self,
        seq: usize,
        batch_index: usize,
        mask: Option<&SimpleVob>,
        adjust: Option<&crate::logits::logit_adjust::LogitAdjust>,
    ) -> TokenId;
    /// The log-probability of `token` in the output row of batch entry `batch_index` of the
    /// last decode (log-softmax of the raw logits), and the `top` most likely tokens with
    /// theirs, most likely first. Only valid until the next decode.
    fn logprobs(&self, batch_index: usize, token: TokenId, top: usize) -> (f32, Vec<(TokenId, f32)>);
    /// The request left the slot: drop its sampler. Its KV cells stay for prefix reuse.
    fn end_sequence(&mut self, seq: usize);
    /// Replaces `dst`'s KV cells with a copy of `src`'s, positions included.
    fn copy_sequence(&mut self, src: usize, dst: usize);
    /// Moves a running sequence to another slot: `dst` gets a copy of `src`'s KV cells and
    /// takes over its sampler; `src` keeps its cells and has no sampler.
    fn move_sequence(&mut self, src: usize, dst: usize);
    /// Drops the slot's KV cells from position `keep` on (0 frees them all).
    fn truncate_sequence(&mut self, seq: usize, keep: u32);
    /// KV cells currently held by `seq`, as the runtime reports them.
    fn sequence_cells(&self, seq: usize) -> u32;
    /// Copies `seq`'s KV state out to host memory, with its size in bytes.
    fn save_sequence(&mut self, seq: usize) -> Result<(Self::Snapshot, usize), RuntimeError>;
    /// Replaces `seq`'s KV cells with a saved state. On error the slot holds nothing.
    fn restore_sequence(&mut self, seq: usize, snapshot: &Self::Snapshot) -> Result<(), RuntimeError>;
    /// Each want's next tokens as the draft model would generate them greedily, at most
    /// `count`, ending early at an end of generation or before a token the draft model is
    /// unsure of; empty where there is no draft model, or while the draft model is still
    /// taking in a long history (it does so in steps).
    fn draft(&mut self, wants: &[DraftWant<'_>]) -> Result<Vec<Vec<TokenId>>, RuntimeError> {
        Ok(vec![Vec::new(); wants.len()])
    }
    /// What one pass of the draft model takes, feeding a row per drafting sequence
    /// (measured at start and as it drafts); `None` without a draft model.
    fn draft_pass_ms(&self) -> Option<f64> {
        None
    }
}
