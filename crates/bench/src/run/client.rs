//! Sends one request and times its stream as the bytes arrive.

use std::time::{Duration, Instant};

use eventsource_stream::Eventsource;
use futures::StreamExt;
use serde_json::Value;

use crate::protocol::{Protocol, StreamDecoder, UsageInfo};

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
    /// Position in the run's schedule (arrival order; sessions: session by session).
    pub index: usize,
    /// The conversation and 1-based turn, for session workloads.
    pub session: Option<std::sync::Arc<str>>,
    pub turn: Option<u32>,
    /// The prompt's tokens: the server's usage where it reported them, else the
    /// benchmark's own count.
    pub prompt_tokens: Option<u32>,
    /// Prompt tokens the server says it reused (`prompt_tokens_details.cached_tokens`).
    pub cached_tokens: Option<u32>,
    pub status: Status,
    pub http_status: Option<u16>,
    pub error: Option<String>,
    pub retry_after_s: Option<f64>,
    /// When the arrival process scheduled it, from the start of the run.
    pub scheduled_ms: f64,
    /// When it actually went out; `sent_ms - scheduled_ms` is the client's dispatch lag.
    pub sent_ms: f64,
    /// From the actual send to the first content event (reasoning or answer).
    pub ttft_ms: Option<f64>,
    /// From the actual send to the first answer text (later than TTFT for reasoning models).
    pub ttfat_ms: Option<f64>,
    /// Characters of reasoning text streamed (reasoning models).
    pub reasoning_chars: usize,
    /// Completion tokens spent thinking, as the server reported them.
    pub reasoning_tokens: Option<u32>,
    pub event_gaps_ms: Vec<f64>,
    /// Tokens carried by each content event, where the protocol says.
    pub event_tokens: Vec<Option<u32>>,
    /// From the actual send to the end of the stream.
    pub e2e_ms: f64,
    pub text: String,
    pub content_events: usize,
    /// As reported by the server (usage); `None` when it reported none.
    pub completion_tokens: Option<u32>,
    /// `completion_tokens` was counted by the benchmark (`--tokenizer`), not reported.
    pub tokens_estimated: bool,
    /// Sent a second time: the server closed a kept-alive connection as it first went out.
    pub resent: bool,
    /// Which `--url` it went to (0 for the first).
    pub target: usize,
    /// The model its body named.
    pub model: Option<std::sync::Arc<str>>,
    /// Why the server ended it, where its stream said (`length`: cut by `max_tokens`).
    pub finish_reason: Option<String>,
    /// Constraint workloads: what the check of its output found (completed requests).
    pub output_check: Option<crate::checks::OutputCheck>,
    /// Tool workloads: the calls the reply made, their check, and which round of its turn
    /// it was (1: the user's turn; 2 on: replies to tool results).
    pub tool_calls: Vec<crate::protocol::tool_calls::ToolCall>,
    pub call_check: Option<crate::checks::CallCheck>,
    pub round: Option<u32>,
}

impl RequestRecord {
    pub fn shed(scheduled_ms: f64) -> Self {
        Self::unsent(Status::Shed, scheduled_ms, "shed by the client: --max-inflight requests in flight")
    }

    fn unsent(status: Status, scheduled_ms: f64, error: &str) -> Self {
        Self {
            index: 0,
            session: None,
            turn: None,
            prompt_tokens: None,
            cached_tokens: None,
            status,
            http_status: None,
            error: Some(error.to_string()),
            retry_after_s: None,
            scheduled_ms,
            sent_ms: scheduled_ms,
            ttft_ms: None,
            ttfat_ms: None,
            reasoning_chars: 0,
            reasoning_tokens: None,
            event_gaps_ms: Vec::new(),
            event_tokens: Vec::new(),
            e2e_ms: 0.0,
            text: String::new(),
            content_events: 0,
            completion_tokens: None,
            tokens_estimated: false,
            resent: false,
            target: 0,
            model: None,
            finish_reason: None,
            output_check: None,
            tool_calls: Vec::new(),
            call_check: None,
            round: None,
        }
    }

    fn take_usage(&mut self, usage: UsageInfo) {
        self.completion_tokens = usage.completion_tokens.or(self.completion_tokens);
        self.prompt_tokens = usage.prompt_tokens.or(self.prompt_tokens);
        self.cached_tokens = usage.cached_tokens.or(self.cached_tokens);
        self.reasoning_tokens = usage.reasoning_tokens.or(self.reasoning_tokens);
    }

