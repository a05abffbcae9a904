//! What a run sends, built once before it starts: prompts cycled at the load's arrivals, a
//! trace replayed at its own times, or multi-turn sessions. Synthetic prompts are made and
//! counted here, so the send path only serialises bodies.
//!
//! The first stage of the bench's data flow (workload → run → results → report): the
//! sources of requests (datasets, traces, synthetic prompts and sessions, tools, schemas)
//! and their token counting. Nothing here imports the later stages.

pub mod body;
pub mod conversation;
pub mod dataset;
pub mod error;
pub mod lengths;
pub mod model_mix;
pub mod spec;
pub mod structured;
pub mod synth;
pub mod think;
pub mod tokens;
pub mod tools;
pub mod trace;

use std::sync::Arc;

use rand::{Rng, SeedableRng};
use serde_json::{json, Value};

use crate::args::BenchArgs;
use crate::protocol::Protocol;
use crate::workload::conversation::{Session, Turn};
use crate::workload::error::WorkloadError;
use crate::workload::lengths::LengthDist;
use crate::workload::spec::{PromptSpec, RequestSpec};
use crate::workload::synth::{PromptLength, PromptPlan, PromptSynth};
use crate::workload::tokens::TokenCounter;
use structured::{ConstraintArgs, ResponseFormat};
use trace::TraceScaling;

/// A request with its own arrival time (trace replay).
#[derive(Debug, Clone)]
pub struct TimedRequest {
    pub at_s: f64,
    pub spec: RequestSpec,
}

#[derive(Debug, Clone)]
pub enum Workload {
    /// Independent requests, used in turn at the load's arrivals.
    Requests(Vec<RequestSpec>),
    /// Requests at recorded times, open loop.
    Trace(Vec<TimedRequest>),
    Sessions(Vec<Session>),
}

/// The workload and what a reader of the result must know about it.
pub struct Built {
    pub workload: Workload,
    /// For `run_context.workload`: source, hashes, every scale factor, how prompts were made.
    pub description: Value,
    /// For `limits`.
    pub notes: Vec<String>,
}

/// Where the benchmark's token counts come from: `--tokenizer`, else the target's own
/// `/tokenize`, else estimates.
async fn counter(args: &BenchArgs, client: &reqwest::Client, base: &str) -> Result<TokenCounter, WorkloadError> {
    match &args.tokenizer {
        Some(path) => Ok(TokenCounter::from_file(path)?),
        None => Ok(TokenCounter::probe(client, base, args.api_key.as_deref()).await),
    }
}

/// The run's requests: `pool_size` prompts in all, or sessions enough for `levels` load
/// levels to play their own.
pub async fn build(
    args: &BenchArgs,
    protocol: Protocol,
    client: &reqwest::Client,
    base: &str,
    pool_size: usize,
    levels: usize,
) -> Result<Built, WorkloadError> {
    let chat = protocol.takes_messages();
    if let Some(path) = &args.trace {
        let counter = counter(args, client, base).await?;
        return trace_workload(args, path, chat, &counter).await;
    }
    if let Some(path) = &args.dataset {
        if args.multi_turn || dataset::is_sessions_file(path)? {
            let mut sessions = dataset::load_sessions(path, args.max_tokens)?;
            if let Some(n) = args.sessions {
                sessions.truncate(n.saturating_mul(levels));
            }
            let turns: usize = sessions.iter().map(|s| s.turns.len()).sum();
            let replies = if sessions.iter().flat_map(|s| &s.turns).any(|t| t.recorded.is_some()) {
                "recorded: each request is sent as it was recorded (--save-sessions), whatever the server replies"
            } else {
                "the server's live replies are the history"
            };
            let description = json!({"kind": "sessions", "source": path.display().to_string(), "sha256": crate::files::sha256_file(path),
                "sessions": sessions.len(), "turns": turns, "replies": replies});
            return Ok(Built { workload: Workload::Sessions(sessions), description, notes: Vec::new() });
        }
        let mut specs = dataset::load(path, args.max_tokens)?;
        if !args.record_models {
            specs.iter_mut().for_each(|s| s.model = None);
        }
        let description = json!({"kind": "dataset", "source": path.display().to_string(), "sha256": crate::files::sha256_file(path), "prompts": specs.len(), "record_models": args.record_models});
        return Ok(Built { workload: Workload::Requests(specs), description, notes: Vec::new() });
    }
    if let Some(n) = args.sessions {
        let counter = counter(args, client, base).await?;
        return synthetic_sessions(args, n, levels, &counter).await;
    }
    if args.input_tokens.is_some() || args.shared_prefix_tokens.is_some() {
        let counter = counter(args, client, base).await?;
        return synthetic_requests(args, chat, &counter, pool_size, levels).await;
    }
    let spec = RequestSpec::new(PromptSpec::Text(args.prompt.clone()), args.max_tokens);
    Ok(Built {
        workload: Workload::Requests(vec![spec]),
        description: json!({"kind": "prompt", "prompts": 1}),
        notes: Vec::new(),
    })
}

