//! `rillm bench`: live HTTP load against any LLM server, measured honestly.
//!
//! The benchmark knows nothing of rillm's engine: it speaks HTTP and SSE to a URL. Arrivals
//! are open-loop (a schedule that never waits for responses) or closed-loop workers; every
//! offered request is disclosed, whether it completed, failed, was rejected with 429 or was
//! shed by the client; latencies are reported from the actual send and from the schedule.
//!
//! The modules follow the data: `workload` (datasets, traces, synthetic prompts and
//! sessions, tools, schemas → request specs) → `run` (client, pacing, sessions, shards,
//! endpoints, server metrics) → `results` (records → figures, limits, context, result
//! files read back) → `report` (text, HTML, compare). Each stage imports only the ones
//! before it. Beside them: `args`/`validate` (the command line), `protocol` (each server
//! API's request bodies and stream framing, the vocabulary every stage speaks), `stats`
//! (percentiles), `mock` (a scripted server for tests), `merge` (shards into one result).

pub mod args;
pub mod merge;
pub mod mock;
pub mod protocol;
pub mod report;
pub mod results;
pub mod run;
pub mod stats;
mod validate;
pub mod workload;

use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};

pub use args::BenchArgs;
use protocol::{BodyOptions, PromptSpec, RequestSpec};
use results::context;
use results::result::{self, BenchResult, LoadDescription, LoadMode, RunFacts, Slos};
use results::slo::Calibration;
use run::plan::{Amount, LevelPlan, Load};
use run::{client, server_metrics, shard, targets};
use workload::{dataset, tokens, tools, trace, Workload};

/// Requests per level (or trace records) when neither --requests nor --duration is given.
pub const DEFAULT_REQUESTS: usize = 20;

