//! Speculative decoding with a draft model (`--speculative draft`): a smaller model with the
//! target's vocabulary proposes each generating sequence's next tokens greedily
//! (`Executor::draft`), and the step verifies them as it does prompt lookup's
//! (`scheduler::decode::verify`), so the output stays the target's.
//!
//! Unlike a lookup, a model's draft costs time before the step: a pass of the draft model
//! per drafted position (the drafting sequences share each pass). That time is measured
//! (`Executor::draft_pass_ms`) and priced into every sequence's draft length beside the
//! target's row costs (`speculate::priced_draft_len`). A sequence whose acceptance says
//! drafting does not pay is still asked for one token every `PROBE_EVERY` steps, which
//! keeps the estimate current; where drafting could not pay even if every token were kept
//! (a draft model not much cheaper than its target), the draft model is not asked at all:
//! it would have to take in every token the sequence generates.

use crate::draft_acceptance::DraftSource;
use crate::forecast::DraftPrices;
use crate::runtime::{DraftWant, Executor, TokenId};
use crate::sequence::Sequence;
use crate::speculate::priced_draft_len;

/// A sequence that drafts nothing asks the draft model for one token in this many steps.
const PROBE_EVERY: u32 = 8;

/// A draft model's side of the scheduler.
pub(crate) struct ModelDrafts {
    /// Tokens asked for a sequence in a step: at least `min` (while room is left), at
    /// most `max`; in between as the prices say.
    min_draft: usize,
    max_draft: usize,
    /// The drafting sequences' histories (buffers reused across steps).
    histories: Vec<Vec<TokenId>>,
}

/// One sequence's part of a step's drafting.
struct Plan {
    slot: usize,
    /// Tokens asked of the draft model.
    asked: usize,
    /// Tokens to feed: 0 for a probe, whose first token is only predicted.
    feed: usize,
}

impl ModelDrafts {
    pub fn new(min_draft: usize, max_draft: usize) -> Self {
        Self { min_draft: min_draft.min(max_draft), max_draft, histories: Vec::new() }
    }

    /// Sets each generating sequence's drafts for the next step from `executor`'s draft
    /// model, as deep as pays at this step's size and the measured pass time, within
    /// `budget` extra rows in all. A failed draft model drafts nothing this step.
    pub fn propose<E: Executor>(
        &mut self,
        slots: &mut [Option<Sequence>],
        executor: &mut E,
        prices: DraftPrices,
        ctx_limit: u32,
        mut budget: usize,
    ) {
        let Some(pass_ms) = executor.draft_pass_ms() else { return };
        let mut rows: usize = slots.iter().flatten().map(|s| s.uncached_generated().len()).sum();
        let mut plans = Vec::new();
        for (slot, seq) in slots.iter_mut().enumerate() {
            let Some(seq) = seq else { continue };
            seq.drafts.clear();
            seq.predicted = None;
            let room = seq.draft_room(ctx_limit).min(budget).min(self.max_draft);
            if room == 0 || seq.uncached_generated().len() != 1 {
                continue;
            }
            seq.acceptance.source = DraftSource::Model;
            // What drafting saves is priced against a one-row step: until one is measured,
            // only probes run (and their steps measure it).
            let priced = if prices.one_row_measured() {
                priced_draft_len(room, seq.acceptance.current(), rows, prices, pass_ms)
            } else {
                0
            };
            let feed = priced.max(self.min_draft.min(room));
            // A probe's draft model first takes in every token since its last call, about
            // another pass per token: probing is worth it only where drafting would pay even so.
            let probe =
                seq.generated % PROBE_EVERY == 0 && priced_draft_len(room, 1.0, rows, prices, 2.0 * pass_ms) > 0;
            if feed == 0 && !probe {
                continue;
            }
            budget -= feed;
            rows += feed;
            plans.push(Plan { slot, asked: feed.max(1), feed });
        }
        if plans.is_empty() {
            return;
        }
        self.histories.resize_with(plans.len(), Vec::new);
        for (history, plan) in self.histories.iter_mut().zip(&plans) {
            if let Some(seq) = &slots[plan.slot] {
                seq.history_into(history);
            }
        }
        let wants: Vec<DraftWant> = plans
            .iter()
            .zip(&self.histories)
            .map(|(plan, history)| DraftWant { seq: plan.slot, history, count: plan.asked })
            .collect();
        let drafted = match executor.draft(&wants) {
            Ok(drafted) => drafted,
            Err(error) => {
                tracing::warn!(%error, "the draft model failed: nothing drafted this step");
                return;
            }
        };
        for (plan, tokens) in plans.iter().zip(drafted) {
            let Some(seq) = slots[plan.slot].as_mut() else { continue };
            // Under a constraint, only the part of the draft the grammar accepts can be kept.
            let tokens = &tokens[..seq.constraint_allows(&tokens)];
            if plan.feed == 0 {
                seq.predicted = tokens.first().copied();
            } else {
                seq.drafts.extend_from_slice(&tokens[..plan.feed.min(tokens.len())]);
            }
        }
    }
}
