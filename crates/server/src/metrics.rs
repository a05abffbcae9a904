//! Prometheus metrics under vLLM's names, so gateways that route on vLLM's metrics
//! (Gateway API Inference Extension, llm-d) can route on rillm's.

use std::sync::OnceLock;

use metrics::{counter, describe_counter, describe_gauge, describe_histogram, gauge, histogram, Histogram};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

use rillm_backend::{Backend, Completion};

pub const RUNNING: &str = "vllm:num_requests_running";
pub const WAITING: &str = "vllm:num_requests_waiting";
pub const KV_USAGE: &str = "vllm:kv_cache_usage_perc";
/// Always 1; its labels carry the cache layout (GIE's prefix-cache scorer reads them).
pub const CACHE_CONFIG: &str = "vllm:cache_config_info";
pub const TTFT: &str = "vllm:time_to_first_token_seconds";
pub const ITL: &str = "vllm:inter_token_latency_seconds";
pub const E2E: &str = "vllm:e2e_request_latency_seconds";
pub const QUEUE_TIME: &str = "vllm:request_queue_time_seconds";
/// A request's time from its slot to its first token, after it, and both (vLLM's prefill,
/// decode and inference phases), and its mean time per output token after the first.
pub const PREFILL_TIME: &str = "vllm:request_prefill_time_seconds";
pub const DECODE_TIME: &str = "vllm:request_decode_time_seconds";
pub const INFERENCE_TIME: &str = "vllm:request_inference_time_seconds";
pub const REQUEST_TPOT: &str = "vllm:request_time_per_output_token_seconds";
/// Per-request token counts, as histograms (the vLLM dashboard's length heatmaps).
pub const REQUEST_PROMPT_TOKENS: &str = "vllm:request_prompt_tokens";
pub const REQUEST_GENERATION_TOKENS: &str = "vllm:request_generation_tokens";
pub const PROMPT_TOKENS: &str = "vllm:prompt_tokens_total";
pub const GENERATION_TOKENS: &str = "vllm:generation_tokens_total";
pub const SUCCESS: &str = "vllm:request_success_total";
pub const REJECTED: &str = "rillm_requests_rejected_total";
pub const DISCONNECTS: &str = "rillm_client_disconnects_total";
pub const SEQUENCES_MOVED: &str = "rillm_sequences_moved_total";
/// Prompt tokens run through the model: cache hits are not, and a request with `n`
/// choices runs its prompt once (`vllm:prompt_tokens_total` counts what requests sent).
pub const PROMPT_TOKENS_COMPUTED: &str = "rillm_prompt_tokens_computed_total";
pub const PREFIX_QUERIES: &str = "vllm:prefix_cache_queries_total";
pub const PREFIX_HITS: &str = "vllm:prefix_cache_hits_total";
pub const HOST_CACHE_BYTES: &str = "rillm_prefix_cache_host_bytes";
pub const HOST_CACHE_BUDGET: &str = "rillm_prefix_cache_host_budget_bytes";
pub const HOST_CACHE_ENTRIES: &str = "rillm_prefix_cache_host_entries";
pub const HOST_CACHE_SAVES: &str = "rillm_prefix_cache_host_saves_total";
pub const HOST_CACHE_EVICTIONS: &str = "rillm_prefix_cache_host_evictions_total";
pub const HOST_CACHE_RESTORES: &str = "rillm_prefix_cache_host_restores_total";
pub const HOST_CACHE_RESTORE_FAILURES: &str = "rillm_prefix_cache_host_restore_failures_total";
pub const HOST_CACHE_RESTORED_TOKENS: &str = "rillm_prefix_cache_host_restored_tokens_total";
pub const HOST_CACHE_RESTORE_SECONDS: &str = "rillm_prefix_cache_host_restore_seconds";
/// The Responses API's kept responses (`--responses-store-mib`).
pub const RESPONSES_KEPT_BYTES: &str = "rillm_responses_store_bytes";
pub const RESPONSES_KEPT: &str = "rillm_responses_store_entries";
pub const STRUCTURED_COMPILES: &str = "rillm_structured_compiles_total";
pub const STRUCTURED_COMPILE_FAILURES: &str = "rillm_structured_compile_failures_total";
pub const STRUCTURED_COMPILE_SECONDS: &str = "rillm_structured_compile_seconds";
pub const STRUCTURED_CACHE_HITS: &str = "rillm_structured_cache_hits_total";
/// Tokens generated under a constraint; of them, those jump-forward forced.
pub const STRUCTURED_TOKENS: &str = "rillm_structured_tokens_total";
pub const STRUCTURED_FORCED_TOKENS: &str = "rillm_structured_forced_tokens_total";
/// Constrained replies that could not go on (an engine bug: each is logged at warn and
/// ends with its text so far); samples drawn again because, before a lazy grammar's
/// trigger (`tool_choice: auto`), the token would have opened the grammar and broken it.
pub const STRUCTURED_FAILURES: &str = "rillm_structured_failures_total";
/// Tool calls identical to one the reply made, or to one whose result the conversation
/// holds, dropped (`--keep-repeated-calls` off); label `then`: the reply `ended` there, or
/// `restarted` as the answer.
pub const TOOL_CALLS_REPEATED: &str = "rillm_tool_calls_repeated_total";
pub const STRUCTURED_RESAMPLES: &str = "rillm_structured_resamples_total";
/// Replies to the results of calls that the model began as no call (under `auto` with an
/// answer format): answered at once in the format, where the mask alone would have made it
/// open a call (most often a repeat of the call just answered, dropped and restarted).
pub const TOOL_ANSWERS_CHOSEN: &str = "rillm_tool_answers_chosen_total";
/// Embedding and rerank requests, apart from generation's (label `task`): answered
/// requests, their inputs, and their latency from arrival to answer.
pub const POOLED_REQUESTS: &str = "rillm_embedding_requests_total";
pub const POOLED_INPUTS: &str = "rillm_embedding_inputs_total";
pub const POOLED_SECONDS: &str = "rillm_embedding_request_seconds";
/// Several models: loads (label `outcome`: loaded, failed), their seconds, and unloads.
pub const MODEL_LOADS: &str = "rillm_model_loads_total";
pub const MODEL_LOAD_SECONDS: &str = "rillm_model_load_seconds";
pub const MODEL_UNLOADS: &str = "rillm_model_unloads_total";
/// Speculative decoding, as vLLM names it: verified drafts, their tokens, those kept, and
/// those kept by their place in the draft (label `position`).
pub const SPEC_DRAFTS: &str = "vllm:spec_decode_num_drafts_total";
pub const SPEC_DRAFT_TOKENS: &str = "vllm:spec_decode_num_draft_tokens_total";
pub const SPEC_ACCEPTED_TOKENS: &str = "vllm:spec_decode_num_accepted_tokens_total";
pub const SPEC_ACCEPTED_PER_POS: &str = "vllm:spec_decode_num_accepted_tokens_per_pos_total";
/// Steps whose drafts rillm's fairness guard cut (no vLLM name: vLLM drafts a fixed `k`).
pub const SPEC_GUARD_CUTS: &str = "rillm_spec_decode_guard_cuts_total";

