//! Per-sequence decoding: what a sequence does with the logits rows a step computed for
//! it. Sampling under its constraint's mask (every sampler setting applies inside the
//! mask), its log-probabilities, then the stop conditions and text streaming of
//! `Sequence::accept_token`. The step calls [`decode_next`] for a sequence's output row, or
//! [`verify`] when it fed drafted tokens, and knows nothing of these.

use rillm_backend::{FinishReason, TokenLogprob, TopLogprob};

use crate::logits::logit_adjust::LogitAdjust;
use crate::request::constraint::ConstraintCounters;
use crate::request::sequence::Sequence;
use crate::runtime::{Executor, TokenId, Tokenizer};
use crate::speculation::SlotDrafts;

/// The step's logits, as one sequence's sampler sees them.
pub(crate) trait Logits {
    /// Samples from `row` with the sequence's own sampler and logit adjustments, only
    /// among `mask`'s tokens.
    fn sample(&mut self, row: usize, mask: Option<&toktrie::SimpleVob>, adjust: Option<&LogitAdjust>) -> TokenId;
    /// `token`'s log-probability at `row` and the `top` most likely tokens'.
    fn logprobs(&self, row: usize, token: TokenId, top: usize) -> (f32, Vec<(TokenId, f32)>);
}

/// A slot's sampler over the executor's last decode.
pub(crate) struct SlotLogits<'a, E> {
    pub executor: &'a mut E,
    pub slot: usize,
}

impl<E: Executor> Logits for SlotLogits<'_, E> {
    fn sample(&mut self, row: usize, mask: Option<&toktrie::SimpleVob>, adjust: Option<&LogitAdjust>) -> TokenId {
        self.executor.sample(self.slot, row, mask, adjust)
    }

    fn logprobs(&self, row: usize, token: TokenId, top: usize) -> (f32, Vec<(TokenId, f32)>) {
        self.executor.logprobs(row, token, top)
    }
}

/// What decoding needs besides the sequence and its logits.
pub(crate) struct DecodeContext<'a> {
    pub tokenizer: &'a dyn Tokenizer,
    /// KV cells per sequence: a sequence that fills them ends at `length`.
    pub ctx_limit: u32,
    pub counters: &'a ConstraintCounters,
}

/// Picks `seq`'s next token from `row` and takes it in. `Ok(Some(reason))`: the sequence
/// is done; `Err`: its constraint failed (the request ends with an error, never a hang).
pub(crate) fn decode_next(
    seq: &mut Sequence,
    drafting: &mut SlotDrafts,
    row: usize,
    logits: &mut impl Logits,
    ctx: &DecodeContext,
) -> Result<Option<FinishReason>, String> {
    let predicted = drafting.predicted.take();
    let (token, finished) = sample_and_accept(seq, row, logits, ctx)?;
    if let Some(predicted) = predicted {
        // As if one token had been drafted.
        let kept = usize::from(predicted == token);
        drafting.acceptance.observe(1, kept);
    }
    Ok(finished)
}

fn sample_and_accept(
    seq: &mut Sequence,
    row: usize,
    logits: &mut impl Logits,
    ctx: &DecodeContext,
) -> Result<(TokenId, Option<FinishReason>), String> {
    let mask = seq.constraint_mask()?;
    let mut token = logits.sample(row, mask.as_ref(), seq.logit_adjust());
    if seq.constraint_refuses(token, ctx.tokenizer) {
        // Free text before a lazy grammar's trigger has no mask, and this token would open
        // the grammar and break it: drawn again among the tokens that would not. (Rejecting
        // and drawing again samples from the distribution without those tokens, as a mask
        // would.) A request never fails on a token the server let the model sample.
        let lazy = seq.lazy_constraint_mask()?;
        token = logits.sample(row, lazy.as_ref(), seq.logit_adjust());
        ctx.counters.record_resample();
    }
    if let Some(top) = seq.request().logprobs {
        let (logprob, top) = logits.logprobs(row, token, top as usize);
        seq.note_logprob(token_logprob(ctx.tokenizer, token, logprob, top));
    }
    Ok((token, seq.accept_token(token, ctx.tokenizer, ctx.ctx_limit, ctx.counters)?))
}

/// What verifying a sequence's drafts found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Verified {
    pub finished: Option<FinishReason>,
    pub drafted: usize,
    /// Drafted tokens the model kept (their KV stays).
    pub accepted: usize,
}

/// Walks the rows from `first_row` (the last generated token's) through one per draft:
/// samples each as if it were the only row, with the sequence's own sampler, and goes on
/// while the sample equals the draft fed at the next position. The first sample that
/// differs (or the one after the last draft) is the step's new token, as in plain
/// decoding. Sampling every row exactly as plain decoding would, one draw each, keeps the
/// output the target's: greedy output is unchanged, and with temperature a drafted token is
/// kept with the probability the model gives it, otherwise the sample drawn instead stands
/// (speculative sampling's rule for a draft of probability one). The sequence counts the
/// kept drafts' cells; the caller drops the KV of the others.
pub(crate) fn verify(
    seq: &mut Sequence,
    drafting: &mut SlotDrafts,
    first_row: usize,
    logits: &mut impl Logits,
    ctx: &DecodeContext,
) -> Result<Verified, String> {
    let drafts = std::mem::take(&mut drafting.drafts);
    let mut verified = Verified { finished: None, drafted: drafts.len(), accepted: 0 };
    for (i, row) in (first_row..=first_row + drafts.len()).enumerate() {
        let generated = seq.generated();
        let (token, finished) = sample_and_accept(seq, row, logits, ctx)?;
        let kept = drafts.get(i) == Some(&token);
        if kept {
            // The draft fed at the next position was this very token: its KV is right.
            seq.keep_draft();
            verified.accepted += 1;
        }
        // Tokens a constraint forced after this one take the positions the later drafts
        // were fed at: those rows saw another sequence, and the forced tokens go next step.
        let forced = seq.generated() > generated + 1;
        if finished.is_some() || !kept || forced {
            verified.finished = finished;
            break;
        }
    }
    drafting.acceptance.observe(verified.drafted, verified.accepted);
    Ok(verified)
}

/// A token's log-probability with its alternatives, their bytes attached.
pub(crate) fn token_logprob(
    tokenizer: &dyn Tokenizer,
    token: TokenId,
    logprob: f32,
    top: Vec<(TokenId, f32)>,
) -> TokenLogprob {
    let bytes = |t: TokenId| {
        let mut out = Vec::new();
        tokenizer.append_token_bytes(t, &mut out);
        out
    };
    let top = top.into_iter().map(|(t, logprob)| TopLogprob { token: t, bytes: bytes(t), logprob }).collect();
    TokenLogprob { token, bytes: bytes(token), logprob, top }
}
