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

use crate::draft_acceptance::DraftSource;
use crate::draft_lengths::{self, DraftOption};
use crate::runtime::{DraftWant, Executor, TokenId};
use crate::sequence::Sequence;
use crate::speculate::{priced_draft_len, DraftStep};

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
    /// Per slot: rows fed anyway, what it could draft or had forced, how many it may
    /// draft (0: not a drafting sequence this step), the lengths chosen. Reused buffers.
    base: Vec<usize>,
    options: Vec<Option<DraftOption>>,
    rooms: Vec<usize>,
    lengths: Vec<usize>,
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
        Self {
            min_draft: min_draft.min(max_draft),
            max_draft,
            histories: Vec::new(),
            base: Vec::new(),
            options: Vec::new(),
            rooms: Vec::new(),
            lengths: Vec::new(),
        }
    }

    /// Sets each generating sequence's drafts for the next step from `executor`'s draft
    /// model, as deep as pays given the step's layout and the measured pass time, within
    /// `step.budget` drafted rows in all; and how many of its forced tokens each feeds. A
    /// failed draft model drafts nothing this step. Returns whether the fairness guard cut
    /// drafts that would otherwise have been fed.
    pub fn propose<E: Executor>(&mut self, slots: &mut [Option<Sequence>], executor: &mut E, step: DraftStep) -> bool {
        let Some(pass_ms) = executor.draft_pass_ms() else { return false };
        let DraftStep { prices, ctx_limit, budget, .. } = step;
        let rows: usize = slots.iter().flatten().map(|s| s.uncached_generated().len()).sum();
        let (base, options, rooms) = (&mut self.base, &mut self.options, &mut self.rooms);
        base.clear();
        options.clear();
        rooms.clear();
        for slot in slots.iter_mut() {
            let Some(seq) = slot.as_mut() else {
                base.push(0);
                options.push(None);
                rooms.push(0);
                continue;
            };
            seq.drafts.clear();
            seq.predicted = None;
            let uncached = seq.uncached_generated().len();
            if uncached > 1 {
                // The last sampled token, then the ones its constraint forced after it.
                base.push(1);
                options.push(Some(DraftOption::forced(uncached - 1)));
                rooms.push(0);
                continue;
            }
            base.push(uncached);
            let room = if uncached == 1 { seq.draft_room(ctx_limit).min(budget).min(self.max_draft) } else { 0 };
            rooms.push(room);
            if room > 0 {
                seq.acceptance.source = DraftSource::Model;
            }
            // What drafting saves is priced against a one-row step: until one is measured,
            // only minimum drafts and probes run (and their steps measure it).
            let priced = room > 0 && prices.one_row_measured();
            options.push(priced.then(|| DraftOption::drafted(room, seq.acceptance.current())));
        }
        let cut = draft_lengths::choose(base, options, prices, step.bounds(pass_ms), &mut self.lengths);
        let mut left = budget.saturating_sub(draft_lengths::drafted_rows(options, &self.lengths));
        let mut plans = Vec::new();
        for (slot, seq) in slots.iter_mut().enumerate() {
            let Some(seq) = seq else { continue };
            let chosen = self.lengths[slot];
            if let Some(option) = options[slot].filter(|o| o.forced) {
                seq.held_forced = option.available - chosen;
                continue;
            }
            let room = rooms[slot];
            if room == 0 {
                continue;
            }
            // A minimum draft, where the user set one, from what the budget has left.
            let extra = self.min_draft.min(room).saturating_sub(chosen).min(left);
            left -= extra;
            let feed = chosen + extra;
            // A probe's draft model first takes in every token since its last call, about
            // another pass per token: probing is worth it only where drafting would pay even so.
            let probe =
                seq.generated % PROBE_EVERY == 0 && priced_draft_len(room, 1.0, rows, prices, 2.0 * pass_ms) > 0;
            if feed == 0 && !probe {
                continue;
            }
            plans.push(Plan { slot, asked: feed.max(1), feed });
        }
        if plans.is_empty() {
            return cut;
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
                return cut;
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
        cut
    }
}