/// Each metric's `# HELP` text (vLLM's own for its names), which dashboards and scrapers
/// such as AIPerf show beside the figures.
const COUNTERS: &[(&str, &str)] = &[
    (PROMPT_TOKENS, "Number of prefill tokens processed."),
    (GENERATION_TOKENS, "Number of generation tokens processed."),
    (SUCCESS, "Count of successfully processed requests."),
    (REJECTED, "Requests refused before any token, by reason (429 when full, 503 when draining, ...)."),
    (DISCONNECTS, "Streams whose client went away before the end; their generation was cancelled."),
    (SEQUENCES_MOVED, "Sequences moved between KV slots to make room."),
    (PROMPT_TOKENS_COMPUTED, "Prompt tokens run through the model (cache hits are not)."),
    (PREFIX_QUERIES, "Prefix cache queries, in terms of number of queried tokens."),
    (PREFIX_HITS, "Prefix cache hits, in terms of number of cached tokens."),
    (HOST_CACHE_SAVES, "Prefixes saved to the host-memory cache tier."),
    (HOST_CACHE_EVICTIONS, "Prefixes evicted from the host-memory cache tier."),
    (HOST_CACHE_RESTORES, "Prefixes restored from the host-memory cache tier."),
    (HOST_CACHE_RESTORE_FAILURES, "Restores from the host-memory tier that failed (the prompt was prefilled)."),
    (HOST_CACHE_RESTORED_TOKENS, "Tokens restored from the host-memory tier instead of prefilled."),
    (STRUCTURED_COMPILES, "Output constraints (schemas, regexes, grammars) compiled."),
    (STRUCTURED_COMPILE_FAILURES, "Output constraints refused at compile time."),
    (STRUCTURED_CACHE_HITS, "Output constraints found compiled in the cache."),
    (STRUCTURED_TOKENS, "Tokens generated under an output constraint."),
    (STRUCTURED_FAILURES, "Constrained replies that could not go on (logged at warn; the reply ends with its text)."),
    (STRUCTURED_RESAMPLES, "Tokens sampled again: before a lazy grammar's trigger they would have broken it."),
    (TOOL_ANSWERS_CHOSEN, "Replies to tool results that could not open a call as the model wrote them: the answer."),
    (TOOL_CALLS_REPEATED, "Repeated tool calls dropped; the reply then ended, or restarted as the answer."),
    (STRUCTURED_FORCED_TOKENS, "Constrained tokens the grammar forced (fed without a decode step)."),
    (SPEC_DRAFTS, "Number of spec decoding drafts."),
    (SPEC_DRAFT_TOKENS, "Number of draft tokens."),
    (SPEC_ACCEPTED_TOKENS, "Number of accepted tokens."),
    (SPEC_ACCEPTED_PER_POS, "Accepted tokens per draft position."),
    (POOLED_REQUESTS, "Embedding and rerank requests answered (label task)."),
    (POOLED_INPUTS, "Inputs (or query-document pairs) of answered embedding and rerank requests."),
    (MODEL_LOADS, "Model loads, by outcome (loaded, failed)."),
    (MODEL_UNLOADS, "Models unloaded (asked, or to make room under --models-max)."),
    (SPEC_GUARD_CUTS, "Steps whose drafts were cut to keep every stream's time per token within the guard."),
];
const GAUGES: &[(&str, &str)] = &[
    (RUNNING, "Number of requests in model execution batches."),
    (WAITING, "Number of requests waiting to be processed."),
    (KV_USAGE, "KV-cache usage. 1 means 100 percent usage."),
    (CACHE_CONFIG, "Information of the KV cache layout (labels block_size, num_gpu_blocks)."),
    (HOST_CACHE_BYTES, "Bytes held by the host-memory cache tier."),
    (HOST_CACHE_BUDGET, "Byte budget of the host-memory cache tier."),
    (HOST_CACHE_ENTRIES, "Prefixes held by the host-memory cache tier."),
    (HOST_CACHE_RESTORE_SECONDS, "Seconds spent restoring prefixes from the host-memory tier, in all."),
    (STRUCTURED_COMPILE_SECONDS, "Seconds spent compiling output constraints, in all."),
    (RESPONSES_KEPT_BYTES, "Bytes of Responses API responses kept for previous_response_id."),
    (RESPONSES_KEPT, "Responses API responses kept for previous_response_id."),
];
const HISTOGRAMS: &[(&str, &str)] = &[
    (TTFT, "Histogram of time to first token in seconds."),
    (ITL, "Histogram of inter-token latency in seconds."),
    (E2E, "Histogram of e2e request latency in seconds."),
    (QUEUE_TIME, "Histogram of time spent in WAITING phase for request."),
    (PREFILL_TIME, "Histogram of time spent in PREFILL phase for request."),
    (DECODE_TIME, "Histogram of time spent in DECODE phase for request."),
    (INFERENCE_TIME, "Histogram of time spent in RUNNING phase for request."),
    (REQUEST_TPOT, "Histogram of time_per_output_token_seconds per request."),
    (REQUEST_PROMPT_TOKENS, "Number of prefill tokens processed."),
    (REQUEST_GENERATION_TOKENS, "Number of generation tokens processed."),
    (POOLED_SECONDS, "Histogram of embedding and rerank request latency in seconds, arrival to answer."),
    (MODEL_LOAD_SECONDS, "Histogram of model load time in seconds."),
];

