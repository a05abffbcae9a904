//! Requests that are more than one stream of tokens: `n` choices from one prompt, and
//! prompts scored token by token. Apart from the batching loop because both change what a
//! prefill produces: a KV state that several sequences continue, or a score per prompt row.
//!
//! A request for `n` choices is admitted into `n` slots at once. The first computes the
//! prompt; the others wait (`Sequence::awaits_fork`) and, in the step that completes the
//! prompt, get a copy of its KV (llama.cpp copies the stream at the next decode) and sample
//! their first token from the same logits row, each with its own sampler. The prompt is
//! computed once, not `n` times.

use super::decode::token_logprob;
use super::Scheduler;
use crate::runtime::Executor;
use crate::sequence::{PendingRequest, Sequence};

impl<E: Executor> Scheduler<E> {
    /// Takes a slot for each of a request's choices past the first and returns them; each
    /// waits for the first choice's prompt.
    pub(super) fn admit_choices(&mut self, choices: Vec<PendingRequest>) -> Vec<usize> {
        let mut forks = Vec::with_capacity(choices.len());
        for choice in choices {
            // `admit` popped the request only with a slot free for each choice.
            let Some(slot) = self.kv.free_slot(&self.slots) else { break };
            // The slot's cached prefix is about to be overwritten by the fork's copy.
            self.kv.clear_for_copy(&mut self.executor, &self.stats, slot);
            self.executor.start_sequence(slot, &choice.sampling, choice.ignore_eos);
            let mut seq = Sequence::new(choice, 0);
            seq.awaits_fork = true;
            self.slots[slot] = Some(seq);
            self.admission_order.push_back(slot);
            forks.push(slot);
        }
        forks
    }

    /// Hands the prompts completed in this step to the choices waiting for them: each gets
    /// a copy of the KV and an output row to sample (the same as the first choice's).
    pub(super) fn fork_choices(&mut self) {
        for i in 0..self.batch.outputs.len() {
            let (slot, batch_index) = self.batch.outputs[i];
            let Some(first) = self.slots[slot].as_mut() else { continue };
            // Scoring only (`max_tokens` 0): the choices end with it, nothing to copy.
            if first.forks.is_empty() || first.request.max_tokens == 0 {
                continue;
            }
            let forks = std::mem::take(&mut first.forks);
            let (cached, cached_prompt) = (first.cached, first.cached_prompt());
            for fork in forks {
                let Some(choice) = self.slots[fork].as_mut() else { continue };
                choice.take_fork(cached, cached_prompt);
                self.executor.copy_sequence(slot, fork);
                self.kv.mark_copy(slot, fork);
                self.batch.outputs.push((fork, batch_index));
            }
        }
    }

    /// Scores the prompt tokens after each scored row of this step's batch.
    pub(super) fn score_prompts(&mut self) {
        for &(slot, batch_index, pos) in &self.batch.prompt_rows {
            let Some(seq) = self.slots[slot].as_mut() else { continue };
            let Some(&next) = seq.request.prompt.get(pos + 1) else { continue };
            let top = seq.request.prompt_logprobs.unwrap_or(0) as usize;
            let (logprob, top) = self.executor.logprobs(batch_index, next, top);
            seq.note_prompt_logprob(pos, token_logprob(self.tokenizer.as_ref(), next, logprob, top));
        }
    }
}
