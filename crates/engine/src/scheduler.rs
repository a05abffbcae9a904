//! The continuous-batching loop that runs on the engine thread.
//!
//! Each step builds one batch: first a decode token for every sequence that is generating,
//! then prompt tokens of sequences still prefilling, up to the step's token budget (oldest
//! first, but a short prompt may get a step before long ones: `prefill_plan`). Long prompts
//! are therefore prefilled in chunks while running streams keep receiving a token per
//! step, and a new request can start in the very next step. Where an admitted request's
//! cached prefix comes from (its slot, another slot, host memory) is `reuse`'s policy.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use crate::forecast::StepCosts;
use crate::host_cache::HostCache;
use crate::prefill_plan::PrefillPlanner;
use crate::prefix_cache::PrefixCache;
use crate::queue::WaitQueue;
use crate::runtime::{BatchToken, Executor, Tokenizer};
use crate::sequence::{PendingRequest, Sequence};
use crate::stats::EngineStats;
use rillm_backend::{FinishReason, TokenId, TokenLogprob, TopLogprob};

mod choices;
mod reuse;

/// Moving a sequence copies its whole KV stream, which a few steps with one less pass over
/// the weights repay; a sequence this close to its token limit is left where it is.
const MIN_TOKENS_LEFT_TO_MOVE: u32 = 16;

/// How long an idle engine sleeps before refreshing its heartbeat.
const IDLE_WAKE: Duration = Duration::from_millis(500);

/// A slot's end of a pending KV copy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CopyEnd {
    Source,
    Target,
}

pub(crate) struct Scheduler<E: Executor> {
    executor: E,
    tokenizer: Arc<dyn Tokenizer>,
    queue: Arc<WaitQueue<PendingRequest>>,
    stats: Arc<EngineStats>,
    slots: Vec<Option<Sequence>>,
    prefix_cache: PrefixCache,
    /// KV states saved from slots before they were overwritten (`None`: tier off).
    host_cache: Option<HostCache<E::Snapshot>>,
    host_cache_budget: usize,
    /// Each slot's part in a KV copy not yet carried out: llama.cpp copies stream buffers
    /// at the next decode, so a target's buffer holds nothing worth saving until then, and
    /// neither end may be restored into.
    copy_pending: Vec<Option<CopyEnd>>,
    /// Slots in admission order, the order prefill budget is handed out in.
    admission_order: VecDeque<usize>,
    /// Tokens a step computes, widened prefills aside: bounds how long it stalls streams.
    step_budget: usize,
    /// Tokens one decode call accepts.
    batch_limit: usize,
    prefix_caching: bool,
    batch: Vec<BatchToken>,
    /// (slot, batch index) of every batch entry whose logits get sampled.
    outputs: Vec<(usize, usize)>,
    /// (slot, batch index, position) of prompt tokens whose logits score the next prompt
    /// token, for requests that score their prompt.
    prompt_rows: Vec<(usize, usize, usize)>,
    /// Prompt tokens each slot prefills this step.
    prefill_take: Vec<usize>,
    /// (slot, prompt tokens left) of the prefilling slots in admission order, this step.
    prompts_left: Vec<(usize, usize)>,
    prefill_planner: PrefillPlanner,
    /// Measured step costs, for the wait forecast.
    costs: StepCosts,
    /// Completion tokens of recent finished requests, smoothed.
    expected_completion: f64,
    /// Publish the blocks of tokens held in KV with the forecast (only `--max-queue-ms`
    /// reads them, and gathering them costs a pass over every slot and host entry).
    forecast_prefixes: bool,
    /// What the slots or the host tier hold changed since the blocks were last published.
    held_changed: bool,
}

