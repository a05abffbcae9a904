//! `rillm bench` as its stages, each a function: the arguments read into a [`Setup`]
//! (protocol, endpoints, client, model, load levels), the workload built into what each
//! level sends ([`Prepared`]), warm-up and SLO calibration, the levels run and turned into
//! results; the report is written by the caller ([`crate::BenchOutput`]).

use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};

use crate::args::{self, BenchArgs};
use crate::error::BenchError;
use crate::protocol::origin;
use crate::protocol::Protocol;
use crate::results::context::{self, RunContext};
use crate::results::result::{self, BenchResult, LoadDescription, LoadMode, RunFacts, Slos};
use crate::results::slo::Calibration;
use crate::run::plan::{Amount, Endpoints, LevelPlan, Load, PromptShare};
use crate::run::saved_sessions::SessionRecorder;
use crate::run::{self as run_stage, model_status, record, server_metrics, shard, targets};
use crate::workload::spec::{BodyOptions, PromptSpec, RequestSpec};
use crate::workload::{self, tokens, tools, Workload};

/// The arguments read: where to send, how, and the load levels.
pub(crate) struct Setup {
    protocol: Protocol,
    url: String,
    targets: Arc<targets::Targets>,
    client: reqwest::Client,
    model: Option<String>,
    amount: Amount,
    loads: Vec<Load>,
    output_counter: Option<tokens::TokenCounter>,
    timeout: Duration,
}

/// What the levels send: one workload per level and the body knobs they share.
pub(crate) struct Prepared {
    levels: Vec<Arc<Workload>>,
    body: BodyOptions,
    /// How many prompts each level's share of the pool holds.
    level_prompts: usize,
    /// For the result's `run_context.workload` and `limits`.
    description: Value,
    notes: Vec<String>,
    save_sessions: Option<Arc<SessionRecorder>>,
}

/// Requests per level (or trace records) when neither --requests nor --duration is given.
pub const DEFAULT_REQUESTS: usize = 20;

/// The most synthetic prompts made for one run.
const MAX_POOL: usize = 100_000;

/// Stage 1: the arguments validated and read.
pub(crate) async fn setup(args: &BenchArgs) -> Result<Setup, BenchError> {
    let protocol = args.validate().map_err(BenchError::Args)?;
    let url = args.url[0].clone();
    if args.protocol == args::ProtocolArg::Auto {
        eprintln!("rillm bench: protocol {protocol:?} (picked from the URL path; --protocol overrides)");
    }
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
    Ok(Setup {
        protocol,
        url,
        targets: Arc::new(targets::Targets::new(args.url.clone(), args.balance)),
        client,
        model,
        amount,
        loads: levels(args),
        output_counter: args.tokenizer.as_deref().map(tokens::TokenCounter::from_file).transpose()?,
        timeout: Duration::from_secs_f64(args.timeout.max(0.001)),
    })
}

/// Stage 2: the workload built, constrained, given its tools and split into levels.
pub(crate) async fn prepare(args: &BenchArgs, setup: &Setup) -> Result<Prepared, BenchError> {
    // One pool holds every level's prompts, each level its own share of it.
    // Prompts sent several times in a row need a pool that much smaller.
    let per_level = pool_size(args, setup.amount).div_ceil(args.prompt_repeats as usize).max(1);
    let pool = per_level.saturating_mul(setup.loads.len()).min(MAX_POOL);
    // With --distinct-prompts a level's share is its N prompts, sent in turn.
    let level_prompts =
        workload::recurring_per_level(args.distinct_prompts, pool, setup.loads.len()).unwrap_or(per_level);
    let protocol = setup.protocol;
    let mut built = workload::build(args, protocol, &setup.client, origin(&setup.url), pool, setup.loads.len()).await?;
    if let Some(format) = args.response_format {
        built = workload::constrain(built, args, format, protocol).map_err(BenchError::Args)?;
    }
    built = workload::recorded_tools(built, protocol, args.tools.is_some()).map_err(BenchError::Args)?;
    let (built, tools) = with_tools(args, built)?;
    let save_sessions = session_recorder(args, &built.workload)?;
    let body = BodyOptions {
        model: setup.model.clone(),
        // A trace's output lengths are targets: ask the server to reach them.
        ignore_eos: args.ignore_eos || matches!(built.workload, Workload::Trace(_)),
        temperature: args.temperature,
        extra: args.extra_body.clone(),
        tools,
        batch_size: args.batch_size,
        model_mix: args.model_mix.clone().map(Arc::new),
    };
    let description = describe_workload(args, setup.amount, built.description, &built.workload);
    Ok(Prepared {
        levels: per_level_workloads(built.workload, args.sessions, setup.loads.len()),
        body,
        level_prompts,
        description,
        notes: built.notes,
        save_sessions,
    })
}

