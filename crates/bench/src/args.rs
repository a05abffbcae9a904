//! `rillm bench` options.

use std::path::PathBuf;

use crate::protocol::Protocol;
use crate::schedule::Arrival;

#[derive(clap::Args, Debug, Clone)]
#[command(group(clap::ArgGroup::new("amount").args(["requests", "duration"])))]
#[command(group(clap::ArgGroup::new("load").args(["rate", "concurrency"])))]
#[command(group(clap::ArgGroup::new("source").args(["prompt", "dataset"])))]
pub struct BenchArgs {
    /// Endpoint to load, e.g. http://127.0.0.1:8767/generate or .../v1/chat/completions.
    #[arg(long)]
    pub url: String,
    /// Wire protocol; `auto` picks it from the URL's path.
    #[arg(long, value_enum, default_value_t = ProtocolArg::Auto)]
    pub protocol: ProtocolArg,
    /// Requests per load level (default 20 when --duration is not given).
    #[arg(long)]
    pub requests: Option<usize>,
    /// Seconds per load level, instead of a request count.
    #[arg(long)]
    pub duration: Option<f64>,
    /// Open-loop arrival rate(s) in requests/s; a comma list sweeps them in turn.
    #[arg(long, value_delimiter = ',')]
    pub rate: Vec<f64>,
    /// Closed-loop concurrency level(s); a comma list sweeps them in turn.
    #[arg(long, value_delimiter = ',')]
    pub concurrency: Vec<usize>,
    #[arg(long, value_enum, default_value_t = Arrival::Poisson)]
    pub arrival: Arrival,
    /// Gamma shape for --arrival gamma (1 = Poisson, < 1 burstier).
    #[arg(long, default_value_t = 1.0)]
    pub burstiness: f64,
    /// Open loop: arrivals beyond this many in-flight requests are shed (not sent) and counted.
    #[arg(long)]
    pub max_inflight: Option<usize>,
    #[arg(long, default_value_t = 500.0)]
    pub ttft_slo_ms: f64,
    #[arg(long)]
    pub tpot_slo_ms: Option<f64>,
    #[arg(long)]
    pub e2e_slo_ms: Option<f64>,
    #[arg(long, default_value = "What is a cache?")]
    pub prompt: String,
    /// ShareGPT JSON or JSONL of {"prompt"|"messages", "max_tokens"}.
    #[arg(long)]
    pub dataset: Option<PathBuf>,
    #[arg(long, default_value_t = 64)]
    pub max_tokens: u32,
    /// Model name to send (OpenAI protocols); default: the first of the server's /v1/models.
    #[arg(long)]
    pub model: Option<String>,
    /// Seeds the arrival process.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Seconds before one request counts as failed.
    #[arg(long, default_value_t = 120.0)]
    pub timeout: f64,
    /// Requests sent one by one before measuring, not counted.
    #[arg(long, default_value_t = 0)]
    pub warmup: usize,
    /// Ask servers that support it to ignore end-of-sequence (fixed-length outputs).
    #[arg(long)]
    pub ignore_eos: bool,
    /// Sampling temperature to send (the server's default when unset).
    #[arg(long)]
    pub temperature: Option<f64>,
    /// Bearer token for the server.
    #[arg(long, env = "RILLM_BENCH_API_KEY", hide_env_values = true)]
    pub api_key: Option<String>,
    /// Where the server runs, for run_context (default: this machine for a loopback URL).
    #[arg(long)]
    pub device: Option<String>,
    /// One sentence on what this run is and is not, for run_context.
    #[arg(long)]
    pub scope: Option<String>,
    #[arg(long)]
    pub output: Option<PathBuf>,
    /// Self-contained HTML report (inline SVG charts).
    #[arg(long)]
    pub report: Option<PathBuf>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ProtocolArg {
    Auto,
    Generate,
    Completions,
    Chat,
}

impl ProtocolArg {
    pub fn resolve(self, url: &str) -> Result<Protocol, String> {
        match self {
            Self::Generate => Ok(Protocol::Generate),
            Self::Completions => Ok(Protocol::Completions),
            Self::Chat => Ok(Protocol::Chat),
            Self::Auto => Protocol::from_url(url).ok_or_else(|| {
                format!("cannot tell the protocol from {url}; pass --protocol generate|completions|chat")
            }),
        }
    }
}
