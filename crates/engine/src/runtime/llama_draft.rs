//! A draft model for speculative decoding (`--speculative draft`): a second, smaller GGUF
//! with the target's vocabulary, in a llama.cpp context of its own with one KV stream per
//! target slot, proposing each sequence's next tokens greedily while it is sure of them.
//!
//! It never hears of admissions, moves or rejected drafts: each call compares a slot's
//! history with the tokens it holds for that slot, drops its cells from where they part,
//! and takes in the rest (a new prompt, the tokens kept since its last call) before
//! drafting. A history it has not seen costs a prefill on the draft model, in chunks of at
//! most `CATCH_UP_PER_CALL` tokens a call so that no step waits on a whole long prompt.
//!
//! What a pass costs decides whether drafting can pay at all (`model_drafts`): it is
//! measured when the context is made, and again on every pass that feeds one row per
//! drafting sequence.

use std::time::Instant;

use llama_cpp_2::context::LlamaContext;
use llama_cpp_2::llama_batch::LlamaBatch;
use llama_cpp_2::model::LlamaModel;
use llama_cpp_2::token::LlamaToken;

use crate::config::EngineConfig;
use crate::error::EngineError;
use crate::logits::log_softmax::log_softmax_at;
use crate::runtime::llama_context::{backend, slot_context_params};
use crate::runtime::{DraftWant, RuntimeError, TokenId};

/// History tokens the draft model takes in per call, over all sequences: a step waits on
/// them, so a long new prompt is taken in over several steps.
const CATCH_UP_PER_CALL: usize = 128;

/// A draft ends before a token its model gives less than this probability: such tokens are
/// seldom the target's, and each costs a row (llama.cpp's `--draft-p-min`, same default).
const MIN_DRAFT_PROBABILITY: f32 = 0.75;

/// One-row passes timed when the context is made (the fastest counts: the first ones warm
/// caches up).
const CALIBRATION_PASSES: usize = 4;

/// How quickly the pass time follows the latest measurement.
const PASS_SMOOTHING: f64 = 0.2;

/// The draft model's context, on the engine thread.
pub(crate) struct DraftContext<'m> {
    model: &'m LlamaModel,
    ctx: LlamaContext<'m>,
    batch: LlamaBatch<'static>,
    /// Per slot, the tokens whose KV cells the context holds, from position 0.
    fed: Vec<Vec<TokenId>>,
    /// A pass of one row per drafting sequence, smoothed.
    pass_ms: f64,
}

impl<'m> DraftContext<'m> {
    /// A context for `draft`, sized as the target's (`config`); refused unless `draft`
    /// reads and writes text with the same tokens as `target`.
    pub fn new(draft: &'m LlamaModel, target: &LlamaModel, config: &EngineConfig) -> Result<Self, EngineError> {
        same_vocabulary(draft, target).map_err(|reason| EngineError::Model {
            path: config.speculation.draft_model_path.clone().unwrap_or_default(),
            reason: format!("cannot draft for the target model: {reason}"),
        })?;
        let n_batch = CATCH_UP_PER_CALL.max(config.max_running) as u32;
        let params = slot_context_params(config, config.ctx_per_sequence, n_batch, n_batch)?;
        let ctx = draft
            .new_context(backend()?, params)
            .map_err(|e| EngineError::Backend(format!("creating the draft model's context: {e}")))?;
        let mut context = Self {
            model: draft,
            ctx,
            batch: LlamaBatch::new(n_batch as usize, 1),
            fed: (0..config.max_running).map(|_| Vec::new()).collect(),
            pass_ms: 0.0,
        };
        context.pass_ms = context.time_one_row().map_err(|e| EngineError::Backend(e.to_string()))?;
        tracing::info!(pass_ms = context.pass_ms, "draft model ready");
        Ok(context)
    }

    /// The fastest of a few one-row passes over an empty slot 0, which is left empty.
    fn time_one_row(&mut self) -> Result<f64, RuntimeError> {
        let mut fastest = f64::INFINITY;
        for _ in 0..CALIBRATION_PASSES {
            self.batch.clear();
            add(&mut self.batch, self.model.vocab().bos().0 as TokenId, 0, 0, true)?;
            let started = Instant::now();
            self.decode()?;
            fastest = fastest.min(started.elapsed().as_secs_f64() * 1000.0);
            let _ = self.ctx.clear_kv_cache_seq(Some(0), None, None);
        }
        Ok(fastest)
    }

    /// What a pass of one row per drafting sequence takes, as measured.
    pub fn pass_ms(&self) -> f64 {
        self.pass_ms
    }

