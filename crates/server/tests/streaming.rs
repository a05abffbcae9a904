//! Streaming and non-streaming responses, checked field by field, on the real model.

mod support;

use serde_json::{json, Value};
use support::{read_sse, Options, TestServer};

#[tokio::test]
async fn generate_streams_text_events_then_done_with_usage_and_timings() {
    let server = TestServer::start(Options::default()).await;
    let response =
        server.post("/generate", json!({"prompt": "What is a cache?", "chat": true, "max_tokens": 20})).await;
    assert_eq!(response.headers()["cache-control"], "no-cache");
    assert_eq!(response.headers()["x-accel-buffering"], "no");
    let events = read_sse(response).await;
    let (done, texts) = events.split_last().unwrap();
    assert_eq!(done.event, "done");
    let mut text = String::new();
    let mut ids = 0;
    for e in texts {
        assert_eq!(e.event, "message");
        let v = e.json();
        text.push_str(v["text"].as_str().unwrap());
        ids += v["token_ids"].as_array().unwrap().len();
    }
    let done = done.json();
    assert_eq!(done["finish_reason"], "length");
    assert_eq!(done["usage"]["completion_tokens"], 20);
    assert_eq!(ids, 20);
    assert!(done["usage"]["prompt_tokens"].as_u64().unwrap() > 5);
    for key in ["queue_ms", "prefill_ms", "ttft_ms", "decode_ms"] {
        assert!(done["timings"][key].as_f64().unwrap() >= 0.0, "{key}");
    }
    assert!(text.to_lowercase().contains("cache"), "{text:?}");
}

#[tokio::test]
async fn generate_accepts_max_new_tokens_and_stop() {
    let server = TestServer::start(Options::default()).await;
    let events = read_sse(
        server.post("/generate", json!({"prompt": "1, 2, 3, 4,", "max_new_tokens": 30, "stop": [" 7"]})).await,
    )
    .await;
    let done = events.last().unwrap().json();
    let text: String =
        events[..events.len() - 1].iter().map(|e| e.json()["text"].as_str().unwrap().to_string()).collect();
    assert_eq!(done["finish_reason"], "stop", "{text:?}");
    assert!(!text.contains(" 7") && text.contains('6'), "{text:?}");
}

fn assert_completion_object(v: &Value, object: &str, model: &str) {
    assert_eq!(v["object"], object);
    assert_eq!(v["model"], model);
    assert!(v["id"].as_str().unwrap().len() > 5);
    assert!(v["created"].as_u64().unwrap() > 1_600_000_000);
}

fn model_name() -> &'static str {
    "SmolLM2-135M-Instruct.Q4_1"
}

#[tokio::test]
async fn completions_non_streaming_has_the_openai_shape() {
    let server = TestServer::start(Options::default()).await;
    let r = server
        .post(
            "/v1/completions",
            json!({"model": model_name(), "prompt": "The capital of France is", "max_tokens": 8, "temperature": 0}),
        )
        .await;
    assert_eq!(r.status(), 200);
    let v: Value = r.json().await.unwrap();
    assert_completion_object(&v, "text_completion", model_name());
    let choice = &v["choices"][0];
    assert_eq!(choice["index"], 0);
    assert!(choice["text"].as_str().unwrap().contains("Paris"), "{choice}");
    assert_eq!(choice["finish_reason"], "length");
    assert!(choice["logprobs"].is_null());
    assert_eq!(v["usage"]["completion_tokens"], 8);
    let u = &v["usage"];
    assert_eq!(u["total_tokens"].as_u64(), Some(u["prompt_tokens"].as_u64().unwrap() + 8));
}

#[tokio::test]
async fn completions_streaming_chunks_then_usage_then_done() {
    let server = TestServer::start(Options::default()).await;
    let body = json!({"prompt": "The capital of France is", "max_tokens": 6, "temperature": 0, "stream": true, "stream_options": {"include_usage": true}});
    let events = read_sse(server.post("/v1/completions", body).await).await;
    assert_eq!(events.last().unwrap().data, "[DONE]");
    let chunks: Vec<Value> = events[..events.len() - 1].iter().map(|e| e.json()).collect();
    let usage_chunk = chunks.last().unwrap();
    assert_eq!(usage_chunk["choices"].as_array().unwrap().len(), 0);
    assert_eq!(usage_chunk["usage"]["completion_tokens"], 6);
    let finish = &chunks[chunks.len() - 2];
    assert_eq!(finish["choices"][0]["finish_reason"], "length");
    let mut text = String::new();
    for c in &chunks[..chunks.len() - 2] {
        assert_completion_object(c, "text_completion", model_name());
        assert!(c["choices"][0]["finish_reason"].is_null());
        assert!(c["usage"].is_null(), "usage only in the last chunk");
        text.push_str(c["choices"][0]["text"].as_str().unwrap());
    }
    assert!(text.contains("Paris"), "{text:?}");

    // Without include_usage there is no usage anywhere.
    let events =
        read_sse(server.post("/v1/completions", json!({"prompt": "Hi", "max_tokens": 3, "stream": true})).await).await;
    assert!(events.iter().all(|e| !e.data.contains("\"usage\"")));
    assert_eq!(events.last().unwrap().data, "[DONE]");
}

