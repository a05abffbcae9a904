//! Predicts how long a new request would wait for its first token, so admission can refuse
//! at once what would miss its deadline instead of queueing it to fail (`--max-queue-ms`).
//!
//! Past its capacity a server that queues without limit makes *every* request late: the
//! queue grows until all of them miss their TTFT objective and goodput collapses. Refusing
//! the requests that cannot start in time keeps the admitted ones on time, and the client
//! learns when to come back (`Retry-After`) from the same prediction.
//!
//! The engine thread publishes, after each step, when each slot is expected to come free
//! and what steps cost (measured, smoothed: `step_costs`); `submit` combines that with the
//! prompts waiting ahead of the new one. The model is deliberately simple: a step costs a
//! decode part plus a per-prompt-token part, a running request is expected to produce as
//! many tokens as recent requests did (never more than its `max_tokens`).

use std::collections::HashSet;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use super::step_costs::StepCosts;
use crate::kv::host_cache::{block_hashes, BLOCK_TOKENS};
use crate::runtime::TokenId;

/// The wait forecast takes a prompt with at most this many tokens (a chat's next turn, an
/// agent's next round) to go before the prompts being prefilled once the step in progress
/// is done, as `prefill_plan`'s shortest-first order mostly has it (the prompts' own
/// lengths ahead are not in the outlook).
const SHORT_PROMPT_TOKENS: usize = 256;

/// What the engine thread last measured and expects.
#[derive(Debug, Clone)]
pub(crate) struct Outlook {
    pub at: Instant,
    /// Milliseconds until each slot is expected to be free, ascending; 0 for free slots.
    pub slot_free_ms: Vec<f64>,
    /// Prompt tokens of running sequences not prefilled yet.
    pub prefill_left: usize,
    pub costs: StepCosts,
    /// Completion tokens a request is expected to produce (smoothed over finished ones).
    pub expected_completion: f64,
    /// Chained hashes of every whole block of tokens the slots and the host tier hold:
    /// a prompt that recurs (a retry, the next turn, a shared system prompt) is mostly
    /// reused, not prefilled, and predicting its full prefill would refuse it for nothing.
    pub cached_blocks: Arc<HashSet<u64>>,
    /// Tokens one step computes at most: a short prompt waits for the step in progress,
    /// not for every long prompt ahead (see `prefill_plan`).
    pub step_tokens: usize,
}

/// A slot's load, for the forecast: what it still has to prefill and generate.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct SlotLoad {
    pub prompt_left: usize,
    pub generated: u32,
    pub max_tokens: u32,
}

/// What the forecast is computed from besides step costs, kept on the engine thread: the
/// completion-length estimate and the TPOT objective's cap on prefills. The scheduler
/// reports finished requests to it and publishes the slots' loads through it.
#[derive(Debug, Clone)]
pub(crate) struct WaitForecaster {
    /// Completion tokens of recent finished requests, smoothed.
    expected_completion: f64,
    step_tokens: usize,
    /// The TPOT objective (ms) and the prompt tokens it lets the current step prefill.
    prefill_cap: Option<(f64, usize)>,
    /// `--max-queue-ms`: a request that reaches the head of the queue after waiting so
    /// long that its first token would come later than this is refused there.
    pub max_queue_ms: Option<u64>,
    /// Publish the blocks of tokens held in KV with the outlook (only `--max-queue-ms`
    /// reads them, and gathering them costs a pass over every slot and host entry).
    pub publish_prefixes: bool,
    /// Where the outlook is published: `submit` reads it on the callers' threads.
    published: Arc<Forecast>,
}

impl WaitForecaster {
    pub fn new(step_tokens: usize, published: Arc<Forecast>) -> Self {
        Self {
            expected_completion: 128.0,
            step_tokens,
            prefill_cap: None,
            max_queue_ms: None,
            publish_prefixes: false,
            published,
        }
    }

    /// The outlook as last published.
    #[cfg(test)]
    pub fn outlook(&self) -> Outlook {
        self.published.read()
    }

    /// The TPOT objective's cap on this step's prefill, if one applies.
    pub fn set_prefill_cap(&mut self, cap: Option<(f64, usize)>) {
        self.prefill_cap = cap;
    }

    /// A request that ended on its own (not cancelled or failed) after `tokens`.
    pub fn observe_completion(&mut self, tokens: u32) {
        self.expected_completion += 0.1 * (f64::from(tokens) - self.expected_completion);
    }