/// `--tools` (and `--final-schema`) loaded and offered by every request.
fn with_tools(
    args: &BenchArgs,
    built: workload::Built,
) -> Result<(workload::Built, Option<Arc<tools::ToolSet>>), BenchError> {
    let Some(path) = &args.tools else { return Ok((built, None)) };
    let tools = tools::ToolSet::load(path, &args.tool_choice, args.tool_result_tokens, args.max_tool_rounds)
        .map_err(BenchError::Args)?;
    let tools = match &args.final_schema {
        Some(schema) => tools::ToolSet::answering_in(tools, schema).map_err(BenchError::Args)?,
        None => tools,
    };
    Ok((workload::with_tools(built, path, &tools), Some(tools)))
}

/// `--save-sessions`' file, where the workload has sessions to save.
fn session_recorder(args: &BenchArgs, workload: &Workload) -> Result<Option<Arc<SessionRecorder>>, BenchError> {
    let sessions = matches!(workload, Workload::Sessions(_));
    if sessions && args.requests.is_some() {
        return Err(BenchError::Args(
            "--requests counts single requests; with sessions say how many with --sessions".into(),
        ));
    }
    match &args.save_sessions {
        Some(_) if !sessions => Err(BenchError::Args(
            "--save-sessions saves what sessions send: give sessions (--sessions, a sessions --dataset, --multi-turn) or --tools".into(),
        )),
        Some(path) => SessionRecorder::create(path)
            .map(|recorder| Some(Arc::new(recorder)))
            .map_err(|e| BenchError::Args(format!("--save-sessions {}: {e}", path.display()))),
        None => Ok(None),
    }
}

/// With the builder's description, what `bench compare` needs to know two runs sent the
/// same requests: the seed, the amount per level, prompt repeats.
fn describe_workload(args: &BenchArgs, amount: Amount, mut description: Value, workload: &Workload) -> Value {
    if let Some(fields) = description.as_object_mut() {
        fields.insert("seed".into(), json!(args.seed));
        let per_level = match (workload, amount) {
            // A trace replays its own records (all, or as many as `--requests` said).
            (Workload::Trace(requests), _) => json!({ "requests": requests.len() }),
            (_, Amount::Requests(n)) => json!({ "requests": n }),
            (_, Amount::Duration(d)) => json!({ "duration_s": d.as_secs_f64() }),
        };
        fields.insert("per_level".into(), per_level);
        if args.prompt_repeats > 1 {
            fields.insert("prompt_repeats".into(), json!(args.prompt_repeats));
        }
    }
    description
}

/// Stage 3: warm-up requests, then the SLOs: given, read from an earlier result, or
/// calibrated on requests of the run's own server.
pub(crate) async fn before_levels(args: &BenchArgs, setup: &Setup, prepared: &Prepared) -> Result<Slos, BenchError> {
    let slos = match &args.slos_from {
        Some(path) => crate::results::compare::earlier_slos(path, args.e2e_slo_ms).map_err(BenchError::Args)?,
        None => {
            Slos { ttft_ms: args.ttft_slo_ms, tpot_ms: args.tpot_slo_ms, e2e_ms: args.e2e_slo_ms, ..Slos::default() }
        }
    };
    if args.warmup > 0 {
        // Warm-up uses --prompt.
        let warm = Workload::Requests(vec![RequestSpec::new(PromptSpec::Text(args.prompt.clone()), args.max_tokens)]);
        let plan = one_at_a_time(args, setup, warm, args.warmup, prepared.body.clone());
        run_stage::run_level(&setup.client, plan).await;
    }
    match args.slo_scale {
        Some(scale) => calibrate(args, setup, &prepared.body, scale).await,
        None => Ok(slos),
    }
}