    /// Each want's greedy continuation (see `Executor::draft`). On error the context is
    /// emptied: the next call starts every history afresh.
    pub fn draft(&mut self, wants: &[DraftWant<'_>]) -> Result<Vec<Vec<TokenId>>, RuntimeError> {
        let drafted = self.draft_inner(wants);
        if drafted.is_err() {
            self.ctx.clear_kv_cache();
            self.fed.iter_mut().for_each(Vec::clear);
        }
        drafted
    }

    fn draft_inner(&mut self, wants: &[DraftWant<'_>]) -> Result<Vec<Vec<TokenId>>, RuntimeError> {
        let mut tokens = vec![Vec::new(); wants.len()];
        // The batch row each want samples its next token from; `None` once it is done.
        let mut rows = vec![None; wants.len()];
        self.batch.clear();
        let mut budget = CATCH_UP_PER_CALL;
        for (i, want) in wants.iter().enumerate() {
            let Some(fed) = self.fed.get_mut(want.seq) else { continue };
            if want.history.is_empty() || want.count == 0 {
                continue;
            }
            // The last token is fed again when already held: its logits are needed.
            let keep = common_prefix(fed, want.history).min(want.history.len() - 1);
            if keep < fed.len() {
                let _ = self.ctx.clear_kv_cache_seq(Some(want.seq as u32), Some(keep as u32), None);
                fed.truncate(keep);
            }
            let take = (want.history.len() - keep).min(budget);
            budget -= take;
            for (pos, &token) in want.history.iter().enumerate().skip(keep).take(take) {
                let last = pos + 1 == want.history.len();
                add(&mut self.batch, token, pos, want.seq, last)?;
            }
            fed.extend_from_slice(&want.history[keep..keep + take]);
            if fed.len() == want.history.len() {
                rows[i] = Some(self.batch.n_tokens() - 1);
            }
        }
        if self.batch.n_tokens() == 0 {
            return Ok(tokens);
        }
        // The first pass counts where it took in nothing but each history's last token.
        let plain = self.batch.n_tokens() as usize == rows.iter().flatten().count();
        self.timed_decode(plain)?;
        loop {
            self.batch.clear();
            for (i, want) in wants.iter().enumerate() {
                let Some(row) = rows[i].take() else { continue };
                let (token, probability) = self.most_likely(row);
                if probability < MIN_DRAFT_PROBABILITY {
                    continue;
                }
                tokens[i].push(token);
                let ends = self.model.vocab().is_eog(LlamaToken(token as i32));
                if tokens[i].len() < want.count && !ends {
                    let fed = &mut self.fed[want.seq];
                    add(&mut self.batch, token, fed.len(), want.seq, true)?;
                    fed.push(token);
                    rows[i] = Some(self.batch.n_tokens() - 1);
                }
            }
            if self.batch.n_tokens() == 0 {
                break;
            }
            self.timed_decode(true)?;
        }
        Ok(tokens)
    }

    /// A decode whose time teaches the pass estimate if it was `plain` (one row a sequence).
    fn timed_decode(&mut self, plain: bool) -> Result<(), RuntimeError> {
        let started = Instant::now();
        self.decode()?;
        if plain {
            let ms = started.elapsed().as_secs_f64() * 1000.0;
            self.pass_ms += PASS_SMOOTHING * (ms - self.pass_ms);
        }
        Ok(())
    }

    fn decode(&mut self) -> Result<(), RuntimeError> {
        self.ctx.decode(&mut self.batch).map_err(|e| RuntimeError::Decode(format!("draft model: {e}")))
    }

    /// The most likely token at `row` and its probability.
    fn most_likely(&self, row: i32) -> (TokenId, f32) {
        let (_, top) = log_softmax_at(self.ctx.get_logits_ith(row), 0, 1);
        top.first().map_or((0, 0.0), |&(token, logprob)| (token, logprob.exp()))
    }
}

fn add(
    batch: &mut LlamaBatch<'static>,
    token: TokenId,
    pos: usize,
    seq: usize,
    logits: bool,
) -> Result<(), RuntimeError> {
    batch
        .add(LlamaToken(token as i32), pos as i32, &[seq as i32], logits)
        .map_err(|e| RuntimeError::Decode(format!("draft model batch: {e}")))
}

fn common_prefix(a: &[TokenId], b: &[TokenId]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

/// A draft must spell every token as the target does, or its drafts mean other text (the
/// check llama.cpp's `common_speculative_are_compatible` makes, over every token).
fn same_vocabulary(draft: &LlamaModel, target: &LlamaModel) -> Result<(), String> {
    let (ours, theirs) = (draft.n_vocab(), target.n_vocab());
    if ours != theirs {
        return Err(format!("its vocabulary has {ours} tokens, the target's {theirs}"));
    }
    let (draft_vocab, target_vocab) = (draft.vocab(), target.vocab());
    let (mut a, mut b) = (Vec::new(), Vec::new());
    for id in 0..ours {
        let token = LlamaToken(id);
        a.clear();
        b.clear();
        draft_vocab.token_to_piece_into(token, &mut a, true, None);
        target_vocab.token_to_piece_into(token, &mut b, true, None);
        if a != b {
            return Err(format!(
                "token {id} is {:?} in it and {:?} in the target",
                String::from_utf8_lossy(&a),
                String::from_utf8_lossy(&b)
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::common_prefix;

    #[test]
    fn histories_part_where_their_first_different_token_is() {
        assert_eq!(common_prefix(&[1, 2, 3], &[1, 2, 4, 5]), 2);
        assert_eq!(common_prefix(&[1, 2], &[1, 2, 3]), 2);
        assert_eq!(common_prefix(&[], &[1]), 0);
        assert_eq!(common_prefix(&[9], &[1]), 0);
    }
}
