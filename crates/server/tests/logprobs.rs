//! Log-probabilities on the real model over loopback HTTP: chat's `logprobs.content`,
//! completions' parallel lists and `/generate`'s entries, streamed and not; a greedy token
//! is the top of its alternatives; every 400 names its field.

mod support;

use serde_json::{json, Value};
use support::{read_sse, Options, TestServer};

/// Cold prefills: a test that asks the same greedy request twice (streamed and whole)
/// compares rows computed in the same shape, equal to the token.
fn opts() -> Options {
    Options { max_running: 4, max_waiting: 16, ctx: 512, prefix_caching: false, ..Options::default() }
}

async fn post_json(server: &TestServer, path: &str, body: Value) -> Value {
    let response = server.post(path, body).await;
    assert_eq!(response.status(), 200);
    response.json().await.expect("JSON")
}

/// Checks one chat entry against the raw distribution's basic laws; returns its token.
fn check_chat_entry(entry: &Value, top: usize, greedy: bool) -> String {
    let logprob = entry["logprob"].as_f64().expect("logprob");
    assert!(logprob <= 0.0 && logprob.is_finite(), "{entry}");
    let alternatives = entry["top_logprobs"].as_array().expect("top_logprobs");
    assert_eq!(alternatives.len(), top, "{entry}");
    let values: Vec<f64> = alternatives.iter().map(|a| a["logprob"].as_f64().expect("logprob")).collect();
    assert!(values.windows(2).all(|w| w[0] >= w[1]), "most likely first: {entry}");
    assert!(values.iter().map(|v| v.exp()).sum::<f64>() <= 1.0 + 1e-4, "{entry}");
    let token = entry["token"].as_str().expect("token").to_string();
    let bytes: Vec<u8> =
        entry["bytes"].as_array().expect("bytes").iter().map(|b| b.as_u64().unwrap_or(0) as u8).collect();
    assert_eq!(String::from_utf8_lossy(&bytes), token.as_str());
    if greedy {
        assert_eq!(alternatives[0]["token"], token.as_str(), "a greedy token is the most likely: {entry}");
        assert!((values[0] - logprob).abs() < 1e-6, "{entry}");
    }
    token
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_logprobs_streamed_and_not_cover_every_token() {
    let server = TestServer::start(opts()).await;
    let body = json!({"messages": [{"role": "user", "content": "Name three colors."}], "max_tokens": 16,
        "temperature": 0, "logprobs": true, "top_logprobs": 5});
    let whole = post_json(&server, "/v1/chat/completions", body.clone()).await;
    let choice = &whole["choices"][0];
    let entries = choice["logprobs"]["content"].as_array().expect("content");
    // The end-of-turn token that ended it is counted in usage but is no text: no entry.
    let ended = u64::from(choice["finish_reason"] == "stop");
    assert_eq!(entries.len() as u64 + ended, whole["usage"]["completion_tokens"].as_u64().expect("count"));
    let tokens: String = entries.iter().map(|e| check_chat_entry(e, 5, true)).collect();
    assert_eq!(tokens, choice["message"]["content"].as_str().expect("text"));

    let mut streamed = body;
    streamed["stream"] = json!(true);
    let events = read_sse(server.post("/v1/chat/completions", streamed).await).await;
    let mut streamed_entries = Vec::new();
    for event in events.iter().filter(|e| e.data != "[DONE]") {
        let chunk = event.json();
        let delta = chunk["choices"][0]["delta"]["content"].as_str().unwrap_or_default().to_string();
        let content = chunk["choices"][0]["logprobs"]["content"].as_array().cloned().unwrap_or_default();
        let text: String = content.iter().map(|e| e["token"].as_str().unwrap_or_default().to_string()).collect();
        assert_eq!(text, delta, "each chunk carries its own tokens' logprobs: {chunk}");
        streamed_entries.extend(content);
    }
    let logprob = |e: &Value| e["logprob"].as_f64().unwrap_or(f64::NAN);
    assert_eq!(streamed_entries.len(), entries.len());
    for (a, b) in streamed_entries.iter().zip(entries) {
        assert_eq!(a["token"], b["token"]);
        assert!((logprob(a) - logprob(b)).abs() < 0.05, "batch rounding at most: {a} vs {b}");
    }

    // Without logprobs the field is null, as OpenAI sends it.
    let plain = post_json(
        &server,
        "/v1/chat/completions",
        json!({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2}),
    )
    .await;
    assert!(plain["choices"][0]["logprobs"].is_null());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn completions_and_generate_logprobs_and_constrained_tokens() {
    let server = TestServer::start(opts()).await;
    let whole = post_json(
        &server,
        "/v1/completions",
        json!({"prompt": "The capital of France is", "max_tokens": 6, "temperature": 0, "logprobs": 3}),
    )
    .await;
    let choice = &whole["choices"][0];
    let lp = &choice["logprobs"];
    let tokens: Vec<&str> = lp["tokens"].as_array().expect("tokens").iter().map(|t| t.as_str().expect("str")).collect();
    assert_eq!(tokens.concat(), choice["text"].as_str().expect("text"));
    let offsets: Vec<u64> =
        lp["text_offset"].as_array().expect("offsets").iter().map(|o| o.as_u64().expect("n")).collect();
    let mut at = 0;
    for (token, offset) in tokens.iter().zip(&offsets) {
        assert_eq!(*offset, at);
        at += token.len() as u64;
    }
    for (i, top) in lp["top_logprobs"].as_array().expect("top").iter().enumerate() {
        let top = top.as_object().expect("map");
        assert!(top.len() <= 3 && !top.is_empty());
        let best = top.values().filter_map(Value::as_f64).fold(f64::NEG_INFINITY, f64::max);
        assert!((best - lp["token_logprobs"][i].as_f64().expect("lp")).abs() < 1e-6, "greedy is the best");
    }

    // Under a constraint no token is forced unseen: each gets its own logprob.
    let choice = post_json(
        &server,
        "/v1/chat/completions",
        json!({"messages": [{"role": "user", "content": "Pick one"}], "guided_choice": ["alpha beta gamma", "delta"],
               "temperature": 0, "logprobs": true}),
    )
    .await;
    let entries = choice["choices"][0]["logprobs"]["content"].as_array().expect("content");
    assert_eq!(entries.len() as u64, choice["usage"]["completion_tokens"].as_u64().expect("count"));
    assert!(entries.len() > 1, "{choice}");
    let text: String = entries.iter().map(|e| e["token"].as_str().unwrap_or_default()).collect();
    assert_eq!(text, choice["choices"][0]["message"]["content"].as_str().expect("content"));

    let events =
        read_sse(server.post("/generate", json!({"prompt": "One, two,", "max_tokens": 3, "logprobs": 2})).await).await;
    let texts: Vec<Value> = events.iter().filter(|e| e.event == "message").map(|e| e.json()).collect();
    assert!(!texts.is_empty());
    for t in &texts {
        let entries = t["logprobs"].as_array().expect("logprobs");
        assert_eq!(entries.len(), t["token_ids"].as_array().expect("ids").len(), "{t}");
        assert_eq!(entries[0]["token_id"], t["token_ids"][0]);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logprob_requests_over_the_limits_are_400s_naming_the_field() {
    let server = TestServer::start(opts()).await;
    let chat = |extra: Value| {
        let mut body = json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2});
        body.as_object_mut().expect("object").extend(extra.as_object().expect("object").clone());
        ("/v1/chat/completions", body)
    };
    let completion = |extra: Value| {
        let mut body = json!({"prompt": "hi", "max_tokens": 2});
        body.as_object_mut().expect("object").extend(extra.as_object().expect("object").clone());
        ("/v1/completions", body)
    };
    let cases = [
        (chat(json!({"logprobs": true, "top_logprobs": 21})), "top_logprobs"),
        (chat(json!({"top_logprobs": 2})), "top_logprobs"),
        (completion(json!({"logprobs": 6})), "logprobs"),
        (completion(json!({"logprobs": "yes"})), "logprobs"),
        (completion(json!({"logprobs": -1})), "logprobs"),
        (("/generate", json!({"prompt": "hi", "logprobs": 21})), "logprobs"),
    ];
    for ((path, body), param) in cases {
        let response = server.post(path, body.clone()).await;
        assert_eq!(response.status(), 400, "{body}");
        let error: Value = response.json().await.expect("JSON");
        assert_eq!(error["error"]["param"], param, "{body}: {error}");
    }
}
