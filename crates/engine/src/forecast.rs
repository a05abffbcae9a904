//! Predicts how long a new request would wait for its first token, so admission can refuse
//! at once what would miss its deadline instead of queueing it to fail (`--max-queue-ms`).
//!
//! Past its capacity a server that queues without limit makes *every* request late: the
//! queue grows until all of them miss their TTFT objective and goodput collapses. Refusing
//! the requests that cannot start in time keeps the admitted ones on time, and the client
//! learns when to come back (`Retry-After`) from the same prediction.
//!
//! The engine thread publishes, after each step, when each slot is expected to come free
//! and what steps cost (measured, smoothed); `submit` combines that with the prompts
//! waiting ahead of the new one. The model is deliberately simple: a step costs a decode
//! part plus a per-prompt-token part, a running request is expected to produce as many
//! tokens as recent requests did (never more than its `max_tokens`).

use std::collections::HashSet;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use crate::host_cache::{block_hashes, BLOCK_TOKENS};
use crate::runtime::TokenId;

/// Smoothing of the measured costs: recent steps dominate, one odd step does not.
const SMOOTHING: f64 = 0.1;

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

/// Measured step costs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct StepCosts {
    /// A step with only decode tokens in it.
    pub decode_step_ms: f64,
    /// Each prompt token a step prefills adds this much.
    pub prefill_token_ms: f64,
}

impl Default for StepCosts {
    /// Before anything is measured: roughly a small model on two CPU cores.
    fn default() -> Self {
        Self { decode_step_ms: 30.0, prefill_token_ms: 2.0 }
    }
}

impl StepCosts {
    /// Folds in one step that decoded `decode_tokens` and prefilled `prefill_tokens`.
    pub fn observe(&mut self, took_ms: f64, decode_tokens: usize, prefill_tokens: usize) {
        if prefill_tokens == 0 {
            if decode_tokens > 0 {
                self.decode_step_ms += SMOOTHING * (took_ms - self.decode_step_ms);
            }
        } else if prefill_tokens >= 16 {
            // The decode part of a mixed step costs about a decode step.
            let base = if decode_tokens > 0 { self.decode_step_ms } else { 0.0 };
            let per_token = ((took_ms - base) / prefill_tokens as f64).max(0.0);
            self.prefill_token_ms += SMOOTHING * (per_token - self.prefill_token_ms);
        }
    }

    /// The least a request with `prompt` tokens to compute waits for its first token once
    /// it has a slot: its own prefill and one step, as if nothing else were prefilled.
    pub fn own_first_token_ms(&self, prompt: usize) -> f64 {
        prompt as f64 * self.prefill_token_ms + self.decode_step_ms
    }
}

/// A slot's load, for the forecast: what it still has to prefill and generate.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct SlotLoad {
    pub prompt_left: usize,
    pub generated: u32,
    pub max_tokens: u32,
}

/// What the forecast is computed from, kept on the engine thread: measured step costs and
/// the completion-length estimate. The scheduler reports steps and finished requests to it
/// and publishes the slots' loads through it.
#[derive(Debug, Clone)]
pub(crate) struct Forecaster {
    costs: StepCosts,
    /// Completion tokens of recent finished requests, smoothed.
    expected_completion: f64,
    step_tokens: usize,
    /// What decode-only steps cost by their rows, for pricing drafts.
    rows: RowCosts,
    /// Costs given, not measured (tests, whose fake steps take no time).
    frozen: bool,
    /// The TPOT objective (ms) and the prompt tokens it lets the current step prefill.
    prefill_cap: Option<(f64, usize)>,
}

/// What a decode-only step costs by how many rows it computes (a row per generating
/// sequence, plus drafted tokens), measured. On CPU the cost is far from linear: with
/// SmolLM2 on two cores at ~650 cached tokens, 1 row took 9 ms, 2 rows 22 ms, 9 rows 56 ms
/// (llama.cpp's one-row path is its fastest), so a short draft can cost more than it saves
/// where a long one pays. Rows never measured are priced from the nearest measured count
/// below, each further row at what a prompt token costs in a prefill (a wide step computes
/// rows as a prefill does: ~5 ms each there, against 17 ms for a one-row step at ~900
/// cached tokens), or at `PRIOR_ROW_SHARE` of a one-row step if that is less or unknown.
#[derive(Debug, Clone)]
pub(crate) struct RowCosts {
    ms: [Option<f64>; ROW_COUNTS],
    /// The measured cost of a prompt token in a prefill.
    prompt_token_ms: Option<f64>,
}

/// Row counts priced apart; beyond, the last is extrapolated.
const ROW_COUNTS: usize = 64;

/// A further row's price, as a share of a one-row step, until measured.
const PRIOR_ROW_SHARE: f64 = 0.5;

impl Default for RowCosts {
    fn default() -> Self {
        Self { ms: [None; ROW_COUNTS], prompt_token_ms: None }
    }
}