/// A tool workload: replies' calls are answered and sent back (`session::play`), so
/// independent prompts become one-turn conversations.
pub fn with_tools(mut built: Built, path: &std::path::Path, tools: &crate::workload::tools::ToolSet) -> Built {
    if let Workload::Requests(specs) = &built.workload {
        let sessions = specs
            .iter()
            .enumerate()
            .map(|(i, spec)| Session {
                id: Arc::from(format!("agent-{i}")),
                turns: vec![Turn::live(spec.prompt.as_messages(), spec.max_tokens, 0.0)],
            })
            .collect();
        built.workload = Workload::Sessions(sessions);
    }
    built.description["tools"] = json!({"source": path.display().to_string(), "sha256": crate::files::sha256_file(path),
        "count": tools.tools.len(), "tool_choice": tools.tool_choice, "result_tokens": tools.result_tokens,
        "max_rounds": tools.max_rounds, "final_schema": tools.final_answer.as_ref().map(|f| f.schema())});
    built
}

/// A dataset of recorded chat requests with their own tools: replayed as recorded, on the
/// chat protocol, with no `--tools` to replace theirs.
pub fn recorded_tools(mut built: Built, protocol: Protocol, tools_arg: bool) -> Result<Built, String> {
    let with_tools = match &built.workload {
        Workload::Requests(specs) => specs.iter().filter(|s| s.tools.is_some()).count(),
        Workload::Sessions(sessions) => {
            let mut recorded = sessions.iter().flat_map(|s| &s.turns).filter_map(|t| t.recorded.as_ref()).peekable();
            if recorded.peek().is_some() && tools_arg {
                return Err("the sessions are recorded requests, sent as recorded; --tools would change them".into());
            }
            recorded.filter(|r| r.tools.is_some()).count()
        }
        Workload::Trace(_) => 0,
    };
    if with_tools == 0 {
        return Ok(built);
    }
    if !matches!(protocol, Protocol::Chat | Protocol::Responses) {
        return Err("the dataset's requests carry tools: replay them on chat (/v1/chat/completions) or the \
                    Responses API (/v1/responses)"
            .into());
    }
    if tools_arg {
        return Err("the dataset's requests carry their own tools; --tools would replace them".into());
    }
    built.description["tools"] = json!({"source": "dataset", "requests_with_tools": with_tools, "max_rounds": 1});
    Ok(built)
}

/// A constraint workload: every request asks for structured output (`--response-format`),
/// the constraints taken round-robin. A run that brings no prompts of its own (no dataset,
/// trace or synthetic prompts) asks each constraint's own question (a schema's description).
pub fn constrain(built: Built, args: &BenchArgs, format: ResponseFormat, protocol: Protocol) -> Result<Built, String> {
    let constraints = structured::load(&ConstraintArgs {
        format,
        schemas: args.schemas.as_deref(),
        regex: args.regex.as_deref(),
        choices: &args.choices,
        prompt: &args.prompt,
    })?;
    body::constraint_fields(&constraints[0], protocol)?;
    let Built { workload, mut description, notes } = built;
    let own_prompts = description["kind"] != "prompt";
    let nth = |i: usize| Some(Arc::clone(&constraints[i % constraints.len()]));
    let workload = match workload {
        Workload::Sessions(_) => return Err("--response-format does not take session workloads yet".into()),
        Workload::Requests(specs) if own_prompts => Workload::Requests(
            specs.into_iter().enumerate().map(|(i, spec)| RequestSpec { constraint: nth(i), ..spec }).collect(),
        ),
        Workload::Requests(_) => Workload::Requests(
            (0..constraints.len())
                .map(|i| {
                    let prompt =
                        PromptSpec::Messages(vec![json!({"role": "user", "content": constraints[i].prompt_text()})]);
                    RequestSpec { constraint: nth(i), ..RequestSpec::new(prompt, args.max_tokens) }
                })
                .collect(),
        ),
        Workload::Trace(requests) => Workload::Trace(
            requests
                .into_iter()
                .enumerate()
                .map(|(i, r)| TimedRequest { spec: RequestSpec { constraint: nth(i), ..r.spec }, ..r })
                .collect(),
        ),
    };
    let names: Vec<&str> = constraints.iter().map(|c| c.name.as_str()).collect();
    description["constraints"] = json!({"response_format": format, "count": constraints.len(), "names": names,
        "prompts": if own_prompts { "the workload's" } else { "each constraint's own" }});
    Ok(Built { workload, description, notes })
}

