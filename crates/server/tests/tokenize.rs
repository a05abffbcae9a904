//! `/tokenize` and `/detokenize` on the real model: counts agree with what generation
//! reports (vLLM's chat layout fields included), and ids round-trip to text.

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

#[tokio::test]
async fn a_begun_assistant_turn_is_continued_and_tokenizes_as_generation_sees_it() {
    let server = TestServer::start(Options::default()).await;
    let begun = "The capital of France is";
    let messages = json!([
        {"role": "user", "content": "What is the capital of France?"},
        {"role": "assistant", "content": begun},
    ]);
    let layouts = [
        json!({}),
        json!({"add_generation_prompt": false}),
        json!({"add_generation_prompt": false, "continue_final_message": true}),
        json!({"chat_template_kwargs": {"enable_thinking": false}}),
    ];
    let mut counts = Vec::new();
    for layout in &layouts {
        let mut body = json!({"messages": messages, "max_tokens": 6, "temperature": 0});
        body.as_object_mut().unwrap().extend(layout.as_object().unwrap().clone());
        let tokens = post_json(&server, "/tokenize", body.clone()).await;
        let done = post_json(&server, "/v1/chat/completions", body).await;
        assert_eq!(done["usage"]["prompt_tokens"], tokens["count"], "{layout}");
        counts.push(tokens["count"].as_u64().unwrap());
        if layout.get("continue_final_message").is_some() {
            // The prompt ends with the begun turn itself, and the reply goes on from it.
            let ids: Vec<u64> = tokens["tokens"].as_array().unwrap().iter().map(|t| t.as_u64().unwrap()).collect();
            let tail = post_json(&server, "/detokenize", json!({"tokens": ids[ids.len() - 5..]})).await;
            assert!(tail["prompt"].as_str().unwrap().ends_with(" France is"), "{tail}");
            let reply = done["choices"][0]["message"]["content"].as_str().unwrap();
            assert!(reply.contains("Paris"), "{reply:?}");
        }
    }
    // Opening the assistant's turn adds tokens; leaving the last one open drops its end.
    assert!(counts[0] > counts[1] && counts[1] > counts[2], "{counts:?}");
    assert_eq!(counts[3], counts[0], "a variable this template does not read changes nothing");
}
