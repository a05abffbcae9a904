//! The embedding engine's thread: takes requests off the queue, packs their inputs into
//! batches, runs each and answers every request once its last input is computed.

use std::time::Duration;

use crate::embedding::forecast::EmbedForecast;
use crate::embedding::jobs::{ActiveJobs, EmbedJob};
use crate::embedding::runner::{BatchLimits, PoolRunner};
use crate::queue::WaitQueue;
use crate::stats::EngineStats;

/// How long an idle thread sleeps on the queue before it looks at the world again.
const IDLE_WAIT: Duration = Duration::from_millis(500);

/// Runs until the queue is closed; what is still in flight then is failed, not computed
/// (a shutdown cancels, as the generating engine's does).
pub(crate) fn run_embedding_loop(
    runner: &mut impl PoolRunner,
    queue: &WaitQueue<EmbedJob>,
    stats: &EngineStats,
    forecast: &EmbedForecast,
    limits: BatchLimits,
) {
    let mut active = ActiveJobs::default();
    loop {
        if active.is_empty() && !queue.wait_for_item(IDLE_WAIT) {
            break;
        }
        if queue.is_closed() {
            active.fail_all("the engine is shutting down");
            break;
        }
        // Enough requests on hand to fill a batch, if there are that many.
        while active.pending_inputs() < limits.max_inputs {
            match queue.pop() {
                Some(job) => active.push(job),
                None => break,
            }
        }
        for _ in 0..active.drop_cancelled() {
            queue.finish_one();
            stats.record_finished(0, 0, true);
        }
        run_one_batch(runner, &mut active, queue, stats, forecast, limits);
        forecast.set_active_tokens(active.pending_tokens());
        stats.set_occupancy(active.len(), queue.len(), 0, 0);
        stats.mark_progress(!active.is_empty());
    }
}

fn run_one_batch(
    runner: &mut impl PoolRunner,
    active: &mut ActiveJobs,
    queue: &WaitQueue<EmbedJob>,
    stats: &EngineStats,
    forecast: &EmbedForecast,
    limits: BatchLimits,
) {
    let packed = active.pack(limits.max_inputs, limits.target_tokens);
    if packed.is_empty() {
        return;
    }
    let inputs = active.inputs(&packed);
    let tokens = inputs.iter().map(|i| i.len()).sum();
    let started = std::time::Instant::now();
    let pooled = runner.pool(&inputs);
    forecast.record_batch(tokens, started.elapsed().as_secs_f64() * 1e3);
    stats.record_step();
    let answered = match pooled {
        Ok(vectors) if vectors.len() == packed.len() => {
            let delivered = active.deliver(&packed, vectors);
            stats.record_prompt_computed(delivered.tokens);
            delivered.answered
        }
        Ok(vectors) => active
            .fail_packed(&packed, &format!("the model returned {} vectors for {} inputs", vectors.len(), packed.len())),
        Err(reason) => {
            tracing::error!(%reason, inputs = packed.len(), "an embedding batch failed");
            active.fail_packed(&packed, &reason)
        }
    };
    for _ in 0..answered {
        queue.finish_one();
        stats.record_finished(0, 0, false);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use rillm_backend::{EmbedFailed, EmbedResponse, TokenId};

    use super::*;

    /// Each vector is its input's length and first token; batch sizes are recorded, and
    /// the queue is closed (ending the loop) once `inputs` inputs were run.
    struct Recording {
        queue: Arc<WaitQueue<EmbedJob>>,
        inputs: usize,
        batches: Vec<usize>,
        fail_on_token: Option<TokenId>,
    }

    impl PoolRunner for Recording {
        fn pool(&mut self, inputs: &[&[TokenId]]) -> Result<Vec<Vec<f32>>, String> {
            self.batches.push(inputs.len());
            if self.batches.iter().sum::<usize>() >= self.inputs {
                self.queue.close();
            }
            if inputs.iter().any(|i| Some(i[0]) == self.fail_on_token) {
                return Err("decode failed".into());
            }
            Ok(inputs.iter().map(|i| vec![i.len() as f32, i[0] as f32]).collect())
        }
    }

    fn submit(queue: &WaitQueue<EmbedJob>, inputs: Vec<Vec<TokenId>>) -> EmbedResponse {
        let (reply, response) = EmbedResponse::channel();
        assert!(queue.push(EmbedJob::new(inputs, reply)).is_ok());
        response
    }

    fn run(runner: &mut Recording, limits: BatchLimits) -> EngineStats {
        let stats = EngineStats::new(0);
        let queue = Arc::clone(&runner.queue);
        run_embedding_loop(runner, &queue, &stats, &EmbedForecast::default(), limits);
        stats
    }

    #[test]
    fn requests_are_answered_in_input_order_from_shared_batches() {
        let queue = Arc::new(WaitQueue::new(0, 3));
        let a = submit(&queue, vec![vec![7; 2], vec![8; 3], vec![9; 1]]);
        let b = submit(&queue, vec![vec![5; 4]]);
        let c = submit(&queue, vec![vec![6; 1]]);
        let mut runner = Recording { queue, inputs: 5, batches: Vec::new(), fail_on_token: None };
        let stats = run(&mut runner, BatchLimits { max_inputs: 4, target_tokens: 100, max_tokens: 100 });
        assert_eq!(a.blocking_wait().expect("a").vectors, vec![vec![2.0, 7.0], vec![3.0, 8.0], vec![1.0, 9.0]]);
        assert_eq!(b.blocking_wait().expect("b").vectors, vec![vec![4.0, 5.0]]);
        assert_eq!(c.blocking_wait().expect("c").prompt_tokens, 1);
        assert_eq!(runner.batches, vec![4, 1], "a's three inputs and b's share the first batch");
        assert_eq!(stats.snapshot().finished, 3);
        assert_eq!(stats.snapshot().prompt_tokens_computed, 11);
    }

    #[test]
    fn a_failed_batch_fails_only_its_requests() {
        let queue = Arc::new(WaitQueue::new(0, 2));
        let bad = submit(&queue, vec![vec![13; 2]]);
        let good = submit(&queue, vec![vec![1; 2]]);
        let mut runner = Recording { queue, inputs: 2, batches: Vec::new(), fail_on_token: Some(13) };
        run(&mut runner, BatchLimits { max_inputs: 1, target_tokens: 100, max_tokens: 100 });
        assert_eq!(bad.blocking_wait(), Err(EmbedFailed("decode failed".into())));
        assert_eq!(good.blocking_wait().expect("good").vectors, vec![vec![2.0, 1.0]]);
    }

    #[test]
    fn closing_the_queue_fails_what_is_in_flight() {
        let queue = Arc::new(WaitQueue::new(0, 2));
        // Two inputs of 3 tokens; batches of 3 tokens run one input each.
        let cut = submit(&queue, vec![vec![1; 3], vec![2; 3]]);
        let mut runner = Recording { queue, inputs: 1, batches: Vec::new(), fail_on_token: None };
        run(&mut runner, BatchLimits { max_inputs: 4, target_tokens: 3, max_tokens: 3 });
        assert_eq!(runner.batches, vec![1]);
        assert!(cut.blocking_wait().is_err_and(|e| e.0.contains("shutting down")));
    }
}
