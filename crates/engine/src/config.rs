use std::path::PathBuf;

use crate::kv::kept_prefixes::KeptPrefixes;

/// Everything the engine needs to start. Sizes are in tokens.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// Path of a GGUF file.
    pub model_path: PathBuf,
    /// llama.cpp compute threads. On a 2-core machine shared with the HTTP layer and a
    /// benchmark client this is the knob that matters most; see the README.
    pub threads: usize,
    /// KV cache cells reserved for each sequence (prompt + completion).
    pub ctx_per_sequence: u32,
    /// Sequences decoded together in one batch.
    pub max_running: usize,
    /// Requests allowed to wait for a free sequence; beyond this `submit` rejects.
    pub max_waiting: usize,
    /// Token budget of one engine step: decode tokens of running sequences plus prompt
    /// chunks of newly admitted ones. Bounds how long one step can stall running streams.
    pub prefill_chunk: usize,
    /// Layers offloaded to a GPU (only meaningful with the `cuda` feature).
    pub gpu_layers: u32,
    /// Reuse KV cells for a prompt's prefix: a finished request's (kept in its slot) or a
    /// running one's (copied from its slot). Off: every prompt is prefilled in full.
    pub prefix_caching: bool,
    /// Host memory for KV states that no slot holds any more (the RAM tier of the prefix
    /// cache), in bytes; 0 turns the tier off.
    pub host_cache_bytes: usize,
    /// Refuse at once a request predicted to wait longer than this for its first token
    /// (milliseconds), rather than queue it to miss its deadline. `None`: queue up to
    /// `max_waiting`.
    pub max_queue_ms: Option<u64>,
    /// A Jinja chat template used instead of the GGUF's own (llama-server's
    /// `--chat-template-file`): e.g. one that lists tools itself.
    pub chat_template: Option<String>,
    /// Speculative decoding: drafts from the sequence's own tokens (prompt lookup) or a
    /// draft model, verified in the batch, fed only where they pay (`speculation`).
    pub speculation: SpeculationConfig,
    /// The running streams' time-per-output-token objective (`--tpot-slo-ms`): a step
    /// beside generating sequences prefills only as many prompt tokens as keep each one's
    /// mean time per token within this, by the measured step costs (a prefill budget from
    /// the streams' slack; Sarathi-Serve sizes it per step).
    /// `None`: the whole `prefill_chunk`.
    pub tpot_slo_ms: Option<u32>,
    /// Price steps with fixed costs instead of measured ones, and never widen prefills
    /// (`--fixed-step-prices`): what a step holds (drafts, forced tokens, prompt chunks)
    /// then depends on the requests alone, not on this machine's timing, so greedy
    /// requests sent one at a time repeat token for token across runs and builds.
    pub fixed_step_prices: bool,
    /// What this engine takes over from earlier ones instead of measuring or computing it again.
    pub inherit: Inherited,
}

/// What an engine takes over from earlier ones: a machine's measured verdicts, a model's
/// saved prefixes.
#[derive(Debug, Clone, Default)]
pub struct Inherited {
    /// Where verdicts measured on this machine (the start-up widening probe's) are kept
    /// across processes (`runtime::widening_verdicts`); `None`: in this process only.
    pub measurements_dir: Option<PathBuf>,
    /// The model's prefix cache, kept across its engines' stops (`KeptPrefixes`); `None`:
    /// an engine starts with an empty one and drops it when it stops.
    pub prefixes: Option<KeptPrefixes>,
}

/// How speculative decoding drafts, how deep, and what its drafts may cost other streams.
#[derive(Debug, Clone)]
pub struct SpeculationConfig {
    pub mode: Speculative,
    /// The draft model's GGUF for `Speculative::Draft`: a smaller model with the same
    /// vocabulary (llama-server's `--model-draft`).
    pub draft_model_path: Option<PathBuf>,
    /// Most tokens a draft model proposes for one sequence in one step (llama-server's
    /// `--draft-max`).
    pub draft_max: usize,
    /// Tokens a draft model proposes for a sequence in every step at least, whatever the
    /// measured costs say (llama-server's `--draft-min`); 0 leaves it to them.
    pub draft_min: usize,
    /// How much slower per token any stream's step may get for the drafts of the streams
    /// beside it (`--spec-max-slowdown`; with `tpot_slo_ms` the objective bounds it instead).
    pub max_slowdown: f64,
}

impl Default for SpeculationConfig {
    fn default() -> Self {
        Self {
            mode: Speculative::default(),
            draft_model_path: None,
            draft_max: 8,
            draft_min: 0,
            max_slowdown: DEFAULT_SPEC_MAX_SLOWDOWN,
        }
    }
}

/// How tokens are drafted for speculative decoding.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Speculative {
    /// One token per sequence per step.
    Off,
    /// Prompt lookup: the tokens that followed the sequence's recent tokens earlier on.
    #[default]
    Ngram,
    /// A draft model (`draft_model_path`) proposes them, greedily.
    Draft,
}

impl EngineConfig {
    pub fn new(model_path: impl Into<PathBuf>) -> Self {
        Self {
            model_path: model_path.into(),
            threads: default_threads(),
            ctx_per_sequence: 2048,
            max_running: 16,
            max_waiting: 64,
            prefill_chunk: 256,
            gpu_layers: 0,
            prefix_caching: true,
            host_cache_bytes: DEFAULT_HOST_CACHE_MIB << 20,
            max_queue_ms: None,
            chat_template: None,
            speculation: SpeculationConfig::default(),
            tpot_slo_ms: None,
            fixed_step_prices: false,
            inherit: Inherited::default(),
        }
    }

    /// Clamp values that would make llama.cpp fail or the scheduler stall.
    pub(crate) fn normalized(mut self) -> Self {
        self.threads = self.threads.max(1);
        self.max_running = self.max_running.clamp(1, 256);
        self.ctx_per_sequence = self.ctx_per_sequence.max(16);
        // Every running sequence needs room for its decode token in each step.
        self.prefill_chunk = self.prefill_chunk.max(self.max_running).max(16);
        let speculation = &mut self.speculation;
        speculation.draft_max = speculation.draft_max.clamp(1, rillm_backend::DRAFT_POSITIONS);
        speculation.max_slowdown = speculation.max_slowdown.max(1.0);
        self
    }
}

/// The RAM tier's default size. A conversation's KV costs about 23 KB per token on the
/// default model (1,000-token prompts: ~23 MB), so this keeps a few hundred of them while
/// leaving most of a 24 GiB machine alone; llama-server keeps up to 8 GiB by default.
pub const DEFAULT_HOST_CACHE_MIB: usize = 4096;

/// How much slower per token a stream's step may get for the drafts beside it, by default
/// (`--spec-max-slowdown`; `speculation::draft_lengths::FairnessGuard`).
pub const DEFAULT_SPEC_MAX_SLOWDOWN: f64 = 1.2;

/// Physical parallelism available to this process.
pub fn default_threads() -> usize {
    std::thread::available_parallelism().map_or(2, |n| n.get())
}