impl<E: Executor> Scheduler<E> {
    pub fn new(
        executor: E,
        tokenizer: Arc<dyn Tokenizer>,
        queue: Arc<WaitQueue<PendingRequest>>,
        stats: Arc<EngineStats>,
        max_running: usize,
        prefix_caching: bool,
        host_cache_bytes: usize,
    ) -> Self {
        let batch_limit = executor.max_batch_tokens();
        let host_cache_budget = if prefix_caching { host_cache_bytes } else { 0 };
        stats.set_host_cache(host_cache_budget, Default::default());
        Self {
            executor,
            tokenizer,
            queue,
            stats,
            slots: (0..max_running).map(|_| None).collect(),
            prefix_cache: PrefixCache::new(max_running),
            host_cache: (host_cache_budget > 0).then(|| HostCache::new(host_cache_budget)),
            host_cache_budget,
            copy_pending: vec![None; max_running],
            admission_order: VecDeque::with_capacity(max_running),
            step_budget: batch_limit,
            batch_limit,
            prefix_caching,
            batch: Vec::with_capacity(batch_limit),
            outputs: Vec::with_capacity(max_running),
            prompt_rows: Vec::new(),
            prefill_take: vec![0; max_running],
            prompts_left: Vec::with_capacity(max_running),
            prefill_planner: PrefillPlanner::default(),
            costs: StepCosts::default(),
            expected_completion: 128.0,
            forecast_prefixes: false,
            held_changed: false,
        }
    }

    /// Caps what a step computes below what a decode call accepts; the difference is room
    /// for widened prefills (`widen_prefills`).
    pub fn with_step_budget(mut self, tokens: usize) -> Self {
        self.step_budget = tokens.clamp(1, self.batch_limit);
        self
    }

    /// Lets the wait forecast see which prompt prefixes are cached (see `Outlook::cached_blocks`).
    pub fn forecasting_cached_prefixes(mut self, on: bool) -> Self {
        self.forecast_prefixes = on && self.prefix_caching;
        self.held_changed = self.forecast_prefixes;
        self
    }

    /// Runs until the queue is closed, then cancels whatever is left.
    pub fn run(mut self) {
        loop {
            if self.queue.is_closed() {
                break;
            }
            if self.admission_order.is_empty() {
                self.publish(false);
                if !self.queue.wait_for_item(IDLE_WAKE) {
                    break;
                }
            }
            self.arrange_slots();
            if self.admission_order.is_empty() {
                continue;
            }
            // Published before the step too, so the counts are current by the time the
            // step's first tokens reach their callers.
            self.publish(true);
            self.step();
            self.stats.record_step();
            self.publish(true);
        }
        self.cancel_all();
        self.publish(false);
    }

    /// Who runs in the next step, and in which slot.
    fn arrange_slots(&mut self) {
        self.reap_cancelled();
        self.admit();
        self.close_gap();
    }

    /// Frees sequences and queue entries whose caller dropped the stream.
    fn reap_cancelled(&mut self) {
        for slot in 0..self.slots.len() {
            if self.slots[slot].as_ref().is_some_and(|s| s.request.is_cancelled()) {
                self.release(slot, FinishReason::Cancelled, None);
            }
        }
        for request in self.queue.remove_where(PendingRequest::is_cancelled) {
            self.stats.record_finished(request.prompt.len() as u32, 0, true);
        }
    }

    fn admit(&mut self) {
        while self.admission_order.len() < self.slots.len() {
            // A request runs as `n` sequences: it waits, keeping its turn, until `n` slots are free.
            let free = self.slots.iter().filter(|s| s.is_none()).count();
            let Some(request) = self.queue.pop_if(|r| r.is_cancelled() || r.n as usize <= free) else { break };
            if request.is_cancelled() {
                (0..request.n).for_each(|_| self.queue.finish_one());
                self.stats.record_finished(request.prompt.len() as u32, 0, true);
                continue;
            }
            let Some(slot) = self.free_slot() else { break };
            // Prompt scores need the logits of every prompt token: no cached prefix has them.
            let reusable = if request.prompt_logprobs.is_some() { &[][..] } else { &request.prompt[..] };
            let reused = self.load_prefix(slot, reusable);
            self.stats.record_prefix_query(request.prompt.len(), reused);
            self.executor.truncate_sequence(slot, reused as u32);
            self.executor.start_sequence(slot, &request.sampling, request.ignore_eos);
            let choices: Vec<PendingRequest> = (1..request.n).map(|index| request.choice(index)).collect();
            self.slots[slot] = Some(Sequence::new(request, reused as u32));
            self.admission_order.push_back(slot);
            self.held_changed = true;
            let forks = self.admit_choices(choices);
            if let Some(seq) = self.slots[slot].as_mut() {
                seq.forks = forks;
            }
        }
    }

