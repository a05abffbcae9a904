//! The batch one step computes: a decode row for every generating sequence (its last
//! token, and any tokens its constraint forced), then prompt tokens of sequences still
//! prefilling, up to the step's token budget; a prompt's last chunk is followed by the
//! tokens its constraint forces first, or by a call's opening as drafts
//! (`Sequence::opening_drafts`). Which prompts get budget is
//! `prefill_plan`'s choice (fewest tokens left first, the oldest waiting at most about its
//! own prefill for shorter ones); where the runtime computes a wider prefill faster, a
//! completing prefill is widened.

use std::collections::VecDeque;

use super::layout::StepLayout;
use crate::cost::prefill_plan::PrefillPlanner;
use crate::request::sequence::Sequence;
use crate::runtime::{BatchToken, Executor};
use crate::speculation::Drafter;
use crate::stats::EngineStats;

/// How much of a step the generating sequences take and what is left for prompts, decided
/// by the scheduler before the batch is laid out.
pub(super) struct StepSizing<'a> {
    /// Rows the generating sequences feed (`StepBatch::generating_rows`).
    pub generating_rows: usize,
    /// Prompt tokens allowed beside them (the TPOT objective's budget; `usize::MAX` for none).
    pub prefill_cap: usize,
    /// What a step costs in prompt tokens: a second prompt joins only if cheaper (`prefill_plan`).
    pub join_below: usize,
    /// Slots in admission order: the order prompts get the budget in.
    pub admission_order: &'a VecDeque<usize>,
}

pub(super) struct StepBatch {
    pub tokens: Vec<BatchToken>,
    /// (slot, batch index) of every batch entry whose logits get sampled.
    pub outputs: Vec<(usize, usize)>,
    /// (slot, batch index, position) of prompt tokens whose logits score the next prompt
    /// token, for requests that score their prompt.
    pub prompt_rows: Vec<(usize, usize, usize)>,
    /// Prompt tokens each slot prefills this step.
    prefill_take: Vec<usize>,
    /// (slot, prompt tokens left) of the prefilling slots in admission order, this step.
    prompts_left: Vec<(usize, usize)>,
    planner: PrefillPlanner,
    /// Tokens a step computes, widened prefills aside: bounds how long it stalls streams.
    step_budget: usize,
    /// Tokens one decode call accepts.
    batch_limit: usize,
    /// The rows beyond each generating sequence's one: forced tokens and drafts.
    pub layout: StepLayout,
}

impl StepBatch {
    pub fn new(slots: usize, batch_limit: usize, ubatch_rows: usize, step_budget: usize) -> Self {
        Self {
            tokens: Vec::with_capacity(batch_limit),
            outputs: Vec::with_capacity(slots),
            prompt_rows: Vec::new(),
            prefill_take: vec![0; slots],
            prompts_left: Vec::with_capacity(slots),
            planner: PrefillPlanner::default(),
            step_budget: step_budget.clamp(1, batch_limit),
            batch_limit,
            layout: StepLayout::new(slots, ubatch_rows),
        }
    }

    /// How many passes over the weights the runtime makes of this step's batch.
    pub fn passes(&mut self) -> usize {
        self.layout.passes(&self.tokens)
    }

    pub fn step_budget(&self) -> usize {
        self.step_budget
    }

    /// Prompt tokens in the batch.
    pub fn prefilled(&self) -> usize {
        self.prefill_take.iter().sum()
    }

    /// Room for drafted tokens this step: what the step budget leaves after one row per
    /// generating sequence's fed tokens and every prompt token waiting to be prefilled.
    /// Prompts come first: a draft only shortens a running stream, while a prompt held
    /// back delays a first token, and under load the queue behind it (with half the room
    /// for drafts while prompts waited, recurring prompts past capacity had TTFT p50 9.3 s
    /// against 5.6 s without speculation).
    pub fn draft_budget(&self, slots: &[Option<Sequence>]) -> usize {
        let rows: usize = slots.iter().flatten().map(|s| s.uncached_generated().len()).sum();
        let prompts: usize = slots
            .iter()
            .flatten()
            .filter(|s| s.is_prefilling() && !s.awaits_fork())
            .map(|s| s.prompt_left().len())
            .sum();
        self.step_budget.saturating_sub(rows + prompts)
    }

    /// Rows the generating sequences feed this step: each its last token, and any tokens its
    /// constraint forced (those not held for a later step) or drafts to verify.
    pub fn generating_rows(&self, slots: &[Option<Sequence>], drafter: &Drafter) -> usize {
        let fed = |(slot, seq): (usize, &Sequence)| seq.fed_generated(self.layout.held(slot)).len();
        let rows: usize = slots.iter().enumerate().filter_map(|(i, s)| s.as_ref().map(|s| (i, s))).map(fed).sum();
        rows + drafter.drafted()
    }

