//! A step's phases: propose (drafts offered, every sequence's extra rows laid out), plan
//! (the batch), decode (computed, its cost measured), verify (each output row sampled,
//! drafts kept or dropped, finished sequences released).

use std::time::Instant;

use super::batch::StepSizing;
use super::decode::{decode_next, verify, DecodeContext, SlotLogits};
use super::Scheduler;
use crate::cost::tpot_budget;
use crate::runtime::{Executor, RuntimeError};
use crate::speculation::draft_lengths::PassRules;
use crate::speculation::DraftStep;
use rillm_backend::FinishReason;

impl<E: Executor> Scheduler<E> {
    /// Whether this step gives some request its first token: its prompt's last chunk fits.
    pub(super) fn first_token_due(&self) -> bool {
        let budget = self.batch.step_budget();
        self.running.iter().flatten().any(|s| s.is_prefilling() && !s.awaits_fork() && s.prompt_left().len() <= budget)
    }

    /// The drafter offers drafts and the step's layout chooses, with the tokens grammars
    /// forced, how many rows each sequence feeds; then the chosen drafts are made. Requests
    /// waiting for a slot mean the server is saturated: every row then goes to sequences
    /// already running, where a draft costs about a token's compute and is not always
    /// kept, so nothing is drafted until the queue empties (vLLM turns speculation off by
    /// batch size). Nor is anything drafted in a step that gives a request its first token:
    /// verification rows would hold it back; the running streams draft again a step later.
    /// Returns whether the fairness guard cut drafts.
    pub(super) fn propose(&mut self, first_token_due: bool) -> bool {
        let lookups = self.drafter.enabled() && self.queue.is_empty() && !first_token_due;
        let rules = PassRules {
            ubatch_rows: self.batch.layout.ubatch_rows(),
            attention_tile: self.executor.attention_tile_rows(),
        };
        let prices = self.costs.step.row_costs();
        let budget = self.batch.draft_budget(&self.running);
        let step = DraftStep { prices, ctx_limit: self.executor.ctx_per_sequence(), budget, rules };
        self.drafter.offer(&mut self.running, step, lookups, &mut self.batch.layout.offers);
        let bounds = step.bounds(self.drafter.pass_ms(&self.executor), self.drafter.guard());
        let guard_cut = self.batch.layout.lay_out(&self.running, prices, bounds);
        let (offers, lengths) = (&self.batch.layout.offers, self.batch.layout.lengths());
        self.drafter.take(&mut self.running, &mut self.executor, step, offers, lengths);
        if guard_cut {
            self.stats.record_guard_cut();
        }
        guard_cut
    }

    /// Lays the batch out: the generating sequences' rows, then prompt chunks within the
    /// step's budget (under the TPOT objective, what the streams' slack allows).
    pub(super) fn plan(&mut self) {
        let generating = self.batch.generating_rows(&self.running, &self.drafter);
        let cap = tpot_budget::prefill_cap(&self.running, generating, &self.costs.step, self.costs.tpot_slo_ms);
        self.costs.wait.set_prefill_cap(cap.steady);
        let (slots, admission_order) = self.running.with_order();
        let sizing = StepSizing {
            generating_rows: generating,
            prefill_cap: cap.tokens,
            join_below: self.costs.step.step_in_prompt_tokens(generating),
            admission_order,
        };
        self.batch.plan(slots, &mut self.drafter, &mut self.executor, &self.stats, &sizing);
    }

    /// Runs the batch and learns what it cost; after it, each sequence's cells hold what
    /// was fed (drafts aside until verified).
    pub(super) fn decode(&mut self, first_token_due: bool, guard_cut: bool) -> Result<(), RuntimeError> {
        let started = Instant::now();
        let decoded = self.executor.decode(&self.batch.tokens);
        let took_ms = started.elapsed().as_secs_f64() * 1000.0;
        let (rows, prefilled, drafted) = (self.batch.tokens.len(), self.batch.prefilled(), self.drafter.drafted());
        let passes = self.observe_step(took_ms);
        tracing::trace!(
            rows,
            sequences = self.batch.outputs.len(),
            passes,
            drafted,
            prefilled,
            first_token_due,
            guard_cut,
            queued = !self.queue.is_empty(),
            decode_ms = took_ms,
            "step"
        );
        decoded?;
        self.stats.record_prompt_computed(prefilled);
        for entry in &self.batch.tokens {
            if let Some(seq) = self.running[entry.seq].as_mut() {
                seq.fed_through(entry.pos);
            }
        }
        // Drafts are in KV but not yet the sequence's: `verify` counts the ones it keeps.
        for (slot, drafts) in self.drafter.fed_counts() {
            if let Some(seq) = self.running[slot].as_mut() {
                seq.unverified(drafts);
            }
        }
        // Held forced tokens wait for the next step's layout.
        self.batch.layout.clear_held();
        Ok(())
    }

