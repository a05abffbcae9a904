//! Admission, cancellation and shutdown under load, on the real model over loopback.

mod support;

use std::time::{Duration, Instant};

use futures::StreamExt;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};
use support::{read_sse, Options, TestServer};

fn long_request() -> Value {
    json!({"prompt": "Write a very long story about a dragon.", "max_tokens": 400, "ignore_eos": true})
}

/// Sends a streaming request and waits for its first SSE bytes.
async fn open_stream(server: &TestServer, body: Value) -> reqwest::Response {
    let mut response = server.post("/generate", body).await;
    assert_eq!(response.status(), 200);
    let first = response.chunk().await.unwrap().expect("a first event");
    assert!(!first.is_empty());
    response
}

#[tokio::test]
async fn with_max_queue_ms_a_request_that_would_start_too_late_gets_429_at_once_and_an_idle_server_admits() {
    let server =
        TestServer::start(Options { max_running: 1, max_waiting: 8, max_queue_ms: Some(300), ..Options::default() })
            .await;
    // Idle: nothing ahead, admitted (no loss below the knee).
    let events = read_sse(server.post("/generate", json!({"prompt": "Hi", "max_tokens": 4})).await).await;
    assert_eq!(events.last().unwrap().json()["finish_reason"], "length");

    // One slot, busy for hundreds of tokens: the next request could not start within 300 ms,
    // though a waiting place is free.
    let running = open_stream(&server, long_request()).await;
    let started = Instant::now();
    let response = server.post("/v1/completions", json!({"prompt": "Hi", "max_tokens": 4, "stream": true})).await;
    assert_eq!(response.status(), 429);
    assert!(started.elapsed() < Duration::from_millis(500), "the refusal waited");
    let retry_after: u64 = response.headers()["retry-after"].to_str().unwrap().parse().unwrap();
    assert!(retry_after >= 1, "{retry_after}");
    let body: Value = response.json().await.unwrap();
    assert!(body["error"]["message"].as_str().unwrap().contains("would wait about"), "{body}");
    assert_eq!(server.metric("vllm:num_requests_waiting").await, 0.0, "nothing was queued");
    let metrics = server.client.get(server.url("/metrics")).send().await.unwrap().text().await.unwrap();
    assert!(metrics.lines().any(|l| l.starts_with("rillm_requests_rejected_total{reason=\"would_miss_deadline\"")));
    drop(running);
}

/// Opens a stream of 1,800 tokens and reads it until `tokens` have come: past what this
/// server's requests have produced so far, so the wait forecast expects its slot free soon.
async fn running_past_forecast(server: &TestServer, tokens: usize) -> reqwest::Response {
    let body = json!({"prompt": "Write a very long story about a dragon.", "max_tokens": 1800, "ignore_eos": true});
    let mut response = server.post("/generate", body).await;
    assert_eq!(response.status(), 200);
    let mut seen = 0;
    while seen < tokens {
        let chunk = response.chunk().await.unwrap().expect("tokens");
        seen += String::from_utf8_lossy(&chunk).matches("\"token_ids\"").count();
    }
    response
}

#[tokio::test]
async fn with_max_queue_ms_a_queued_request_whose_wait_runs_out_gets_429_when_it_reaches_the_head() {
    let server = TestServer::start(Options {
        max_running: 1,
        max_waiting: 8,
        ctx: 2048,
        max_queue_ms: Some(1000),
        ..Options::default()
    })
    .await;
    for (hold_ms, expect) in [(1300, 429), (200, 200)] {
        // Admitted on the forecast (the running request should end any moment), it waits
        // for the slot; the response, headers included, waits with it.
        let running = running_past_forecast(&server, 140).await;
        let queued = tokio::spawn({
            let (client, url) = (server.client.clone(), server.url("/v1/chat/completions"));
            let body = json!({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4, "stream": true});
            async move { client.post(url).json(&body).send().await.unwrap() }
        });
        server.wait_metric("vllm:num_requests_waiting", Duration::from_secs(5), |v| v == 1.0).await;
        tokio::time::sleep(Duration::from_millis(hold_ms)).await;
        assert!(!queued.is_finished(), "nothing answered while it waits");
        drop(running);
        let response = tokio::time::timeout(Duration::from_secs(30), queued).await.unwrap().unwrap();
        assert_eq!(response.status(), expect, "held {hold_ms} ms against a bound of 1000");
        if expect == 429 {
            assert!(response.headers()["content-type"].to_str().unwrap().starts_with("application/json"));
            assert!(response.headers().contains_key("retry-after"));
            let body: Value = response.json().await.unwrap();
            assert_eq!(body["error"]["type"], "rate_limit_error", "{body}");
            assert!(body["error"]["message"].as_str().unwrap().contains("ms in the queue"), "{body}");
        } else {
            let events = read_sse(response).await;
            assert!(events.iter().any(|e| e.data.contains("\"content\"")), "a streamed answer");
        }
    }
    let metrics = server.client.get(server.url("/metrics")).send().await.unwrap().text().await.unwrap();
    assert!(metrics.lines().any(|l| l.starts_with("rillm_requests_rejected_total{reason=\"waited_past_deadline\"")));
}