    pub fn dispatch_lag_ms(&self) -> f64 {
        (self.sent_ms - self.scheduled_ms).max(0.0)
    }

    /// Generated tokens: the server's usage, else the token counts the events carried.
    pub fn tokens(&self) -> Option<u32> {
        self.completion_tokens.or_else(|| {
            let counted: Option<Vec<u32>> = self.event_tokens.iter().copied().collect();
            counted.filter(|c| !c.is_empty()).map(|c| c.iter().sum())
        })
    }

    /// Time per output token after the first: (e2e − ttft) / (tokens − 1).
    pub fn tpot_ms(&self) -> Option<f64> {
        let tokens = self.tokens()?;
        let ttft = self.ttft_ms?;
        (tokens > 1).then(|| (self.e2e_ms - ttft) / f64::from(tokens - 1))
    }

    /// Token-level inter-token latencies, when they can be told apart from event gaps:
    /// either every event says how many tokens it carries, or events and tokens are 1:1.
    pub fn token_gaps_ms(&self) -> Option<Vec<f64>> {
        let per_event: Option<Vec<u32>> = self.event_tokens.iter().copied().collect();
        if let Some(per_event) = per_event.filter(|p| p.len() == self.content_events && !p.is_empty()) {
            let mut gaps = Vec::new();
            // The first event's own extra tokens arrived with zero gap between them.
            gaps.extend(std::iter::repeat_n(0.0, per_event[0].saturating_sub(1) as usize));
            for (gap, &n) in self.event_gaps_ms.iter().zip(&per_event[1..]) {
                let n = n.max(1);
                gaps.extend(std::iter::repeat_n(gap / f64::from(n), n as usize));
            }
            return Some(gaps);
        }
        (self.completion_tokens == Some(self.content_events as u32)).then(|| self.event_gaps_ms.clone())
    }
}

pub struct Target<'a> {
    pub client: &'a reqwest::Client,
    pub url: &'a str,
    pub protocol: Protocol,
    pub api_key: Option<&'a str>,
    pub timeout: Duration,
}

/// Sends `body` now; `run_start` and `scheduled_ms` place it on the run's timeline.
pub async fn send(target: &Target<'_>, body: &Value, run_start: Instant, scheduled_ms: f64) -> RequestRecord {
    let sent = Instant::now();
    let mut record = RequestRecord::unsent(Status::Failed, scheduled_ms, "");
    record.error = None;
    record.sent_ms = ms(sent - run_start);
    let outcome = tokio::time::timeout(target.timeout, exchange(target, body, sent, &mut record)).await;
    if outcome.is_err() {
        record.status = Status::Failed;
        record.error = Some(format!("timed out after {:?}", target.timeout));
    }
    record.e2e_ms = ms(sent.elapsed());
    record
}

