//! Engine options shared by `serve` and `generate`.

use std::path::{Path, PathBuf};

use rillm_engine::EngineConfig;

#[derive(clap::Args, Debug, Clone)]
pub struct ModelArgs {
    /// GGUF model file (llama, qwen2, gemma3, bert, ...), or a known model's name
    /// (`all-minilm-l6-v2`). Default: SmolLM2-135M-Instruct Q4_1. Known models are fetched
    /// into $RILLM_HOME (default ~/.cache/rillm) on first use.
    /// `rillm serve` takes several (repeat `--model`, or `--model NAME=PATH` each) and
    /// routes requests by their `model`.
    #[arg(long, value_name = "PATH | NAME=PATH")]
    pub model: Vec<String>,
    /// llama.cpp compute threads. Default: all cores.
    #[arg(long)]
    pub threads: Option<usize>,
    /// KV cache cells per sequence (prompt + completion).
    #[arg(long, default_value_t = engine_defaults().ctx_per_sequence)]
    pub ctx_size: u32,
    /// Token budget of one engine step (decode tokens + prompt chunk).
    #[arg(long, default_value_t = engine_defaults().prefill_chunk)]
    pub prefill_chunk: usize,
    /// Layers to offload to the GPU (builds with the `cuda` feature).
    #[arg(long, default_value_t = engine_defaults().gpu_layers)]
    pub gpu_layers: u32,
    /// Prefill every prompt in full: no reuse of earlier or running requests' KV cells,
    /// in slots or in host memory.
    #[arg(long)]
    pub no_prefix_cache: bool,
    /// Host memory (MiB) for the prefix cache's RAM tier: KV of prompts no slot holds any
    /// more, restored instead of recomputed when they recur. 0 turns the tier off.
    #[arg(long, default_value_t = rillm_engine::DEFAULT_HOST_CACHE_MIB)]
    pub prefix_cache_mib: usize,
    /// A Jinja chat template to use instead of the model's own. One that lists tools and
    /// writes calls itself (Qwen2.5's, Hermes', Llama 3.1's, Mistral's) is given the
    /// request's tools.
    #[arg(long, value_name = "FILE")]
    pub chat_template_file: Option<PathBuf>,
    /// Speculative decoding: `ngram` drafts tokens from each sequence's own prompt and
    /// output (prompt lookup) and verifies them in the batch, only where the measured
    /// acceptance and step costs say it pays; `draft` drafts with --draft-model; `off`
    /// decodes one token per step. Default: `draft` with --draft-model, else `ngram`.
    #[arg(long, value_enum)]
    pub speculative: Option<SpeculativeArg>,
    /// A smaller GGUF with the model's vocabulary that drafts tokens for it
    /// (`--speculative draft`): worth it where it runs several times faster than the model.
    #[arg(long, value_name = "FILE")]
    pub draft_model: Option<PathBuf>,
    /// Most tokens the draft model proposes for a sequence in one step; fewer are fed where
    /// the measured acceptance and costs say so.
    #[arg(long, value_name = "N", default_value_t = engine_defaults().speculation.draft_max as u32,
          value_parser = clap::value_parser!(u32).range(1..=64))]
    pub draft_max: u32,
    /// Tokens the draft model proposes for a sequence in every step at least, whatever the
    /// measured costs say (0: as they say).
    #[arg(long, value_name = "N", default_value_t = engine_defaults().speculation.draft_min as u32,
          value_parser = clap::value_parser!(u32).range(0..=64))]
    pub draft_min: u32,
    /// Time-per-output-token objective of running streams, in ms: a step beside them
    /// prefills only as many prompt tokens as keep each stream's mean time per token within
    /// this, by the measured step costs (64 at least, else none until they have the slack).
    /// Off by default: each step takes up to --prefill-chunk tokens.
    #[arg(long, value_name = "MS", value_parser = clap::value_parser!(u32).range(1..))]
    pub tpot_slo_ms: Option<u32>,
    /// How much slower per token any stream may get for the drafts of the streams beside it
    /// (speculative decoding shares each step): drafts are cut to keep every stream's
    /// expected time per token within this factor of the step without them (with
    /// --tpot-slo-ms, within the objective instead). A large value trades any stream's
    /// latency for throughput.
    #[arg(long, value_name = "FACTOR", default_value_t = engine_defaults().speculation.max_slowdown)]
    pub spec_max_slowdown: f64,
    /// Price steps with fixed costs instead of measured ones, and never widen prefills: a
    /// step's make-up then depends on the requests alone, not on this machine's timing, so
    /// greedy requests sent one at a time repeat token for token across runs and builds
    /// (scripts/greedy-outputs.py). For comparing outputs, not for speed.
    #[arg(long)]
    pub fixed_step_prices: bool,
}