    /// When each slot should come free: its prompt left to prefill, then as many tokens as
    /// recent requests produced (never past its `max_tokens`). `held_blocks`, when given,
    /// replaces the published set of cached prefix blocks.
    pub fn publish(
        &self,
        costs: StepCosts,
        slots: impl Iterator<Item = Option<SlotLoad>>,
        held_blocks: Option<Arc<HashSet<u64>>>,
    ) {
        let (mut costs, expected_completion) = (costs, self.expected_completion);
        // Under a TPOT cap a prompt gets at most `tokens` per step of `target` ms: it
        // fills more slowly than the per-token cost alone says.
        if let Some((target_ms, tokens)) = self.prefill_cap {
            costs.prefill_token_ms = costs.prefill_token_ms.max(target_ms / tokens.max(1) as f64);
        }
        self.published.publish(|outlook| {
            if let Some(blocks) = held_blocks {
                outlook.cached_blocks = blocks;
            }
            outlook.at = Instant::now();
            outlook.prefill_left = 0;
            outlook.slot_free_ms.clear();
            for load in slots {
                let Some(load) = load else {
                    outlook.slot_free_ms.push(0.0);
                    continue;
                };
                outlook.prefill_left += load.prompt_left;
                let cap = f64::from(load.max_tokens.saturating_sub(load.generated));
                let expected = (expected_completion - f64::from(load.generated)).max(1.0);
                let free_ms =
                    load.prompt_left as f64 * costs.prefill_token_ms + cap.min(expected) * costs.decode_step_ms;
                outlook.slot_free_ms.push(free_ms);
            }
            outlook.slot_free_ms.sort_by(f64::total_cmp);
            outlook.costs = costs;
            outlook.expected_completion = expected_completion;
            outlook.step_tokens = self.step_tokens;
        });
    }
}

impl Outlook {
    pub fn new(slots: usize) -> Self {
        Self {
            at: Instant::now(),
            slot_free_ms: vec![0.0; slots],
            prefill_left: 0,
            costs: StepCosts::default(),
            expected_completion: 128.0,
            cached_blocks: Arc::default(),
            step_tokens: usize::MAX,
        }
    }

    /// Prompt tokens of `prompt` the engine holds KV for, to whole blocks (so at most a
    /// block short of what admission will reuse; never the last token, which is computed).
    pub fn cached_estimate(&self, prompt: &[TokenId]) -> usize {
        if self.cached_blocks.is_empty() {
            return 0;
        }
        let hashes = block_hashes(prompt);
        let blocks = hashes.iter().rposition(|h| self.cached_blocks.contains(h)).map_or(0, |i| i + 1);
        (blocks * BLOCK_TOKENS).min(prompt.len().saturating_sub(1))
    }

    /// Milliseconds until the first token of a request with `prompt` tokens (after cache
    /// reuse, if known), queued behind waiting requests with `ahead` prompt tokens each.
    pub fn first_token_ms(&self, ahead: &[usize], prompt: usize, now: Instant) -> f64 {
        let elapsed = now.saturating_duration_since(self.at).as_secs_f64() * 1000.0;
        let slots = self.slot_free_ms.len().max(1);
        let k = ahead.len();
        // The k-th request in line gets the k-th slot to come free; beyond one round, each
        // further round waits for a whole expected request.
        let service_ms = self.expected_completion * self.costs.decode_step_ms;
        let slot_ms = self.slot_free_ms.get(k % slots).copied().unwrap_or(0.0) + (k / slots) as f64 * service_ms;
        let start_ms = (slot_ms - elapsed).max(0.0);
        // Prompts ahead are prefilled while it waits, chunk by chunk beside the decodes; a
        // short one goes before them once the step in progress is done.
        let mut ahead_tokens = self.prefill_left + ahead.iter().sum::<usize>();
        if prompt <= SHORT_PROMPT_TOKENS {
            ahead_tokens = ahead_tokens.min(self.step_tokens);
        }
        let ahead_ms = ahead_tokens as f64 * self.costs.prefill_token_ms - elapsed;
        start_ms.max(ahead_ms) + self.costs.own_first_token_ms(prompt)
    }
}

/// The latest outlook, written by the engine thread and read by `submit`.
#[derive(Debug)]
pub(crate) struct Forecast(Mutex<Outlook>);

impl Forecast {
    pub fn new(slots: usize) -> Self {
        Self(Mutex::new(Outlook::new(slots)))
    }

    pub fn publish(&self, update: impl FnOnce(&mut Outlook)) {
        update(&mut self.0.lock().unwrap_or_else(PoisonError::into_inner));
    }

