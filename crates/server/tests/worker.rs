//! What a router (sglang-router, vllm-router) asks of a worker, on the real model: the
//! registration probes, the load, the cache flush, and the fields it adds to every request.

use serde_json::{json, Value};

mod support;

use support::{Options, TestServer};

async fn get(server: &TestServer, path: &str) -> Value {
    let response = server.client.get(server.url(path)).send().await.unwrap();
    assert_eq!(response.status(), 200, "{path}");
    response.json().await.unwrap()
}

fn cached(reply: &Value) -> u64 {
    reply["usage"]["prompt_tokens_details"]["cached_tokens"].as_u64().expect("cached_tokens")
}

#[tokio::test]
async fn a_router_registers_reads_the_load_and_flushes_the_prefix_cache() {
    let opts = Options { max_running: 2, ctx: 512, ..Options::default() };
    let server = TestServer::start(opts).await;

    // Registration: the name the router files the worker under, both spellings.
    let info = get(&server, "/server_info").await;
    let models = get(&server, "/v1/models").await;
    assert_eq!(info["served_model_name"], models["data"][0]["id"]);
    assert_eq!((info["max_running_requests"].as_u64(), info["context_length"].as_u64()), (Some(2), Some(512)));
    assert_eq!(get(&server, "/get_server_info").await, info);
    assert_eq!(get(&server, "/model_info").await["is_generation"], true);
    assert_eq!(get(&server, "/get_model_info").await["is_generation"], true);
    let load = get(&server, "/get_load").await;
    assert_eq!((load[0]["num_reqs"].as_u64(), load[0]["num_tokens"].as_u64()), (Some(0), Some(0)), "{load}");

    // What sglang-router sends: its fields, `model: "unknown"`; the prefix is cached.
    let system = "You are the assistant of a shop that sells bicycles, helmets and lamps. ".repeat(4);
    let routed = |question: &str| {
        json!({
            "messages": [{"role": "system", "content": system}, {"role": "user", "content": question}],
            "model": "unknown", "max_completion_tokens": 4, "logprobs": false, "stream": false,
            "no_stop_trim": false, "ignore_eos": false, "continue_final_message": false,
            "skip_special_tokens": true, "separate_reasoning": true, "stream_reasoning": true,
            "return_hidden_states": false,
        })
    };
    let first: Value = server.post("/v1/chat/completions", routed("Hi")).await.json().await.unwrap();
    assert_eq!(cached(&first), 0, "{first}");
    let again: Value = server.post("/v1/chat/completions", routed("Hello")).await.json().await.unwrap();
    assert!(cached(&again) >= 60, "the system prompt comes from the cache: {again}");

    // A flush drops it: the next request prefills it again.
    let flushed = server.post("/flush_cache", json!({})).await;
    assert_eq!(flushed.status(), 200);
    let flushed: Value = flushed.json().await.unwrap();
    assert_eq!(flushed["slots_cleared"], 1, "{flushed}");
    assert_eq!(flushed["running_kept"], 0, "{flushed}");
    let cold: Value = server.post("/v1/chat/completions", routed("Hey")).await.json().await.unwrap();
    assert_eq!(cached(&cold), 0, "{cold}");
}

#[tokio::test]
async fn no_stop_trim_keeps_the_stop_string_and_other_values_of_default_only_fields_are_refused() {
    let server = TestServer::start(Options::default()).await;
    let body = |extra: Value| {
        let mut body = json!({"prompt": "1, 2, 3, 4,", "max_tokens": 12, "stop": [" 6"], "temperature": 0});
        body.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        body
    };
    let trimmed: Value =
        server.post("/v1/completions", body(json!({"no_stop_trim": false}))).await.json().await.unwrap();
    let kept: Value = server.post("/v1/completions", body(json!({"no_stop_trim": true}))).await.json().await.unwrap();
    let (trimmed, kept) =
        (trimmed["choices"][0]["text"].as_str().unwrap(), kept["choices"][0]["text"].as_str().unwrap());
    assert!(!trimmed.contains(" 6") && kept.ends_with(" 6"), "{trimmed:?} / {kept:?}");

    for (field, value) in [("return_hidden_states", json!(true)), ("separate_reasoning", json!(false))] {
        let refused = server.post("/v1/completions", body(json!({field: value}))).await;
        assert_eq!(refused.status(), 400, "{field}");
        let error: Value = refused.json().await.unwrap();
        assert_eq!(error["error"]["param"], field);
    }
    let sglang = server.post("/generate", json!({"text": "Hi", "sampling_params": {"max_new_tokens": 4}})).await;
    assert_eq!(sglang.status(), 400);
    assert_eq!(sglang.json::<Value>().await.unwrap()["error"]["param"], "text");
}
