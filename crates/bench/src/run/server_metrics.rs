//! What the server says it did, read from its Prometheus `/metrics` before and after each
//! level: speculative decoding's drafted and kept tokens, under vLLM's `vllm:spec_decode_*`
//! names (rillm and vLLM; llama-server has its own and says nothing here). A server without
//! them, or without `/metrics`, leaves the figures out rather than guessing.

use serde::{Deserialize, Serialize};

/// vLLM's speculative-decoding counters at one moment, summed over label sets.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct SpecCounters {
    pub drafts: f64,
    pub draft_tokens: f64,
    pub accepted_tokens: f64,
}

/// Reads the counters from a Prometheus exposition; `None` when it has none of them.
pub fn parse_spec(exposition: &str) -> Option<SpecCounters> {
    // prometheus-parse reads metric names as `\w+`, without the `:` the exposition format
    // allows and vLLM's names carry: it is spelled `__` for the parser.
    let lines = exposition.lines().map(|l| Ok(l.replacen("vllm:", "vllm__", 1)));
    let scrape = prometheus_parse::Scrape::parse(lines).ok()?;
    let mut counters = SpecCounters::default();
    let mut found = false;
    for sample in &scrape.samples {
        let value = match sample.value {
            prometheus_parse::Value::Counter(v)
            | prometheus_parse::Value::Gauge(v)
            | prometheus_parse::Value::Untyped(v) => v,
            _ => continue,
        };
        let field = match sample.metric.trim_end_matches("_total") {
            "vllm__spec_decode_num_drafts" => &mut counters.drafts,
            "vllm__spec_decode_num_draft_tokens" => &mut counters.draft_tokens,
            "vllm__spec_decode_num_accepted_tokens" => &mut counters.accepted_tokens,
            _ => continue,
        };
        *field += value;
        found = true;
    }
    found.then_some(counters)
}

/// Fetches `origin/metrics` and reads the counters; `None` on any failure.
pub async fn scrape_spec(client: &reqwest::Client, origin: &str, api_key: Option<&str>) -> Option<SpecCounters> {
    let mut request = client.get(format!("{origin}/metrics")).timeout(std::time::Duration::from_secs(5));
    if let Some(key) = api_key {
        request = request.bearer_auth(key);
    }
    let response = request.send().await.ok()?.error_for_status().ok()?;
    parse_spec(&response.text().await.ok()?)
}

/// Sums the counters of several endpoints; `None` if any lacks them.
pub async fn scrape_all(client: &reqwest::Client, origins: &[String], api_key: Option<&str>) -> Option<SpecCounters> {
    let mut total = SpecCounters::default();
    for origin in origins {
        let c = scrape_spec(client, origin, api_key).await?;
        total.drafts += c.drafts;
        total.draft_tokens += c.draft_tokens;
        total.accepted_tokens += c.accepted_tokens;
    }
    Some(total)
}

/// Speculative decoding over one level, from the server's counters.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct SpeculationSummary {
    /// Verified drafts (a sequence's draft in one step), their tokens, and those kept.
    pub drafts: u64,
    pub draft_tokens: u64,
    pub accepted_tokens: u64,
    /// Kept of drafted tokens, in percent.
    pub acceptance_pct: Option<f64>,
    /// Tokens a step produced per draft: the kept ones plus the one sampled after them
    /// (vLLM's mean acceptance length).
    pub mean_accepted_length: Option<f64>,
}

impl SpeculationSummary {
    /// What happened between two readings; `None` when either is missing.
    pub fn between(before: Option<SpecCounters>, after: Option<SpecCounters>) -> Option<Self> {
        let (before, after) = (before?, after?);
        let count = |a: f64, b: f64| (b - a).max(0.0).round() as u64;
        let drafts = count(before.drafts, after.drafts);
        let draft_tokens = count(before.draft_tokens, after.draft_tokens);
        let accepted_tokens = count(before.accepted_tokens, after.accepted_tokens);
        Some(Self {
            drafts,
            draft_tokens,
            accepted_tokens,
            acceptance_pct: (draft_tokens > 0).then(|| 100.0 * accepted_tokens as f64 / draft_tokens as f64),
            mean_accepted_length: (drafts > 0).then(|| 1.0 + accepted_tokens as f64 / drafts as f64),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RILLM: &str = "# TYPE vllm:spec_decode_num_drafts_total counter\n\
        vllm:spec_decode_num_drafts_total{model_name=\"m\"} 10\n\
        # TYPE vllm:spec_decode_num_draft_tokens_total counter\n\
        vllm:spec_decode_num_draft_tokens_total{model_name=\"m\"} 40\n\
        # TYPE vllm:spec_decode_num_accepted_tokens_total counter\n\
        vllm:spec_decode_num_accepted_tokens_total{model_name=\"m\"} 30\n\
        # TYPE vllm:spec_decode_num_accepted_tokens_per_pos_total counter\n\
        vllm:spec_decode_num_accepted_tokens_per_pos_total{model_name=\"m\",position=\"0\"} 10\n\
        # TYPE vllm:num_requests_running gauge\n\
        vllm:num_requests_running{model_name=\"m\"} 2\n";

    #[test]
    fn counters_are_read_by_vllms_names_and_differenced_over_a_level() {
        let after = parse_spec(RILLM).expect("counters");
        assert_eq!(after, SpecCounters { drafts: 10.0, draft_tokens: 40.0, accepted_tokens: 30.0 });
        let before = SpecCounters { drafts: 2.0, draft_tokens: 8.0, accepted_tokens: 2.0 };
        let level = SpeculationSummary::between(Some(before), Some(after)).expect("both readings");
        // 8 drafts of 32 tokens, 28 kept: 87.5 %, and 1 + 28 / 8 tokens a draft.
        assert_eq!((level.drafts, level.draft_tokens, level.accepted_tokens), (8, 32, 28));
        assert_eq!((level.acceptance_pct, level.mean_accepted_length), (Some(87.5), Some(4.5)));
        // A server that never drafted says so; one without the counters says nothing.
        let idle = SpeculationSummary::between(Some(after), Some(after)).expect("readings");
        assert_eq!((idle.drafts, idle.acceptance_pct), (0, None));
        assert_eq!(
            parse_spec("# TYPE llamacpp:tokens_predicted_total counter\nllamacpp:tokens_predicted_total 5\n"),
            None
        );
        assert_eq!(SpeculationSummary::between(None, Some(after)), None);
    }
}
