//! The embedding requests the engine thread is working on, and how their inputs are
//! packed into batches.
//!
//! A batch is one llama.cpp decode: an encoder attends over every token of its batch at
//! once (masked per sequence), so each input must sit whole in it and the batch must fit
//! one ubatch. Inputs are taken oldest request first, input by input, so a request of 64
//! inputs fills batches without holding back the single-input requests behind it for more
//! than its own turn; an input that does not fit waits for the next batch (nothing later
//! jumps it, so no request starves).

use std::collections::VecDeque;

use rillm_backend::{EmbedFailed, EmbedReply, Embeddings, TokenId};

/// One admitted request: its inputs' tokens and the vectors computed so far.
pub(crate) struct EmbedJob {
    inputs: Vec<Vec<TokenId>>,
    vectors: Vec<Vec<f32>>,
    reply: EmbedReply,
}

impl EmbedJob {
    pub(crate) fn new(inputs: Vec<Vec<TokenId>>, reply: EmbedReply) -> Self {
        let vectors = Vec::with_capacity(inputs.len());
        Self { inputs, vectors, reply }
    }

    fn pending(&self) -> &[Vec<TokenId>] {
        &self.inputs[self.vectors.len()..]
    }

    /// Tokens not computed yet (the wait forecast's work ahead).
    pub(crate) fn pending_tokens(&self) -> usize {
        self.pending().iter().map(Vec::len).sum()
    }

    /// Its caller dropped the response: nothing more is computed for it.
    fn is_cancelled(&self) -> bool {
        self.reply.is_closed()
    }

    /// Answers with an error (a failed batch, the engine stopping).
    pub(crate) fn fail(self, reason: &str) {
        let _ = self.reply.send(Err(EmbedFailed(reason.to_string())));
    }

    fn answer(self) {
        let prompt_tokens = self.inputs.iter().map(Vec::len).sum();
        let _ = self.reply.send(Ok(Embeddings { vectors: self.vectors, prompt_tokens }));
    }
}

/// Which inputs one batch holds: (job position, input index), in batch order.
pub(crate) type Packed = Vec<(usize, usize)>;

/// The requests taken off the queue, oldest first.
#[derive(Default)]
pub(crate) struct ActiveJobs {
    jobs: VecDeque<EmbedJob>,
}

/// What one delivery did, for the queue's places and the statistics.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Delivered {
    pub answered: usize,
    pub tokens: usize,
}

impl ActiveJobs {
    pub(crate) fn push(&mut self, job: EmbedJob) {
        self.jobs.push_back(job);
    }

    pub(crate) fn len(&self) -> usize {
        self.jobs.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.jobs.is_empty()
    }

    /// Tokens not computed yet, over every job.
    pub(crate) fn pending_tokens(&self) -> usize {
        self.jobs.iter().map(EmbedJob::pending_tokens).sum()
    }

    /// Inputs not computed yet, over every job.
    pub(crate) fn pending_inputs(&self) -> usize {
        self.jobs.iter().map(|j| j.pending().len()).sum()
    }

    /// Drops the jobs whose callers left; returns how many.
    pub(crate) fn drop_cancelled(&mut self) -> usize {
        let before = self.jobs.len();
        self.jobs.retain(|job| !job.is_cancelled());
        before - self.jobs.len()
    }

    /// The next batch: up to `max_inputs` inputs of `max_tokens` tokens together, oldest
    /// first, stopping at the first input that does not fit (one alone always does: the
    /// engine refuses longer ones at submit).
    pub(crate) fn pack(&self, max_inputs: usize, max_tokens: usize) -> Packed {
        let mut packed = Vec::new();
        let mut tokens = 0;
        for (position, job) in self.jobs.iter().enumerate() {
            let first = job.vectors.len();
            for (offset, input) in job.pending().iter().enumerate() {
                let fits = tokens + input.len() <= max_tokens || packed.is_empty();
                if packed.len() == max_inputs || !fits {
                    return packed;
                }
                tokens += input.len();
                packed.push((position, first + offset));
            }
        }
        packed
    }

