//! What the run measured of one request (`RequestRecord`), in parts read apart: where it
//! sits in the run, how it ended, its stream's timing, its token counts and its reply. The
//! client fills it as the bytes arrive (`client`); `results` reads it.

use std::sync::Arc;

use crate::protocol::tool_calls::ToolCall;
use crate::protocol::UsageInfo;

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Completed,
    /// Transport error, non-2xx other than 429, error inside the stream, or timeout.
    Failed,
    /// HTTP 429: the server said it was full. Counted apart from failures.
    Rejected,
    /// Never sent: `--max-inflight` requests were already in flight at its arrival.
    Shed,
}

/// Everything measured about one request. Times are milliseconds.
#[derive(Debug, Clone)]
pub struct RequestRecord {
    pub place: RequestPlace,
    pub status: Status,
    pub http_status: Option<u16>,
    pub error: Option<String>,
    pub retry_after_s: Option<f64>,
    /// Sent a second time: the server closed a kept-alive connection as it first went out.
    pub resent: bool,
    /// Why the server ended it, where its stream said (`length`: cut by `max_tokens`).
    pub finish_reason: Option<String>,
    pub timing: StreamTiming,
    /// Its token counts (named apart from `tokens()`, the generated count however known).
    pub usage: TokenCounts,
    pub reply: Reply,
}

/// Where a request sits in the run.
#[derive(Debug, Clone, Default)]
pub struct RequestPlace {
    /// Position in the run's schedule (arrival order; sessions: session by session).
    pub index: usize,
    /// The conversation and 1-based turn, for session workloads.
    pub session: Option<Arc<str>>,
    pub turn: Option<u32>,
    /// Tool workloads: which round of its turn it was (1: the user's turn; 2 on: replies
    /// to tool results).
    pub round: Option<u32>,
    /// Which `--url` it went to (0 for the first).
    pub target: usize,
    /// The model its body named.
    pub model: Option<Arc<str>>,
}

/// When it was scheduled and sent, and when its stream's content arrived.
#[derive(Debug, Clone, Default)]
pub struct StreamTiming {
    /// When the arrival process scheduled it, from the start of the run.
    pub scheduled_ms: f64,
    /// When it actually went out; `sent_ms - scheduled_ms` is the client's dispatch lag.
    pub sent_ms: f64,
    /// From the actual send to the first content event (reasoning or answer).
    pub ttft_ms: Option<f64>,
    /// From the actual send to the first answer text (later than TTFT for reasoning models).
    pub ttfat_ms: Option<f64>,
    pub event_gaps_ms: Vec<f64>,
    /// Tokens carried by each content event, where the protocol says.
    pub event_tokens: Vec<Option<u32>>,
    pub content_events: usize,
    /// From the actual send to the end of the stream.
    pub e2e_ms: f64,
}

/// Its tokens, as the server reported them or the benchmark counted them.
#[derive(Debug, Clone, Default)]
pub struct TokenCounts {
    /// The prompt's tokens: the server's usage where it reported them, else the
    /// benchmark's own count.
    pub prompt_tokens: Option<u32>,
    /// Prompt tokens the server says it reused (`prompt_tokens_details.cached_tokens`).
    pub cached_tokens: Option<u32>,
    /// As reported by the server (usage); `None` when it reported none.
    pub completion_tokens: Option<u32>,
    /// `completion_tokens` was counted by the benchmark (`--tokenizer`), not reported.
    pub tokens_estimated: bool,
    /// Completion tokens spent thinking, as the server reported them.
    pub reasoning_tokens: Option<u32>,
    /// Characters of reasoning text streamed (reasoning models).
    pub reasoning_chars: usize,
}

/// What it answered, and the checks of it.
#[derive(Debug, Clone, Default)]
pub struct Reply {
    pub text: String,
    /// Constraint workloads: what the check of its output found (completed requests).
    pub output_check: Option<crate::checks::OutputCheck>,
    /// Tool workloads: the calls the reply made, and their check.
    pub tool_calls: Vec<ToolCall>,
    pub call_check: Option<crate::checks::CallCheck>,
}

impl RequestRecord {
    pub fn shed(scheduled_ms: f64) -> Self {
        Self::unsent(Status::Shed, scheduled_ms, "shed by the client: --max-inflight requests in flight")
    }

    pub(crate) fn unsent(status: Status, scheduled_ms: f64, error: &str) -> Self {
        Self {
            place: RequestPlace::default(),
            status,
            http_status: None,
            error: Some(error.to_string()),
            retry_after_s: None,
            resent: false,
            finish_reason: None,
            timing: StreamTiming { scheduled_ms, sent_ms: scheduled_ms, ..StreamTiming::default() },
            usage: TokenCounts::default(),
            reply: Reply::default(),
        }
    }

    pub(crate) fn take_usage(&mut self, usage: UsageInfo) {
        let counts = &mut self.usage;
        counts.completion_tokens = usage.completion_tokens.or(counts.completion_tokens);
        counts.prompt_tokens = usage.prompt_tokens.or(counts.prompt_tokens);
        counts.cached_tokens = usage.cached_tokens.or(counts.cached_tokens);
        counts.reasoning_tokens = usage.reasoning_tokens.or(counts.reasoning_tokens);
    }

    pub fn dispatch_lag_ms(&self) -> f64 {
        (self.timing.sent_ms - self.timing.scheduled_ms).max(0.0)
    }

    /// Generated tokens: the server's usage, else the token counts the events carried.
    pub fn tokens(&self) -> Option<u32> {
        self.usage.completion_tokens.or_else(|| {
            let counted: Option<Vec<u32>> = self.timing.event_tokens.iter().copied().collect();
            counted.filter(|c| !c.is_empty()).map(|c| c.iter().sum())
        })
    }

    /// Time per output token after the first: (e2e − ttft) / (tokens − 1).
    pub fn tpot_ms(&self) -> Option<f64> {
        let tokens = self.tokens()?;
        let ttft = self.timing.ttft_ms?;
        (tokens > 1).then(|| (self.timing.e2e_ms - ttft) / f64::from(tokens - 1))
    }

    /// Token-level inter-token latencies, when they can be told apart from event gaps:
    /// either every event says how many tokens it carries, or events and tokens are 1:1.
    pub fn token_gaps_ms(&self) -> Option<Vec<f64>> {
        let timing = &self.timing;
        let per_event: Option<Vec<u32>> = timing.event_tokens.iter().copied().collect();
        if let Some(per_event) = per_event.filter(|p| p.len() == timing.content_events && !p.is_empty()) {
            let mut gaps = Vec::new();
            // The first event's own extra tokens arrived with zero gap between them.
            gaps.extend(std::iter::repeat_n(0.0, per_event[0].saturating_sub(1) as usize));
            for (gap, &n) in timing.event_gaps_ms.iter().zip(&per_event[1..]) {
                let n = n.max(1);
                gaps.extend(std::iter::repeat_n(gap / f64::from(n), n as usize));
            }
            return Some(gaps);
        }
        (self.usage.completion_tokens == Some(timing.content_events as u32)).then(|| timing.event_gaps_ms.clone())
    }
}