    pub fn read(&self) -> Outlook {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outlook(slot_free_ms: Vec<f64>) -> Outlook {
        Outlook {
            at: Instant::now(),
            slot_free_ms,
            prefill_left: 0,
            costs: StepCosts { decode_step_ms: 20.0, prefill_token_ms: 1.0 },
            expected_completion: 100.0,
            cached_blocks: Arc::default(),
            step_tokens: 256,
        }
    }

    #[test]
    fn a_free_slot_means_only_the_own_prefill_and_one_step() {
        let o = outlook(vec![0.0, 500.0]);
        assert_eq!(o.first_token_ms(&[], 200, o.at), 200.0 + 20.0);
    }

    #[test]
    fn a_request_in_line_waits_for_its_slot_and_for_the_prompts_ahead() {
        let o = outlook(vec![300.0, 900.0]);
        // Second in line: the second slot to free (900 ms) dominates 150 ms of prefill ahead.
        assert_eq!(o.first_token_ms(&[150], 100, o.at), 900.0 + 100.0 + 20.0);
        // Third in line with two slots: a whole expected request (100 x 20 ms) after slot 0.
        assert_eq!(o.first_token_ms(&[10, 10], 0, o.at), 300.0 + 2000.0 + 20.0);
        // Long prompts ahead outweigh an early slot.
        assert_eq!(o.first_token_ms(&[5000], 300, o.at), 5000.0 + 300.0 + 20.0);
    }

    #[test]
    fn a_short_prompt_waits_for_the_step_in_progress_not_for_the_long_prompts_ahead() {
        let mut o = outlook(vec![0.0, 0.0]);
        o.prefill_left = 3000;
        let short = SHORT_PROMPT_TOKENS as f64;
        assert_eq!(o.first_token_ms(&[], SHORT_PROMPT_TOKENS, o.at), 256.0 + short + 20.0);
        assert_eq!(o.first_token_ms(&[], SHORT_PROMPT_TOKENS + 1, o.at), 3000.0 + short + 1.0 + 20.0);
        // At best (the head of the queue's check): its own prefill and a step, nothing ahead.
        assert_eq!(o.costs.own_first_token_ms(SHORT_PROMPT_TOKENS + 1), short + 1.0 + 20.0);
    }

    #[test]
    fn time_since_the_outlook_was_published_counts_as_waited() {
        let o = outlook(vec![300.0]);
        let later = o.at + std::time::Duration::from_millis(100);
        assert!((o.first_token_ms(&[], 0, later) - (200.0 + 20.0)).abs() < 1e-6);
    }

    #[test]
    fn cached_blocks_count_to_the_deepest_held_block() {
        let held: Vec<TokenId> = (0..40).collect();
        let mut o = outlook(vec![0.0]);
        assert_eq!(o.cached_estimate(&held), 0, "nothing held");
        o.cached_blocks = Arc::new(block_hashes(&held).into_iter().collect());
        // The same 40 tokens: two whole blocks (32); the next turn of it: the same.
        assert_eq!(o.cached_estimate(&held), 32);
        let next_turn: Vec<TokenId> = (0..100).collect();
        assert_eq!(o.cached_estimate(&next_turn), 32);
        // Exactly one block long: all but the token whose logits are needed.
        assert_eq!(o.cached_estimate(&held[..16]), 15);
        // Same tokens in another order share no chained block.
        let other: Vec<TokenId> = (0..40).rev().collect();
        assert_eq!(o.cached_estimate(&other), 0);
    }

    #[test]
    fn a_slot_frees_after_its_prompt_and_the_expected_completion_capped_by_its_max_tokens() {
        let mut forecaster = WaitForecaster::new(256, Arc::new(Forecast::new(3)));
        forecaster.observe_completion(28); // 128 -> 118
        let load = |prompt_left, generated, max_tokens| Some(SlotLoad { prompt_left, generated, max_tokens });
        let slots = [load(100, 0, 500), None, load(0, 10, 20)].into_iter();
        forecaster.publish(StepCosts::default(), slots, None);
        let outlook = forecaster.outlook();
        let costs = StepCosts::default();
        // Idle first; then 10 tokens left of max_tokens; then 100 prompt tokens and 118 expected.
        let expected =
            [0.0, 10.0 * costs.decode_step_ms, 100.0 * costs.prefill_token_ms + 118.0 * costs.decode_step_ms];
        assert_eq!(outlook.slot_free_ms, expected);
        assert_eq!((outlook.prefill_left, outlook.step_tokens, outlook.expected_completion), (100, 256, 118.0));
    }
}