    /// The token ids of the packed inputs, in batch order.
    pub(crate) fn inputs<'a>(&'a self, packed: &Packed) -> Vec<&'a [TokenId]> {
        packed.iter().map(|&(job, input)| self.jobs[job].inputs[input].as_slice()).collect()
    }

    /// Hands each packed input its vector; answers and removes the jobs now complete.
    pub(crate) fn deliver(&mut self, packed: &Packed, vectors: Vec<Vec<f32>>) -> Delivered {
        let mut delivered = Delivered::default();
        for (&(job, input), vector) in packed.iter().zip(vectors) {
            let job = &mut self.jobs[job];
            debug_assert_eq!(job.vectors.len(), input, "inputs are packed in order");
            delivered.tokens += job.inputs[input].len();
            job.vectors.push(vector);
        }
        let (done, going): (VecDeque<_>, VecDeque<_>) =
            std::mem::take(&mut self.jobs).into_iter().partition(|job| job.pending().is_empty());
        self.jobs = going;
        delivered.answered = done.len();
        done.into_iter().for_each(EmbedJob::answer);
        delivered
    }

    /// Fails the jobs `packed` touched (their batch failed); returns how many.
    pub(crate) fn fail_packed(&mut self, packed: &Packed, reason: &str) -> usize {
        let mut positions: Vec<usize> = packed.iter().map(|&(job, _)| job).collect();
        positions.dedup();
        for &position in positions.iter().rev() {
            if let Some(job) = self.jobs.remove(position) {
                job.fail(reason);
            }
        }
        positions.len()
    }

    /// Fails every job (the engine is stopping).
    pub(crate) fn fail_all(&mut self, reason: &str) -> usize {
        let n = self.jobs.len();
        self.jobs.drain(..).for_each(|job| job.fail(reason));
        n
    }
}

#[cfg(test)]
mod tests {
    use rillm_backend::EmbedResponse;

    use super::*;

    fn job(lengths: &[usize]) -> (EmbedJob, EmbedResponse) {
        let (reply, response) = EmbedResponse::channel();
        let inputs = lengths.iter().map(|&n| vec![1; n]).collect();
        (EmbedJob::new(inputs, reply), response)
    }

    #[test]
    fn packs_oldest_first_within_both_limits() {
        let mut active = ActiveJobs::default();
        let (a, _ra) = job(&[3, 3, 3]);
        let (b, _rb) = job(&[2]);
        active.push(a);
        active.push(b);
        assert_eq!(active.pack(16, 100), vec![(0, 0), (0, 1), (0, 2), (1, 0)]);
        assert_eq!(active.pack(2, 100), vec![(0, 0), (0, 1)]);
        assert_eq!(active.pack(16, 7), vec![(0, 0), (0, 1)], "the third input would overflow 7 tokens");
    }

    #[test]
    fn an_input_alone_always_fits_and_nothing_jumps_the_one_that_did_not() {
        let mut active = ActiveJobs::default();
        let (a, _ra) = job(&[10, 1]);
        active.push(a);
        assert_eq!(active.pack(16, 4), vec![(0, 0)], "alone, even over the token budget");
        let packed = active.pack(16, 4);
        active.deliver(&packed, vec![vec![0.5]]);
        assert_eq!(active.pack(16, 4), vec![(0, 1)]);
    }

    #[test]
    fn a_job_is_answered_in_input_order_once_its_last_batch_is_delivered() {
        let mut active = ActiveJobs::default();
        let (a, response) = job(&[1, 2, 3]);
        active.push(a);
        let first = active.pack(2, 100);
        assert_eq!(active.deliver(&first, vec![vec![1.0], vec![2.0]]), Delivered { answered: 0, tokens: 3 });
        let second = active.pack(2, 100);
        assert_eq!(second, vec![(0, 2)]);
        assert_eq!(active.deliver(&second, vec![vec![3.0]]), Delivered { answered: 1, tokens: 3 });
        assert!(active.is_empty());
        let answer = response.blocking_wait().expect("answered");
        assert_eq!(answer.vectors, vec![vec![1.0], vec![2.0], vec![3.0]]);
        assert_eq!(answer.prompt_tokens, 6);
    }

    #[test]
    fn a_dropped_response_cancels_what_is_not_computed() {
        let mut active = ActiveJobs::default();
        let (a, response) = job(&[1, 1]);
        let (b, _kept) = job(&[1]);
        active.push(a);
        active.push(b);
        drop(response);
        assert_eq!(active.drop_cancelled(), 1);
        assert_eq!(active.pending_inputs(), 1);
        assert_eq!(active.pack(16, 100), vec![(0, 0)]);
    }

    #[test]
    fn a_failed_batch_fails_the_jobs_in_it_and_keeps_the_rest() {
        let mut active = ActiveJobs::default();
        let (a, ra) = job(&[1, 1]);
        let (b, rb) = job(&[1]);
        let (c, _rc) = job(&[5]);
        active.push(a);
        active.push(b);
        active.push(c);
        let packed = active.pack(3, 3);
        assert_eq!(packed, vec![(0, 0), (0, 1), (1, 0)]);
        assert_eq!(active.fail_packed(&packed, "decode failed"), 2);
        assert_eq!(active.len(), 1);
        assert_eq!(ra.blocking_wait(), Err(EmbedFailed("decode failed".into())));
        assert!(rb.blocking_wait().is_err());
    }
}