    /// Fills the batch for this step.
    ///
    /// Which prompts get prefill budget is `prefill_plan`'s choice, but the batch itself is
    /// laid out in slot order: with one KV stream per sequence, llama.cpp splits a batch
    /// into one ubatch (one pass over the weights) per run of consecutive sequence ids in
    /// batch order, so admission order would cost a pass per out-of-order run.
    pub fn plan<E: Executor>(
        &mut self,
        slots: &mut [Option<Sequence>],
        drafter: &mut Drafter,
        executor: &mut E,
        stats: &EngineStats,
        sizing: &StepSizing<'_>,
    ) {
        self.tokens.clear();
        self.outputs.clear();
        self.prompt_rows.clear();
        let generating = sizing.generating_rows;
        let mut budget = self.step_budget.saturating_sub(generating);
        if generating > 0 {
            budget = budget.min(sizing.prefill_cap);
        }
        self.prefill_take.iter_mut().for_each(|n| *n = 0);
        self.prompts_left.clear();
        for &slot in sizing.admission_order {
            let Some(seq) = slots[slot].as_ref().filter(|s| s.is_prefilling() && !s.awaits_fork()) else { continue };
            self.prompts_left.push((slot, seq.prompt_left().len()));
        }
        self.planner.plan(budget, &self.prompts_left, sizing.join_below, &mut self.prefill_take);
        self.widen_prefills(slots, executor, stats, generating);
        // What one decode call still takes after the planned rows: room for forced tokens
        // and a call's opening.
        let mut room = self.batch_limit.saturating_sub(generating + self.prefilled());
        for (slot, seq) in slots.iter_mut().enumerate() {
            let Some(seq) = seq else { continue };
            if seq.is_prefilling() {
                room -= self.prefill_rows(slot, seq, drafter, executor.ctx_per_sequence(), room);
            } else {
                self.decode_rows(slot, seq, drafter.drafts(slot));
            }
        }
    }

    /// A prefilling sequence's rows: this step's chunk of its prompt and, where the chunk
    /// completes it, what is fed after it (the tokens its constraint forces first, or a
    /// call's opening as drafts), within `room`: rows beyond the planned ones. Returns the
    /// rows of `room` it took.
    fn prefill_rows(
        &mut self,
        slot: usize,
        seq: &mut Sequence,
        drafter: &mut Drafter,
        ctx_limit: u32,
        room: usize,
    ) -> usize {
        let take = self.prefill_take[slot];
        let completes_prompt = take > 0 && take == seq.prompt_left().len();
        // The tokens its constraint forces first go with the prompt's last chunk, and the
        // output row is the last of them; without room they are forced one at a time.
        if completes_prompt && seq.start_forced().len() > room {
            seq.drop_start_forced();
        }
        let forced = if completes_prompt { seq.start_forced().len() } else { 0 };
        // A scored prompt has nothing forced after it (`Sequence::find_start_forced`).
        let scored = seq.request().prompt_logprobs.is_some();
        let fed = seq.prompt_left()[..take].iter().chain(&seq.start_forced()[..forced]);
        for (i, &token) in fed.enumerate() {
            let sampled = completes_prompt && i + 1 == take + forced;
            let pos = seq.cached() + i as u32;
            if sampled {
                self.outputs.push((slot, self.tokens.len()));
            }
            if scored {
                self.prompt_rows.push((slot, self.tokens.len(), pos as usize));
            }
            self.tokens.push(BatchToken { token, pos, seq: slot, logits: sampled || scored });
        }
        let opening = if completes_prompt && forced == 0 { seq.opening_drafts(ctx_limit) } else { Vec::new() };
        if opening.is_empty() || opening.len() > room - forced {
            return forced;
        }
        let from = seq.cached() + take as u32;
        for (i, &token) in opening.iter().enumerate() {
            self.tokens.push(BatchToken { token, pos: from + i as u32, seq: slot, logits: true });
        }
        let rows = forced + opening.len();
        drafter.open_with(slot, opening);
        rows
    }

    /// A generating sequence's rows: its fed tokens, the last generated one's row the
    /// output, then each draft's row, for `decode::verify` to walk. With forced tokens held
    /// for a later step, nothing is sampled: the next token is already known.
    fn decode_rows(&mut self, slot: usize, seq: &Sequence, drafts: &[crate::runtime::TokenId]) {
        let held = self.layout.held(slot);
        let tokens = seq.fed_generated(held);
        let samples = held == 0;
        for (i, &token) in tokens.iter().chain(drafts).enumerate() {
            if samples && i + 1 == tokens.len() {
                self.outputs.push((slot, self.tokens.len()));
            }
            let logits = samples && i + 1 >= tokens.len();
            self.tokens.push(BatchToken { token, pos: seq.cached() + i as u32, seq: slot, logits });
        }
    }

    /// Widens this step's prefills where the runtime computes a wider one faster
    /// (`Executor::prefill_width`), by computing some of their cached prompt tokens again.
    /// Only a prefill that completes its prompt is widened (a chunk the budget cut short
    /// goes on next step anyway), and only as far as one decode call accepts.
    fn widen_prefills<E: Executor>(
        &mut self,
        slots: &mut [Option<Sequence>],
        executor: &mut E,
        stats: &EngineStats,
        decode_tokens: usize,
    ) {
        let prefilling = self.prefill_take.iter().filter(|&&n| n > 0).count();
        // The batch must stay within what one decode call accepts.
        let mut room = self.batch_limit.saturating_sub(decode_tokens + self.prefilled());
        for (slot, take) in self.prefill_take.iter_mut().enumerate() {
            let Some(seq) = slots[slot].as_mut() else { continue };
            if *take == 0 || *take < seq.prompt_left().len() {
                continue;
            }
            let cached = seq.cached() as usize;
            let width = executor.prefill_width(cached, *take, prefilling > 1).clamp(*take, *take + cached);
            let extra = width - *take;
            if extra > 0 && extra <= room {
                let hits_lost = seq.rewind_prompt(extra as u32);
                executor.truncate_sequence(slot, seq.cached());
                stats.record_prefix_recomputed(hits_lost as usize);
                *take = width;
                room -= extra;
            }
        }
    }
}
