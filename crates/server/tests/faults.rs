//! Error paths the real model cannot be made to take, against the scripted backend: a
//! decode failure mid-stream on every endpoint, the engine thread dying, requests while
//! the model loads, a drain. Real HTTP over loopback, real SSE; seconds, not minutes.

mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use rillm_backend::scripted::{Script, ScriptedBackend};
use rillm_server::{Backend, ServeError, ServerConfig};
use serde_json::{json, Value};
use support::scripted::{get, post, serve_router, Running};
use support::{read_sse, SseEvent};

fn data_json(events: &[SseEvent]) -> Vec<Value> {
    events.iter().filter(|e| e.data != "[DONE]").map(SseEvent::json).collect()
}

fn assert_error_body(v: &Value, needle: &str) {
    let message = v["error"]["message"].as_str().unwrap_or_else(|| panic!("no error object in {v}"));
    assert!(message.contains(needle), "{message:?} lacks {needle:?}");
    let error = &v["error"];
    assert!(error["type"].is_string() && error.get("param").is_some() && error.get("code").is_some(), "{v}");
}

#[tokio::test]
async fn a_decode_failure_mid_stream_reaches_every_endpoint_as_an_error_after_the_tokens_before_it() {
    let backend = ScriptedBackend::start(Script { fail_after_tokens: Some(3), ..Script::default() });
    let base = serve_router(backend).await;

    // rillm's protocol: three text events, `event: error` with the error object, then done.
    let events = read_sse(post(&base, "/generate", json!({"prompt": "hello there"})).await).await;
    let kinds: Vec<&str> = events.iter().map(|e| e.event.as_str()).collect();
    assert_eq!(kinds, ["message", "message", "message", "error", "done"], "{events:?}");
    assert_eq!(events[2].json()["text"], " w2");
    assert_error_body(&events[3].json(), "scripted decode failure");
    let done = events[4].json();
    assert_eq!(done["finish_reason"], "error");
    assert_eq!(done["usage"]["completion_tokens"], 3);

    // OpenAI streams: the error object as a data chunk, then finish_reason "error", then [DONE].
    for (path, body) in [
        ("/v1/completions", json!({"prompt": "hello", "stream": true})),
        ("/v1/chat/completions", json!({"messages": [{"role": "user", "content": "hello"}], "stream": true})),
    ] {
        let events = read_sse(post(&base, path, body).await).await;
        assert_eq!(events.last().unwrap().data, "[DONE]", "{path}");
        let chunks = data_json(&events);
        let error_at =
            chunks.iter().position(|c| c.get("error").is_some()).unwrap_or_else(|| panic!("{path}: {chunks:?}"));
        assert_error_body(&chunks[error_at], "scripted decode failure");
        let text: String = chunks[..error_at]
            .iter()
            .filter_map(|c| c["choices"][0]["text"].as_str().or(c["choices"][0]["delta"]["content"].as_str()))
            .collect();
        assert_eq!(text, "w0 w1 w2", "{path}");
        assert_eq!(chunks[error_at + 1]["choices"][0]["finish_reason"], "error", "{path}");
    }

    // Not streamed: a 500 with the error object, no partial text passed off as a completion.
    let response = post(&base, "/v1/completions", json!({"prompt": "hello"})).await;
    assert_eq!(response.status(), 500);
    assert_error_body(&response.json().await.unwrap(), "scripted decode failure");
}