const LATENCY_BUCKETS: &[f64] =
    &[0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0];
const LATENCY_HISTOGRAMS: &[&str] = &[
    TTFT,
    ITL,
    E2E,
    QUEUE_TIME,
    PREFILL_TIME,
    DECODE_TIME,
    INFERENCE_TIME,
    REQUEST_TPOT,
    POOLED_SECONDS,
    MODEL_LOAD_SECONDS,
];
/// vLLM's 1-2-5 series for token counts (it stops at the model's length; these at 100k).
const TOKEN_BUCKETS: &[f64] =
    &[1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1e3, 2e3, 5e3, 1e4, 2e4, 5e4, 1e5];

/// The process-wide recorder: `metrics` has one global recorder, so every server in the
/// process (tests start several) shares it.
pub fn handle() -> &'static PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE.get_or_init(|| {
        let buckets = LATENCY_HISTOGRAMS
            .iter()
            .map(|&name| (name, LATENCY_BUCKETS))
            .chain([(REQUEST_PROMPT_TOKENS, TOKEN_BUCKETS), (REQUEST_GENERATION_TOKENS, TOKEN_BUCKETS)]);
        let builder = buckets.fold(PrometheusBuilder::new(), |b, (name, buckets)| {
            b.set_buckets_for_metric(Matcher::Full(name.to_string()), buckets).expect("static, non-empty buckets")
        });
        let recorder = builder.build_recorder();
        let handle = recorder.handle();
        // Fails only if another recorder was installed first; then ours just stays empty.
        if metrics::set_global_recorder(recorder).is_ok() {
            COUNTERS.iter().for_each(|&(name, help)| describe_counter!(name, help));
            GAUGES.iter().for_each(|&(name, help)| describe_gauge!(name, help));
            HISTOGRAMS.iter().for_each(|&(name, help)| describe_histogram!(name, help));
        }
        handle
    })
}