#[tokio::test]
async fn chat_non_streaming_has_the_openai_shape_and_stops_at_end_of_turn() {
    let server = TestServer::start(Options::default()).await;
    let body = json!({"messages": [{"role": "user", "content": "Say hello in one short sentence."}], "temperature": 0, "max_tokens": 200});
    let r = server.post("/v1/chat/completions", body).await;
    assert_eq!(r.status(), 200);
    let v: Value = r.json().await.unwrap();
    assert_completion_object(&v, "chat.completion", model_name());
    let choice = &v["choices"][0];
    assert_eq!(choice["message"]["role"], "assistant");
    let content = choice["message"]["content"].as_str().unwrap();
    assert!(!content.is_empty() && !content.contains("<|im_end|>"), "{content:?}");
    assert_eq!(choice["finish_reason"], "stop");
    assert!(v["usage"]["completion_tokens"].as_u64().unwrap() < 200);
}

#[tokio::test]
async fn chat_streaming_opens_with_role_and_ends_with_finish_reason() {
    let server = TestServer::start(Options::default()).await;
    let body = json!({
        "messages": [{"role": "system", "content": "You are terse."}, {"role": "user", "content": [{"type": "text", "text": "Name a colour."}]}],
        "max_completion_tokens": 5, "temperature": 0, "stream": true, "stream_options": {"include_usage": true}
    });
    let events = read_sse(server.post("/v1/chat/completions", body).await).await;
    assert_eq!(events.last().unwrap().data, "[DONE]");
    let chunks: Vec<Value> = events[..events.len() - 1].iter().map(|e| e.json()).collect();
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    for c in &chunks[..chunks.len() - 1] {
        assert_completion_object(c, "chat.completion.chunk", model_name());
    }
    let finish = &chunks[chunks.len() - 2];
    assert_eq!(finish["choices"][0]["finish_reason"], "length");
    assert_eq!(finish["choices"][0]["delta"], json!({}));
    assert_eq!(chunks.last().unwrap()["usage"]["completion_tokens"], 5);
    let content: String = chunks[1..chunks.len() - 2]
        .iter()
        .map(|c| c["choices"][0]["delta"]["content"].as_str().unwrap().to_string())
        .collect();
    assert!(!content.is_empty());
}

/// The Responses API streamed: every event is named by its `type`, numbered in order, and
/// the deltas add up to what the same request answers whole.
#[tokio::test]
async fn responses_stream_names_its_events_and_adds_up_to_the_whole_response() {
    // Cold prefills: the streamed request computes what the whole one did, to the token.
    let server = TestServer::start(Options { prefix_caching: false, ..Options::default() }).await;
    let body = json!({"input": "Name a colour.", "instructions": "You are terse.", "max_output_tokens": 6,
        "temperature": 0});
    let whole: Value = server.post("/v1/responses", body.clone()).await.json().await.unwrap();
    assert_eq!((whole["object"].as_str(), whole["status"].as_str()), (Some("response"), Some("incomplete")), "{whole}");
    assert_eq!(whole["incomplete_details"]["reason"], "max_output_tokens");
    assert_eq!(whole["usage"]["output_tokens"], 6);
    assert_eq!(whole["model"], model_name());

    let mut streamed = body;
    streamed["stream"] = json!(true);
    let events = read_sse(server.post("/v1/responses", streamed).await).await;
    let data: Vec<Value> = events.iter().map(|e| e.json()).collect();
    for (i, (event, data)) in events.iter().zip(&data).enumerate() {
        assert_eq!(data["type"], event.event.as_str(), "the SSE name is the type");
        assert_eq!(data["sequence_number"], i, "{data}");
    }
    let kinds: Vec<&str> = data.iter().filter_map(|d| d["type"].as_str()).collect();
    assert_eq!(
        &kinds[..4],
        ["response.created", "response.in_progress", "response.output_item.added", "response.content_part.added"]
    );
    // vLLM's ending (AIPerf reads usage there): `response.completed`, its status saying the cut.
    assert_eq!(kinds.last(), Some(&"response.completed"));
    assert_eq!(data[data.len() - 1]["response"]["status"], "incomplete");
    let deltas: String = data
        .iter()
        .filter(|d| d["type"] == "response.output_text.delta")
        .map(|d| d["delta"].as_str().unwrap().to_string())
        .collect();
    let last = &data[data.len() - 1]["response"];
    let message = &last["output"][0];
    assert_eq!(message["content"], whole["output"][0]["content"], "streamed and whole say the same");
    assert_eq!(message["content"][0]["text"], deltas.as_str());
    assert_eq!(message["status"], "incomplete", "the text was cut short");
    for tokens in ["input_tokens", "output_tokens"] {
        assert_eq!(last["usage"][tokens], whole["usage"][tokens]);
    }
}