#[tokio::test]
async fn full_queue_answers_429_with_retry_after_and_no_sse() {
    let server = TestServer::start(Options { max_running: 1, max_waiting: 1, ..Options::default() }).await;
    let running = open_stream(&server, long_request()).await;
    // This one waits in the queue (its SSE response has started; its tokens have not).
    let waiting = tokio::spawn({
        let client = server.client.clone();
        let url = server.url("/generate");
        async move { client.post(url).json(&long_request()).send().await }
    });
    server.wait_metric("vllm:num_requests_waiting", Duration::from_secs(5), |v| v == 1.0).await;

    let rejected_before = server.metric("rillm_requests_rejected_total").await;
    let prompt = json!({"prompt": "Hi", "max_tokens": 4, "stream": true});
    let chat = json!({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4, "stream": true});
    for (path, body) in [("/generate", &prompt), ("/v1/completions", &prompt), ("/v1/chat/completions", &chat)] {
        let r = server.post(path, body.clone()).await;
        assert_eq!(r.status(), 429, "{path}");
        assert_eq!(r.headers()["retry-after"], "1");
        assert!(r.headers()["content-type"].to_str().unwrap().starts_with("application/json"));
        let v: Value = r.json().await.unwrap();
        assert_eq!(v["error"]["type"], "rate_limit_error");
        assert_eq!(v["error"]["code"], "queue_full");
    }
    assert_eq!(server.metric("rillm_requests_rejected_total").await - rejected_before, 3.0);
    drop(running);
    waiting.abort();
}

#[tokio::test]
async fn dropped_stream_is_cancelled_and_its_sequence_freed() {
    let server = TestServer::start(Options::default()).await;
    let disconnects_before = server.metric("rillm_client_disconnects_total").await;
    let response = open_stream(&server, long_request()).await;
    assert_eq!(server.metric("vllm:num_requests_running").await, 1.0);
    let dropped_at = Instant::now();
    drop(response);
    server.wait_metric("vllm:num_requests_running", Duration::from_secs(1), |v| v == 0.0).await;
    server.wait_metric("vllm:kv_cache_usage_perc", Duration::from_secs(1), |v| v == 0.0).await;
    assert!(dropped_at.elapsed() < Duration::from_secs(1));
    server
        .wait_metric("rillm_client_disconnects_total", Duration::from_secs(1), |v| v == disconnects_before + 1.0)
        .await;
}

#[tokio::test]
async fn dropped_responses_stream_is_cancelled_too() {
    let server = TestServer::start(Options::default()).await;
    let disconnects_before = server.metric("rillm_client_disconnects_total").await;
    let body = json!({"input": "Write a very long story about a dragon.", "max_output_tokens": 400, "stream": true});
    let mut response = server.post("/v1/responses", body).await;
    assert_eq!(response.status(), 200);
    assert!(!response.chunk().await.unwrap().expect("a first event").is_empty());
    server.wait_metric("vllm:num_requests_running", Duration::from_secs(2), |v| v == 1.0).await;
    drop(response);
    server.wait_metric("vllm:num_requests_running", Duration::from_secs(1), |v| v == 0.0).await;
    server.wait_metric("vllm:kv_cache_usage_perc", Duration::from_secs(1), |v| v == 0.0).await;
    server
        .wait_metric("rillm_client_disconnects_total", Duration::from_secs(1), |v| v == disconnects_before + 1.0)
        .await;
}

#[tokio::test]
async fn dropped_non_streaming_request_is_cancelled_too() {
    let server = TestServer::start(Options::default()).await;
    let pending = tokio::spawn({
        let client = server.client.clone();
        let url = server.url("/v1/completions");
        async move {
            client
                .post(url)
                .json(&json!({"prompt": "Once upon a time", "max_tokens": 400, "ignore_eos": true}))
                .send()
                .await
        }
    });
    server.wait_metric("vllm:num_requests_running", Duration::from_secs(5), |v| v == 1.0).await;
    pending.abort();
    server.wait_metric("vllm:num_requests_running", Duration::from_secs(1), |v| v == 0.0).await;
    server.wait_metric("vllm:kv_cache_usage_perc", Duration::from_secs(1), |v| v == 0.0).await;
}