    /// The slot a new request takes: the lowest free one, as llama.cpp computes attention
    /// over the contiguous range of KV streams a batch touches and packing sequences low
    /// keeps batches cheap; but not one with a KV copy pending when another is free. Such a
    /// slot cannot be restored into before the next decode, so a conversation whose KV is
    /// in host memory would be prefilled again, and an idle donor keeps its prefix in place.
    fn free_slot(&self) -> Option<usize> {
        // min_by_key keeps the first of equals: the lowest free slot without a pending copy.
        (0..self.slots.len()).filter(|&s| self.slots[s].is_none()).min_by_key(|&s| self.copy_pending[s].is_some())
    }

    /// Moves the highest running sequence down into the lowest free slot, if one is free
    /// below it. llama.cpp runs a pass over the weights per run of consecutive slots, so a
    /// hole left by a finished request costs every later step until it is filled; `admit`
    /// fills holes with waiting requests, and this closes one when nobody waits. One move
    /// per step bounds the copying a step can take on.
    fn close_gap(&mut self) {
        let Some(free) = self.slots.iter().position(Option::is_none) else { return };
        let Some(highest) = self.slots.iter().rposition(Option::is_some) else { return };
        let Some(seq) = self.slots[highest].as_ref() else { return };
        let tokens_left = seq.request.max_tokens.saturating_sub(seq.generated);
        // Choices tied to each other by slot wait for their fork before any of them moves.
        let forking = seq.awaits_fork || !seq.forks.is_empty();
        if highest < free || tokens_left < MIN_TOKENS_LEFT_TO_MOVE || forking {
            return;
        }
        self.preserve(free, 0);
        let Some(seq) = self.slots[highest].take() else { return };
        self.executor.move_sequence(highest, free);
        self.held_changed = true;
        self.mark_copy(highest, free);
        self.stats.record_move();
        // The source keeps its cells: it is now an idle slot caching this prefix.
        if self.prefix_caching {
            self.prefix_cache.store(highest, seq.kv_tokens().collect());
        } else {
            self.executor.truncate_sequence(highest, 0);
        }
        self.prefix_cache.clear(free);
        self.slots[free] = Some(seq);
        for slot in self.admission_order.iter_mut().filter(|s| **s == highest) {
            *slot = free;
        }
    }

    fn step(&mut self) {
        self.plan_batch();
        if self.batch.is_empty() {
            return;
        }
        let started = std::time::Instant::now();
        let decoded = self.executor.decode(&self.batch);
        let prefilled: usize = self.prefill_take.iter().sum();
        let took_ms = started.elapsed().as_secs_f64() * 1000.0;
        self.costs.observe(took_ms, self.batch.len() - prefilled, prefilled);
        // Pending KV copies were carried out at the start of this decode.
        self.copy_pending.iter_mut().for_each(|p| *p = None);
        tracing::trace!(
            tokens = self.batch.len(),
            sequences = self.outputs.len(),
            slot_runs = slot_runs(&self.batch),
            decode_ms = took_ms,
            "step"
        );
        if let Err(error) = decoded {
            tracing::error!(%error, tokens = self.batch.len(), "decode failed");
            let slots: Vec<usize> = self.admission_order.iter().copied().collect();
            for slot in slots {
                self.release(slot, FinishReason::Error, Some(error.to_string()));
            }
            return;
        }
        self.stats.record_prompt_computed(prefilled);
        for entry in &self.batch {
            if let Some(seq) = self.slots[entry.seq].as_mut() {
                seq.cached = seq.cached.max(entry.pos + 1);
            }
        }
        self.score_prompts();
        self.fork_choices();
        let ctx_limit = self.executor.ctx_per_sequence();
        for i in 0..self.outputs.len() {
            let (slot, batch_index) = self.outputs[i];
            let Some(seq) = self.slots[slot].as_mut() else { continue };
            if seq.request.prompt_logprobs.is_some() && seq.request.index == 0 && seq.is_prefilling() {
                seq.send_prompt_scores(self.tokenizer.as_ref());
            }
            // Scoring a prompt without generating (`max_tokens` 0): done once it is computed.
            if seq.request.max_tokens == 0 {
                self.release(slot, FinishReason::Length, None);
                continue;
            }
            let accepted = seq.constraint_mask().and_then(|mask| {
                let token = self.executor.sample(slot, batch_index, mask.as_ref());
                if let Some(top) = seq.request.logprobs {
                    let (logprob, top) = self.executor.logprobs(batch_index, token, top as usize);
                    seq.note_logprob(token_logprob(self.tokenizer.as_ref(), token, logprob, top));
                }
                seq.accept_token(token, self.tokenizer.as_ref(), ctx_limit, &self.stats.constraints)
            });
            match accepted {
                Ok(None) => {}
                Ok(Some(reason)) => self.release(slot, reason, None),
                Err(error) => self.release(slot, FinishReason::Error, Some(error)),
            }
        }
    }

