//! Requests that are more than one stream of tokens: `n` choices from one prompt, and
//! prompts scored token by token. Both change what a prefill produces: a KV state that
//! several sequences continue, or a score per prompt row.
//!
//! A request for `n` choices is admitted into `n` slots at once. The first computes the
//! prompt; the others wait (`Sequence::awaits_fork`) and, in the step that completes the
//! prompt, get a copy of its KV (llama.cpp copies the stream at the next decode) and sample
//! their first token from the same logits row, each with its own sampler. The prompt is
//! computed once, not `n` times. [`Choices`] keeps, per slot, which choices wait for it and
//! the scores of its prompt so far.

use rillm_backend::TokenLogprob;

use super::decode::token_logprob;
use crate::kv::residency::KvResidency;
use crate::request::sequence::Sequence;
use crate::runtime::{Executor, Tokenizer};

pub(crate) struct Choices {
    /// Per slot: the slots of its request's other choices, waiting for its prompt.
    forks: Vec<Vec<usize>>,
    /// Per slot: the scores of its prompt tokens 1.. computed so far.
    scores: Vec<Vec<TokenLogprob>>,
}

/// A batch row to sample and the slot it belongs to.
pub(crate) type Output = (usize, usize);

impl Choices {
    pub fn new(slots: usize) -> Self {
        Self { forks: vec![Vec::new(); slots], scores: vec![Vec::new(); slots] }
    }

    /// The choices in `forks` wait for `first`'s prompt.
    pub fn wait_for(&mut self, first: usize, forks: Vec<usize>) {
        self.forks[first] = forks;
    }

    /// Whether choices wait for `slot`'s prompt.
    pub fn has_forks(&self, slot: usize) -> bool {
        !self.forks[slot].is_empty()
    }

    /// `slot` left: the choices waiting for its prompt, which end with it.
    pub fn release(&mut self, slot: usize) -> Vec<usize> {
        self.scores[slot].clear();
        std::mem::take(&mut self.forks[slot])
    }

    /// The sequence in `from` moved to `to` (never one with forks: they stay put).
    pub fn move_slot(&mut self, from: usize, to: usize) {
        self.scores[to] = std::mem::take(&mut self.scores[from]);
        self.forks[to] = std::mem::take(&mut self.forks[from]);
    }

    /// Hands the prompts completed in this step to the choices waiting for them: each gets
    /// a copy of the KV and an output row to sample (the same as the first choice's),
    /// appended to `outputs`.
    pub fn fork<E: Executor, S>(
        &mut self,
        seqs: &mut [Option<Sequence>],
        executor: &mut E,
        kv: &mut KvResidency<S>,
        outputs: &mut Vec<Output>,
    ) {
        for i in 0..outputs.len() {
            let (slot, batch_index) = outputs[i];
            let Some(first) = seqs[slot].as_ref() else { continue };
            // Scoring only (`max_tokens` 0): the choices end with it, nothing to copy.
            if self.forks[slot].is_empty() || first.request().max_tokens == 0 {
                continue;
            }
            let (cached, cached_prompt) = (first.cached(), first.cached_prompt());
            for fork in std::mem::take(&mut self.forks[slot]) {
                let Some(choice) = seqs[fork].as_mut() else { continue };
                choice.take_fork(cached, cached_prompt);
                executor.copy_sequence(slot, fork);
                kv.mark_copy(slot, fork);
                outputs.push((fork, batch_index));
            }
        }
    }

    /// Scores the prompt tokens after each scored row of this step's batch (`rows`: slot,
    /// batch index, position).
    pub fn score<E: Executor>(
        &mut self,
        seqs: &[Option<Sequence>],
        executor: &E,
        tokenizer: &dyn Tokenizer,
        rows: &[(usize, usize, usize)],
    ) {
        for &(slot, batch_index, pos) in rows {
            let Some(seq) = seqs[slot].as_ref() else { continue };
            let Some(&next) = seq.request().prompt.get(pos + 1) else { continue };
            let top = seq.request().prompt_logprobs.unwrap_or(0) as usize;
            let (logprob, top) = executor.logprobs(batch_index, next, top);
            debug_assert_eq!(pos, self.scores[slot].len());
            self.scores[slot].push(token_logprob(tokenizer, next, logprob, top));
        }
    }

    /// The scores of `slot`'s prompt, once its prefill is done (taken).
    pub fn take_scores(&mut self, slot: usize) -> Vec<TokenLogprob> {
        std::mem::take(&mut self.scores[slot])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forks_and_scores_follow_their_slot_and_end_with_it() {
        let mut choices = Choices::new(4);
        choices.wait_for(0, vec![1, 2]);
        assert!(choices.has_forks(0) && !choices.has_forks(1));
        choices.scores[3].push(TokenLogprob { token: 7, bytes: b"x".to_vec(), logprob: -0.5, top: Vec::new() });
        choices.move_slot(3, 1);
        assert_eq!(choices.take_scores(1).len(), 1, "a scored prompt moves with its sequence");
        assert!(choices.take_scores(3).is_empty());
        assert_eq!(choices.release(0), [1, 2], "its waiting choices end with it");
        assert!(!choices.has_forks(0) && choices.release(0).is_empty());
    }
}
