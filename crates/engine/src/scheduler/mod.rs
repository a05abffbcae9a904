//! The continuous-batching loop that runs on the engine thread.
//!
//! Before each step the running sequences are arranged (`admission`: cancelled ones reaped,
//! waiting requests admitted into free slots, a hole below the highest slot closed). A step
//! then reads as its phases (`phases`): **propose** (the drafter offers drafts, and the
//! step's layout chooses every sequence's extra rows, drafts and grammar-forced tokens,
//! together: `layout`), **plan** (the batch: those rows, then prompt chunks up to the
//! step's budget: `batch`), **decode** (the runtime computes it; its cost is measured),
//! **verify** (each output row is sampled, drafts kept or dropped: `decode`), and
//! **release** (finished sequences leave their slots: `release`). Long prompts are
//! therefore prefilled in chunks while running streams keep receiving tokens, and a new
//! request can start in the very next step. Which tokens' KV each slot holds is
//! `kv::residency`'s; `n` choices and scored prompts are `choices`'; what steps cost and the
//! wait forecast are `cost`'s; drafts are `speculation`'s.

use std::sync::Arc;
use std::time::Duration;

use crate::control::EngineControl;
use crate::cost::step_costs::StepCostModel;
use crate::cost::wait_forecast::{Forecast, WaitForecaster};
use crate::cost::Costs;
use crate::kv::kept_prefixes::KeptPrefixes;
use crate::kv::residency::KvResidency;
use crate::queue::WaitQueue;
use crate::request::pending::PendingRequest;
use crate::runtime::{Executor, Tokenizer};
use crate::speculation::draft_lengths::FairnessGuard;
use crate::speculation::model_drafts::ModelDrafts;
use crate::speculation::ngram_pool::NgramPool;
use crate::speculation::{DraftMode, Drafter};
use crate::stats::EngineStats;
use batch::StepBatch;
use choices::Choices;
use running::Running;

mod admission;
mod batch;
mod choices;
pub(crate) mod decode;
mod layout;
mod phases;
mod release;
mod running;

/// How long a starting engine waits for the model's previous one to hand back the prefix
/// cache it keeps (`keeping`): that one may be draining its last requests.
const PREVIOUS_ENGINE_WAIT: Duration = Duration::from_secs(5);

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
    /// Draft tokens and verify them in the batch: by prompt lookup, or...
    pub speculative: bool,
    /// ...by the executor's draft model, (at least, at most) so many tokens a sequence and
    /// step (`model_drafts`).
    pub draft_tokens: Option<(usize, usize)>,
    /// Keep generating sequences' mean time per token within this many milliseconds by
    /// when prompts are prefilled beside them (`EngineConfig::tpot_slo_ms`).
    pub tpot_slo_ms: Option<u32>,
    /// What drafts may cost the streams beside them (`draft_lengths::FairnessGuard`).
    pub draft_guard: FairnessGuard,
    /// Steps priced by fixed costs, not measured ones (`EngineConfig::fixed_step_prices`).
    pub fixed_step_prices: bool,
}

pub(crate) struct Scheduler<E: Executor> {
    executor: E,
    tokenizer: Arc<dyn Tokenizer>,
    queue: Arc<WaitQueue<PendingRequest>>,
    stats: Arc<EngineStats>,
    running: Running,
    kv: KvResidency<E::Snapshot>,
    batch: StepBatch,
    costs: Costs,
    drafter: Drafter,
    choices: Choices,
    /// Work asked of the engine thread besides requests (`control`).
    control: Arc<EngineControl>,
}

impl<E: Executor> Scheduler<E> {
    pub fn new(
        executor: E,
        tokenizer: Arc<dyn Tokenizer>,
        queue: Arc<WaitQueue<PendingRequest>>,
        stats: Arc<EngineStats>,
        forecast: Arc<Forecast>,
        config: SchedulerConfig,
    ) -> Self {
        let slots = config.max_running;
        let batch = StepBatch::new(slots, executor.max_batch_tokens(), executor.ubatch_rows(), config.step_budget);
        let mut wait = WaitForecaster::new(batch.step_budget(), forecast);
        wait.max_queue_ms = config.max_queue_ms;
        wait.publish_prefixes = config.forecast_prefixes && config.prefix_caching;
        let step = if config.fixed_step_prices { StepCostModel::fixed() } else { StepCostModel::default() };
        let costs = Costs { step, wait, tpot_slo_ms: config.tpot_slo_ms };
        let mode = match (config.speculative, config.draft_tokens) {
            (false, _) => DraftMode::Off,
            (true, Some((min, max))) => DraftMode::Model(ModelDrafts::new(min, max)),
            (true, None) => DraftMode::Lookups { pool: NgramPool::default() },
        };
        Self {
            kv: KvResidency::new(slots, config.prefix_caching, config.host_cache_bytes, &stats),
            executor,
            tokenizer,
            queue,
            stats,
            running: Running::new(slots),
            batch,
            costs,
            drafter: Drafter::new(mode, config.draft_guard, slots),
            choices: Choices::new(slots),
            control: Arc::default(),
        }
    }

    /// Runs until the queue is closed, then cancels whatever is left.
    pub fn run(mut self) {
        loop {
            if self.queue.is_closed() {
                break;
            }
            self.serve_control();
            if self.running.is_idle() {
                self.publish(false);
                if !self.queue.wait_for_item(IDLE_WAKE) {
                    break;
                }
            }
            self.arrange_slots();
            if self.running.is_idle() {
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
        self.kv.hand_back(&mut self.executor, &self.stats, &self.running);
        self.publish(false);
    }

    /// Starts from the prefix cache `kept` holds for this model and leaves its own there
    /// when it stops (`kv::kept_prefixes`).
    pub fn keeping(mut self, kept: &KeptPrefixes<E::Snapshot>, fingerprint: String) -> Self {
        let (lease, cache) = kept.lease(fingerprint, PREVIOUS_ENGINE_WAIT);
        self.kv.keeping(lease, cache, &self.stats);
        self
    }

    /// Takes work from `control` (the engine's handle) instead of a control of its own.
    pub fn controlled(mut self, control: Arc<EngineControl>) -> Self {
        self.control = control;
        self
    }

    /// Does what callers asked of the engine thread since the last step: an idle engine
    /// gets to it within `IDLE_WAKE`.
    fn serve_control(&mut self) {
        let askers = self.control.take_flush_askers();
        if askers.is_empty() {
            return;
        }
        let flushed = self.kv.flush(&mut self.executor, &self.stats, &self.running);
        tracing::info!(?flushed, "prefix cache flushed");
        for asker in askers {
            let _ = asker.send(flushed);
        }
    }

    /// One step, as its phases: propose, plan, decode, verify (which releases what ends).
    fn step(&mut self) {
        let first_token_due = self.first_token_due();
        let guard_cut = self.propose(first_token_due);
        self.plan();
        if self.batch.tokens.is_empty() {
            return;
        }
        match self.decode(first_token_due, guard_cut) {
            Ok(()) => self.verify(),
            Err(error) => self.fail_all(&error.to_string()),
        }
    }
}

#[cfg(test)]
mod tests;