/// `--slo-scale`: SLOs fitted to how fast the server answers calibration requests alone.
async fn calibrate(args: &BenchArgs, setup: &Setup, body: &BodyOptions, scale: f64) -> Result<Slos, BenchError> {
    let specs = run_stage::calibrate::requests(args.seed);
    let count = specs.len();
    // Every answer runs its full length, so each gives a TPOT; no tools, which would
    // lengthen the prompt and turn answers into calls.
    let body = BodyOptions { ignore_eos: true, tools: None, ..body.clone() };
    let plan = one_at_a_time(args, setup, Workload::Requests(specs), count, body);
    let outcome = run_stage::run_level(&setup.client, plan).await;
    let calibration = Calibration::fit(&run_stage::calibrate::measured(&outcome.records), scale).ok_or_else(|| {
        BenchError::Args(format!(
            "--slo-scale: calibration needs at least two of its {count} requests to complete with a TTFT and \
             a prompt token count (does the server report usage?)"
        ))
    })?;
    let slos = calibration.slos(args.e2e_slo_ms);
    eprintln!("rillm bench: calibrated SLOs: TTFT {}, TPOT {:.1} ms", slos.ttft_text(), slos.tpot_ms.unwrap_or(0.0));
    Ok(slos)
}

/// Requests sent one at a time before the run: never the measured prompts, which must not
/// be in a prefix cache when their level sends them.
fn one_at_a_time(
    args: &BenchArgs,
    setup: &Setup,
    workload: Workload,
    count: usize,
    body: BodyOptions,
) -> Arc<LevelPlan> {
    Arc::new(LevelPlan {
        endpoints: endpoints(args, setup),
        workload: Arc::new(workload),
        body,
        load: Load::Concurrency(1),
        amount: Amount::Requests(count),
        max_inflight: None,
        seed: args.seed,
        progress: false,
        prompts: PromptShare { first_prompt: 0, level_prompts: count, prompt_repeats: 1 },
        shard: None,
        save_sessions: None,
    })
}

/// Stages 4 and 5: each level run, then its records turned into a result.
pub(crate) async fn run_levels(
    args: &BenchArgs,
    setup: &Setup,
    prepared: &Prepared,
    slos: Slos,
    command_line: &str,
) -> Vec<BenchResult> {
    let mut run_context = RunContext::new(args, setup.model.as_deref(), command_line);
    run_context.workload = prepared.description.clone();
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
    for (level, &load) in setup.loads.iter().enumerate() {
        let mut level_context = run_context.clone();
        level_context.started_unix_ms = Some(shard::unix_ms_now());
        results.push(run_level(args, setup, prepared, level, load, slos, level_context).await);
    }
    results
}

