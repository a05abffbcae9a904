//! The Gateway API Inference Extension's model-server protocol, on the real model: OpenAI
//! completions and chat, and the gauges its endpoint picker scrapes to route (queued and
//! running requests, KV-cache utilisation, the cache layout for prefix-aware scoring),
//! moving while requests run.

use std::time::Duration;

use serde_json::{json, Value};

mod support;

use support::{read_sse, Options, TestServer};

const RUNNING: &str = "vllm:num_requests_running";
const WAITING: &str = "vllm:num_requests_waiting";
const KV: &str = "vllm:kv_cache_usage_perc";

#[tokio::test]
async fn the_pickers_metrics_are_there_and_move_under_load() {
    let opts = Options { max_running: 2, max_waiting: 8, ctx: 256, ..Options::default() };
    let server = TestServer::start(opts).await;

    // Both OpenAI APIs answer.
    let completion: Value =
        server.post("/v1/completions", json!({"prompt": "Hi", "max_tokens": 2})).await.json().await.unwrap();
    assert_eq!(completion["object"], "text_completion");
    let chat = json!({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2});
    let chat: Value = server.post("/v1/chat/completions", chat).await.json().await.unwrap();
    assert_eq!(chat["object"], "chat.completion");

    // The layout a prefix-aware picker sizes its index with: 16-token blocks over 2 x 256 cells.
    let text = server.client.get(server.url("/metrics")).send().await.unwrap().text().await.unwrap();
    let info = text.lines().find(|l| l.starts_with("vllm:cache_config_info{")).expect("cache_config_info");
    assert!(info.contains("block_size=\"16\"") && info.contains("num_gpu_blocks=\"32\""), "{info}");
    assert!(info.ends_with(" 1"), "{info}");

    // Four long streams on two slots: two run, two wait, KV fills; all scraped mid-flight.
    let streams: Vec<_> = (0..4)
        .map(|i| {
            let (client, url) = (server.client.clone(), server.url("/generate"));
            tokio::spawn(async move {
                let body = json!({"prompt": format!("Story {i}:"), "max_tokens": 48, "ignore_eos": true});
                read_sse(client.post(url).json(&body).send().await.unwrap()).await
            })
        })
        .collect();
    server.wait_metric(RUNNING, Duration::from_secs(20), |v| v == 2.0).await;
    server.wait_metric(WAITING, Duration::from_secs(20), |v| v >= 1.0).await;
    let kv = server.wait_metric(KV, Duration::from_secs(20), |v| v > 0.0).await;
    assert!(kv <= 1.0, "a fraction, as vLLM reports it: {kv}");
    for stream in streams {
        let events = stream.await.unwrap();
        assert_eq!(events.last().unwrap().event, "done");
    }
    for name in [RUNNING, WAITING, KV] {
        server.wait_metric(name, Duration::from_secs(5), |v| v == 0.0).await;
    }
}
