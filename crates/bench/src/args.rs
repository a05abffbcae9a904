//! `rillm bench` options.

use std::path::PathBuf;

use crate::protocol::Protocol;
use crate::run::schedule::Arrival;
use crate::workload::lengths::LengthDist;
use crate::workload::think::ThinkTime;
use crate::workload::trace::TraceFormat;

#[derive(clap::Args, Debug, Clone)]
#[command(group(clap::ArgGroup::new("amount").args(["requests", "duration"])))]
#[command(group(clap::ArgGroup::new("load").args(["rate", "concurrency"])))]
#[command(group(clap::ArgGroup::new("source").args(["prompt", "dataset", "trace", "input_tokens"])))]
pub struct BenchArgs {
    /// Endpoint to load, e.g. http://127.0.0.1:8767/generate or .../v1/chat/completions.
    /// Given several times (replicas of one model, same path), requests are spread over
    /// them by --balance and the result breaks the figures down per endpoint.
    #[arg(long, required = true)]
    pub url: Vec<String>,
    /// How requests are spread over several --url: round-robin, or least-in-flight (fewest
    /// unanswered requests). A session stays on the endpoint its first turn went to.
    #[arg(long, value_enum, default_value_t = crate::run::targets::Balance::RoundRobin)]
    pub balance: crate::run::targets::Balance,
    /// Wire protocol; `auto` picks it from the URL's path and says what it picked
    /// (`/generate` is rillm's: SGLang's native /generate needs `sglang`).
    #[arg(long, visible_alias = "endpoint", value_enum, default_value_t = ProtocolArg::Auto)]
    pub protocol: ProtocolArg,
    /// Embeddings and rerank: inputs (documents) per request, each a prompt of the workload's
    /// lengths.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub batch_size: u32,
    /// JSON object merged into every request body, e.g.
    /// '{"chat_template_kwargs": {"enable_thinking": false}}'.
    #[arg(long, value_parser = parse_json_object)]
    pub extra_body: Option<serde_json::Value>,
    /// Requests per load level, or the first N records of a --trace (default 20 when
    /// --duration is not given). Sessions count with --sessions instead.
    #[arg(long)]
    pub requests: Option<usize>,
    /// Seconds per load level instead of a count: arrivals (trace records, new sessions)
    /// stop after this long.
    #[arg(long)]
    pub duration: Option<f64>,
    /// Open-loop arrival rate(s) in requests/s (sessions/s with sessions); a comma list
    /// sweeps them in turn.
    #[arg(long, value_delimiter = ',')]
    pub rate: Vec<f64>,
    /// Closed-loop concurrency level(s) (sessions open at once with sessions); a comma list
    /// sweeps them in turn.
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
    /// Objectives calibrated on the target: before the run seven requests, one at a time (a
    /// warm-up, then prompts of about 40, 150 and 450 tokens twice, 32-token answers), measure its idle TTFT by
    /// prompt length and its idle TPOT; the SLOs are this many times those (TTFT by each
    /// request's prompt length). Recorded in the result.
    #[arg(long, conflicts_with_all = ["ttft_slo_ms", "tpot_slo_ms", "slos_from"])]
    pub slo_scale: Option<f64>,
    /// The SLOs of an earlier result file (its first level's, calibrated or not): several
    /// servers judged by one server's objectives.
    #[arg(long, value_name = "RESULT", conflicts_with_all = ["ttft_slo_ms", "tpot_slo_ms"])]
    pub slos_from: Option<PathBuf>,
    #[arg(long)]
    pub e2e_slo_ms: Option<f64>,
    #[arg(long, default_value = "What is a cache?")]
    pub prompt: String,
    /// ShareGPT JSON or JSONL of {"prompt"|"messages", "max_tokens"}; a JSONL of
    /// {"session_id", "turns": [{"text"|"messages", "max_tokens"?, "delay_ms"?}]} is sessions,
    /// and one of {"session_id", "messages", ...} (--save-sessions) is sessions as recorded.
    #[arg(long)]
    pub dataset: Option<PathBuf>,
    /// With a JSONL --dataset: send each record to the model its `model` field names (a
    /// server with several models; the figures are broken down per model). Off, a recorded
    /// request's model (often a hosted API's) is replaced by --model or left out.
    #[arg(long, requires = "dataset", conflicts_with = "model_mix")]
    pub record_models: bool,
    /// With a ShareGPT --dataset: send every human turn of each conversation in order, with
    /// the server's live reply in the history.
    #[arg(long)]
    pub multi_turn: bool,
    /// Sessions and tool workloads: write every request sent (history, tools, max_tokens),
    /// one JSON line each; `--dataset FILE` replays them as recorded against another server.
    #[arg(long)]
    pub save_sessions: Option<PathBuf>,
    /// Replay a production trace at its recorded times (open loop): Mooncake JSONL, Azure
    /// or BurstGPT CSV. Prompts are synthesised at the recorded lengths.
    #[arg(long)]
    pub trace: Option<PathBuf>,
    #[arg(long, value_enum, default_value_t = TraceFormat::Auto)]
    pub trace_format: TraceFormat,
    /// Multiplies the trace's gaps between arrivals (10 = ten times slower).
    #[arg(long, default_value_t = 1.0)]
    pub time_scale: f64,
    /// Multiplies the trace's prompt lengths.
    #[arg(long, default_value_t = 1.0)]
    pub input_scale: f64,
    /// Multiplies the trace's output lengths.
    #[arg(long, default_value_t = 1.0)]
    pub output_scale: f64,
    /// Caps each prompt's length, after --input-scale.
    #[arg(long)]
    pub max_input_tokens: Option<u32>,
    /// Caps each output length, after --output-scale.
    #[arg(long)]
    pub max_output_tokens: Option<u32>,
    /// Trace records to skip before replaying.
    #[arg(long, default_value_t = 0)]
    pub trace_offset: usize,
    /// Prompt tokens per Mooncake hash id.
    #[arg(long, default_value_t = 512)]
    pub trace_block_tokens: u32,
    /// A Hugging Face tokenizer.json of the served model, for exact prompt lengths (else the
    /// target's /tokenize is used when it has one, else lengths are estimates).
    #[arg(long)]
    pub tokenizer: Option<PathBuf>,
    /// Synthetic prompts: tokens per prompt (or per turn), MEAN[,STDDEV] or uniform:MIN-MAX.
    #[arg(long)]
    pub input_tokens: Option<LengthDist>,
    /// Synthetic output lengths (max_tokens), MEAN[,STDDEV] or uniform:MIN-MAX; default --max-tokens.
    #[arg(long)]
    pub output_tokens: Option<LengthDist>,
    /// Synthetic prompts: make only N distinct prompts and send them in turn, so prompts
    /// recur (retries, popular questions) as they do in production.
    #[arg(long)]
    pub distinct_prompts: Option<usize>,
    /// Each prompt is sent K times in a row (with --concurrency K, K copies at once): one
    /// prompt sampled K times by separate requests, beside one request asking for `n: K`
    /// (--extra-body '{"n": K}').
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub prompt_repeats: u32,
    /// A shared system prompt of N tokens before each synthetic prompt.
    #[arg(long)]
    pub shared_prefix_tokens: Option<u32>,
    /// How many distinct shared prefixes; each request picks one at random.
    #[arg(long, default_value_t = 1)]
    pub prefix_groups: u32,
    /// Multi-turn sessions: how many (synthetic, or the first N of a sessions dataset).
    #[arg(long)]
    pub sessions: Option<usize>,
    /// Synthetic sessions: turns per session.
    #[arg(long, default_value_t = 4)]
    pub turns: u32,
    /// Synthetic sessions: think time between a reply and the next turn, in ms: MS (fixed),
    /// exp:MEAN (exponential, as independent users pause) or uniform:MIN-MAX.
    #[arg(long, default_value = "0")]
    pub think_ms: ThinkTime,
    /// Synthetic sessions: the first turn's length (an opening document), default --input-tokens.
    #[arg(long)]
    pub opening_tokens: Option<LengthDist>,
    #[arg(long, default_value_t = 64)]
    pub max_tokens: u32,
    /// Constraint workload: every request asks for structured output and each output is
    /// checked (JSON-valid, schema-valid). json_schema takes --schemas, regex --regex,
    /// choice --choices; json_object, regex and choice prompts are --prompt.
    #[arg(long, value_enum)]
    pub response_format: Option<crate::workload::structured::ResponseFormat>,
    /// A folder of JSON Schema files (*.json), assigned to requests round-robin. Without
    /// --dataset, --trace or --input-tokens each schema's `description` is its prompt.
    #[arg(long)]
    pub schemas: Option<PathBuf>,
    /// The pattern for --response-format regex.
    #[arg(long)]
    pub regex: Option<String>,
    /// The strings for --response-format choice, comma-separated.
    #[arg(long, value_delimiter = ',')]
    pub choices: Vec<String>,
    /// Tool workload (chat, or the Responses API in its shapes): an OpenAI chat `tools` JSON
    /// array every request offers. The bench
    /// plays the tools: a reply with calls gets a result per call and a next round, up to
    /// --max-tool-rounds, before the conversation's next user turn. Every call is checked.
    #[arg(long)]
    pub tools: Option<PathBuf>,
    /// auto, required, none, or a tool's name (a named `tool_choice`).
    #[arg(long, default_value = "auto")]
    pub tool_choice: String,
    /// Tokens (about) of each tool result the bench sends back.
    #[arg(long, default_value_t = 64)]
    pub tool_result_tokens: usize,
    /// Rounds per user turn at most: the turn, and replies to tool results.
    #[arg(long, default_value_t = 3)]
    pub max_tool_rounds: u32,
    /// With --tools: a JSON Schema file every request also asks its answer in (chat
    /// `response_format`, Responses `text.format`): a reply calls tools or gives the typed
    /// answer. A reply without calls is the session's final answer, checked against it.
    #[arg(long, requires = "tools")]
    pub final_schema: Option<PathBuf>,
    /// Model name to send (OpenAI protocols); default: the first of the server's /v1/models.
    #[arg(long)]
    pub model: Option<String>,
    /// A server with several models: each request names one of these, by share, e.g.
    /// chat:0.7,chat2:0.3 (a conversation keeps its model); the result breaks the figures
    /// down per model.
    #[arg(long, conflicts_with = "model")]
    pub model_mix: Option<crate::workload::model_mix::ModelMix>,
    /// With --model-mix: read the server's /v1/models every so many milliseconds through
    /// the run, to count the requests that waited on their model's load (rillm's and
    /// llama-server's router's load states). Off by default: the reads are requests too,
    /// and llama-server's router served fewer requests while read every 100 ms.
    #[arg(long, value_name = "MS", requires = "model_mix")]
    pub model_status_ms: Option<u64>,
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
    /// Don't read the server's `/metrics` before and after each level (its speculative
    /// decoding counters): for endpoints that must see only the benchmark's requests.
    #[arg(long)]
    pub no_server_metrics: bool,
    #[arg(long)]
    pub output: Option<PathBuf>,
    /// Self-contained HTML report (inline SVG charts).
    #[arg(long)]
    pub report: Option<PathBuf>,
    /// Send only shard I of N (0-based) of an open-loop schedule (--rate or --trace, one
    /// level): arrival i is shard i mod N's. Run N processes, then `rillm bench merge`.
    #[arg(long)]
    pub shard: Option<crate::run::shard::Shard>,
    /// Begin the schedule at this Unix time in milliseconds (by this machine's clock), so
    /// shards on several machines start together.
    #[arg(long)]
    pub start_at: Option<u64>,
}