/// vLLM's `continuous_usage_stats` (AIPerf's `--per-chunk-usage` reads it): every chunk
/// carries its choice's usage so far, which counts the tokens streamed up to it.
#[tokio::test]
async fn continuous_usage_counts_the_tokens_streamed_so_far_on_every_chunk() {
    let server = TestServer::start(Options::default()).await;
    for (path, body) in [
        ("/v1/completions", json!({"prompt": "The colours of the rainbow are"})),
        ("/v1/chat/completions", json!({"messages": [{"role": "user", "content": "List three colours."}]})),
    ] {
        let mut body = body;
        body["max_tokens"] = json!(12);
        body["ignore_eos"] = json!(true);
        body["stream"] = json!(true);
        body["logprobs"] = json!(if path == "/v1/completions" { json!(1) } else { json!(true) });
        body["stream_options"] = json!({"include_usage": true, "continuous_usage_stats": true});
        let events = read_sse(server.post(path, body).await).await;
        assert_eq!(events.last().unwrap().data, "[DONE]", "{path}");
        let chunks: Vec<Value> = events[..events.len() - 1].iter().map(|e| e.json()).collect();
        let last = chunks.last().unwrap();
        assert_eq!(last["usage"]["completion_tokens"], 12, "{path}: {last}");
        let prompt_tokens = last["usage"]["prompt_tokens"].as_u64().unwrap();
        // Each chunk's count is the tokens of every chunk so far (one logprob entry a token).
        let mut streamed = 0;
        for c in &chunks[..chunks.len() - 1] {
            let logprobs = &c["choices"][0]["logprobs"];
            streamed += logprobs["content"].as_array().or(logprobs["tokens"].as_array()).map_or(0, Vec::len);
            let usage = &c["usage"];
            assert_eq!(usage["completion_tokens"].as_u64(), Some(streamed as u64), "{path}: {c}");
            assert_eq!(usage["prompt_tokens"].as_u64(), Some(prompt_tokens), "{path}");
            assert_eq!(usage["total_tokens"].as_u64(), Some(prompt_tokens + streamed as u64), "{path}");
        }
        assert_eq!(streamed, 12, "{path}");
    }

    // Without include_usage, continuous_usage_stats alone adds nothing (as in vLLM).
    let body =
        json!({"prompt": "Hi", "max_tokens": 3, "stream": true, "stream_options": {"continuous_usage_stats": true}});
    let events = read_sse(server.post("/v1/completions", body).await).await;
    assert!(events.iter().all(|e| !e.data.contains("\"usage\"")));
}

#[tokio::test]
async fn eight_concurrent_streams_all_complete() {
    let server = TestServer::start(Options::default()).await;
    let requests = (0..8).map(|i| {
        let body = json!({"prompt": format!("Fact number {i} about the sea:"), "max_tokens": 24, "ignore_eos": true});
        server.post("/generate", body)
    });
    let responses = futures::future::join_all(requests).await;
    let results = futures::future::join_all(responses.into_iter().map(read_sse)).await;
    for events in results {
        let done = events.last().unwrap().json();
        assert_eq!(done["finish_reason"], "length");
        assert_eq!(done["usage"]["completion_tokens"], 24);
    }
}

