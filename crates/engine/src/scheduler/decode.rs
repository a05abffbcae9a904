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
    let Some((token, finished)) = sample_and_accept(seq, row, logits, ctx)? else { return Ok(None) };
    if let Some(predicted) = predicted {
        // As if one token had been drafted.
        let kept = usize::from(predicted == token);
        drafting.acceptance.observe(1, kept);
    }
    Ok(finished)
}

/// `None`: the output starts over as the answer (`Sequence::asks_restart`), nothing taken.
fn sample_and_accept(
    seq: &mut Sequence,
    row: usize,
    logits: &mut impl Logits,
    ctx: &DecodeContext,
) -> Result<Option<(TokenId, Option<FinishReason>)>, String> {
    let mut token = sample_constrained(seq, row, logits, ctx)?;
    if !seq.constraint_opens(token, ctx.tokenizer) {
        let Some(answer_token) = answer_instead(seq, row, logits, ctx)? else { return Ok(None) };
        token = answer_token;
    }
    if let Some(top) = seq.request().logprobs {
        let (logprob, top) = logits.logprobs(row, token, top as usize);
        seq.note_logprob(token_logprob(ctx.tokenizer, token, logprob, top));
    }
    Ok(Some((token, seq.accept_token(token, ctx.tokenizer, ctx.ctx_limit, ctx.counters)?)))
}

/// A token from `row` under the sequence's constraint.
fn sample_constrained(
    seq: &mut Sequence,
    row: usize,
    logits: &mut impl Logits,
    ctx: &DecodeContext,
) -> Result<TokenId, String> {
    let mask = seq.constraint_mask()?;
    let token = logits.sample(row, mask.as_ref(), seq.logit_adjust());
    if !seq.constraint_refuses(token, ctx.tokenizer) {
        return Ok(token);
    }
    // Free text before a lazy grammar's trigger has no mask, and this token would open the
    // grammar and break it: drawn again among the tokens that would not. (Rejecting and
    // drawing again samples from the distribution without those tokens, as a mask would.)
    // A request never fails on a token the server let the model sample.
    let lazy = seq.lazy_constraint_mask()?;
    ctx.counters.record_resample();
    Ok(logits.sample(row, lazy.as_ref(), seq.logit_adjust()))
}

/// Under calls or an answer (`Constraint::CallsOrAnswer`), the model's own token (drawn
/// without a mask, as `tool_choice: auto` without a format draws it) cannot open a call:
/// the reply is the answer. As its first token, the answer's own constraint takes over and
/// the token is drawn again under it; after tokens written towards a call's opening (`<`
/// of `<tool_response>`), the output starts over as the answer (`None`). Under a mask of
/// calls or the answer, such a model is made to open a call instead, and fills it with the
/// call it was just answered: a repeat the server drops and restarts, ~30 tokens of wait.
fn answer_instead(
    seq: &mut Sequence,
    row: usize,
    logits: &mut impl Logits,
    ctx: &DecodeContext,
) -> Result<Option<TokenId>, String> {
    ctx.counters.record_answer_chosen();
    if seq.constraint_started() {
        seq.ask_restart();
        return Ok(None);
    }
    seq.answer_without_calls();
    sample_constrained(seq, row, logits, ctx).map(Some)
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
        let Some((token, finished)) = sample_and_accept(seq, row, logits, ctx)? else { break };
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
    if !drafting.opening {
        drafting.acceptance.observe(verified.drafted, verified.accepted);
    }
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
