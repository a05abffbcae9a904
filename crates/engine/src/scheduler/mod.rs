//! The continuous-batching loop that runs on the engine thread.
//!
//! Each step admits waiting requests into free slots, builds one batch (`batch`: a decode
//! row for every generating sequence, then prompt chunks up to the step's token budget),
//! runs it, and hands each output row to its sequence's decoder (`decode`). Long prompts
//! are therefore prefilled in chunks while running streams keep receiving a token per
//! step, and a new request can start in the very next step. Which tokens' KV each slot
//! holds, and where an admitted request's cached prefix comes from (its slot, another
//! slot, host memory), is `kv`'s; `n` choices and scored prompts are `choices`'; the TPOT
//! objective's prefill budget is `tpot_budget`'s; the wait forecast is `Forecaster`'s,
//! which the loop reports steps and completions to.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::draft_lengths::{FairnessGuard, PassRules};
use crate::forecast::{Forecaster, SlotLoad};
use crate::model_drafts::ModelDrafts;
use crate::ngram_pool::NgramPool;
use crate::queue::WaitQueue;
use crate::runtime::{Executor, Tokenizer};
use crate::sequence::{PendingRequest, Sequence};
use crate::speculate::{self, DraftScratch, DraftStep};
use crate::stats::EngineStats;
use batch::{StepBatch, StepSizing};
use decode::{decode_next, verify, DecodeContext, SlotLogits};
use kv::KvResidency;
use rillm_backend::{FinishReason, Rejected};

mod batch;
mod choices;
pub(crate) mod decode;
mod kv;
mod tpot_budget;

/// Moving a sequence copies its whole KV stream, which a few steps with one less pass over
/// the weights repay; a sequence this close to its token limit is left where it is.
const MIN_TOKENS_LEFT_TO_MOVE: u32 = 16;

/// How long an idle engine sleeps before refreshing its heartbeat.
const IDLE_WAKE: Duration = Duration::from_millis(500);

/// How the scheduler is set up; the engine's configuration decides it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct SchedulerConfig {
    /// Slots: sequences that run at once.
    pub max_running: usize,
    /// Tokens a step computes, widened prefills aside (at most what a decode call accepts;
    /// the difference is room for widened prefills).
    pub step_budget: usize,
    /// Reuse cached prompt prefixes (in slots and host memory).
    pub prefix_caching: bool,
    /// Host memory for the prefix cache's RAM tier; 0 turns it off.
    pub host_cache_bytes: usize,
    /// Publish the blocks of tokens held in KV with the forecast (only `--max-queue-ms`
    /// reads them, and gathering them costs a pass over every slot and host entry).
    pub forecast_prefixes: bool,
    /// `--max-queue-ms`: a request that reaches the head of the queue after waiting so long
    /// that its first token would come later than this is refused there (`refused_at_head`).
    pub max_queue_ms: Option<u64>,
    /// Draft tokens and verify them in the batch: by prompt lookup (`speculate`), or...
    pub speculative: bool,
    /// ...by the executor's draft model, (at least, at most) so many tokens a sequence and
    /// step (`model_drafts`).
    pub draft_tokens: Option<(usize, usize)>,
    /// Keep generating sequences' mean time per token within this many milliseconds by
    /// when prompts are prefilled beside them (`EngineConfig::tpot_slo_ms`).
    pub tpot_slo_ms: Option<u32>,
    /// What drafts may cost the streams beside them (`draft_lengths::FairnessGuard`).
    pub draft_guard: FairnessGuard,
}