async fn exchange(target: &Target<'_>, body: &Value, sent: Instant, record: &mut RequestRecord) {
    let mut request = target.client.post(target.url).header("accept", "text/event-stream").json(body);
    if let Some(key) = target.api_key {
        request = request.bearer_auth(key);
    }
    let response = match request.try_clone().map(|r| r.send()) {
        Some(first) => match first.await {
            // A server may close a kept-alive connection just as a request goes out on it
            // (llama.cpp's HTTP library does after a few requests per connection). No
            // response began, so the request is sent once more, on a new connection; the
            // record says so, and its timings still start at the first attempt.
            Err(e) if stale_connection(&e) => {
                record.resent = true;
                request.send().await
            }
            other => other,
        },
        None => request.send().await,
    };
    let response = match response {
        Ok(r) => r,
        Err(e) => {
            record.error = Some(format!("request failed: {}", error_chain(&e)));
            return;
        }
    };
    let status = response.status();
    record.http_status = Some(status.as_u16());
    if !status.is_success() {
        record.retry_after_s =
            response.headers().get("retry-after").and_then(|v| v.to_str().ok()).and_then(|v| v.trim().parse().ok());
        let text = response.text().await.unwrap_or_default();
        let message = serde_json::from_str::<Value>(&text)
            .ok()
            .and_then(|v| v["error"]["message"].as_str().map(str::to_string))
            .unwrap_or_else(|| text.chars().take(200).collect());
        record.status = if status.as_u16() == 429 { Status::Rejected } else { Status::Failed };
        record.error = Some(format!("HTTP {status}: {message}"));
        return;
    }

    if target.protocol.is_pooled() {
        return read_pooled(response, body, sent, record).await;
    }
    let mut events = response.bytes_stream().eventsource();
    let mut decoder = StreamDecoder::new(target.protocol);
    let mut last_content: Option<Instant> = None;
    let (mut finished, mut end) = (false, false);
    while let Some(event) = events.next().await {
        let now = Instant::now();
        let event = match event {
            Ok(e) => e,
            Err(e) => {
                record.error = Some(format!("stream broke: {e}"));
                return;
            }
        };
        let chunk = decoder.decode(&event.event, &event.data);
        if let Some(message) = chunk.error {
            record.error = Some(format!("error in stream: {message}"));
            return;
        }
        if chunk.is_content() {
            match last_content {
                None => record.ttft_ms = Some(ms(now - sent)),
                Some(last) => record.event_gaps_ms.push(ms(now - last)),
            }
            if !chunk.text.is_empty() && record.ttfat_ms.is_none() {
                record.ttfat_ms = Some(ms(now - sent));
            }
            last_content = Some(now);
            record.content_events += 1;
            record.event_tokens.push(chunk.tokens);
            record.text.push_str(&chunk.text);
            for delta in chunk.tool_calls {
                crate::protocol::tool_calls::assemble(&mut record.tool_calls, delta);
            }
            record.reasoning_chars += chunk.reasoning.chars().count();
        }
        if let Some(usage) = chunk.usage {
            record.take_usage(usage);
        }
        finished |= chunk.finished;
        if chunk.finish_reason.is_some() {
            record.finish_reason = chunk.finish_reason;
        }
        if chunk.end {
            end = true;
            break;
        }
    }
    if record.content_events == 0 {
        record.error =
            Some(if end || finished { "stream ended with no content" } else { "stream closed with no content" }.into());
        return;
    }
    if !(end || finished) && target.protocol.has_end_marker() {
        // A cut-off stream looks like a short answer; only the end marker tells them apart.
        record.error = Some("truncated: the stream closed without its end marker".into());
        return;
    }
    record.status = Status::Completed;
}

/// An embeddings or rerank answer: one JSON body, timed whole. It completes only when it
/// holds a vector (a score) for every input sent; `content_events` counts them.
async fn read_pooled(response: reqwest::Response, body: &Value, sent: Instant, record: &mut RequestRecord) {
    let answer = match response.bytes().await {
        Ok(bytes) => serde_json::from_slice::<Value>(&bytes),
        Err(e) => {
            record.error = Some(format!("answer broke: {}", error_chain(&e)));
            return;
        }
    };
    record.ttft_ms = Some(ms(sent.elapsed()));
    let Ok(answer) = answer else {
        record.error = Some("the answer is not JSON".into());
        return;
    };
    let sent_inputs = body.get("input").or_else(|| body.get("documents")).and_then(Value::as_array).map_or(1, Vec::len);
    let answered = answer["data"].as_array().or_else(|| answer["results"].as_array()).map_or(0, |items| {
        items.iter().filter(|i| i.get("embedding").is_some() || i.get("relevance_score").is_some()).count()
    });
    record.prompt_tokens = answer["usage"]["prompt_tokens"].as_u64().and_then(|t| u32::try_from(t).ok());
    record.completion_tokens = Some(0);
    record.content_events = answered;
    if answered != sent_inputs {
        record.error = Some(format!("the answer holds {answered} results for {sent_inputs} inputs"));
        return;
    }
    record.status = Status::Completed;
}

/// The server closed the connection before any response to this request began.
fn stale_connection(e: &reqwest::Error) -> bool {
    let mut source = std::error::Error::source(e);
    while let Some(cause) = source {
        if cause.downcast_ref::<hyper::Error>().is_some_and(hyper::Error::is_incomplete_message) {
            return true;
        }
        source = cause.source();
    }
    false
}

/// An error with its causes ("error sending request: connection closed before message
/// completed"), so a failure says whose it was.
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}