/// The Responses API's store, as it is now.
pub fn record_responses_store(bytes: usize, entries: usize) {
    gauge!(RESPONSES_KEPT_BYTES).set(bytes as f64);
    gauge!(RESPONSES_KEPT).set(entries as f64);
}

/// Renders the exposition text, refreshing each served model's engine gauges first.
pub fn render(models: &[(String, std::sync::Arc<dyn Backend>)]) -> String {
    let handle = handle();
    for (model, backend) in models {
        let model = model.clone();
        let stats = backend.stats();
        gauge!(RUNNING, "model_name" => model.clone()).set(stats.running as f64);
        gauge!(WAITING, "model_name" => model.clone()).set(stats.waiting as f64);
        gauge!(KV_USAGE, "model_name" => model.clone()).set(stats.kv_usage());
        if let Some(layout) = backend.cache_layout() {
            let (block, blocks) = (layout.block_tokens.to_string(), layout.blocks.to_string());
            gauge!(CACHE_CONFIG, "model_name" => model.clone(), "block_size" => block, "num_gpu_blocks" => blocks)
                .set(1.0);
        }
        counter!(SEQUENCES_MOVED, "model_name" => model.clone()).absolute(stats.sequences_moved);
        counter!(PROMPT_TOKENS_COMPUTED, "model_name" => model.clone()).absolute(stats.prompt_tokens_computed);
        render_prefix_cache(&model, &stats.prefix);
        render_structured(&model, &stats.constraints);
        render_speculation(&model, &stats.speculation);
    }
    handle.run_upkeep();
    handle.render()
}

