//! Counters the engine publishes for metrics and health checks. Written by the engine
//! thread, read by anyone, lock-free.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use rillm_backend::{Health, PrefixCacheSnapshot, StatsSnapshot};

/// How long an engine with work may go without finishing a step before it counts as stalled.
pub const STALL_AFTER: Duration = Duration::from_secs(10);

/// What the host-memory tier of the prefix cache (`kv::host_cache`) holds and has done, for metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HostCacheCounts {
    pub entries: usize,
    pub bytes: usize,
    pub saves: u64,
    pub evictions: u64,
}

#[derive(Debug)]
pub struct EngineStats {
    started: Instant,
    running: AtomicU64,
    waiting: AtomicU64,
    kv_cells_used: AtomicU64,
    kv_cells_cached: AtomicU64,
    kv_cells_total: AtomicU64,
    busy: AtomicBool,
    alive: AtomicBool,
    /// Why the engine thread died, if it died on a fault.
    failure: OnceLock<String>,
    /// Milliseconds since `started` at the end of the last engine step or idle wake-up.
    last_progress_ms: AtomicU64,
    steps: AtomicU64,
    prompt_tokens: AtomicU64,
    /// Prompt tokens run through the model (cache hits not included).
    prompt_tokens_computed: AtomicU64,
    generation_tokens: AtomicU64,
    finished: AtomicU64,
    cancelled: AtomicU64,
    sequences_moved: AtomicU64,
    prefix: PrefixCounters,
    speculation: SpeculationCounters,
    /// Structured outputs: compiles, cache hits, constrained and forced tokens.
    pub(crate) constraints: crate::request::constraint::ConstraintCounters,
}

/// What speculative decoding drafted and kept, cumulative.
#[derive(Debug)]
struct SpeculationCounters {
    drafts: AtomicU64,
    draft_tokens: AtomicU64,
    accepted_tokens: AtomicU64,
    accepted_per_position: [AtomicU64; rillm_backend::DRAFT_POSITIONS],
    guard_cuts: AtomicU64,
}

// By hand: arrays longer than 32 have no `Default`.
impl Default for SpeculationCounters {
    fn default() -> Self {
        Self {
            drafts: AtomicU64::new(0),
            draft_tokens: AtomicU64::new(0),
            accepted_tokens: AtomicU64::new(0),
            accepted_per_position: std::array::from_fn(|_| AtomicU64::new(0)),
            guard_cuts: AtomicU64::new(0),
        }
    }
}

/// What prefix caching did, cumulative except the host tier's size.
#[derive(Debug, Default)]
struct PrefixCounters {
    queried_tokens: AtomicU64,
    hit_tokens: AtomicU64,
    host_budget_bytes: AtomicU64,
    host_bytes: AtomicU64,
    host_entries: AtomicU64,
    host_saves: AtomicU64,
    host_evictions: AtomicU64,
    host_restores: AtomicU64,
    host_restore_failures: AtomicU64,
    host_restored_tokens: AtomicU64,
    host_restore_micros: AtomicU64,
}

impl EngineStats {
    pub(crate) fn new(kv_cells_total: u64) -> Self {
        Self {
            started: Instant::now(),
            running: AtomicU64::new(0),
            waiting: AtomicU64::new(0),
            kv_cells_used: AtomicU64::new(0),
            kv_cells_cached: AtomicU64::new(0),
            kv_cells_total: AtomicU64::new(kv_cells_total),
            busy: AtomicBool::new(false),
            alive: AtomicBool::new(true),
            failure: OnceLock::new(),
            last_progress_ms: AtomicU64::new(0),
            steps: AtomicU64::new(0),
            prompt_tokens: AtomicU64::new(0),
            prompt_tokens_computed: AtomicU64::new(0),
            generation_tokens: AtomicU64::new(0),
            finished: AtomicU64::new(0),
            cancelled: AtomicU64::new(0),
            sequences_moved: AtomicU64::new(0),
            prefix: PrefixCounters::default(),
            speculation: SpeculationCounters::default(),
            constraints: Default::default(),
        }
    }

    pub fn snapshot(&self) -> StatsSnapshot {
        StatsSnapshot {
            running: self.running.load(Relaxed),
            waiting: self.waiting.load(Relaxed),
            kv_cells_used: self.kv_cells_used.load(Relaxed),
            kv_cells_cached: self.kv_cells_cached.load(Relaxed),
            kv_cells_total: self.kv_cells_total.load(Relaxed),
            steps: self.steps.load(Relaxed),
            prompt_tokens: self.prompt_tokens.load(Relaxed),
            prompt_tokens_computed: self.prompt_tokens_computed.load(Relaxed),
            generation_tokens: self.generation_tokens.load(Relaxed),
            finished: self.finished.load(Relaxed),
            cancelled: self.cancelled.load(Relaxed),
            sequences_moved: self.sequences_moved.load(Relaxed),
            prefix: {
                let p = &self.prefix;
                PrefixCacheSnapshot {
                    queried_tokens: p.queried_tokens.load(Relaxed),
                    hit_tokens: p.hit_tokens.load(Relaxed),
                    host_budget_bytes: p.host_budget_bytes.load(Relaxed),
                    host_bytes: p.host_bytes.load(Relaxed),
                    host_entries: p.host_entries.load(Relaxed),
                    host_saves: p.host_saves.load(Relaxed),
                    host_evictions: p.host_evictions.load(Relaxed),
                    host_restores: p.host_restores.load(Relaxed),
                    host_restore_failures: p.host_restore_failures.load(Relaxed),
                    host_restored_tokens: p.host_restored_tokens.load(Relaxed),
                    host_restore_micros: p.host_restore_micros.load(Relaxed),
                }
            },
            constraints: self.constraints.snapshot(),
            speculation: {
                let s = &self.speculation;
                rillm_backend::SpeculationSnapshot {
                    drafts: s.drafts.load(Relaxed),
                    draft_tokens: s.draft_tokens.load(Relaxed),
                    accepted_tokens: s.accepted_tokens.load(Relaxed),
                    accepted_per_position: std::array::from_fn(|i| s.accepted_per_position[i].load(Relaxed)),
                    guard_cuts: s.guard_cuts.load(Relaxed),
                }
            },
        }
    }