impl RowCosts {
    /// Measured as `first_row_ms` for one row and `row_ms` more for each further row.
    #[cfg(test)]
    pub fn linear(first_row_ms: f64, row_ms: f64) -> Self {
        let mut costs = Self::default();
        for rows in 1..ROW_COUNTS {
            costs.ms[rows] = Some(first_row_ms + (rows - 1) as f64 * row_ms);
        }
        costs
    }

    /// A decode-only step of `rows` rows took `took_ms`.
    pub fn observe(&mut self, rows: usize, took_ms: f64) {
        if let Some(slot) = self.ms.get_mut(rows) {
            *slot = Some(slot.map_or(took_ms, |ms| ms + SMOOTHING * (took_ms - ms)));
        }
    }

    /// What a decode-only step of `rows` rows is expected to cost; `one_row_ms` when
    /// nothing was measured yet.
    pub fn price(&self, rows: usize, one_row_ms: f64) -> f64 {
        let rows = rows.max(1);
        let one = self.ms[1].unwrap_or(one_row_ms);
        if let Some(Some(ms)) = self.ms.get(rows) {
            return *ms;
        }
        let below = (1..rows.min(ROW_COUNTS)).rev().find_map(|r| self.ms[r].map(|ms| (r, ms))).unwrap_or((1, one));
        let further_row_ms = self.prompt_token_ms.map_or(f64::INFINITY, |ms| ms).min(PRIOR_ROW_SHARE * one);
        below.1 + (rows - below.0) as f64 * further_row_ms
    }
}

/// Step prices for `speculate`: what a decode step of so many rows costs.
#[derive(Debug, Clone, Copy)]
pub(crate) struct DraftPrices<'a> {
    rows: &'a RowCosts,
    one_row_ms: f64,
}

impl<'a> DraftPrices<'a> {
    #[cfg(test)]
    pub fn new(rows: &'a RowCosts, one_row_ms: f64) -> Self {
        Self { rows, one_row_ms }
    }

    pub fn step_ms(&self, rows: usize) -> f64 {
        self.rows.price(rows, self.one_row_ms)
    }

    /// Whether a one-row step was measured: before, its price is a prior.
    pub fn one_row_measured(&self) -> bool {
        self.rows.ms[1].is_some()
    }
}

impl Forecaster {
    pub fn new(step_tokens: usize) -> Self {
        Self {
            costs: StepCosts::default(),
            expected_completion: 128.0,
            step_tokens,
            rows: RowCosts::default(),
            frozen: false,
            prefill_cap: None,
        }
    }

    /// Prompt tokens a step can add beside `decode_rows` generating rows and take at most
    /// `target_ms`: what the decode part leaves of the target, at the measured cost per
    /// prompt token.
    pub fn prefill_within(&self, target_ms: f64, decode_rows: usize) -> usize {
        ((target_ms - self.decode_ms(decode_rows)) / self.costs.prefill_token_ms.max(1e-3)).max(0.0) as usize
    }

    /// What one more step beside `decode_rows` generating rows costs, in prompt tokens: its
    /// decode part (with none, a one-row step: a pass over the weights) at the measured cost
    /// per prompt token. A prompt cheaper than that may share another's step
    /// (`prefill_plan`).
    pub fn step_in_prompt_tokens(&self, decode_rows: usize) -> usize {
        (self.decode_ms(decode_rows) / self.costs.prefill_token_ms.max(1e-3)) as usize
    }

    /// What the decode part of a step of `decode_rows` generating rows costs.
    pub fn decode_ms(&self, decode_rows: usize) -> f64 {
        self.rows.price(decode_rows, self.costs.decode_step_ms)
    }

    /// What a step of `decode_rows` generating rows and `prefill_tokens` prompt tokens took:
    /// `took_ms` as measured, or its price where costs are frozen (tests' steps take no time).
    pub fn step_took_ms(&self, took_ms: f64, decode_rows: usize, prefill_tokens: usize) -> f64 {
        if !self.frozen {
            return took_ms;
        }
        let decode_ms = if decode_rows > 0 { self.decode_ms(decode_rows) } else { 0.0 };
        decode_ms + prefill_tokens as f64 * self.costs.prefill_token_ms
    }

    /// The TPOT objective's cap on this step's prefill, if one applies.
    pub fn set_prefill_cap(&mut self, cap: Option<(f64, usize)>) {
        self.prefill_cap = cap;
    }

    /// A decode-only step (no prompt tokens) of `rows` rows, drafts included, took `took_ms`.
    pub fn observe_decode_rows(&mut self, rows: usize, took_ms: f64) {
        if !self.frozen {
            self.rows.observe(rows, took_ms);
        }
    }

    /// The step costs measured so far (what the next published outlook will carry).
    pub fn costs(&self) -> StepCosts {
        self.costs
    }