/// Prefix caching: vLLM's token counters, and rillm's host-memory tier.
fn render_prefix_cache(model: &str, p: &rillm_backend::PrefixCacheSnapshot) {
    let counters = [
        (PREFIX_QUERIES, p.queried_tokens),
        (PREFIX_HITS, p.hit_tokens),
        (HOST_CACHE_SAVES, p.host_saves),
        (HOST_CACHE_EVICTIONS, p.host_evictions),
        (HOST_CACHE_RESTORES, p.host_restores),
        (HOST_CACHE_RESTORE_FAILURES, p.host_restore_failures),
        (HOST_CACHE_RESTORED_TOKENS, p.host_restored_tokens),
    ];
    set_counters(model, &counters);
    let gauges = [
        (HOST_CACHE_BYTES, p.host_bytes),
        (HOST_CACHE_BUDGET, p.host_budget_bytes),
        (HOST_CACHE_ENTRIES, p.host_entries),
    ];
    for (name, value) in gauges {
        gauge!(name, "model_name" => model.to_string()).set(value as f64);
    }
    gauge!(HOST_CACHE_RESTORE_SECONDS, "model_name" => model.to_string()).set(p.host_restore_micros as f64 / 1e6);
}

/// Structured outputs: compiles and their cache, and how many tokens jump-forward forced.
fn render_structured(model: &str, c: &rillm_backend::ConstraintSnapshot) {
    let counters = [
        (STRUCTURED_COMPILES, c.compiles),
        (STRUCTURED_COMPILE_FAILURES, c.compile_failures),
        (STRUCTURED_CACHE_HITS, c.cache_hits),
        (STRUCTURED_TOKENS, c.constrained_tokens),
        (STRUCTURED_FORCED_TOKENS, c.forced_tokens),
        (STRUCTURED_FAILURES, c.failures),
        (STRUCTURED_RESAMPLES, c.resamples),
        (TOOL_ANSWERS_CHOSEN, c.answers_chosen),
    ];
    set_counters(model, &counters);
    gauge!(STRUCTURED_COMPILE_SECONDS, "model_name" => model.to_string()).set(c.compile_micros as f64 / 1e6);
}

/// Speculative decoding: drafts verified, tokens drafted and kept, kept per draft position.
fn render_speculation(model: &str, s: &rillm_backend::SpeculationSnapshot) {
    let counters = [
        (SPEC_DRAFTS, s.drafts),
        (SPEC_DRAFT_TOKENS, s.draft_tokens),
        (SPEC_ACCEPTED_TOKENS, s.accepted_tokens),
        (SPEC_GUARD_CUTS, s.guard_cuts),
    ];
    set_counters(model, &counters);
    // Positions once anything was drafted (vLLM lists those of its draft length).
    let positions = if s.drafts == 0 { &[][..] } else { &s.accepted_per_position[..] };
    for (position, &kept) in positions.iter().enumerate() {
        counter!(SPEC_ACCEPTED_PER_POS, "model_name" => model.to_string(), "position" => position.to_string())
            .absolute(kept);
    }
}