fn parse_json_object(s: &str) -> Result<serde_json::Value, String> {
    match serde_json::from_str(s) {
        Ok(v @ serde_json::Value::Object(_)) => Ok(v),
        Ok(_) => Err("expected a JSON object".into()),
        Err(e) => Err(format!("not JSON: {e}")),
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ProtocolArg {
    /// From the URL path: /v1/chat/completions, /v1/completions, /v1/responses, /generate (rillm),
    /// /generate_stream (TGI), /v2/models/M/generate_stream (Triton), /completion (llama.cpp),
    /// /v1/embeddings, /v1/rerank.
    Auto,
    /// rillm's `/generate`.
    Generate,
    /// OpenAI completions (vLLM, SGLang, TensorRT-LLM, TGI, llama.cpp, rillm).
    Completions,
    /// OpenAI chat completions, reasoning deltas included.
    Chat,
    /// OpenAI's Responses API (`/v1/responses`).
    Responses,
    /// SGLang's native `/generate`.
    Sglang,
    /// TGI's `/generate_stream`.
    Tgi,
    /// Triton / TensorRT-LLM `/v2/models/{model}/generate_stream`.
    Triton,
    /// llama.cpp's native `/completion`.
    Llamacpp,
    /// OpenAI `/v1/embeddings`.
    Embeddings,
    /// Jina's and Cohere's `/v1/rerank`.
    Rerank,
}

impl ProtocolArg {
    pub fn resolve(self, url: &str) -> Result<Protocol, String> {
        Ok(match self {
            Self::Generate => Protocol::Generate,
            Self::Completions => Protocol::Completions,
            Self::Chat => Protocol::Chat,
            Self::Responses => Protocol::Responses,
            Self::Sglang => Protocol::Sglang,
            Self::Tgi => Protocol::Tgi,
            Self::Triton => Protocol::Triton,
            Self::Llamacpp => Protocol::Llamacpp,
            Self::Embeddings => Protocol::Embeddings,
            Self::Rerank => Protocol::Rerank,
            Self::Auto => {
                return Protocol::from_url(url).ok_or_else(|| {
                    format!("cannot tell the protocol from {url}; pass --protocol generate|completions|chat|responses|sglang|tgi|triton|llamacpp|embeddings|rerank")
                })
            }
        })
    }
}