    /// What decode steps cost by their rows, to price drafts with.
    pub fn row_costs(&self) -> DraftPrices<'_> {
        DraftPrices { rows: &self.rows, one_row_ms: self.costs.decode_step_ms }
    }

    /// A step that took `took_ms` for `decode_tokens` and `prefill_tokens`.
    pub fn observe_step(&mut self, took_ms: f64, decode_tokens: usize, prefill_tokens: usize) {
        if !self.frozen {
            self.costs.observe(took_ms, decode_tokens, prefill_tokens);
            if prefill_tokens > 0 {
                self.rows.prompt_token_ms = Some(self.costs.prefill_token_ms);
            }
        }
    }

    /// Uses `costs`, and a step of r decode rows costs `one_row_ms + (r - 1) * row_ms`,
    /// from now on, whatever steps take.
    #[cfg(test)]
    pub fn freeze(&mut self, costs: StepCosts, row_ms: f64) {
        self.rows = RowCosts::linear(costs.decode_step_ms, row_ms);
        (self.costs, self.frozen) = (costs, true);
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
        forecast: &Forecast,
        slots: impl Iterator<Item = Option<SlotLoad>>,
        held_blocks: Option<Arc<HashSet<u64>>>,
    ) {
        let (mut costs, expected_completion) = (self.costs, self.expected_completion);
        // Under a TPOT cap a prompt gets at most `tokens` per step of `target` ms: it
        // fills more slowly than the per-token cost alone says.
        if let Some((target_ms, tokens)) = self.prefill_cap {
            costs.prefill_token_ms = costs.prefill_token_ms.max(target_ms / tokens.max(1) as f64);
        }
        forecast.publish(|outlook| {
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
    fn costs_follow_the_measured_steps() {
        let mut c = StepCosts { decode_step_ms: 20.0, prefill_token_ms: 1.0 };
        for _ in 0..200 {
            c.observe(40.0, 8, 0);
            c.observe(40.0 + 256.0 * 3.0, 8, 256);
        }
        assert!((c.decode_step_ms - 40.0).abs() < 0.5, "{c:?}");
        assert!((c.prefill_token_ms - 3.0).abs() < 0.1, "{c:?}");
        c.observe(1000.0, 8, 4);
        assert!((c.prefill_token_ms - 3.0).abs() < 0.1, "a few prompt tokens say little about prefill");
    }

    #[test]
    fn a_slot_frees_after_its_prompt_and_the_expected_completion_capped_by_its_max_tokens() {
        let mut forecaster = Forecaster::new(256);
        forecaster.observe_completion(28); // 128 -> 118
        let forecast = Forecast::new(3);
        let load = |prompt_left, generated, max_tokens| Some(SlotLoad { prompt_left, generated, max_tokens });
        forecaster.publish(&forecast, [load(100, 0, 500), None, load(0, 10, 20)].into_iter(), None);
        let outlook = forecast.read();
        let costs = StepCosts::default();
        // Idle first; then 10 tokens left of max_tokens; then 100 prompt tokens and 118 expected.
        let expected =
            [0.0, 10.0 * costs.decode_step_ms, 100.0 * costs.prefill_token_ms + 118.0 * costs.decode_step_ms];
        assert_eq!(outlook.slot_free_ms, expected);
        assert_eq!((outlook.prefill_left, outlook.step_tokens, outlook.expected_completion), (100, 256, 118.0));
    }

    #[test]
    fn row_counts_are_priced_as_measured_and_unmeasured_ones_from_the_nearest_below() {
        let mut rows = RowCosts::default();
        assert_eq!(rows.price(3, 10.0), 10.0 + 2.0 * 5.0, "nothing measured: from the one-row cost");
        rows.observe(1, 9.0);
        rows.observe(2, 22.0);
        assert_eq!(rows.price(1, 10.0), 9.0);
        assert_eq!(rows.price(2, 10.0), 22.0);
        assert_eq!(rows.price(5, 10.0), 22.0 + 3.0 * 4.5, "from 2 rows, 0.5 of a one-row step each");
        rows.observe(2, 12.0);
        assert!((rows.price(2, 10.0) - 21.0).abs() < 1e-9, "smoothed");
        assert_eq!(rows.price(500, 10.0), 21.0 + 498.0 * 4.5, "past the table: extrapolated");
        // Once a prefill was measured, further rows cost what its prompt tokens did, if less.
        rows.prompt_token_ms = Some(3.0);
        assert_eq!(rows.price(5, 10.0), 21.0 + 3.0 * 3.0);
        rows.prompt_token_ms = Some(8.0);
        assert_eq!(rows.price(5, 10.0), 21.0 + 3.0 * 4.5);
    }

    #[test]
    fn a_measured_prefill_prices_the_rows_of_wide_draft_steps() {
        let mut forecaster = Forecaster::new(256);
        forecaster.observe_decode_rows(1, 17.0);
        let before = forecaster.row_costs().step_ms(65);
        // A 64-token prompt chunk beside one decode row: ~5 ms a prompt token.
        for _ in 0..100 {
            forecaster.observe_step(17.0 + 64.0 * 5.0, 1, 64);
        }
        let after = forecaster.row_costs().step_ms(65);
        // The prompt tokens' share is learnt net of the decode part's prior cost (30 ms).
        assert!((after - (17.0 + 64.0 * 5.0)).abs() < 20.0, "{before} -> {after}");
        assert!(before > after);
    }
}