/// Counters the engine keeps itself, published at their current totals.
fn set_counters(model: &str, counters: &[(&'static str, u64)]) {
    for &(name, value) in counters {
        counter!(name, "model_name" => model.to_string()).absolute(value);
    }
}

/// Histograms keep every sample until upkeep folds them in, which a scrape does; without
/// scrapes they would grow with every token. This keeps memory flat for unscraped servers.
pub async fn upkeep_forever() {
    let mut tick = tokio::time::interval(std::time::Duration::from_secs(5));
    loop {
        tick.tick().await;
        handle().run_upkeep();
    }
}

pub fn record_rejected(reason: &'static str) {
    counter!(REJECTED, "reason" => reason).increment(1);
}

/// One answered embedding or rerank request; its prompt tokens count in vLLM's total.
pub fn record_pooled(model: &str, task: &'static str, inputs: usize, prompt_tokens: usize, seconds: f64) {
    let model = model.to_string();
    counter!(POOLED_REQUESTS, "model_name" => model.clone(), "task" => task).increment(1);
    counter!(POOLED_INPUTS, "model_name" => model.clone(), "task" => task).increment(inputs as u64);
    counter!(PROMPT_TOKENS, "model_name" => model.clone()).increment(prompt_tokens as u64);
    histogram!(POOLED_SECONDS, "model_name" => model, "task" => task).record(seconds);
}

/// A model's load ended after `seconds`.
pub fn record_model_load(model: &str, loaded: bool, seconds: f64) {
    let outcome = if loaded { "loaded" } else { "failed" };
    counter!(MODEL_LOADS, "model_name" => model.to_string(), "outcome" => outcome).increment(1);
    histogram!(MODEL_LOAD_SECONDS, "model_name" => model.to_string()).record(seconds);
}

pub fn record_model_unload(model: &str) {
    counter!(MODEL_UNLOADS, "model_name" => model.to_string()).increment(1);
}

pub fn record_disconnect() {
    counter!(DISCONNECTS).increment(1);
}

/// A reply repeated a call: the repeat was dropped, and the reply `then` ended there or
/// (a call the conversation had the result of, and nothing else) restarted as the answer.
pub fn record_repeated_call(then: &'static str) {
    counter!(TOOL_CALLS_REPEATED, "then" => then).increment(1);
}

/// One request's metric handles, resolved once so the per-token path only records.
pub struct RequestMetrics {
    model: String,
    ttft: Histogram,
    itl: Histogram,
}

impl RequestMetrics {
    pub fn new(model: &str) -> Self {
        let model = model.to_string();
        Self {
            ttft: histogram!(TTFT, "model_name" => model.clone()),
            itl: histogram!(ITL, "model_name" => model.clone()),
            model,
        }
    }

    pub fn first_token(&self, seconds: f64) {
        self.ttft.record(seconds);
    }

    /// A gap that brought `tokens` tokens: each counts as an equal share of it.
    pub fn inter_token(&self, seconds: f64, tokens: usize) {
        let share = seconds / tokens.max(1) as f64;
        for _ in 0..tokens.max(1) {
            self.itl.record(share);
        }
    }

    pub fn finished(&self, reason: &'static str, e2e_s: f64, done: &Completion) {
        let (timings, prompt, generated) = (&done.timings, done.usage.prompt_tokens, done.usage.completion_tokens);
        let (prefill_s, decode_s) = (timings.prefill_ms / 1000.0, timings.decode_ms / 1000.0);
        histogram!(E2E, "model_name" => self.model.clone()).record(e2e_s);
        histogram!(QUEUE_TIME, "model_name" => self.model.clone()).record(timings.queue_ms / 1000.0);
        histogram!(PREFILL_TIME, "model_name" => self.model.clone()).record(prefill_s);
        histogram!(DECODE_TIME, "model_name" => self.model.clone()).record(decode_s);
        histogram!(INFERENCE_TIME, "model_name" => self.model.clone()).record(prefill_s + decode_s);
        if generated > 1 {
            histogram!(REQUEST_TPOT, "model_name" => self.model.clone()).record(decode_s / f64::from(generated - 1));
        }
        histogram!(REQUEST_PROMPT_TOKENS, "model_name" => self.model.clone()).record(f64::from(prompt));
        histogram!(REQUEST_GENERATION_TOKENS, "model_name" => self.model.clone()).record(f64::from(generated));
        counter!(PROMPT_TOKENS, "model_name" => self.model.clone()).increment(u64::from(prompt));
        counter!(GENERATION_TOKENS, "model_name" => self.model.clone()).increment(u64::from(generated));
        counter!(SUCCESS, "model_name" => self.model.clone(), "finished_reason" => reason).increment(1);
    }
}
