//! Sends one request and times its stream as the bytes arrive.

use std::time::{Duration, Instant};

use eventsource_stream::Eventsource;
use futures::StreamExt;
use serde_json::Value;

use crate::protocol::{Protocol, StreamDecoder};
use crate::run::record::{RequestRecord, Status};

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
    record.timing.sent_ms = ms(sent - run_start);
    let outcome = tokio::time::timeout(target.timeout, exchange(target, body, sent, &mut record)).await;
    if outcome.is_err() {
        record.status = Status::Failed;
        record.error = Some(format!("timed out after {:?}", target.timeout));
    }
    record.timing.e2e_ms = ms(sent.elapsed());
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
                None => record.timing.ttft_ms = Some(ms(now - sent)),
                Some(last) => record.timing.event_gaps_ms.push(ms(now - last)),
            }
            if !chunk.text.is_empty() && record.timing.ttfat_ms.is_none() {
                record.timing.ttfat_ms = Some(ms(now - sent));
            }
            last_content = Some(now);
            record.timing.content_events += 1;
            record.timing.event_tokens.push(chunk.tokens);
            record.reply.text.push_str(&chunk.text);
            for delta in chunk.tool_calls {
                crate::protocol::tool_calls::assemble(&mut record.reply.tool_calls, delta);
            }
            record.usage.reasoning_chars += chunk.reasoning.chars().count();
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
    if record.timing.content_events == 0 {
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
    record.timing.ttft_ms = Some(ms(sent.elapsed()));
    let Ok(answer) = answer else {
        record.error = Some("the answer is not JSON".into());
        return;
    };
    let sent_inputs = body.get("input").or_else(|| body.get("documents")).and_then(Value::as_array).map_or(1, Vec::len);
    let answered = answer["data"].as_array().or_else(|| answer["results"].as_array()).map_or(0, |items| {
        items.iter().filter(|i| i.get("embedding").is_some() || i.get("relevance_score").is_some()).count()
    });
    record.usage.prompt_tokens = answer["usage"]["prompt_tokens"].as_u64().and_then(|t| u32::try_from(t).ok());
    record.usage.completion_tokens = Some(0);
    record.timing.content_events = answered;
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
