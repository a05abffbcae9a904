//! `/tokenize` and `/detokenize` on the real model: counts agree with what generation
//! reports, and ids round-trip to text.

mod support;

use serde_json::{json, Value};
use support::{Options, TestServer};

async fn post_json(server: &TestServer, path: &str, body: Value) -> Value {
    let r = server.post(path, body).await;
    assert_eq!(r.status(), 200, "{path}");
    r.json().await.unwrap()
}

#[tokio::test]
async fn token_counts_match_generation_and_ids_round_trip() {
    let server = TestServer::start(Options::default()).await;
    let prompt = "The quick brown fox jumps over the lazy dog.";
    let t = post_json(&server, "/tokenize", json!({"prompt": prompt})).await;
    let tokens = t["tokens"].as_array().unwrap();
    assert_eq!(t["count"], tokens.len());
    assert_eq!(t["max_model_len"], 512);
    let done = post_json(&server, "/v1/completions", json!({"prompt": prompt, "max_tokens": 1})).await;
    assert_eq!(done["usage"]["prompt_tokens"], t["count"], "the count generation sees");

    let messages = json!([{"role": "system", "content": "Be brief."}, {"role": "user", "content": prompt}]);
    let chat = post_json(&server, "/tokenize", json!({"messages": messages})).await;
    let done = post_json(&server, "/v1/chat/completions", json!({"messages": messages, "max_tokens": 1})).await;
    assert_eq!(done["usage"]["prompt_tokens"], chat["count"]);
    assert!(chat["count"].as_u64() > t["count"].as_u64(), "the template adds tokens");

    let bare = post_json(&server, "/tokenize", json!({"prompt": prompt, "add_special_tokens": false})).await;
    assert!(bare["count"].as_u64() <= t["count"].as_u64());
    let text = post_json(&server, "/detokenize", json!({"tokens": bare["tokens"]})).await;
    assert_eq!(text["prompt"], prompt);
}