    /// Fills `batch` and `outputs` for this step.
    ///
    /// Which prompts get prefill budget is decided oldest first, but the batch itself is
    /// laid out in slot order: with one KV stream per sequence, llama.cpp splits a batch
    /// into one ubatch (one pass over the weights) per run of consecutive sequence ids in
    /// batch order, so admission order would cost a pass per out-of-order run.
    fn plan_batch(&mut self) {
        self.batch.clear();
        self.outputs.clear();
        self.prompt_rows.clear();
        // A generating sequence feeds its last token, and any tokens its constraint forced.
        let generating: usize = self.slots.iter().flatten().map(|s| s.uncached_generated().len()).sum();
        let budget = self.step_budget.saturating_sub(generating);
        self.prefill_take.iter_mut().for_each(|n| *n = 0);
        self.prompts_left.clear();
        for &slot in &self.admission_order {
            let Some(seq) = self.slots[slot].as_ref().filter(|s| s.is_prefilling() && !s.awaits_fork) else { continue };
            self.prompts_left.push((slot, seq.prompt_left().len()));
        }
        self.prefill_planner.plan(budget, &self.prompts_left, &mut self.prefill_take);
        self.widen_prefills(generating);
        for (slot, seq) in self.slots.iter().enumerate() {
            let Some(seq) = seq else { continue };
            if !seq.is_prefilling() {
                let tokens = seq.uncached_generated();
                for (i, &token) in tokens.iter().enumerate() {
                    let logits = i + 1 == tokens.len();
                    if logits {
                        self.outputs.push((slot, self.batch.len()));
                    }
                    self.batch.push(BatchToken { token, pos: seq.cached + i as u32, seq: slot, logits });
                }
                continue;
            }
            let take = self.prefill_take[slot];
            let completes_prompt = take > 0 && take == seq.prompt_left().len();
            let scored = seq.request.prompt_logprobs.is_some();
            for (i, &token) in seq.prompt_left()[..take].iter().enumerate() {
                let sampled = completes_prompt && i + 1 == take;
                let pos = seq.cached + i as u32;
                if sampled {
                    self.outputs.push((slot, self.batch.len()));
                }
                if scored {
                    self.prompt_rows.push((slot, self.batch.len(), pos as usize));
                }
                self.batch.push(BatchToken { token, pos, seq: slot, logits: sampled || scored });
            }
        }
    }

    /// Widens this step's prefills where the runtime computes a wider one faster
    /// (`Executor::prefill_width`), by computing some of their cached prompt tokens again.
    /// Only a prefill that completes its prompt is widened (a chunk the budget cut short
    /// goes on next step anyway), and only as far as one decode call accepts.
    fn widen_prefills(&mut self, decode_tokens: usize) {
        let prefilling = self.prefill_take.iter().filter(|&&n| n > 0).count();
        // The batch must stay within what one decode call accepts.
        let mut room = self.batch_limit.saturating_sub(decode_tokens + self.prefill_take.iter().sum::<usize>());
        for (slot, take) in self.prefill_take.iter_mut().enumerate() {
            let Some(seq) = self.slots[slot].as_mut() else { continue };
            if *take == 0 || *take < seq.prompt_left().len() {
                continue;
            }
            let cached = seq.cached as usize;
            let width = self.executor.prefill_width(cached, *take, prefilling > 1).clamp(*take, *take + cached);
            let extra = width - *take;
            if extra > 0 && extra <= room {
                let hits_lost = seq.rewind_prompt(extra as u32);
                self.executor.truncate_sequence(slot, seq.cached);
                self.stats.record_prefix_recomputed(hits_lost as usize);
                *take = width;
                room -= extra;
            }
        }
    }