/// One level: sent, with the server's speculation counters read either side, then summed.
async fn run_level(
    args: &BenchArgs,
    setup: &Setup,
    prepared: &Prepared,
    level: usize,
    load: Load,
    slos: Slos,
    run_context: RunContext,
) -> BenchResult {
    let plan = Arc::new(level_plan(args, setup, prepared, level, load));
    let origins: Vec<String> = args.url.iter().map(|u| origin(u).to_string()).collect();
    let scrape = || async {
        match args.no_server_metrics {
            true => None,
            false => server_metrics::scrape_all(&setup.client, &origins, args.api_key.as_deref()).await,
        }
    };
    let spec_before = scrape().await;
    let every = args.model_status_ms.filter(|&ms| ms > 0).map(std::time::Duration::from_millis);
    let watch = every.map(|every| watch_models(args, setup, &origins, every));
    let mut outcome = run_stage::run_level(&setup.client, plan).await;
    let model_polls = match watch {
        Some((stop, polls)) => {
            let _ = stop.send(());
            polls.await.unwrap_or_default()
        }
        None => Vec::new(),
    };
    let spec_after = scrape().await;
    if let Some(counter) = &setup.output_counter {
        estimate_output_tokens(counter, &mut outcome.records);
    }
    let model_loads = every.and_then(|every| model_status::load_waits(&model_polls, &outcome.records, every));
    let mut result = result::build(RunFacts {
        url: setup.url.clone(),
        urls: args.url.clone(),
        protocol: setup.protocol,
        load: describe(load, args.max_inflight),
        slos,
        records: outcome.records,
        wall_s: outcome.wall_s,
        client_cpu_s: outcome.client_cpu_s,
        run_context,
        notes: prepared.notes.clone(),
        sessions: matches!(*prepared.levels[level], Workload::Sessions(_)).then_some(result::SessionCounts {
            cut_short: outcome.sessions_cut,
            turns_not_sent: outcome.turns_not_sent,
        }),
        answers: result::AnswersPerPrompt {
            requests: args.prompt_repeats as usize,
            choices: args.extra_body.as_ref().and_then(|b| b["n"].as_u64()).map_or(1, |n| n.max(1) as usize),
        },
    });
    result.speculation = server_metrics::SpeculationSummary::between(spec_before, spec_after);
    result.model_loads = model_loads;
    result
}

/// Polls the (first) server's model list through a level (`--model-status-ms`): which
/// requests waited on a model's load. Stopped by the sender.
fn watch_models(
    args: &BenchArgs,
    setup: &Setup,
    origins: &[String],
    every: std::time::Duration,
) -> (tokio::sync::oneshot::Sender<()>, tokio::task::JoinHandle<Vec<model_status::StatusPoll>>) {
    let (stop, stopped) = tokio::sync::oneshot::channel();
    let origin = origins.first().cloned().unwrap_or_default();
    let target = model_status::Watched { client: setup.client.clone(), origin, api_key: args.api_key.clone() };
    let watch = model_status::watch(target, every, std::time::Instant::now(), stopped);
    (stop, tokio::spawn(watch))
}

/// The run's endpoints, for each level's plan.
fn endpoints(args: &BenchArgs, setup: &Setup) -> Endpoints {
    Endpoints {
        targets: Arc::clone(&setup.targets),
        protocol: setup.protocol,
        api_key: args.api_key.clone(),
        timeout: setup.timeout,
    }
}

fn level_plan(args: &BenchArgs, setup: &Setup, prepared: &Prepared, level: usize, load: Load) -> LevelPlan {
    let prompts = PromptShare {
        first_prompt: level * prepared.level_prompts,
        level_prompts: prepared.level_prompts,
        prompt_repeats: args.prompt_repeats as usize,
    };
    LevelPlan {
        endpoints: endpoints(args, setup),
        workload: Arc::clone(&prepared.levels[level]),
        body: prepared.body.clone(),
        load,
        amount: setup.amount,
        max_inflight: args.max_inflight,
        seed: args.seed,
        progress: std::io::IsTerminal::is_terminal(&std::io::stderr()),
        prompts,
        shard: args.shard,
        save_sessions: prepared.save_sessions.clone(),
    }
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
fn estimate_output_tokens(counter: &tokens::TokenCounter, records: &mut [record::RequestRecord]) {
    for r in records.iter_mut().filter(|r| r.status == record::Status::Completed && r.tokens().is_none()) {
        if let Some(n) = counter.count_output(&r.reply.text) {
            r.usage.completion_tokens = Some(n);
            r.usage.tokens_estimated = true;
        }
    }
}

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

async fn discover_model(client: &reqwest::Client, url: &str, api_key: Option<&str>) -> Option<String> {
    let mut request = client.get(format!("{}/v1/models", origin(url))).timeout(Duration::from_secs(5));
    if let Some(key) = api_key {
        request = request.bearer_auth(key);
    }
    let models: Value = request.send().await.ok()?.json().await.ok()?;
    models["data"][0]["id"].as_str().map(str::to_string)
}