#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpeculativeArg {
    Off,
    Ngram,
    Draft,
}

/// The engine's own defaults: the CLI shows and uses these, so they live in one place.
pub fn engine_defaults() -> EngineConfig {
    EngineConfig::new(PathBuf::new())
}

impl ModelArgs {
    /// The engine configuration, fetching the default model first when none was given.
    pub fn engine_config(&self, max_running: usize, max_waiting: usize) -> anyhow::Result<EngineConfig> {
        let path = match self.model.as_slice() {
            [] => rillm_models::ensure_default_model(|m| eprintln!("rillm: {m}"))?,
            [one] if !one.contains('=') => resolve_model(Path::new(one))?,
            _ => anyhow::bail!("several models (--model NAME=PATH, or --model more than once) are for `rillm serve`"),
        };
        self.engine_config_for(path, max_running, max_waiting)
    }

    /// The engine configuration for the model at `path`.
    pub fn engine_config_for(
        &self,
        path: PathBuf,
        max_running: usize,
        max_waiting: usize,
    ) -> anyhow::Result<EngineConfig> {
        let mut config = EngineConfig::new(path);
        if let Some(threads) = self.threads {
            config.threads = threads;
        }
        config.ctx_per_sequence = self.ctx_size;
        config.prefill_chunk = self.prefill_chunk;
        config.max_running = max_running;
        config.max_waiting = max_waiting;
        config.gpu_layers = self.gpu_layers;
        config.prefix_caching = !self.no_prefix_cache;
        config.host_cache_bytes = self.prefix_cache_mib.saturating_mul(1 << 20);
        // Beside the models: what the start-up probe measured here, so it runs once per
        // model, CPU and thread count, not at every start or load.
        config.inherit.measurements_dir = rillm_models::cache_dir().ok();
        config.speculation.mode = match (self.speculative, &self.draft_model) {
            (Some(SpeculativeArg::Draft), None) => anyhow::bail!("--speculative draft needs --draft-model FILE"),
            (Some(SpeculativeArg::Off | SpeculativeArg::Ngram), Some(_)) => {
                anyhow::bail!("--draft-model is used only with --speculative draft")
            }
            (Some(SpeculativeArg::Draft), Some(_)) | (None, Some(_)) => rillm_engine::Speculative::Draft,
            (Some(SpeculativeArg::Off), None) => rillm_engine::Speculative::Off,
            (Some(SpeculativeArg::Ngram) | None, None) => rillm_engine::Speculative::Ngram,
        };
        config.speculation.draft_model_path = self.draft_model.clone();
        config.speculation.draft_max = self.draft_max as usize;
        config.speculation.draft_min = self.draft_min as usize;
        config.tpot_slo_ms = self.tpot_slo_ms;
        config.speculation.max_slowdown = self.spec_max_slowdown;
        config.fixed_step_prices = self.fixed_step_prices;
        if let Some(path) = &self.chat_template_file {
            let source = std::fs::read_to_string(path)
                .map_err(|e| anyhow::anyhow!("cannot read --chat-template-file {}: {e}", path.display()))?;
            config.chat_template = Some(source);
        }
        Ok(config)
    }
}

/// A model's file: `path`, or a known model's (`all-minilm-l6-v2`), fetched on first use,
/// where no such file exists.
pub fn resolve_model(path: &Path) -> anyhow::Result<PathBuf> {
    match path.to_str() {
        Some(name) if !path.exists() && rillm_models::KNOWN_MODELS.contains(&name) => {
            Ok(rillm_models::ensure_known_model(name, |m| eprintln!("rillm: {m}"))?)
        }
        _ => Ok(path.to_path_buf()),
    }
}