#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    #[error("{0}")]
    Args(String),
    #[error(transparent)]
    Dataset(#[from] dataset::DatasetError),
    #[error(transparent)]
    Trace(#[from] trace::TraceError),
    #[error(transparent)]
    Tokenizer(#[from] tokens::TokenizerError),
    #[error(transparent)]
    Write(#[from] WriteError),
    #[error("HTTP client: {0}")]
    Client(#[from] reqwest::Error),
}

/// A file the benchmark could not write (result, report, comparison).
#[derive(Debug, thiserror::Error)]
#[error("writing {path}: {error}")]
pub struct WriteError {
    pub path: String,
    pub error: std::io::Error,
}

/// Writes `text` to `path`, naming the path if it fails.
pub fn write_file(path: &std::path::Path, text: &str) -> Result<(), WriteError> {
    std::fs::write(path, text).map_err(|error| WriteError { path: path.display().to_string(), error })
}

/// What a run produced: one result per load level.
pub struct BenchOutput {
    pub levels: Vec<BenchResult>,
}

impl BenchOutput {
    /// The file written by `--output`: a single level is the prototype's schema (a
    /// superset); a sweep wraps one such result per level with a goodput-vs-load table.
    pub fn to_json(&self) -> Value {
        match self.levels.as_slice() {
            [one] => serde_json::to_value(one).unwrap_or(Value::Null),
            levels => json!({
                "sweep": report::sweep_table(levels),
                "knee_level": report::knee(levels),
                "levels": levels,
            }),
        }
    }

    /// The result file (`--output`) and the HTML report (`--report`), where asked for.
    pub fn write_files(
        &self,
        result: Option<&std::path::Path>,
        report: Option<&std::path::Path>,
    ) -> Result<(), WriteError> {
        if let Some(path) = result {
            write_file(path, &serde_json::to_string_pretty(&self.to_json()).unwrap_or_default())?;
        }
        if let Some(path) = report {
            write_file(path, &report::html(&self.levels))?;
        }
        Ok(())
    }
}

pub async fn run(args: BenchArgs, command_line: String) -> Result<BenchOutput, BenchError> {
    let protocol = args.validate().map_err(BenchError::Args)?;
    let url = args.url[0].clone();
    let targets = Arc::new(targets::Targets::new(args.url.clone(), args.balance));
    if args.protocol == args::ProtocolArg::Auto {
        eprintln!("rillm bench: protocol {protocol:?} (picked from the URL path; --protocol overrides)");
    }
    let output_counter = args.tokenizer.as_deref().map(tokens::TokenCounter::from_file).transpose()?;
    let client = reqwest::Client::builder()
        .tcp_nodelay(true)
        .pool_max_idle_per_host(usize::MAX)
        // Servers close idle keep-alive connections after a few seconds (llama.cpp and
        // uvicorn after 5): drop ours first, or a request sent on one the server just
        // closed fails through no fault of the server.
        .pool_idle_timeout(Duration::from_secs(2))
        .build()?;
    let model = match &args.model {
        Some(m) => Some(m.clone()),
        None => discover_model(&client, &url, args.api_key.as_deref()).await,
    };
    let amount = match (args.requests, args.duration) {
        (_, Some(d)) if d > 0.0 => Amount::Duration(Duration::from_secs_f64(d)),
        (Some(n), _) => Amount::Requests(n),
        _ => Amount::Requests(DEFAULT_REQUESTS),
    };
    // One pool holds every level's prompts, each level its own share of it.
    // Prompts sent several times in a row need a pool that much smaller.
    let per_level = pool_size(&args, amount).div_ceil(args.prompt_repeats as usize).max(1);
    let loads = levels(&args);
    let pool = per_level.saturating_mul(loads.len()).min(MAX_POOL);
    // With --distinct-prompts a level's share is its N prompts, sent in turn.
    let level_prompts = workload::recurring_per_level(args.distinct_prompts, pool, loads.len()).unwrap_or(per_level);
    let mut built = workload::build(&args, protocol, &client, origin(&url), pool, loads.len()).await?;
    if let Some(format) = args.response_format {
        built = workload::constrain(built, &args, format, protocol).map_err(BenchError::Args)?;
    }
    built = workload::recorded_tools(built, protocol, args.tools.is_some()).map_err(BenchError::Args)?;
    let tools = match &args.tools {
        Some(path) => {
            let tools = tools::ToolSet::load(path, &args.tool_choice, args.tool_result_tokens, args.max_tool_rounds)?;
            let tools = match &args.final_schema {
                Some(schema) => tools::ToolSet::answering_in(tools, schema)?,
                None => tools,
            };
            built = workload::with_tools(built, path, &tools);
            Some(tools)
        }
        None => None,
    };
    if matches!(built.workload, Workload::Sessions(_)) && args.requests.is_some() {
        return Err(BenchError::Args(
            "--requests counts single requests; with sessions say how many with --sessions".into(),
        ));
    }
    let save_sessions = match &args.save_sessions {
        Some(_) if !matches!(built.workload, Workload::Sessions(_)) => {
            return Err(BenchError::Args(
                "--save-sessions saves what sessions send: give sessions (--sessions, a sessions --dataset, --multi-turn) or --tools".into(),
            ))
        }
        Some(path) => Some(Arc::new(
            run::saved_sessions::SessionRecorder::create(path)
                .map_err(|e| BenchError::Args(format!("--save-sessions {}: {e}", path.display())))?,
        )),
        None => None,
    };
    // A trace's output lengths are targets: ask the server to reach them.
    let ignore_eos = args.ignore_eos || matches!(built.workload, Workload::Trace(_));
    let body = BodyOptions {
        model: model.clone(),
        ignore_eos,
        temperature: args.temperature,
        extra: args.extra_body.clone(),
        tools,
    };
    let timeout = Duration::from_secs_f64(args.timeout.max(0.001));
    let mut slos = match &args.slos_from {
        Some(path) => results::compare::earlier_slos(path, args.e2e_slo_ms).map_err(BenchError::Args)?,
        None => {
            Slos { ttft_ms: args.ttft_slo_ms, tpot_ms: args.tpot_slo_ms, e2e_ms: args.e2e_slo_ms, ..Slos::default() }
        }
    };
    let mut run_context = context::RunContext::new(&args, model.as_deref(), &command_line);
    run_context.workload = built.description;
    // With the description, what `bench compare` needs to know two runs sent the same requests.
    if let Some(workload) = run_context.workload.as_object_mut() {
        workload.insert("seed".into(), json!(args.seed));
        let per_level = match (&built.workload, amount) {
            // A trace replays its own records (all, or as many as `--requests` said).
            (Workload::Trace(requests), _) => json!({ "requests": requests.len() }),
            (_, Amount::Requests(n)) => json!({ "requests": n }),
            (_, Amount::Duration(d)) => json!({ "duration_s": d.as_secs_f64() }),
        };
        workload.insert("per_level".into(), per_level);
        if args.prompt_repeats > 1 {
            workload.insert("prompt_repeats".into(), json!(args.prompt_repeats));
        }
    }
    let progress = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let level_workloads = per_level_workloads(built.workload, args.sessions, loads.len());

    // Requests sent one at a time before the run: never the measured prompts, which must
    // not be in a prefix cache when their level sends them.
    let one_at_a_time = |workload: Workload, count: usize, body: BodyOptions| {
        Arc::new(LevelPlan {
            targets: Arc::clone(&targets),
            protocol,
            api_key: args.api_key.clone(),
            workload: Arc::new(workload),
            body,
            load: Load::Concurrency(1),
            amount: Amount::Requests(count),
            max_inflight: None,
            timeout,
            seed: args.seed,
            progress: false,
            first_prompt: 0,
            level_prompts: count,
            prompt_repeats: 1,
            shard: None,
            save_sessions: None,
        })
    };
    if args.warmup > 0 {
        // Warm-up uses --prompt.
        let warm = Workload::Requests(vec![RequestSpec::new(PromptSpec::Text(args.prompt.clone()), args.max_tokens)]);
        run::run_level(&client, one_at_a_time(warm, args.warmup, body.clone())).await;
    }
    if let Some(scale) = args.slo_scale {
        let specs = run::calibrate::requests(args.seed);
        let count = specs.len();
        // Every answer runs its full length, so each gives a TPOT; no tools, which would
        // lengthen the prompt and turn answers into calls.
        let calibration_body = BodyOptions { ignore_eos: true, tools: None, ..body.clone() };
        let outcome = run::run_level(&client, one_at_a_time(Workload::Requests(specs), count, calibration_body)).await;
        let calibration = Calibration::fit(&run::calibrate::measured(&outcome.records), scale).ok_or_else(|| {
            BenchError::Args(format!(
                "--slo-scale: calibration needs at least two of its {count} requests to complete with a TTFT and \
                 a prompt token count (does the server report usage?)"
            ))
        })?;
        slos = calibration.slos(args.e2e_slo_ms);
        eprintln!(
            "rillm bench: calibrated SLOs: TTFT {}, TPOT {:.1} ms",
            slos.ttft_text(),
            slos.tpot_ms.unwrap_or(0.0)
        );
    }
    // Shards agree on a start time; each says how late its clock let it begin.
    let late_ms = match args.start_at {
        Some(at) => Some(shard::wait_until(at).await),
        None => None,
    };
    if let Some(s) = args.shard {
        run_context.shard =
            Some(context::ShardContext { index: s.index, count: s.count, start_at_unix_ms: args.start_at, late_ms });
    }
    let mut results = Vec::new();
    for (level, load) in loads.into_iter().enumerate() {
        let plan = Arc::new(LevelPlan {
            targets: Arc::clone(&targets),
            protocol,
            api_key: args.api_key.clone(),
            workload: Arc::clone(&level_workloads[level]),
            body: body.clone(),
            load,
            amount,
            max_inflight: args.max_inflight,
            timeout,
            seed: args.seed,
            progress,
            first_prompt: level * level_prompts,
            level_prompts,
            prompt_repeats: args.prompt_repeats as usize,
            shard: args.shard,
            save_sessions: save_sessions.clone(),
        });
        let mut level_context = run_context.clone();
        level_context.started_unix_ms = Some(shard::unix_ms_now());
        let origins: Vec<String> = args.url.iter().map(|u| origin(u).to_string()).collect();
        let scrape = || async {
            match args.no_server_metrics {
                true => None,
                false => server_metrics::scrape_all(&client, &origins, args.api_key.as_deref()).await,
            }
        };
        let spec_before = scrape().await;
        let mut outcome = run::run_level(&client, plan).await;
        let spec_after = scrape().await;
        if let Some(counter) = &output_counter {
            estimate_output_tokens(counter, &mut outcome.records);
        }
        let notes = built.notes.clone();
        let mut result = result::build(RunFacts {
            url: url.clone(),
            urls: args.url.clone(),
            protocol,
            load: describe(load, args.max_inflight),
            slos,
            records: outcome.records,
            wall_s: outcome.wall_s,
            client_cpu_s: outcome.client_cpu_s,
            run_context: level_context,
            notes,
            sessions: matches!(*level_workloads[level], Workload::Sessions(_)).then_some(result::SessionCounts {
                cut_short: outcome.sessions_cut,
                turns_not_sent: outcome.turns_not_sent,
            }),
            answers: result::AnswersPerPrompt {
                requests: args.prompt_repeats as usize,
                choices: args.extra_body.as_ref().and_then(|b| b["n"].as_u64()).map_or(1, |n| n.max(1) as usize),
            },
        });
        result.speculation = server_metrics::SpeculationSummary::between(spec_before, spec_after);
        results.push(result);
    }
    let output = BenchOutput { levels: results };
    output.write_files(args.output.as_deref(), args.report.as_deref())?;
    Ok(output)
}

/// The workload of each load level. Sessions are split so that each level plays its own
/// (`per_level` of them, or all when not said), as each level sends its own prompts: a level
/// replaying the conversations of the one before finds every turn in the server's prefix
/// cache and measures the cache, not the load. A pool too small for every level wraps.
fn per_level_workloads(workload: Workload, per_level: Option<usize>, levels: usize) -> Vec<Arc<Workload>> {
    match workload {
        Workload::Sessions(all) if levels > 1 && !all.is_empty() => {
            let n = per_level.unwrap_or(all.len()).clamp(1, all.len());
            let level = |l: usize| (0..n).map(|k| all[(l * n + k) % all.len()].clone()).collect();
            (0..levels).map(|l| Arc::new(Workload::Sessions(level(l)))).collect()
        }
        workload => {
            // Every level shares the one workload.
            let shared = Arc::new(workload);
            (0..levels.max(1)).map(|_| Arc::clone(&shared)).collect()
        }
    }
}

/// Counts the output of completed requests whose server reported no token count.
fn estimate_output_tokens(counter: &tokens::TokenCounter, records: &mut [client::RequestRecord]) {
    for r in records.iter_mut().filter(|r| r.status == client::Status::Completed && r.tokens().is_none()) {
        if let Some(n) = counter.count_output(&r.text) {
            r.completion_tokens = Some(n);
            r.tokens_estimated = true;
        }
    }
}

/// The most synthetic prompts made for one run.
const MAX_POOL: usize = 100_000;

/// How many distinct synthetic prompts a level needs: one per request when the count is known;
/// for a duration, enough for the fastest level (closed loop: a bounded pool, cycled).
fn pool_size(args: &BenchArgs, amount: Amount) -> usize {
    match amount {
        Amount::Requests(n) => n.max(1),
        Amount::Duration(d) => {
            let fastest = args.rate.iter().copied().fold(0.0, f64::max);
            if fastest > 0.0 {
                ((fastest * d.as_secs_f64() * 1.5).ceil() as usize + 16).min(MAX_POOL)
            } else {
                1024
            }
        }
    }
}

/// The load levels, in order (the arguments validated). A trace (the workload `--trace`
/// builds) sets its own times.
fn levels(args: &BenchArgs) -> Vec<Load> {
    if args.trace.is_some() {
        return vec![Load::Replay];
    }
    if !args.rate.is_empty() {
        return args
            .rate
            .iter()
            .map(|&rate| Load::Rate { rate, arrival: args.arrival, burstiness: args.burstiness })
            .collect();
    }
    let levels = if args.concurrency.is_empty() { vec![1] } else { args.concurrency.clone() };
    levels.into_iter().map(Load::Concurrency).collect()
}

fn describe(load: Load, max_inflight: Option<usize>) -> LoadDescription {
    match load {
        Load::Rate { rate, arrival, burstiness } => LoadDescription {
            mode: LoadMode::Rate,
            requested_rate_rps: Some(rate),
            arrival: Some(arrival),
            burstiness: Some(burstiness),
            concurrency: None,
            max_inflight,
        },
        Load::Concurrency(c) => LoadDescription {
            mode: LoadMode::Concurrency,
            requested_rate_rps: None,
            arrival: None,
            burstiness: None,
            concurrency: Some(c),
            max_inflight: None,
        },
        Load::Replay => LoadDescription {
            mode: LoadMode::Trace,
            requested_rate_rps: None,
            arrival: None,
            burstiness: None,
            concurrency: None,
            max_inflight,
        },
    }
}

/// `scheme://host:port` of a URL.
pub(crate) fn origin(url: &str) -> &str {
    let after_scheme = url.find("://").map_or(0, |i| i + 3);
    url[after_scheme..].find('/').map_or(url, |i| &url[..after_scheme + i])
}

async fn discover_model(client: &reqwest::Client, url: &str, api_key: Option<&str>) -> Option<String> {
    let mut request = client.get(format!("{}/v1/models", origin(url))).timeout(Duration::from_secs(5));
    if let Some(key) = api_key {
        request = request.bearer_auth(key);
    }
    let models: Value = request.send().await.ok()?.json().await.ok()?;
    models["data"][0]["id"].as_str().map(str::to_string)
}

pub(crate) fn sha256_file(path: &std::path::Path) -> Option<String> {
    use sha2::{Digest, Sha256};
    let mut file = std::fs::File::open(path).ok()?;
    let mut hasher = Sha256::new();
    std::io::copy(&mut file, &mut hasher).ok()?;
    Some(format!("{:x}", hasher.finalize()))
}