#[tokio::test]
async fn models_health_ready_and_metrics_endpoints() {
    let server = TestServer::start(Options::default()).await;
    let models: Value = server.client.get(server.url("/v1/models")).send().await.unwrap().json().await.unwrap();
    assert_eq!(models["object"], "list");
    assert_eq!(models["data"][0]["id"], model_name());
    assert_eq!(models["data"][0]["max_model_len"], 512);
    assert_eq!(server.client.get(server.url("/health")).send().await.unwrap().status(), 200);
    assert_eq!(server.client.get(server.url("/ready")).send().await.unwrap().status(), 200);

    read_sse(server.post("/generate", json!({"prompt": "Hello", "max_tokens": 4})).await).await;
    let text = server.client.get(server.url("/metrics")).send().await.unwrap().text().await.unwrap();
    for name in [
        "vllm:num_requests_running",
        "vllm:num_requests_waiting",
        "vllm:kv_cache_usage_perc",
        "vllm:time_to_first_token_seconds_bucket",
        "vllm:inter_token_latency_seconds_bucket",
        "vllm:e2e_request_latency_seconds_bucket",
        "vllm:request_queue_time_seconds_bucket",
        "vllm:request_prefill_time_seconds_bucket",
        "vllm:request_decode_time_seconds_bucket",
        "vllm:request_inference_time_seconds_bucket",
        "vllm:request_time_per_output_token_seconds_bucket",
        "vllm:request_prompt_tokens_bucket",
        "vllm:request_generation_tokens_bucket",
        "vllm:prompt_tokens_total",
        "vllm:generation_tokens_total",
        "vllm:request_success_total",
        "vllm:prefix_cache_queries_total",
        "vllm:prefix_cache_hits_total",
        "rillm_prefix_cache_host_bytes",
        "rillm_prefix_cache_host_budget_bytes",
        "rillm_prefix_cache_host_restores_total",
    ] {
        assert!(text.lines().any(|l| l.starts_with(name)), "missing {name}");
    }
    assert!(server.metric("vllm:generation_tokens_total").await >= 4.0);
    // The per-request histograms add up to the totals (one scrape: nothing else runs).
    let value = |name: &str| -> f64 {
        let line = text.lines().find(|l| l.split(['{', ' ']).next() == Some(name));
        line.and_then(|l| l.rsplit(' ').next()?.parse().ok()).unwrap_or_else(|| panic!("no {name}"))
    };
    assert_eq!(value("vllm:request_generation_tokens_sum"), value("vllm:generation_tokens_total"));
    assert_eq!(value("vllm:request_prompt_tokens_sum"), value("vllm:prompt_tokens_total"));
    let requests = value("vllm:request_prompt_tokens_count");
    assert!(requests >= 1.0 && value("vllm:request_inference_time_seconds_count") == requests);
    assert!(value("vllm:request_inference_time_seconds_sum") >= value("vllm:request_decode_time_seconds_sum"));
    // Every metric says what it is, as vLLM's do: a `# HELP` line beside each `# TYPE`.
    let described: Vec<&str> = text.lines().filter_map(|l| l.strip_prefix("# HELP ")?.split(' ').next()).collect();
    for typed in text.lines().filter_map(|l| l.strip_prefix("# TYPE ")?.split(' ').next()) {
        assert!(described.contains(&typed), "{typed} has no # HELP line");
    }
}

#[tokio::test]
async fn a_prompt_evicted_from_its_slot_comes_back_from_host_memory() {
    let server = TestServer::start(Options { max_running: 1, ..Options::default() }).await;
    // Long enough to be worth saving (slots keep short prompts only in place).
    let prompt = "You are a support agent for a bicycle shop in a small town. Customers ask about repairs, \
                  spare parts, prices, rentals and opening hours. Answer briefly and politely, and never invent a price.";
    let ask = |p: &'static str| server.post("/v1/completions", json!({"prompt": p, "max_tokens": 4}));
    let first: Value = ask(prompt).await.json().await.unwrap();
    let _: Value = ask("Zebras live in Africa and eat grass all day long.").await.json().await.unwrap();
    let again: Value = ask(prompt).await.json().await.unwrap();
    let n = first["usage"]["prompt_tokens"].as_u64().unwrap();
    assert_eq!(first["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
    assert_eq!(again["usage"]["prompt_tokens_details"]["cached_tokens"], n - 1, "{again}");
    assert_eq!(server.metric("rillm_prefix_cache_host_restores_total").await, 1.0);
    assert!(server.metric("rillm_prefix_cache_host_bytes").await > 0.0);
    assert!(server.metric("vllm:prefix_cache_hits_total").await >= (n - 1) as f64);
    assert!(server.metric("vllm:prefix_cache_queries_total").await > (2 * n) as f64, "both prompts and the other one");
}