    /// Ok while the engine thread runs and, when it has work, finished a step within
    /// `stall_after`.
    pub fn health_within(&self, stall_after: Duration) -> Health {
        if let Some(reason) = self.failure.get() {
            return Health::Failed(reason.clone());
        }
        if !self.alive.load(Relaxed) {
            return Health::Failed("the engine was shut down".into());
        }
        if !self.busy.load(Relaxed) {
            return Health::Ok;
        }
        let now_ms = self.started.elapsed().as_millis() as u64;
        if now_ms.saturating_sub(self.last_progress_ms.load(Relaxed)) <= stall_after.as_millis() as u64 {
            Health::Ok
        } else {
            Health::Stalled
        }
    }

    /// [`Self::health_within`] the default stall limit: a step on these models takes
    /// milliseconds, so ten seconds without one means stuck.
    pub fn health(&self) -> Health {
        self.health_within(STALL_AFTER)
    }

    /// Why the engine thread died on a fault, if it did.
    pub fn failure(&self) -> Option<&str> {
        self.failure.get().map(String::as_str)
    }

    pub(crate) fn set_occupancy(&self, running: usize, waiting: usize, kv_cells_used: u64, kv_cells_cached: u64) {
        self.running.store(running as u64, Relaxed);
        self.waiting.store(waiting as u64, Relaxed);
        self.kv_cells_used.store(kv_cells_used, Relaxed);
        self.kv_cells_cached.store(kv_cells_cached, Relaxed);
    }

    pub(crate) fn set_waiting(&self, waiting: usize) {
        self.waiting.store(waiting as u64, Relaxed);
    }

    pub(crate) fn mark_progress(&self, busy: bool) {
        self.busy.store(busy, Relaxed);
        self.last_progress_ms.store(self.started.elapsed().as_millis() as u64, Relaxed);
    }

    pub(crate) fn record_step(&self) {
        self.steps.fetch_add(1, Relaxed);
    }

    /// One sequence's verified draft: `drafted` tokens fed, the first `accepted` kept.
    pub(crate) fn record_speculation(&self, drafted: usize, accepted: usize) {
        let s = &self.speculation;
        s.drafts.fetch_add(1, Relaxed);
        s.draft_tokens.fetch_add(drafted as u64, Relaxed);
        s.accepted_tokens.fetch_add(accepted as u64, Relaxed);
        for position in s.accepted_per_position.iter().take(accepted) {
            position.fetch_add(1, Relaxed);
        }
    }

    /// A step's drafts were cut by the fairness guard.
    pub(crate) fn record_guard_cut(&self) {
        self.speculation.guard_cuts.fetch_add(1, Relaxed);
    }

    pub(crate) fn record_prompt_computed(&self, tokens: usize) {
        self.prompt_tokens_computed.fetch_add(tokens as u64, Relaxed);
    }

    pub(crate) fn record_finished(&self, prompt: u32, generated: u32, cancelled: bool) {
        self.prompt_tokens.fetch_add(u64::from(prompt), Relaxed);
        self.generation_tokens.fetch_add(u64::from(generated), Relaxed);
        self.finished.fetch_add(1, Relaxed);
        if cancelled {
            self.cancelled.fetch_add(1, Relaxed);
        }
    }

    pub(crate) fn record_move(&self) {
        self.sequences_moved.fetch_add(1, Relaxed);
    }

    /// A request was admitted with `prompt` tokens, `reused` of them from cache.
    pub(crate) fn record_prefix_query(&self, prompt: usize, reused: usize) {
        self.prefix.queried_tokens.fetch_add(prompt as u64, Relaxed);
        self.prefix.hit_tokens.fetch_add(reused as u64, Relaxed);
    }

    /// Cached prompt tokens computed again after all (a wider prefill was cheaper).
    pub(crate) fn record_prefix_recomputed(&self, tokens: usize) {
        self.prefix.hit_tokens.fetch_sub(tokens as u64, Relaxed);
    }

    pub(crate) fn record_host_restore(&self, tokens: usize, took: Duration, ok: bool) {
        let p = &self.prefix;
        if ok {
            p.host_restores.fetch_add(1, Relaxed);
            p.host_restored_tokens.fetch_add(tokens as u64, Relaxed);
            p.host_restore_micros.fetch_add(took.as_micros() as u64, Relaxed);
        } else {
            p.host_restore_failures.fetch_add(1, Relaxed);
        }
    }

    pub(crate) fn set_host_cache(&self, budget: usize, counts: HostCacheCounts) {
        let p = &self.prefix;
        p.host_budget_bytes.store(budget as u64, Relaxed);
        p.host_bytes.store(counts.bytes as u64, Relaxed);
        p.host_entries.store(counts.entries as u64, Relaxed);
        p.host_saves.store(counts.saves, Relaxed);
        p.host_evictions.store(counts.evictions, Relaxed);
    }

    pub(crate) fn mark_failed(&self, reason: &str) {
        let _ = self.failure.set(reason.to_string());
    }

    pub(crate) fn mark_dead(&self) {
        self.alive.store(false, Relaxed);
        self.busy.store(false, Relaxed);
    }
}
