//! Sequences leaving their slots (finished, failed, cancelled) or starting over, and what
//! the engine thread publishes after each step: occupancy, progress, the wait forecast.

use std::sync::Arc;

use super::Scheduler;
use crate::cost::wait_forecast::SlotLoad;
use crate::runtime::Executor;
use rillm_backend::FinishReason;

impl<E: Executor> Scheduler<E> {
    /// The sequence in `slot` ends with `reason`: its final event goes out, its cells stay
    /// as reusable prefix cache (unless the decode failed), and the choices waiting for its
    /// prompt end with it.
    pub(super) fn release(&mut self, slot: usize, reason: FinishReason, error: Option<String>) {
        let Some(seq) = self.running.take(slot) else { return };
        self.executor.end_sequence(slot);
        // After a failed decode the KV contents are not to be trusted.
        let failed = reason == FinishReason::Error;
        self.kv.release(&mut self.executor, slot, seq.kv_tokens().collect(), failed);
        self.queue.finish_one();
        let (id, first_choice) = (seq.request().id, seq.request().index == 0);
        let forks = self.choices.release(slot);
        let ended_on_its_own = matches!(reason, FinishReason::Eos | FinishReason::Stop | FinishReason::Length);
        if ended_on_its_own {
            self.drafter.learn_from(&seq);
        }
        let completion = seq.finish(reason, error.clone());
        if ended_on_its_own {
            self.costs.wait.observe_completion(completion.usage.completion_tokens);
        }
        tracing::debug!(id, reason = reason.as_str(), tokens = completion.usage.completion_tokens, "sequence released");
        // A request's prompt counts once, however many choices it has.
        self.stats.record_finished(
            if first_choice { completion.usage.prompt_tokens } else { 0 },
            completion.usage.completion_tokens,
            reason == FinishReason::Cancelled,
        );
        for fork in forks {
            self.release(fork, reason, error.clone());
        }
    }

    /// Starts a sequence's output again under its constraint's restart (its caller asked):
    /// the cells of what it generated go, the prompt's stay.
    pub(super) fn restart(&mut self, slot: usize) {
        let ctx_limit = self.executor.ctx_per_sequence();
        let Some(seq) = self.running[slot].as_mut() else { return };
        let Some(restart) = seq.restart(self.tokenizer.as_ref(), ctx_limit, &self.stats.constraints) else { return };
        self.executor.truncate_sequence(slot, restart.keep);
        self.drafter.slot_mut(slot).drafts.clear();
        tracing::debug!(id = seq.request().id, index = seq.request().index, "output restarted");
        match restart.finished {
            Ok(None) => {}
            Ok(Some(reason)) => self.release(slot, reason, None),
            Err(error) => self.end_at_constraint_failure(slot, error),
        }
    }

    /// A constrained output that cannot go on (only the constraint fails there). Every token
    /// a sequence takes passed its grammar's mask or the lazy check first, so this is an
    /// engine bug: logged with the grammar's message (it names the tokens), counted, and
    /// the reply ends as cleanly as it can: the text so far, `stop`, no opaque error.
    pub(super) fn end_at_constraint_failure(&mut self, slot: usize, error: String) {
        self.stats.constraints.record_failure();
        if let Some(seq) = self.running[slot].as_mut() {
            let recent = seq.recent_tokens(16);
            let (id, generated) = (seq.request().id, seq.generated());
            tracing::warn!(id, generated, ?recent, %error, "constraint failed; the reply ends here");
            seq.flush_text();
        }
        self.release(slot, FinishReason::Stop, None);
    }

    /// The decode failed: every running sequence ends with the error.
    pub(super) fn fail_all(&mut self, error: &str) {
        tracing::error!(%error, rows = self.batch.tokens.len(), "decode failed");
        let slots: Vec<usize> = self.running.order().iter().copied().collect();
        for slot in slots {
            self.release(slot, FinishReason::Error, Some(error.to_string()));
        }
    }

    pub(super) fn cancel_all(&mut self) {
        for slot in 0..self.running.len() {
            self.release(slot, FinishReason::Cancelled, None);
        }
        for request in self.queue.close() {
            self.stats.record_finished(request.prompt.len() as u32, 0, true);
            request.finish_unstarted(FinishReason::Cancelled, None);
        }
    }

    pub(super) fn publish(&mut self, busy: bool) {
        let (mut used, mut cached) = (0u64, 0u64);
        for (slot, seq) in self.running.iter().enumerate() {
            let cells = u64::from(self.executor.sequence_cells(slot));
            if seq.is_some() {
                used += cells;
            } else {
                cached += cells;
            }
        }
        self.stats.set_occupancy(self.running.count(), self.queue.len(), used, cached);
        // Before the step too, like the counts: a caller that sees its first token must
        // find the slot it took already counted in the next request's predicted wait.
        self.publish_forecast();
        self.stats.mark_progress(busy);
    }

    /// Publishes each slot's load for the wait forecast, with the prefixes held in KV when
    /// they changed and the forecast uses them.
    fn publish_forecast(&mut self) {
        let changed = self.kv.take_changed();
        let held_blocks =
            (self.costs.wait.publish_prefixes && changed).then(|| Arc::new(self.kv.held_blocks(&self.running)));
        let loads = self.running.iter().map(|seq| {
            seq.as_ref().map(|seq| SlotLoad {
                prompt_left: seq.prompt_left().len(),
                generated: seq.generated(),
                max_tokens: seq.request().max_tokens,
            })
        });
        self.costs.wait.publish(self.costs.step.costs(), loads, held_blocks);
    }
}