#[tokio::test]
async fn disconnect_storm_leaves_nothing_running_or_cached() {
    let server = TestServer::start(Options { max_running: 16, max_waiting: 256, ..Options::default() }).await;
    let mut rng = rand::rngs::StdRng::seed_from_u64(42);
    let plans: Vec<(u8, usize)> = (0..200).map(|_| (rng.gen_range(0..4), rng.gen_range(1..6))).collect();
    let deadline = Duration::from_secs(120);
    let started = Instant::now();
    let outcomes = futures::stream::iter(plans)
        .map(|(plan, events_before_drop)| {
            let client = server.client.clone();
            let url = server.url("/generate");
            async move {
                let body = json!({"prompt": "Tell me about rivers.", "max_tokens": 12, "ignore_eos": true});
                let send = client.post(url).json(&body).send();
                match plan {
                    // Gone before the response head arrives.
                    0 => {
                        let _ = tokio::time::timeout(Duration::from_millis(5), send).await;
                        "dropped_early"
                    }
                    // Read a few chunks, then drop.
                    1 | 2 => {
                        let Ok(mut r) = send.await else { return "error" };
                        for _ in 0..events_before_drop {
                            if r.chunk().await.ok().flatten().is_none() {
                                break;
                            }
                        }
                        "dropped_mid"
                    }
                    // Read to the end.
                    _ => match send.await {
                        Ok(r) if r.status() == 200 => {
                            let body = r.text().await.unwrap_or_default();
                            if body.contains("event: done") {
                                "completed"
                            } else {
                                "truncated"
                            }
                        }
                        _ => "error",
                    },
                }
            }
        })
        .buffer_unordered(32)
        .collect::<Vec<_>>()
        .await;
    assert!(started.elapsed() < deadline, "storm took {:?}", started.elapsed());
    assert_eq!(outcomes.len(), 200);
    assert!(!outcomes.contains(&"error") && !outcomes.contains(&"truncated"), "{outcomes:?}");
    assert!(outcomes.contains(&"completed"));
    for name in ["vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc"] {
        server.wait_metric(name, Duration::from_secs(5), |v| v == 0.0).await;
    }
    // The server still serves normally afterwards.
    let events = read_sse(server.post("/generate", json!({"prompt": "Hi", "max_tokens": 3})).await).await;
    assert_eq!(events.last().unwrap().event, "done");
}

#[tokio::test]
async fn shutdown_drains_in_flight_streams_and_refuses_new_work() {
    let mut opts = Options::default();
    opts.server.shutdown_timeout = Duration::from_secs(30);
    let mut server = TestServer::start(opts).await;
    let mut stream =
        open_stream(&server, json!({"prompt": "Count slowly:", "max_tokens": 60, "ignore_eos": true})).await;
    server.trigger_shutdown();
    let deadline = Instant::now() + Duration::from_secs(5);
    while server.client.get(server.url("/ready")).send().await.unwrap().status() != 503 {
        assert!(Instant::now() < deadline, "/ready never turned 503");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let refused = server.post("/generate", json!({"prompt": "Hi", "max_tokens": 3})).await;
    assert_eq!(refused.status(), 503);
    assert!(refused.headers().contains_key("retry-after"));
    // The in-flight stream runs to its natural end.
    let mut body = Vec::new();
    while let Some(chunk) = stream.chunk().await.unwrap() {
        body.extend_from_slice(&chunk);
    }
    let body = String::from_utf8(body).unwrap();
    assert!(body.contains("event: done") && body.contains("\"finish_reason\":\"length\""), "{body}");
    server.join().await.expect("clean exit");
}

#[tokio::test]
async fn shutdown_timeout_cancels_streams_that_run_too_long() {
    let mut opts = Options::default();
    opts.server.shutdown_timeout = Duration::from_millis(300);
    let mut server = TestServer::start(opts).await;
    let mut stream = open_stream(&server, long_request()).await;
    let started = Instant::now();
    server.trigger_shutdown();
    let mut body = Vec::new();
    while let Ok(Some(chunk)) = stream.chunk().await {
        body.extend_from_slice(&chunk);
    }
    let body = String::from_utf8_lossy(&body);
    assert!(body.contains("\"finish_reason\":\"cancelled\""), "{body}");
    server.join().await.expect("clean exit");
    assert!(started.elapsed() < Duration::from_secs(10));
}

/// Sends `n` requests at once; returns how many got 429.
async fn burst(server: &TestServer, n: usize) -> usize {
    let body = json!({"prompt": "Count slowly:", "max_tokens": 24, "ignore_eos": true});
    let requests = (0..n).map(|_| server.client.post(server.url("/v1/completions")).json(&body).send());
    let responses = futures::future::join_all(requests).await;
    let statuses: Vec<u16> = responses.into_iter().map(|r| r.unwrap().status().as_u16()).collect();
    assert!(statuses.iter().all(|&s| s == 200 || s == 429), "{statuses:?}");
    statuses.iter().filter(|&&s| s == 429).count()
}

#[tokio::test]
async fn a_burst_is_admitted_up_to_free_slots_plus_waiting_places_exactly() {
    let server = TestServer::start(Options { max_running: 8, max_waiting: 4, ..Options::default() }).await;
    assert_eq!(burst(&server, 12).await, 0, "8 slots and 4 waiting places hold 12");
    assert_eq!(burst(&server, 20).await, 8, "the 13th to 20th are refused");
    let server = {
        drop(server);
        TestServer::start(Options { max_running: 2, max_waiting: 0, ..Options::default() }).await
    };
    assert_eq!(burst(&server, 1).await, 0, "--max-waiting 0 still serves an idle server");
    assert_eq!(burst(&server, 3).await, 1);
}