#[tokio::test]
async fn when_the_engine_dies_running_and_waiting_requests_get_errors_and_health_and_ready_turn_503() {
    let backend =
        ScriptedBackend::start(Script { slots: 1, max_waiting: 4, reply_tokens: 100_000, ..Script::default() });
    let base = serve_router(Arc::clone(&backend) as Arc<dyn Backend>).await;
    assert_eq!(get(&base, "/health").await.0, 200);

    let running = post(&base, "/generate", json!({"prompt": "first", "max_tokens": 100000})).await;
    let waiting = post(&base, "/generate", json!({"prompt": "second"})).await;
    assert_eq!((running.status().as_u16(), waiting.status().as_u16()), (200, 200));
    let deadline = Instant::now() + Duration::from_secs(5);
    while backend.stats().running == 0 {
        assert!(Instant::now() < deadline, "the first request never ran");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }

    backend.panic_engine();
    for (name, response) in [("running", running), ("waiting", waiting)] {
        let events = tokio::time::timeout(Duration::from_secs(5), read_sse(response)).await.expect("stream ends");
        let error = events.iter().find(|e| e.event == "error").unwrap_or_else(|| panic!("{name}: {events:?}"));
        assert_error_body(&error.json(), "engine");
        assert_eq!(events.last().unwrap().json()["finish_reason"], "error", "{name}");
    }

    let (status, body) = get(&base, "/health").await;
    assert_eq!(status, 503, "{body}");
    assert!(body["reason"].as_str().unwrap().contains("scripted engine panic"), "{body}");
    assert_eq!(get(&base, "/ready").await.0, 503);
    let refused = post(&base, "/generate", json!({"prompt": "third"})).await;
    assert_eq!(refused.status(), 503);
    assert_error_body(&refused.json().await.unwrap(), "engine has stopped");
}

#[tokio::test]
async fn a_dead_engine_ends_the_server_with_an_error_so_the_process_exits_non_zero() {
    let backend = ScriptedBackend::start(Script { reply_tokens: 100_000, ..Script::default() });
    let load_backend = Arc::clone(&backend) as Arc<dyn Backend>;
    let mut server = Running::start(ServerConfig::default(), move || Ok(load_backend)).await;
    server.wait_ready().await;
    let running = post(&server.base, "/generate", json!({"prompt": "a long one", "max_tokens": 100000})).await;
    assert_eq!(running.status(), 200);

    backend.panic_engine();
    let events = tokio::time::timeout(Duration::from_secs(5), read_sse(running)).await.expect("stream ends");
    assert!(events.iter().any(|e| e.event == "error"), "{events:?}");
    let stop = server.stop.take();
    match server.join().await {
        Err(ServeError::EngineFailed(reason)) => assert!(reason.contains("scripted engine panic"), "{reason}"),
        other => panic!("expected EngineFailed, got {other:?}"),
    }
    drop(stop);
}

#[tokio::test]
async fn while_the_model_loads_ready_and_generation_are_503_and_health_is_200() {
    let (loaded, load_done) = std::sync::mpsc::channel::<()>();
    let server = Running::start(ServerConfig::default(), move || {
        let _ = load_done.recv_timeout(Duration::from_secs(10));
        Ok(ScriptedBackend::start(Script::default()) as Arc<dyn Backend>)
    })
    .await;
    assert_eq!(get(&server.base, "/ready").await, (503, json!({"status": "loading"})));
    assert_eq!(get(&server.base, "/health").await.0, 200);
    let refused = post(&server.base, "/v1/completions", json!({"prompt": "hi"})).await;
    assert_eq!(refused.status(), 503);
    assert_error_body(&refused.json().await.unwrap(), "loading");

    loaded.send(()).unwrap();
    server.wait_ready().await;
    let events = read_sse(post(&server.base, "/generate", json!({"prompt": "hi"})).await).await;
    assert_eq!(events.last().unwrap().json()["finish_reason"], "length");
}

#[tokio::test]
async fn a_drain_finishes_running_streams_and_refuses_new_requests() {
    // 40 tokens at 10 ms: the stream is still running when the drain starts.
    let script = Script { step: Duration::from_millis(10), reply_tokens: 40, ..Script::default() };
    let mut server =
        Running::start(ServerConfig::default(), move || Ok(ScriptedBackend::start(script) as Arc<dyn Backend>)).await;
    server.wait_ready().await;
    let running = post(&server.base, "/generate", json!({"prompt": "drain me"})).await;
    assert_eq!(running.status(), 200);

    let _ = server.stop.take().unwrap().send(());
    let deadline = Instant::now() + Duration::from_secs(2);
    while get(&server.base, "/ready").await.0 != 503 {
        assert!(Instant::now() < deadline, "/ready never turned 503");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let refused = post(&server.base, "/generate", json!({"prompt": "too late"})).await;
    assert_eq!(refused.status(), 503);

    let events = read_sse(running).await;
    let done = events.last().unwrap().json();
    assert_eq!(done["finish_reason"], "length", "{events:?}");
    assert_eq!(done["usage"]["completion_tokens"], 40);
    server.join().await.expect("a drain is a clean stop");
}