fn output_dist(args: &BenchArgs) -> LengthDist {
    args.output_tokens.unwrap_or(LengthDist::fixed(args.max_tokens))
}

fn prompt_notes(counter: &TokenCounter, synth: &PromptSynth, made: usize, chat: bool) -> Vec<String> {
    let mut notes = Vec::new();
    if !counter.is_exact() {
        notes.push(format!("Prompt lengths are approximate ({}).", counter.describe()));
    } else if chat && !counter.counts_chat_template() {
        notes.push("Prompt lengths count the message text; the server's chat template adds its own tokens.".into());
    }
    if synth.inexact > 0 {
        notes.push(format!("{} of {made} synthetic prompts could not be made exactly their target length (a target below the template's own tokens, or words the tokenizer merges).", synth.inexact));
    }
    notes
}

async fn trace_workload(
    args: &BenchArgs,
    path: &std::path::Path,
    chat: bool,
    counter: &TokenCounter,
) -> Result<Built, WorkloadError> {
    let scaling = TraceScaling {
        time_scale: args.time_scale,
        input_scale: args.input_scale,
        output_scale: args.output_scale,
        max_input_tokens: args.max_input_tokens,
        max_output_tokens: args.max_output_tokens,
        offset: args.trace_offset,
    };
    // The whole trace unless told otherwise (`--requests`, or `--duration` of recorded time).
    let (format, records, available) = trace::load(path, args.trace_format, &scaling, args.requests, args.duration)?;
    let mut synth = PromptSynth::new(counter, args.seed).await?;
    let block = args.trace_block_tokens.max(1);
    let mut requests = Vec::with_capacity(records.len());
    for (i, r) in records.iter().enumerate() {
        // Hash ids name whole blocks; the last block of a prompt may be partial.
        let mut blocks = Vec::new();
        let mut left = r.input_tokens;
        for &id in &r.hash_ids {
            let n = left.min(block);
            if n == 0 {
                break;
            }
            blocks.push((id, n));
            left -= n;
        }
        let own_seed = TRACE_SEEDS | i as u64;
        let plan = PromptPlan { blocks, own_seed, length: PromptLength::Total(r.input_tokens), system: None };
        let (prompt, counted) = synth.prompt(&plan, chat).await?;
        requests.push(TimedRequest {
            at_s: r.at_s,
            spec: RequestSpec { prompt_tokens: counted, ..RequestSpec::new(prompt, r.output_tokens) },
        });
    }
    let mut notes = prompt_notes(counter, &synth, requests.len(), chat);
    let skipped = if args.trace_offset > 0 { format!(", after skipping {}", args.trace_offset) } else { String::new() };
    notes.push(format!("Replayed {} of the trace's {available} records{skipped}.", requests.len()));
    let description = json!({
        "kind": "trace",
        "records_in_trace": available,
        "source": path.display().to_string(),
        "sha256": crate::files::sha256_file(path),
        "format": format,
        "scaling": scaling,
        "block_tokens": block,
        "requests": requests.len(),
        "span_s": requests.last().map_or(0.0, |r| r.at_s),
        "prompts": counter.describe(),
        "max_tokens": "the trace's output length (ignore_eos asks the server to reach it)",
    });
    Ok(Built { workload: Workload::Trace(requests), description, notes })
}

/// With `--distinct-prompts N`, how many prompts each of `levels` load levels cycles
/// through: N, or fewer when a pool of `pool` prompts cannot hold N for every level. The
/// runner indexes the pool by it and the builder makes N x levels prompts: one formula.
pub(crate) fn recurring_per_level(distinct: Option<usize>, pool: usize, levels: usize) -> Option<usize> {
    distinct.map(|n| n.clamp(1, (pool / levels.max(1)).max(1)))
}

