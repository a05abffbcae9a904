//! The JSON result: every field of the prototype's result file, with its name and meaning,
//! plus the rest of what a run measured.

use serde::{Deserialize, Serialize};

use crate::results::groups::{per_model, per_target, per_turn};
pub use crate::results::groups::{ModelSummary, TargetSummary, TurnSummary};
pub use crate::results::slo::Slos;
use crate::run::record::{Reply, RequestPlace, RequestRecord, Status, StreamTiming, TokenCounts};
use crate::stats::mean;
use crate::stats::Distribution;

/// How a level's requests were sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LoadMode {
    /// Open loop at a requested rate.
    Rate,
    /// Closed loop: a fixed number of workers.
    Concurrency,
    /// Open loop at a trace's recorded times.
    Trace,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LoadDescription {
    pub mode: LoadMode,
    pub requested_rate_rps: Option<f64>,
    pub arrival: Option<crate::run::schedule::Arrival>,
    pub burstiness: Option<f64>,
    pub concurrency: Option<usize>,
    pub max_inflight: Option<usize>,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// One request as written to the file. Field names follow the prototype.
#[derive(Debug, Serialize, Deserialize)]
pub struct RequestJson {
    pub index: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub turn: Option<u32>,
    pub status: Status,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub http_status: Option<u16>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry_after_s: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ttft_ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ttft_from_schedule_ms: Option<f64>,
    /// Time to the first answer text, where reasoning came first.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub time_to_first_answer_ms: Option<f64>,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub reasoning_chars: usize,
    /// Completion tokens spent thinking, as the server reported them (0 is left out).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub event_gaps_ms: Option<Vec<f64>>,
    pub e2e_ms: f64,
    pub e2e_from_schedule_ms: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content_events: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub completion_tokens: Option<u32>,
    /// Sent again after the server closed a kept-alive connection under it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub resent: bool,
    /// The server gave no count: `completion_tokens` was counted with `--tokenizer`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub completion_tokens_estimated: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prompt_tokens: Option<u32>,
    /// Prompt tokens the server reported reusing from its cache.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cached_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tpot_ms: Option<f64>,
    pub scheduled_ms: f64,
    pub sent_ms: f64,
    pub dispatch_lag_ms: f64,
    /// Which `--url` it went to, when there were several (0, the first, is left out).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub target: usize,
    /// The model it named, where the run mixed several (`--model-mix`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finish_reason: Option<String>,
    /// Constraint workloads: does the output parse, and is it valid for its constraint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_check: Option<crate::checks::OutputCheck>,
    /// Tool workloads: the round of its turn (1: the user's turn) and its calls' check.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub round: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call_check: Option<crate::checks::CallCheck>,
}

impl RequestJson {
    fn from(r: &RequestRecord) -> Self {
        let sent = r.status != Status::Shed;
        let streamed = r.status == Status::Completed || r.timing.content_events > 0;
        let r3 = |x: f64| (x * 1000.0).round() / 1000.0;
        Self {
            index: r.place.index,
            session_id: r.place.session.as_deref().map(str::to_string),
            turn: r.place.turn,
            status: r.status,
            error: r.error.clone(),
            http_status: r.http_status,
            retry_after_s: r.retry_after_s,
            ttft_ms: r.timing.ttft_ms.map(r3),
            ttft_from_schedule_ms: r.timing.ttft_ms.map(|t| r3(t + r.dispatch_lag_ms())),
            time_to_first_answer_ms: (r.usage.reasoning_chars > 0).then_some(r.timing.ttfat_ms.map(r3)).flatten(),
            reasoning_chars: r.usage.reasoning_chars,
            reasoning_tokens: r.usage.reasoning_tokens.filter(|&t| t > 0),
            event_gaps_ms: streamed.then(|| r.timing.event_gaps_ms.iter().copied().map(r3).collect()),
            e2e_ms: r3(r.timing.e2e_ms),
            e2e_from_schedule_ms: r3(if sent { r.timing.e2e_ms + r.dispatch_lag_ms() } else { 0.0 }),
            text: streamed.then(|| r.reply.text.clone()),
            content_events: streamed.then_some(r.timing.content_events),
            completion_tokens: r.tokens(),
            completion_tokens_estimated: r.usage.tokens_estimated,
            resent: r.resent,
            prompt_tokens: r.usage.prompt_tokens,
            cached_tokens: r.usage.cached_tokens,
            tpot_ms: r.tpot_ms().map(r3),
            scheduled_ms: r3(r.timing.scheduled_ms),
            sent_ms: r3(r.timing.sent_ms),
            dispatch_lag_ms: r3(r.dispatch_lag_ms()),
            target: r.place.target,
            model: r.place.model.as_deref().map(str::to_string),
            finish_reason: r.finish_reason.clone(),
            output_check: r.reply.output_check,
            round: r.place.round,
            call_check: r.reply.call_check,
        }
    }
}

impl RequestJson {
    /// The record again, its times moved `shift_ms` later (onto another shard's clock), for
    /// recomputing a run from its files. What the file does not keep (tokens per event) is
    /// unknown: ITL per token then comes only from events that carried one token each.
    pub fn to_record(&self, shift_ms: f64) -> RequestRecord {
        RequestRecord {
            place: RequestPlace {
                index: self.index,
                session: self.session_id.as_deref().map(std::sync::Arc::from),
                turn: self.turn,
                round: self.round,
                target: self.target,
                model: self.model.as_deref().map(std::sync::Arc::from),
            },
            status: self.status,
            http_status: self.http_status,
            error: self.error.clone(),
            retry_after_s: self.retry_after_s,
            resent: self.resent,
            finish_reason: self.finish_reason.clone(),
            timing: StreamTiming {
                scheduled_ms: self.scheduled_ms + shift_ms,
                sent_ms: self.sent_ms + shift_ms,
                ttft_ms: self.ttft_ms,
                ttfat_ms: self.time_to_first_answer_ms.or(self.ttft_ms),
                event_gaps_ms: self.event_gaps_ms.clone().unwrap_or_default(),
                event_tokens: Vec::new(),
                content_events: self.content_events.unwrap_or(0),
                e2e_ms: self.e2e_ms,
            },
            usage: TokenCounts {
                prompt_tokens: self.prompt_tokens,
                cached_tokens: self.cached_tokens,
                completion_tokens: self.completion_tokens,
                tokens_estimated: self.completion_tokens_estimated,
                reasoning_tokens: self.reasoning_tokens,
                reasoning_chars: self.reasoning_chars,
            },
            reply: Reply {
                text: self.text.clone().unwrap_or_default(),
                output_check: self.output_check,
                tool_calls: Vec::new(),
                call_check: self.call_check,
            },
        }
    }
}

#[derive(Debug, Serialize, Deserialize)]
pub struct Latencies {
    /// To the first content event, reasoning included.
    pub ttft_ms: Option<Distribution>,
    pub ttft_from_schedule_ms: Option<Distribution>,
    /// Reasoning models: to the first answer text.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub time_to_first_answer_ms: Option<Distribution>,
    pub tpot_ms: Option<Distribution>,
    /// Token-level inter-token latency, only from requests where tokens are known per event.
    pub itl_ms: Option<Distribution>,
    pub event_gap_ms: Option<Distribution>,
    pub e2e_ms: Option<Distribution>,
    pub e2e_from_schedule_ms: Option<Distribution>,
    pub dispatch_lag_ms: Option<Distribution>,
    /// Runs that want several answers to each prompt (`n` in the body, or the prompt sent
    /// several times with `--prompt-repeats`): from a prompt's first send until its last
    /// answer is in. What a client sampling K answers waits for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub all_answers_ms: Option<Distribution>,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct ClientCheck {
    pub cpu_s: f64,
    /// Client CPU time over wall time, in cores.
    pub cpu_cores_used: f64,
    pub dispatch_lag_p99_ms: f64,
    pub saturated: bool,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct SessionCounts {
    /// Sessions that stopped after a failed or rejected turn.
    pub cut_short: usize,
    /// Their remaining turns, never sent (not in `offered_requests`).
    pub turns_not_sent: usize,
}

/// What the prompts and outputs were, and how much of the prompts the server reused.
#[derive(Debug, Serialize, Deserialize)]
pub struct TokenSummary {
    /// Over sent requests whose prompt was counted (by the server or the benchmark).
    pub mean_input_tokens: Option<f64>,
    /// Over completed requests with a known output count.
    pub mean_output_tokens: Option<f64>,
    /// Reasoning models: output tokens spent thinking, over completed requests whose
    /// server reported them (the rest of the output is the answer).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mean_reasoning_tokens: Option<f64>,
    /// Cached prompt tokens over prompt tokens, in percent, over completed requests whose
    /// server reported `cached_tokens`.
    pub prefix_cache_hit_pct: Option<f64>,
    pub requests_reporting_cached_tokens: usize,
    /// Completed requests with no output token count (neither usage nor `--tokenizer`):
    /// output tokens/s leaves them out.
    pub requests_without_token_count: usize,
    /// Completed requests whose output count is the benchmark's estimate (`--tokenizer`).
    pub requests_with_estimated_tokens: usize,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct BenchResult {
    // The prototype's fields, in its order.
    pub execution_mode: String,
    pub offered_requests: usize,
    pub client_shed_requests: usize,
    pub duration_s: f64,
    pub ttft_slo_ms: f64,
    pub ttft_goodput_rps: f64,
    pub requests: Vec<RequestJson>,
    pub limits: String,
    pub run_context: crate::results::context::RunContext,
    // What rillm adds.
    pub url: String,
    /// Every endpoint loaded, when there were several (`url` is the first).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub urls: Vec<String>,
    pub protocol: crate::protocol::Protocol,
    pub load: LoadDescription,
    pub sent: usize,
    pub completed: usize,
    pub failed: usize,
    pub rejected_429: usize,
    pub achieved_rate_rps: f64,
    pub throughput_rps: f64,
    pub output_tokens_per_s: Option<f64>,
    /// Prompt tokens of completed requests per second (the server's usage): what a
    /// scoring or prefill-bound workload is measured by.
    #[serde(default)]
    pub prompt_tokens_per_s: Option<f64>,
    pub slos: Slos,
    /// Completed requests per second meeting every SLO given; open loop counts TTFT and
    /// e2e from the scheduled send.
    pub goodput_rps: f64,
    /// The same from the actual send (differs when the client lagged its schedule).
    pub goodput_from_send_rps: f64,
    /// Share of offered requests meeting every SLO given, in percent.
    pub slo_attainment_pct: f64,
    pub latency: Latencies,
    pub tokens: TokenSummary,
    /// Constraint workloads (`--response-format`): how many outputs were valid.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub structured_outputs: Option<crate::results::checks::ConstraintSummary>,
    /// Tool workloads (`--tools`): calls made and valid, rounds, TTFT by round.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<crate::results::checks::ToolCallSummary>,
    /// Speculative decoding over the level, from the server's own `vllm:spec_decode_*`
    /// counters (servers that publish them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub speculation: Option<crate::run::server_metrics::SpeculationSummary>,
    /// Sessions only: TTFT and reuse by turn index (turn 1 against later turns shows
    /// whether the server reuses the conversation's KV).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub per_turn: Option<Vec<TurnSummary>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sessions: Option<SessionCounts>,
    /// Several `--url`: each endpoint's share and latencies.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub per_target: Option<Vec<TargetSummary>>,
    /// Several models (`--model-mix`): each model's share and latencies.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub per_model: Option<Vec<ModelSummary>>,
    /// Several models: the requests that waited on a model's load, from the server's model
    /// list polled during the run (`run::model_status`; servers that list load states).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_loads: Option<crate::run::model_status::LoadWaits>,
    pub client: ClientCheck,
    /// The notes in `limits` that describe the workload (how prompts were made), apart, so
    /// `bench merge` can carry them into the merged result.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub workload_notes: Vec<String>,
}

impl BenchResult {
    /// Valid structured outputs a second over the level: what a client that wants objects
    /// (an extraction pipeline) waits for, where output tokens a second also reward longer
    /// layouts and replies the model runs to the cap. Derived, so older results have it.
    pub fn valid_outputs_per_s(&self) -> Option<f64> {
        let s = self.structured_outputs?;
        (self.duration_s > 0.0).then(|| s.valid as f64 / self.duration_s)
    }

    /// Embeddings and rerank: inputs (documents) answered a second over the level, every
    /// completed request's. Derived from the requests' answered counts.
    pub fn inputs_per_s(&self) -> Option<f64> {
        let inputs: usize =
            self.requests.iter().filter(|r| r.status == Status::Completed).filter_map(|r| r.content_events).sum();
        (self.protocol.is_pooled() && self.duration_s > 0.0).then(|| inputs as f64 / self.duration_s)
    }
}

pub struct RunFacts {
    pub url: String,
    pub urls: Vec<String>,
    pub protocol: crate::protocol::Protocol,
    pub load: LoadDescription,
    pub slos: Slos,
    pub records: Vec<RequestRecord>,
    pub wall_s: f64,
    pub client_cpu_s: f64,
    pub run_context: crate::results::context::RunContext,
    /// Workload facts for `limits` (how prompts were made).
    pub notes: Vec<String>,
    pub sessions: Option<SessionCounts>,
    /// Answers wanted per prompt: requests per prompt (`--prompt-repeats`) and choices per
    /// request (`n`); the requests of one prompt are consecutive indices.
    pub answers: AnswersPerPrompt,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AnswersPerPrompt {
    pub requests: usize,
    pub choices: usize,
}

impl Default for AnswersPerPrompt {
    fn default() -> Self {
        Self { requests: 1, choices: 1 }
    }
}

/// Per prompt whose requests all completed: from the first send to the last end.
fn all_answers(records: &[RequestRecord], answers: AnswersPerPrompt) -> Option<Distribution> {
    if answers.requests * answers.choices <= 1 {
        return None;
    }
    let mut groups: std::collections::BTreeMap<usize, Vec<&RequestRecord>> = Default::default();
    for r in records {
        groups.entry(r.place.index / answers.requests.max(1)).or_default().push(r);
    }
    Distribution::of(
        groups.values().filter(|g| g.len() == answers.requests && g.iter().all(|r| r.status == Status::Completed)).map(
            |g| {
                let first = g.iter().map(|r| r.timing.sent_ms).fold(f64::MAX, f64::min);
                let last = g.iter().map(|r| r.timing.sent_ms + r.timing.e2e_ms).fold(f64::MIN, f64::max);
                last - first
            },
        ),
    )
}

/// Dispatch lag p99 above this, or client CPU above this many cores, means the client may
/// have distorted the figures.
const LAG_LIMIT_MS: f64 = 10.0;
const CPU_LIMIT_CORES: f64 = 0.5;

pub fn build(facts: RunFacts) -> BenchResult {
    let records = &facts.records;
    let count = |s: Status| records.iter().filter(|r| r.status == s).count();
    let (completed, failed, rejected, shed) =
        (count(Status::Completed), count(Status::Failed), count(Status::Rejected), count(Status::Shed));
    let sent_records: Vec<&RequestRecord> = records.iter().filter(|r| r.status != Status::Shed).collect();
    let done: Vec<&RequestRecord> = records.iter().filter(|r| r.status == Status::Completed).collect();

    // Duration: first scheduled arrival to the end of the last response.
    let first = records.iter().map(|r| r.timing.scheduled_ms).fold(f64::INFINITY, f64::min);
    let last_end = sent_records.iter().map(|r| r.timing.sent_ms + r.timing.e2e_ms).fold(0.0, f64::max);
    let duration_s =
        if records.is_empty() { 0.0 } else { ((last_end.max(first) - first) / 1000.0).max(facts.wall_s.min(1e-3)) };
    let per_s = |n: usize| if duration_s > 0.0 { n as f64 / duration_s } else { 0.0 };
    let dispatch_span_s = {
        let sends: Vec<f64> = sent_records.iter().map(|r| r.timing.sent_ms).collect();
        let span = sends.iter().copied().fold(0.0, f64::max) - sends.iter().copied().fold(f64::INFINITY, f64::min);
        span / 1000.0
    };
    // Open loop: the rate at which requests went out. Closed loop has no target rate, so
    // report what the workers sustained.
    let open_loop = facts.load.mode != LoadMode::Concurrency;
    let achieved_rate_rps = match open_loop {
        true if sent_records.len() > 1 && dispatch_span_s > 0.0 => (sent_records.len() - 1) as f64 / dispatch_span_s,
        true => 0.0,
        false => per_s(sent_records.len()),
    };
    let known_tokens: Vec<u32> = done.iter().filter_map(|r| r.tokens()).collect();
    let tokens: Option<u64> = (!known_tokens.is_empty()).then(|| known_tokens.iter().map(|&t| u64::from(t)).sum());
    let known_prompts: Vec<u32> = done.iter().filter_map(|r| r.usage.prompt_tokens).collect();
    let prompt_tokens: Option<u64> =
        (!known_prompts.is_empty()).then(|| known_prompts.iter().map(|&t| u64::from(t)).sum());
    let lag = Distribution::of(sent_records.iter().map(|r| r.dispatch_lag_ms()));
    let lag_p99 = lag.map_or(0.0, |d| d.p99);
    let cpu_cores_used = if facts.wall_s > 0.0 { facts.client_cpu_s / facts.wall_s } else { 0.0 };
    let saturated = lag_p99 > LAG_LIMIT_MS || cpu_cores_used > CPU_LIMIT_CORES;
    let itl: Vec<f64> = done.iter().filter_map(|r| r.token_gaps_ms()).flatten().collect();
    let meeting_all = done.iter().filter(|r| facts.slos.all_met(r, open_loop)).count();
    let meeting_all_from_send = done.iter().filter(|r| facts.slos.all_met(r, false)).count();
    let reasoning = done.iter().any(|r| r.usage.reasoning_chars > 0);

    let latency = Latencies {
        ttft_ms: Distribution::of(done.iter().filter_map(|r| r.timing.ttft_ms)),
        ttft_from_schedule_ms: Distribution::of(
            done.iter().filter_map(|r| r.timing.ttft_ms.map(|t| t + r.dispatch_lag_ms())),
        ),
        time_to_first_answer_ms: if reasoning {
            Distribution::of(done.iter().filter_map(|r| r.timing.ttfat_ms))
        } else {
            None
        },
        tpot_ms: Distribution::of(done.iter().filter_map(|r| r.tpot_ms())),
        itl_ms: Distribution::of(itl.iter().copied()),
        event_gap_ms: Distribution::of(done.iter().flat_map(|r| r.timing.event_gaps_ms.iter().copied())),
        e2e_ms: Distribution::of(done.iter().map(|r| r.timing.e2e_ms)),
        e2e_from_schedule_ms: Distribution::of(done.iter().map(|r| r.timing.e2e_ms + r.dispatch_lag_ms())),
        dispatch_lag_ms: lag,
        all_answers_ms: all_answers(records, facts.answers),
    };
    let token_summary = token_summary(&sent_records, &done);
    let mut limits = crate::results::limits::text(&crate::results::limits::LimitFacts {
        offered: records.len(),
        completed,
        failed,
        rejected,
        shed,
        protocol: facts.protocol,
        have_tokens: tokens.is_some(),
        no_itl: itl.is_empty(),
        saturated,
        lag_p99,
        cpu: cpu_cores_used,
        slos: &facts.slos,
        open_loop,
        reasoning,
        without_tokens: token_summary.requests_without_token_count,
        estimated_tokens: token_summary.requests_with_estimated_tokens,
        resent: records.iter().filter(|r| r.resent).count(),
    });
    let workload_notes = facts.notes.clone();
    let cut = facts.sessions.filter(|s| s.cut_short > 0).map(|s| {
        format!(
            "{} sessions ended early after a failed or rejected turn; their {} remaining turns were never sent and are not counted as offered.",
            s.cut_short, s.turns_not_sent
        )
    });
    for note in facts.notes.iter().chain(&cut) {
        limits.push(' ');
        limits.push_str(note);
    }
    let per_turn = facts.sessions.map(|_| per_turn(&done));
    let good = |r: &&RequestRecord| facts.slos.all_met(r, open_loop);
    let per_target = (facts.urls.len() > 1).then(|| per_target(&facts.urls, &sent_records, per_s, good));
    let per_model = per_model(&sent_records, per_s, good);
    BenchResult {
        execution_mode: "live HTTP requests".into(),
        offered_requests: records.len(),
        client_shed_requests: shed,
        duration_s: (duration_s * 1000.0).round() / 1000.0,
        ttft_slo_ms: facts.slos.ttft_ms,
        ttft_goodput_rps: per_s(done.iter().filter(|r| facts.slos.ttft_met(r, open_loop)).count()),
        requests: records.iter().map(RequestJson::from).collect(),
        limits,
        run_context: facts.run_context,
        url: facts.url,
        urls: if facts.urls.len() > 1 { facts.urls.clone() } else { Vec::new() },
        protocol: facts.protocol,
        load: facts.load,
        sent: sent_records.len(),
        completed,
        failed,
        rejected_429: rejected,
        achieved_rate_rps,
        throughput_rps: per_s(completed),
        output_tokens_per_s: tokens.map(|t| if duration_s > 0.0 { t as f64 / duration_s } else { 0.0 }),
        prompt_tokens_per_s: prompt_tokens.map(|t| if duration_s > 0.0 { t as f64 / duration_s } else { 0.0 }),
        slos: facts.slos,
        goodput_rps: per_s(meeting_all),
        goodput_from_send_rps: per_s(meeting_all_from_send),
        slo_attainment_pct: if records.is_empty() { 0.0 } else { 100.0 * meeting_all as f64 / records.len() as f64 },
        latency,
        tokens: token_summary,
        structured_outputs: crate::results::checks::ConstraintSummary::of(
            done.iter().filter_map(|r| Some((r.reply.output_check?, r.finish_reason.as_deref() == Some("length")))),
        ),
        tool_calls: crate::results::checks::ToolCallSummary::of(
            done.iter().filter_map(|r| Some((r.reply.call_check?, r.place.round.unwrap_or(1), r.timing.ttft_ms))),
        ),
        speculation: None,
        model_loads: None,
        per_turn,
        sessions: facts.sessions,
        per_target,
        per_model,
        client: ClientCheck { cpu_s: facts.client_cpu_s, cpu_cores_used, dispatch_lag_p99_ms: lag_p99, saturated },
        workload_notes,
    }
}

fn token_summary(sent: &[&RequestRecord], done: &[&RequestRecord]) -> TokenSummary {
    let reporting: Vec<(u32, u32)> =
        done.iter().filter_map(|r| Some((r.usage.cached_tokens?, r.usage.prompt_tokens?))).collect();
    let prompt_sum: u64 = reporting.iter().map(|&(_, p)| u64::from(p)).sum();
    let cached_sum: u64 = reporting.iter().map(|&(c, _)| u64::from(c)).sum();
    TokenSummary {
        mean_input_tokens: mean(sent.iter().filter_map(|r| r.usage.prompt_tokens).map(f64::from)),
        mean_output_tokens: mean(done.iter().filter_map(|r| r.tokens()).map(f64::from)),
        mean_reasoning_tokens: done
            .iter()
            .any(|r| r.usage.reasoning_tokens > Some(0))
            .then(|| mean(done.iter().filter_map(|r| r.usage.reasoning_tokens).map(f64::from)))
            .flatten(),
        prefix_cache_hit_pct: (prompt_sum > 0).then(|| 100.0 * cached_sum as f64 / prompt_sum as f64),
        requests_reporting_cached_tokens: reporting.len(),
        requests_without_token_count: done.iter().filter(|r| r.tokens().is_none()).count(),
        requests_with_estimated_tokens: done.iter().filter(|r| r.usage.tokens_estimated).count(),
    }
}

#[cfg(test)]
#[path = "result_tests.rs"]
pub(crate) mod tests;
