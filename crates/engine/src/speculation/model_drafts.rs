//! Speculative decoding with a draft model (`--speculative draft`): a smaller model with the
//! target's vocabulary proposes each generating sequence's next tokens greedily
//! (`Executor::draft`), and the step verifies them as it does prompt lookup's
//! (`scheduler::decode::verify`), so the output stays the target's.
//!
//! Unlike a lookup, a model's draft costs time before the step: a pass of the draft model
//! per drafted position (the drafting sequences share each pass). That time is measured
//! (`Executor::draft_pass_ms`) and priced beside what the step's layout costs the target
//! (`draft_lengths`, which chooses every sequence's length together, as for lookups, and
//! lays out tokens constraints forced the same way). A sequence whose acceptance says
//! drafting does not pay is still asked for one token every `PROBE_EVERY` steps, which
//! keeps the estimate current; where drafting could not pay even if every token were kept
//! (a draft model not much cheaper than its target), the draft model is not asked at all:
//! it would have to take in every token the sequence generates.

use super::acceptance::DraftSource;
use super::draft_lengths::{self, DraftOption};
use super::lookup::priced_draft_len;
use super::state::{DraftStep, SlotDrafts};
use crate::cost::step_costs::DraftPrices;
use crate::request::sequence::Sequence;
use crate::runtime::{DraftWant, Executor, TokenId};

/// A sequence that drafts nothing asks the draft model for one token in this many steps.
const PROBE_EVERY: u32 = 8;

/// A draft model's side of the drafter.
pub(crate) struct ModelDrafts {
    /// Tokens asked for a sequence in a step: at least `min` (while room is left), at
    /// most `max`; in between as the prices say.
    min_draft: usize,
    max_draft: usize,
    /// The drafting sequences' histories (buffers reused across steps).
    histories: Vec<Vec<TokenId>>,
    /// Per slot, how many it may draft this step (0: not a drafting sequence).
    rooms: Vec<usize>,
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
        Self { min_draft: min_draft.min(max_draft), max_draft, histories: Vec::new(), rooms: Vec::new() }
    }

    /// A new step: no slot drafts until offered.
    pub fn begin(&mut self, slots: usize) {
        self.rooms.clear();
        self.rooms.resize(slots, 0);
    }

    /// What slot `slot` (with `room` for drafts) is offered: its room at its acceptance.
    /// What drafting saves is priced against a one-row step: until one is measured, only
    /// minimum drafts and probes run (and their steps measure it).
    pub fn offer(
        &mut self,
        slot: usize,
        state: &mut SlotDrafts,
        room: usize,
        prices: DraftPrices,
    ) -> Option<DraftOption> {
        let room = room.min(self.max_draft);
        self.rooms[slot] = room;
        state.acceptance.source = DraftSource::Model;
        prices.one_row_measured().then(|| DraftOption::drafted(room, state.acceptance.current()))
    }

    /// Drafts what the layout chose (`lengths`, per slot), topped up to the minimum where
    /// the budget leaves room, and a probe token for sequences that draft nothing every
    /// `PROBE_EVERY` steps. A failed draft model drafts nothing this step.
    pub fn take<E: Executor>(
        &mut self,
        seqs: &mut [Option<Sequence>],
        states: &mut [SlotDrafts],
        executor: &mut E,
        step: DraftStep,
        options: &[Option<DraftOption>],
        lengths: &[usize],
    ) {
        let Some(pass_ms) = executor.draft_pass_ms() else { return };
        let plans = self.plans(seqs, step, options, lengths, pass_ms);
        if plans.is_empty() {
            return;
        }
        self.histories.resize_with(plans.len(), Vec::new);
        for (history, plan) in self.histories.iter_mut().zip(&plans) {
            if let Some(seq) = &seqs[plan.slot] {
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
            let Some(seq) = seqs[plan.slot].as_mut() else { continue };
            // Under a constraint, only the part of the draft the grammar accepts can be kept.
            let tokens = &tokens[..seq.constraint_allows(&tokens)];
            let state = &mut states[plan.slot];
            if plan.feed == 0 {
                state.predicted = tokens.first().copied();
            } else {
                state.drafts.extend_from_slice(&tokens[..plan.feed.min(tokens.len())]);
            }
        }
    }

    /// Each drafting sequence's asking and feeding: the chosen length, a user's minimum
    /// draft from what the budget has left, or a probe.
    fn plans(
        &self,
        seqs: &[Option<Sequence>],
        step: DraftStep,
        options: &[Option<DraftOption>],
        lengths: &[usize],
        pass_ms: f64,
    ) -> Vec<Plan> {
        let rows: usize = seqs.iter().flatten().map(|s| s.uncached_generated().len()).sum();
        let mut left = step.budget.saturating_sub(draft_lengths::drafted_rows(options, lengths));
        let mut plans = Vec::new();
        for (slot, seq) in seqs.iter().enumerate() {
            let (Some(seq), room) = (seq, self.rooms.get(slot).copied().unwrap_or(0)) else { continue };
            if room == 0 {
                continue;
            }
            let chosen = if options[slot].is_some() { lengths[slot] } else { 0 };
            let extra = self.min_draft.min(room).saturating_sub(chosen).min(left);
            left -= extra;
            let feed = chosen + extra;
            // A probe's draft model first takes in every token since its last call, about
            // another pass per token: probing is worth it only where drafting would pay even so.
            let probe =
                seq.generated() % PROBE_EVERY == 0 && priced_draft_len(room, 1.0, rows, step.prices, 2.0 * pass_ms) > 0;
            if feed == 0 && !probe {
                continue;
            }
            plans.push(Plan { slot, asked: feed.max(1), feed });
        }
        plans
    }
}