pub(crate) struct Scheduler<E: Executor> {
    executor: E,
    tokenizer: Arc<dyn Tokenizer>,
    queue: Arc<WaitQueue<PendingRequest>>,
    stats: Arc<EngineStats>,
    slots: Vec<Option<Sequence>>,
    /// Slots in admission order, the order prefill budget is handed out in.
    admission_order: VecDeque<usize>,
    kv: KvResidency<E::Snapshot>,
    batch: StepBatch,
    forecaster: Forecaster,
    forecast_prefixes: bool,
    max_queue_ms: Option<u64>,
    speculative: bool,
    tpot_slo_ms: Option<u32>,
    draft_guard: FairnessGuard,
    /// A finished sequence's tokens, gathered for the n-gram pool (a buffer reused).
    history: Vec<rillm_backend::TokenId>,
    /// Buffers prompt lookup reuses across steps.
    draft_scratch: DraftScratch,
    /// Finished sequences' tokens, to draft from where a sequence goes on like one of them.
    ngram_pool: NgramPool,
    /// With a draft model: drafts come from it instead of lookups.
    model_drafts: Option<ModelDrafts>,
}

impl<E: Executor> Scheduler<E> {
    pub fn new(
        executor: E,
        tokenizer: Arc<dyn Tokenizer>,
        queue: Arc<WaitQueue<PendingRequest>>,
        stats: Arc<EngineStats>,
        config: SchedulerConfig,
    ) -> Self {
        let SchedulerConfig {
            max_running,
            step_budget,
            prefix_caching,
            host_cache_bytes,
            forecast_prefixes,
            max_queue_ms,
            speculative,
            draft_tokens,
            tpot_slo_ms,
            draft_guard,
        } = config;
        let batch = StepBatch::new(max_running, executor.max_batch_tokens(), executor.ubatch_rows(), step_budget);
        let forecaster = Forecaster::new(batch.step_budget());
        let kv = KvResidency::new(max_running, prefix_caching, host_cache_bytes, &stats);
        Self {
            executor,
            tokenizer,
            queue,
            stats,
            slots: (0..max_running).map(|_| None).collect(),
            admission_order: VecDeque::with_capacity(max_running),
            kv,
            batch,
            forecaster,
            forecast_prefixes: forecast_prefixes && prefix_caching,
            max_queue_ms,
            speculative,
            tpot_slo_ms,
            draft_guard,
            history: Vec::new(),
            draft_scratch: DraftScratch::default(),
            ngram_pool: NgramPool::default(),
            model_drafts: draft_tokens.map(|(min, max)| ModelDrafts::new(min, max)),
        }
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

    /// Frees sequences and queue entries whose caller dropped the stream, and ends the
    /// choices it ended early (as a stop string would: `stop`, usage counted).
    fn reap_cancelled(&mut self) {
        for slot in 0..self.slots.len() {
            let Some(seq) = self.slots[slot].as_ref() else { continue };
            if seq.request.is_cancelled() {
                self.release(slot, FinishReason::Cancelled, None);
            } else if seq.request.is_ended_early() && !seq.is_prefilling() {
                self.release(slot, FinishReason::Stop, None);
            } else if seq.request.take_restart() {
                self.restart(slot);
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
            let Some(mut request) = self.queue.pop_if(|r| r.is_cancelled() || r.n as usize <= free) else { break };
            if request.is_cancelled() {
                (0..request.n).for_each(|_| self.queue.finish_one());
                self.stats.record_finished(request.prompt.len() as u32, 0, true);
                continue;
            }
            if let Some(refusal) = self.refused_at_head(&request) {
                (0..request.n).for_each(|_| self.queue.finish_one());
                if let Some(started) = request.started.take() {
                    let _ = started.send(Err(refusal.clone()));
                }
                // A caller that never awaited the start signal learns it from the stream.
                request.finish_unstarted(FinishReason::Error, Some(refusal.to_string()));
                continue;
            }
            if let Some(started) = request.started.take() {
                let _ = started.send(Ok(()));
            }
            let Some(slot) = self.kv.free_slot(&self.slots) else { break };
            // Prompt scores need the logits of every prompt token: no cached prefix has them.
            let reusable = if request.prompt_logprobs.is_some() { &[][..] } else { &request.prompt[..] };
            let reused = self.kv.load_prefix(&mut self.executor, &self.stats, &self.slots, slot, reusable);
            self.stats.record_prefix_query(request.prompt.len(), reused);
            self.executor.truncate_sequence(slot, reused as u32);
            self.executor.start_sequence(slot, &request.sampling, request.ignore_eos);
            let choices: Vec<PendingRequest> = (1..request.n).map(|index| request.choice(index)).collect();
            let mut seq = Sequence::new(request, reused as u32);
            seq.find_start_forced(self.executor.ctx_per_sequence());
            self.slots[slot] = Some(seq);
            self.admission_order.push_back(slot);
            let forks = self.admit_choices(choices);
            if let Some(seq) = self.slots[slot].as_mut() {
                seq.forks = forks;
            }
        }
    }

    /// `--max-queue-ms` again, at the head of the queue: the wait `submit` predicted may
    /// have been wrong either way; now most of it is measured. A request whose first token
    /// cannot come within the bound even at best (what it waited, plus its own prefill with
    /// nothing else in the way) is refused before any of its work is done: it would miss the
    /// objective anyway, and the slot goes to one that can still make it. Only certain misses
    /// are refused here (the other prompts a step shares are not counted against it). Its
    /// route has held the response back, so the refusal is still a 429.
    fn refused_at_head(&self, request: &PendingRequest) -> Option<Rejected> {
        let limit_ms = self.max_queue_ms?;
        request.started.as_ref()?;
        let now = Instant::now();
        let waited_ms = now.saturating_duration_since(request.submitted).as_secs_f64() * 1000.0;
        let predicted_ms = waited_ms + self.forecaster.costs().own_first_token_ms(request.expected_prefill);
        (predicted_ms > limit_ms as f64).then_some(Rejected::WaitedTooLong {
            waited_ms: waited_ms as u64,
            predicted_ms: predicted_ms as u64,
            limit_ms,
        })
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
        let Some(seq) = self.slots[highest].take() else { return };
        // The source keeps its cells: it is now an idle slot caching this prefix.
        self.kv.move_sequence(&mut self.executor, &self.stats, highest, free, seq.kv_tokens().collect());
        self.stats.record_move();
        self.slots[free] = Some(seq);
        for slot in self.admission_order.iter_mut().filter(|s| **s == highest) {
            *slot = free;
        }
    }

    fn step(&mut self) {
        // Requests waiting for a slot mean the server is saturated: every row then goes to
        // sequences already running, where a draft costs about a token's compute and is
        // not always kept, and speculation is off until the queue empties (vLLM turns it
        // off by batch size). Past capacity it had made both TTFT and TPOT worse here.
        // Nor is anything drafted in a step that ends a prompt: that step gives a request its
        // first token, and verification rows (each about a prompt token's compute) would
        // hold it back; the running streams draft again a step later.
        let first_token_due = self
            .slots
            .iter()
            .flatten()
            .any(|s| s.is_prefilling() && !s.awaits_fork && s.prompt_left().len() <= self.batch.step_budget());
        let lookups = self.speculative && self.queue.is_empty() && !first_token_due;
        let budget = self.batch.draft_budget(&self.slots);
        let ctx_limit = self.executor.ctx_per_sequence();
        let prices = self.forecaster.row_costs();
        let rules =
            PassRules { ubatch_rows: self.batch.ubatch_rows(), attention_tile: self.executor.attention_tile_rows() };
        let step = DraftStep { prices, ctx_limit, budget, rules, lookups, guard: self.draft_guard };
        let guard_cut = match self.model_drafts.as_mut().filter(|_| lookups) {
            Some(drafts) => drafts.propose(&mut self.slots, &mut self.executor, step),
            // Without lookups this still lays out the tokens constraints forced.
            None => speculate::propose_drafts(&mut self.slots, &self.ngram_pool, step, &mut self.draft_scratch),
        };
        if guard_cut {
            self.stats.record_guard_cut();
        }
        let generating = StepBatch::generating_rows(&self.slots);
        let sizing = StepSizing {
            generating_rows: generating,
            prefill_cap: tpot_budget::prefill_cap(&self.slots, generating, &mut self.forecaster, self.tpot_slo_ms),
            join_below: self.forecaster.step_in_prompt_tokens(generating),
        };
        let (slots, order) = (&mut self.slots, &self.admission_order);
        self.batch.plan(slots, order, &mut self.executor, &self.stats, &sizing);
        let rows = self.batch.tokens.len();
        if rows == 0 {
            return;
        }
        let started = Instant::now();
        let decoded = self.executor.decode(&self.batch.tokens);
        let took_ms = started.elapsed().as_secs_f64() * 1000.0;
        let prefilled = self.batch.prefilled();
        let drafted: usize = self.slots.iter().flatten().map(|s| s.drafts.len()).sum();
        let passes = self.batch.passes();
        // Decode-only steps made in one pass price drafts by their row count (a step of
        // several passes costs what its passes do: `ubatch_passes`); the wait forecast
        // learns from steps without drafts.
        if prefilled == 0 && passes == 1 {
            self.forecaster.observe_decode_rows(rows, took_ms);
        }
        if drafted == 0 {
            self.forecaster.observe_step(took_ms, rows - prefilled, prefilled);
        }
        // Pending KV copies were carried out at the start of this decode.
        self.kv.copies_done();
        // The step counts against the time per output token of every sequence past its first.
        let step_ms = self.forecaster.step_took_ms(took_ms, rows - prefilled, prefilled);
        for seq in self.slots.iter_mut().flatten().filter(|s| s.generated > 0) {
            seq.decode_elapsed_ms += step_ms;
        }
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
        if let Err(error) = decoded {
            tracing::error!(%error, rows, "decode failed");
            let slots: Vec<usize> = self.admission_order.iter().copied().collect();
            for slot in slots {
                self.release(slot, FinishReason::Error, Some(error.to_string()));
            }
            return;
        }
        self.stats.record_prompt_computed(prefilled);
        for entry in &self.batch.tokens {
            if let Some(seq) = self.slots[entry.seq].as_mut() {
                seq.cached = seq.cached.max(entry.pos + 1);
            }
        }
        // Drafts are in KV but not yet the sequence's: `verify` counts the ones it keeps.
        // Held forced tokens wait for the next step's layout.
        for seq in self.slots.iter_mut().flatten() {
            seq.cached -= seq.drafts.len() as u32;
            seq.held_forced = 0;
        }
        self.score_prompts();
        self.fork_choices();
        let ctx_limit = self.executor.ctx_per_sequence();
        for i in 0..self.batch.outputs.len() {
            let (slot, row) = self.batch.outputs[i];
            let Some(seq) = self.slots[slot].as_mut() else { continue };
            if seq.request.prompt_logprobs.is_some() && seq.request.index == 0 && seq.is_prefilling() {
                seq.send_prompt_scores(self.tokenizer.as_ref());
            }
            // Scoring a prompt without generating (`max_tokens` 0): done once it is computed.
            if seq.request.max_tokens == 0 {
                self.release(slot, FinishReason::Length, None);
                continue;
            }
            if !seq.start_forced.is_empty() {
                // The step fed them after its prompt: its first output tokens.
                match seq.accept_start_forced(self.tokenizer.as_ref(), ctx_limit, &self.stats.constraints) {
                    Ok(None) => {}
                    Ok(Some(reason)) => {
                        // Cells of forced tokens after the one that ended it hold nothing of its.
                        let kept = seq.request.prompt.len() as u32 + seq.generated;
                        if seq.cached > kept {
                            seq.cached = kept;
                            self.executor.truncate_sequence(slot, kept);
                        }
                        self.release(slot, reason, None);
                        continue;
                    }
                    Err(error) => {
                        self.end_at_constraint_failure(slot, error);
                        continue;
                    }
                }
            }
            let ctx =
                DecodeContext { tokenizer: self.tokenizer.as_ref(), ctx_limit, counters: &self.stats.constraints };
            let mut logits = SlotLogits { executor: &mut self.executor, slot };
            let decoded = if seq.drafts.is_empty() {
                decode_next(seq, row, &mut logits, &ctx)
            } else {
                verify(seq, row, &mut logits, &ctx).map(|verified| {
                    if verified.accepted < verified.drafted {
                        // The rejected drafts' cells go; the next token is fed where they began.
                        self.executor.truncate_sequence(slot, seq.cached);
                    }
                    self.stats.record_speculation(verified.drafted, verified.accepted);
                    verified.finished
                })
            };
            if let Some((predicted_ms, waited_ms)) = seq.take_forecast_outcome() {
                tracing::debug!(id = seq.request.id, predicted_ms, waited_ms, "first-token wait against its forecast");
            }
            match decoded {
                Ok(None) => {}
                Ok(Some(reason)) => self.release(slot, reason, None),
                Err(error) => self.end_at_constraint_failure(slot, error),
            }
        }
    }

    /// Starts a sequence's output again under its constraint's restart (its caller asked):
    /// the cells of what it generated go, the prompt's stay.
    fn restart(&mut self, slot: usize) {
        let ctx_limit = self.executor.ctx_per_sequence();
        let Some(seq) = self.slots[slot].as_mut() else { return };
        if let Some(keep) = seq.restart(ctx_limit) {
            self.executor.truncate_sequence(slot, keep);
            tracing::debug!(id = seq.request.id, index = seq.request.index, "output restarted");
        }
    }

    /// A constrained output that cannot go on (only the constraint fails there). Every token
    /// a sequence takes passed its grammar's mask or the lazy check first, so this is an
    /// engine bug: logged with the grammar's message (it names the tokens), counted, and
    /// the reply ends as cleanly as it can: the text so far, `stop`, no opaque error.
    fn end_at_constraint_failure(&mut self, slot: usize, error: String) {
        self.stats.constraints.record_failure();
        if let Some(seq) = self.slots[slot].as_mut() {
            let recent = seq.recent_tokens(16);
            tracing::warn!(id = seq.request.id, generated = seq.generated, ?recent, %error, "constraint failed; the reply ends here");
            seq.flush_text();
        }
        self.release(slot, FinishReason::Stop, None);
    }

    fn release(&mut self, slot: usize, reason: FinishReason, error: Option<String>) {
        let Some(seq) = self.slots[slot].take() else { return };
        self.executor.end_sequence(slot);
        // After a failed decode the KV contents are not to be trusted.
        let failed = reason == FinishReason::Error;
        self.kv.release(&mut self.executor, slot, seq.kv_tokens().collect(), failed);
        self.admission_order.retain(|&s| s != slot);
        self.queue.finish_one();
        let (id, first_choice) = (seq.request.id, seq.request.index == 0);
        // Choices still waiting for this one's prompt end with it.
        let forks = seq.forks.clone();
        let ended_on_its_own = matches!(reason, FinishReason::Eos | FinishReason::Stop | FinishReason::Length);
        if ended_on_its_own && self.speculative && self.model_drafts.is_none() {
            seq.history_into(&mut self.history);
            self.ngram_pool.insert(&self.history);
        }
        let completion = seq.finish(reason, error.clone());
        if ended_on_its_own {
            self.forecaster.observe_completion(completion.usage.completion_tokens);
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

    /// Publishes each slot's load for the wait forecast, with the prefixes held in KV when
    /// they changed and the forecast uses them.
    fn publish_forecast(&mut self) {
        let changed = self.kv.take_changed();
        let held_blocks = (self.forecast_prefixes && changed).then(|| Arc::new(self.kv.held_blocks(&self.slots)));
        let loads = self.slots.iter().map(|seq| {
            seq.as_ref().map(|seq| SlotLoad {
                prompt_left: seq.prompt_left().len(),
                generated: seq.generated,
                max_tokens: seq.request.max_tokens,
            })
        });
        self.forecaster.publish(&self.stats.forecast, loads, held_blocks);
    }
}

#[cfg(test)]
mod tests;