    /// What the step of `took_ms` says of step costs; its number of passes. Decode-only
    /// steps made in one pass price drafts by their row count (a step of several passes
    /// costs what its passes do: `ubatch_passes`); the wait forecast learns from steps
    /// without drafts; the step counts against the time per output token of every
    /// sequence past its first.
    fn observe_step(&mut self, took_ms: f64) -> usize {
        let (rows, prefilled, drafted) = (self.batch.tokens.len(), self.batch.prefilled(), self.drafter.drafted());
        let passes = self.batch.passes();
        if prefilled == 0 && passes == 1 {
            self.costs.step.observe_decode_rows(rows, took_ms);
        }
        if drafted == 0 {
            self.costs.step.observe_step(took_ms, rows - prefilled, prefilled);
        }
        // Pending KV copies were carried out at the start of this decode.
        self.kv.copies_done();
        let step_ms = self.costs.step.step_took_ms(took_ms, rows - prefilled, prefilled);
        for seq in self.running.iter_mut().flatten() {
            seq.add_decode_time(step_ms);
        }
        passes
    }

    /// Samples each output row of the step: prompts scored, choices forked, then every
    /// sequence's next token (its drafts verified); releases the ones that end.
    pub(super) fn verify(&mut self) {
        self.choices.score(&self.running, &self.executor, self.tokenizer.as_ref(), &self.batch.prompt_rows);
        self.choices.fork(&mut self.running, &mut self.executor, &mut self.kv, &mut self.batch.outputs);
        for i in 0..self.batch.outputs.len() {
            let (slot, row) = self.batch.outputs[i];
            match self.take_output(slot, row) {
                Ok(None) => {}
                Ok(Some(reason)) => self.release(slot, reason, None),
                Err(error) => self.end_at_constraint_failure(slot, error),
            }
        }
    }

    /// Slot `slot`'s output row `row`: its prompt scores sent once the prompt is done, the
    /// tokens its constraint forced at the start taken, then its next token sampled (or its
    /// drafts verified). The finish reason where it ends.
    fn take_output(&mut self, slot: usize, row: usize) -> Result<Option<FinishReason>, String> {
        let ctx_limit = self.executor.ctx_per_sequence();
        let Some(seq) = self.running[slot].as_mut() else { return Ok(None) };
        let request = seq.request();
        if request.prompt_logprobs.is_some() && request.index == 0 && seq.is_prefilling() {
            seq.send_prompt_scores(self.choices.take_scores(slot), self.tokenizer.as_ref());
        }
        // Scoring a prompt without generating (`max_tokens` 0): done once it is computed.
        if seq.request().max_tokens == 0 {
            return Ok(Some(FinishReason::Length));
        }
        if !seq.start_forced().is_empty() {
            // The step fed them after its prompt: its first output tokens.
            if let Some(reason) =
                seq.accept_start_forced(self.tokenizer.as_ref(), ctx_limit, &self.stats.constraints)?
            {
                // Cells of forced tokens after the one that ended it hold nothing of its.
                let kept = seq.request().prompt.len() as u32 + seq.generated();
                if seq.cached() > kept {
                    seq.truncate(kept);
                    self.executor.truncate_sequence(slot, kept);
                }
                return Ok(Some(reason));
            }
        }
        self.sample(slot, row)
    }

    /// Slot `slot`'s next token from `row`, and its drafts verified where it fed some.
    fn sample(&mut self, slot: usize, row: usize) -> Result<Option<FinishReason>, String> {
        let ctx_limit = self.executor.ctx_per_sequence();
        let Some(seq) = self.running[slot].as_mut() else { return Ok(None) };
        let ctx = DecodeContext { tokenizer: self.tokenizer.as_ref(), ctx_limit, counters: &self.stats.constraints };
        let mut logits = SlotLogits { executor: &mut self.executor, slot };
        let drafting = self.drafter.slot_mut(slot);
        let opening = drafting.opening;
        let finished = if drafting.drafts.is_empty() {
            decode_next(seq, drafting, row, &mut logits, &ctx)?
        } else {
            let verified = verify(seq, drafting, row, &mut logits, &ctx)?;
            if verified.accepted < verified.drafted {
                // The rejected drafts' cells go; the next token is fed where they began.
                self.executor.truncate_sequence(slot, seq.cached());
            }
            if !opening {
                self.stats.record_speculation(verified.drafted, verified.accepted);
            }
            verified.finished
        };
        if let Some((predicted_ms, waited_ms)) = seq.take_forecast_outcome() {
            tracing::debug!(id = seq.request().id, predicted_ms, waited_ms, "first-token wait against its forecast");
        }
        Ok(finished)
    }
}