    fn release(&mut self, slot: usize, reason: FinishReason, error: Option<String>) {
        let Some(seq) = self.slots[slot].take() else { return };
        self.executor.end_sequence(slot);
        // After a failed decode the KV contents are not to be trusted.
        if reason == FinishReason::Error || !self.prefix_caching {
            self.executor.truncate_sequence(slot, 0);
            self.prefix_cache.clear(slot);
        } else {
            self.prefix_cache.store(slot, seq.kv_tokens().collect());
        }
        self.admission_order.retain(|&s| s != slot);
        self.held_changed = true;
        self.queue.finish_one();
        let (id, first_choice) = (seq.request.id, seq.request.index == 0);
        // Choices still waiting for this one's prompt end with it.
        let forks = seq.forks.clone();
        let completion = seq.finish(reason, error.clone());
        if matches!(reason, FinishReason::Eos | FinishReason::Stop | FinishReason::Length) {
            let tokens = f64::from(completion.usage.completion_tokens);
            self.expected_completion += 0.1 * (tokens - self.expected_completion);
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

    fn cancel_all(&mut self) {
        for slot in 0..self.slots.len() {
            self.release(slot, FinishReason::Cancelled, None);
        }
        for request in self.queue.close() {
            self.stats.record_finished(request.prompt.len() as u32, 0, true);
            request.finish_unstarted(FinishReason::Cancelled, None);
        }
    }

    fn publish(&mut self, busy: bool) {
        let (mut used, mut cached) = (0u64, 0u64);
        for (slot, seq) in self.slots.iter().enumerate() {
            let cells = u64::from(self.executor.sequence_cells(slot));
            if seq.is_some() {
                used += cells;
            } else {
                cached += cells;
            }
        }
        self.stats.set_occupancy(self.admission_order.len(), self.queue.len(), used, cached);
        // Before the step too, like the counts: a caller that sees its first token must
        // find the slot it took already counted in the next request's predicted wait.
        self.publish_forecast();
        self.stats.mark_progress(busy);
    }

    /// When each slot should come free: its prompt left to prefill, then as many tokens as
    /// recent requests produced (never past its `max_tokens`).
    fn publish_forecast(&mut self) {
        let (costs, expected_completion, step_tokens) = (self.costs, self.expected_completion, self.step_budget);
        let held_blocks = (self.forecast_prefixes && std::mem::take(&mut self.held_changed))
            .then(|| std::sync::Arc::new(self.held_blocks()));
        self.stats.forecast.publish(|outlook| {
            if let Some(blocks) = held_blocks {
                outlook.cached_blocks = blocks;
            }
            outlook.at = std::time::Instant::now();
            outlook.prefill_left = 0;
            outlook.slot_free_ms.clear();
            for seq in &self.slots {
                let Some(seq) = seq else {
                    outlook.slot_free_ms.push(0.0);
                    continue;
                };
                let prompt_left = seq.prompt_left().len();
                outlook.prefill_left += prompt_left;
                let cap = f64::from(seq.request.max_tokens.saturating_sub(seq.generated));
                let expected = (expected_completion - f64::from(seq.generated)).max(1.0);
                let free_ms = prompt_left as f64 * costs.prefill_token_ms + cap.min(expected) * costs.decode_step_ms;
                outlook.slot_free_ms.push(free_ms);
            }
            outlook.slot_free_ms.sort_by(f64::total_cmp);
            outlook.costs = costs;
            outlook.expected_completion = expected_completion;
            outlook.step_tokens = step_tokens;
        });
    }
}

/// A sampled token's log-probability with its alternatives, their bytes attached.
fn token_logprob(tokenizer: &dyn Tokenizer, token: TokenId, logprob: f32, top: Vec<(TokenId, f32)>) -> TokenLogprob {
    let bytes = |t: TokenId| {
        let mut out = Vec::new();
        tokenizer.append_token_bytes(t, &mut out);
        out
    };
    let top = top.into_iter().map(|(t, logprob)| TopLogprob { token: t, bytes: bytes(t), logprob }).collect();
    TokenLogprob { token, bytes: bytes(token), logprob, top }
}

/// Runs of consecutive slots in a slot-ordered batch: llama.cpp runs at least one pass
/// over the weights per run, so a gap between running slots costs a pass.
fn slot_runs(batch: &[BatchToken]) -> usize {
    let breaks = batch.windows(2).filter(|w| w[1].seq > w[0].seq + 1).count();
    usize::from(!batch.is_empty()) + breaks
}

#[cfg(test)]
#[path = "scheduler_tests.rs"]
mod tests;
