//! What an engine reports about itself, for metrics and health checks.

/// Prefix caching, as metrics report it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PrefixCacheSnapshot {
    /// Prompt tokens of admitted requests (vLLM's `prefix_cache_queries`).
    pub queried_tokens: u64,
    /// Of those, tokens whose KV was reused (vLLM's `prefix_cache_hits`).
    pub hit_tokens: u64,
    pub host_budget_bytes: u64,
    pub host_bytes: u64,
    pub host_entries: u64,
    pub host_saves: u64,
    pub host_evictions: u64,
    pub host_restores: u64,
    /// Restores that failed and fell back to prefill.
    pub host_restore_failures: u64,
    pub host_restored_tokens: u64,
    pub host_restore_micros: u64,
}

/// What flushing the prefix cache dropped (a router's `/flush_cache`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PrefixCacheFlush {
    /// Idle slots whose cached KV was forgotten.
    pub slots: u64,
    /// Host-memory entries dropped, and their bytes.
    pub host_entries: u64,
    pub host_bytes: u64,
    /// Sequences running at the time: their KV stays (and is cached again when they end).
    pub running: u64,
}

/// Draft positions counted apart: the longest draft an engine feeds (rillm's copies).
pub const DRAFT_POSITIONS: usize = 64;

/// Speculative decoding, as vLLM's `vllm:spec_decode_*` metrics report it; cumulative.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpeculationSnapshot {
    /// Steps in which a sequence fed drafted tokens, and those tokens.
    pub drafts: u64,
    pub draft_tokens: u64,
    /// Drafted tokens the model kept.
    pub accepted_tokens: u64,
    /// Kept tokens by their place in the draft (0: the first drafted token).
    pub accepted_per_position: [u64; DRAFT_POSITIONS],
    /// Steps whose drafts the fairness guard cut: a layout that fed more would have made
    /// some stream's time per token slower than the guard allows.
    pub guard_cuts: u64,
}

// By hand: arrays longer than 32 have no `Default`.
impl Default for SpeculationSnapshot {
    fn default() -> Self {
        Self {
            drafts: 0,
            draft_tokens: 0,
            accepted_tokens: 0,
            accepted_per_position: [0; DRAFT_POSITIONS],
            guard_cuts: 0,
        }
    }
}

/// Structured outputs, as metrics report them; cumulative.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ConstraintSnapshot {
    /// Constraints compiled (cache misses), and the time that took in all.
    pub compiles: u64,
    pub compile_micros: u64,
    /// Constraints that did not compile (the request got a 400).
    pub compile_failures: u64,
    /// Constraints found compiled in the cache.
    pub cache_hits: u64,
    /// Tokens generated under a constraint, sampled or forced.
    pub constrained_tokens: u64,
    /// Of those, tokens the grammar forced: fed to the model with the step that computes
    /// the next choice, not a forward pass each (jump-forward).
    pub forced_tokens: u64,
    /// Constrained outputs that could not go on (an engine bug, counted and logged; the
    /// reply ends with what it had).
    pub failures: u64,
    /// Samples drawn again because, before a lazy grammar's trigger, the token would have
    /// opened the grammar and broken it.
    pub resamples: u64,
    /// Replies under calls or an answer (`Constraint::CallsOrAnswer`) that, written as the
    /// model chose, could not open a call: made the answer, in the answer's shape.
    pub answers_chosen: u64,
}

/// How the KV cache is laid out, for gateways that score prefix reuse per replica (GIE's
/// prefix-cache scorer reads it from `vllm:cache_config_info`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheLayout {
    /// Tokens per block of the prefix index.
    pub block_tokens: u32,
    /// Blocks the device cache (all sequences' KV cells) holds.
    pub blocks: u64,
}

/// A consistent-enough copy of the counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StatsSnapshot {
    pub running: u64,
    pub waiting: u64,
    /// Cells held by running sequences.
    pub kv_cells_used: u64,
    /// Cells of idle slots kept for prefix reuse; free for the taking.
    pub kv_cells_cached: u64,
    pub kv_cells_total: u64,
    pub steps: u64,
    pub prompt_tokens: u64,
    /// Prompt tokens run through the model: cache hits are not, and the prompt of a
    /// request with `n` choices is run once.
    pub prompt_tokens_computed: u64,
    pub generation_tokens: u64,
    pub finished: u64,
    pub cancelled: u64,
    /// Running sequences moved down into a freed slot to keep the batch contiguous.
    pub sequences_moved: u64,
    pub prefix: PrefixCacheSnapshot,
    pub constraints: ConstraintSnapshot,
    pub speculation: SpeculationSnapshot,
}

impl StatsSnapshot {
    pub fn kv_usage(&self) -> f64 {
        if self.kv_cells_total == 0 {
            0.0
        } else {
            self.kv_cells_used as f64 / self.kv_cells_total as f64
        }
    }
}