async fn synthetic_requests(
    args: &BenchArgs,
    chat: bool,
    counter: &TokenCounter,
    pool_size: usize,
    levels: usize,
) -> Result<Built, WorkloadError> {
    let input = args.input_tokens.unwrap_or(LengthDist::fixed(64));
    let output = output_dist(args);
    let groups = args.prefix_groups.max(1);
    let mut rng = rand::rngs::StdRng::seed_from_u64(args.seed ^ 0x1e9);
    let mut synth = PromptSynth::new(counter, args.seed).await?;
    // Recurring prompts: each load level cycles its own N, so a sweep's later levels do not
    // find the first level's prompts cached.
    let recurring = recurring_per_level(args.distinct_prompts, pool_size, levels);
    let distinct = recurring.map_or(pool_size, |n| n * levels.max(1));
    let mut specs = Vec::with_capacity(distinct);
    for i in 0..distinct {
        let question = input.sample(&mut rng);
        let system = args.shared_prefix_tokens.map(|n| (u64::from(rng.gen_range(0..groups)), n));
        let length = PromptLength::Content(question + system.map_or(0, |s| s.1));
        let plan = PromptPlan { blocks: Vec::new(), own_seed: i as u64, length, system };
        let (prompt, counted) = synth.prompt(&plan, chat).await?;
        specs.push(RequestSpec { prompt_tokens: counted, ..RequestSpec::new(prompt, output.sample(&mut rng)) });
    }
    let notes = prompt_notes(counter, &synth, specs.len(), chat);
    let description = json!({
        "kind": "synthetic",
        "input_tokens": input,
        "output_tokens": output,
        "shared_prefix_tokens": args.shared_prefix_tokens,
        "prefix_groups": args.shared_prefix_tokens.map(|_| groups),
        "prompts": counter.describe(),
        "distinct_prompts": specs.len(),
        "distinct_prompts_per_level": recurring,
        "recurring": args.distinct_prompts.is_some(),
    });
    Ok(Built { workload: Workload::Requests(specs), description, notes })
}

/// Sessions' and traces' own seeds live apart from synthetic prompts' (0, 1, 2, …): with
/// one seed, a script's trace, sessions and recurring prompts would otherwise open with the
/// same words and find each other in the server's prefix cache.
const SESSION_SEEDS: u64 = 0x5E55 << 48;
const TRACE_SEEDS: u64 = 0x7ACE << 48;

/// `count` sessions for each of `levels` load levels (each level plays its own).
async fn synthetic_sessions(
    args: &BenchArgs,
    count: usize,
    levels: usize,
    counter: &TokenCounter,
) -> Result<Built, WorkloadError> {
    let input = args.input_tokens.unwrap_or(LengthDist::fixed(64));
    let opening = args.opening_tokens.unwrap_or(input);
    let output = output_dist(args);
    let turns = args.turns.max(1);
    let mut rng = rand::rngs::StdRng::seed_from_u64(args.seed ^ 0x5e55);
    // Apart from the lengths' generator: the same sessions are sent whatever the think time.
    let mut think_rng = rand::rngs::StdRng::seed_from_u64(args.seed ^ 0x7417);
    let mut synth = PromptSynth::new(counter, args.seed).await?;
    let total = count.saturating_mul(levels.max(1));
    let mut sessions = Vec::with_capacity(total);
    let mut made = 0;
    for s in 0..total {
        let mut session_turns = Vec::with_capacity(turns as usize);
        for t in 0..turns {
            let n = if t == 0 { opening.sample(&mut rng) } else { input.sample(&mut rng) };
            let plan = PromptPlan {
                blocks: Vec::new(),
                own_seed: SESSION_SEEDS | ((s as u64) << 16) | u64::from(t),
                length: PromptLength::Content(n),
                system: None,
            };
            // Each turn's text is fitted on its own; the history around it is the server's.
            let (prompt, _) = synth.prompt(&plan, false).await?;
            made += 1;
            session_turns.push(Turn::live(
                vec![json!({"role": "user", "content": prompt.as_text()})],
                output.sample(&mut rng),
                if t == 0 { 0.0 } else { args.think_ms.sample(&mut think_rng) },
            ));
        }
        sessions.push(Session { id: format!("s{s}").into(), turns: session_turns });
    }
    let notes = prompt_notes(counter, &synth, made, false);
    let description = json!({
        "kind": "sessions",
        "source": "synthetic",
        "sessions": count,
        "turns_per_session": turns,
        "think_ms": args.think_ms,
        "opening_tokens": opening,
        "input_tokens": input,
        "output_tokens": output,
        "prompts": counter.describe(),
        "replies": "the server's live replies are the history",
    });
    Ok(Built { workload: Workload::Sessions(sessions), description, notes })
}

/// A test input: `content` in a file named like `name` (loaders read the extension), removed
/// when the handle drops.
#[cfg(test)]
pub(crate) fn test_file(name: &str, content: &str) -> tempfile::TempPath {
    let file = tempfile::Builder::new().prefix("rillm-").suffix(&format!("-{name}")).tempfile().unwrap();
    std::fs::write(file.path(), content).unwrap();
    file.into_temp_path()
}
