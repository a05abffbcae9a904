//! Prompt scoring (`echo`) and `n` choices on the real model over loopback HTTP: the
//! scores a prompt gets are the logprobs generation reported for the same tokens; `n`
//! choices share one prefill, stream with their index and add up their usage; every 400
//! names its field.

mod support;

use serde_json::{json, Value};
use support::{read_sse, Options, TestServer};

fn opts() -> Options {
    Options { max_running: 4, max_waiting: 16, ctx: 512, ..Options::default() }
}

async fn post_json(server: &TestServer, path: &str, body: Value) -> Value {
    let response = server.post(path, body.clone()).await;
    assert_eq!(response.status(), 200, "{body}");
    response.json().await.expect("JSON")
}

fn floats(v: &Value) -> Vec<Option<f64>> {
    v.as_array().expect("array").iter().map(Value::as_f64).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_echoed_prompt_is_scored_as_generation_scored_the_same_tokens() {
    let server = TestServer::start(opts()).await;
    // Generate greedily with logprobs, keeping the token ids.
    let prompt = "The three primary colors are";
    let events = read_sse(
        server.post("/generate", json!({"prompt": prompt, "max_tokens": 12, "logprobs": 1, "ignore_eos": true})).await,
    )
    .await;
    let mut generated: Vec<(u64, f64)> = Vec::new();
    for event in events.iter().filter(|e| e.event == "message") {
        for entry in event.json()["logprobs"].as_array().expect("logprobs") {
            generated.push((entry["token_id"].as_u64().expect("id"), entry["logprob"].as_f64().expect("lp")));
        }
    }
    assert!(generated.len() >= 8, "{generated:?}");
    // Score prompt + those tokens as one token-id prompt.
    let tokenized = post_json(&server, "/tokenize", json!({"prompt": prompt})).await;
    let mut ids: Vec<u64> = tokenized["tokens"].as_array().expect("tokens").iter().filter_map(Value::as_u64).collect();
    let prompt_len = ids.len();
    ids.extend(generated.iter().map(|&(id, _)| id));
    let scored = post_json(
        &server,
        "/v1/completions",
        json!({"prompt": ids, "max_tokens": 0, "echo": true, "logprobs": 1, "temperature": 0}),
    )
    .await;
    let choice = &scored["choices"][0];
    assert_eq!(choice["finish_reason"], "length");
    assert_eq!(scored["usage"]["completion_tokens"], 0);
    assert_eq!(scored["usage"]["prompt_tokens"].as_u64(), Some(ids.len() as u64));
    let lp = &choice["logprobs"];
    let token_logprobs = floats(&lp["token_logprobs"]);
    assert_eq!(token_logprobs.len(), ids.len(), "one entry per prompt token, nothing generated");
    assert_eq!(token_logprobs[0], None, "nothing predicts the first token");
    assert_eq!(lp["top_logprobs"][0], Value::Null);
    let tokens: String = lp["tokens"].as_array().expect("tokens").iter().filter_map(Value::as_str).collect();
    assert_eq!(tokens, choice["text"].as_str().expect("text"), "the echoed text is its tokens");
    let mut worst: f64 = 0.0;
    for (i, &(_, generated_logprob)) in generated.iter().enumerate() {
        let at = prompt_len + i;
        let echoed = token_logprobs[at].expect("scored");
        worst = worst.max((echoed - generated_logprob).abs());
        // A greedy token is the most likely at its position, scored as a prompt too.
        let top = lp["top_logprobs"][at].as_object().expect("top");
        let best = top.values().filter_map(Value::as_f64).fold(f64::NEG_INFINITY, f64::max);
        assert!((best - echoed).abs() < 1e-4, "position {at}: {top:?} vs {echoed}");
    }
    // Prefill and decode round differently in a batch; a small tolerance, no more.
    assert!(worst < 0.05, "echo and generation disagree by up to {worst}");
    eprintln!("largest difference between echo and generation logprobs: {worst:.5}");

    // Streamed: the prompt comes first, as one chunk with its scores, then generation.
    let events = read_sse(
        server
            .post(
                "/v1/completions",
                json!({"prompt": prompt, "max_tokens": 3, "echo": true, "logprobs": 0, "stream": true,
                       "temperature": 0}),
            )
            .await,
    )
    .await;
    let chunks: Vec<Value> = events.iter().filter(|e| e.data != "[DONE]").map(|e| e.json()).collect();
    let first = &chunks[0]["choices"][0];
    assert_eq!(first["text"], prompt, "{first}");
    assert_eq!(first["logprobs"]["token_logprobs"][0], Value::Null);
    let text: String = chunks.iter().filter_map(|c| c["choices"][0]["text"].as_str()).collect();
    assert!(text.starts_with(prompt) && text.len() > prompt.len(), "{text:?}");

    // Echo without logprobs scores nothing: the prompt as sent (token ids decoded), then
    // the completion; computed once, it is a prefix cache hit the second time. The second
    // and third requests both reuse the first one's prompt and compute its tail in the same
    // shape, so they answer the same to the token (the first, cold, may part from them at
    // a near-tie).
    let plain = json!({"prompt": prompt, "max_tokens": 4, "echo": true, "temperature": 0});
    let first = post_json(&server, "/v1/completions", plain.clone()).await;
    let again = post_json(&server, "/v1/completions", plain.clone()).await;
    let third = post_json(&server, "/v1/completions", plain).await;
    let text = again["choices"][0]["text"].as_str().expect("text");
    for reply in [&first, &again] {
        let text = reply["choices"][0]["text"].as_str().expect("text");
        assert!(text.starts_with(prompt) && text.len() > prompt.len(), "{reply}");
        assert!(reply["choices"][0]["logprobs"].is_null());
    }
    assert_eq!(third["choices"][0]["text"], text);
    assert!(again["usage"]["prompt_tokens_details"]["cached_tokens"].as_u64() > Some(0), "{again}");
    let by_ids =
        post_json(&server, "/v1/completions", json!({"prompt": tokenized["tokens"], "max_tokens": 0, "echo": true}))
            .await;
    assert_eq!(by_ids["choices"][0]["text"], prompt);
    assert_eq!(by_ids["usage"]["completion_tokens"], 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn n_choices_share_one_prefill_and_each_ends_on_its_own() {
    let server = TestServer::start(opts()).await;
    let prompt = "Write one sentence about a lighthouse keeper who collects";
    let computed_before = server.metric("rillm_prompt_tokens_computed_total").await;
    let body = json!({"prompt": prompt, "max_tokens": 12, "n": 4, "temperature": 1.0, "seed": 11});
    let whole = post_json(&server, "/v1/completions", body.clone()).await;
    let computed = server.metric("rillm_prompt_tokens_computed_total").await - computed_before;
    let usage = &whole["usage"];
    let prompt_tokens = usage["prompt_tokens"].as_f64().expect("prompt_tokens");
    assert_eq!(computed, prompt_tokens, "four choices, one prefill");
    let choices = whole["choices"].as_array().expect("choices");
    let indexes: Vec<u64> = choices.iter().filter_map(|c| c["index"].as_u64()).collect();
    assert_eq!(indexes, [0, 1, 2, 3]);
    let texts: Vec<&str> = choices.iter().filter_map(|c| c["text"].as_str()).collect();
    let distinct: std::collections::HashSet<&&str> = texts.iter().collect();
    assert!(distinct.len() >= 2, "each choice samples on its own: {texts:?}");
    assert!(choices.iter().all(|c| c["finish_reason"] == "length" || c["finish_reason"] == "stop"));
    assert!(usage["completion_tokens"].as_u64().expect("n") > 12, "summed over the choices: {usage}");
    // A request seed makes the choices reproducible: the second and third requests both
    // reuse the first one's prompt and compute the same rows, so they sample the same (the
    // first computed its prompt cold, in another shape, and may part from them where two
    // tokens were all but tied).
    let texts_of = |reply: &Value| -> Vec<String> {
        reply["choices"]
            .as_array()
            .expect("choices")
            .iter()
            .filter_map(|c| c["text"].as_str().map(str::to_string))
            .collect()
    };
    let again = texts_of(&post_json(&server, "/v1/completions", body.clone()).await);
    let third = texts_of(&post_json(&server, "/v1/completions", body).await);
    assert_eq!(third, again);

    // Streamed chat: every chunk names its choice; each choice opens, and ends, once.
    let events = read_sse(
        server
            .post(
                "/v1/chat/completions",
                json!({"messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 8, "n": 3,
                       "stream": true, "stream_options": {"include_usage": true}}),
            )
            .await,
    )
    .await;
    assert_eq!(events.iter().filter(|e| e.data == "[DONE]").count(), 1);
    let chunks: Vec<Value> = events.iter().filter(|e| e.data != "[DONE]").map(|e| e.json()).collect();
    let mut roles = [0; 3];
    let mut finishes = [0; 3];
    for chunk in &chunks {
        for choice in chunk["choices"].as_array().expect("choices") {
            let i = choice["index"].as_u64().expect("index") as usize;
            roles[i] += usize::from(choice["delta"]["role"] == "assistant");
            finishes[i] += usize::from(!choice["finish_reason"].is_null());
        }
    }
    assert_eq!((roles, finishes), ([1; 3], [1; 3]));
    let usage = &chunks.last().expect("usage chunk")["usage"];
    assert!(usage["completion_tokens"].as_u64().expect("n") >= 3, "{usage}");

    // Each choice has its own constraint matcher, and its own log-probabilities.
    let constrained = post_json(
        &server,
        "/v1/chat/completions",
        json!({"messages": [{"role": "user", "content": "Describe a cat as JSON."}], "n": 2, "temperature": 1,
               "seed": 4, "max_tokens": 60, "response_format": {"type": "json_object"}, "logprobs": true}),
    )
    .await;
    for choice in constrained["choices"].as_array().expect("choices") {
        let text = choice["message"]["content"].as_str().expect("content");
        if choice["finish_reason"] == "stop" {
            let parsed: Value = serde_json::from_str(text).unwrap_or_else(|e| panic!("{text:?}: {e}"));
            assert!(parsed.is_object(), "{text}");
        }
        let tokens: String = choice["logprobs"]["content"]
            .as_array()
            .expect("logprobs")
            .iter()
            .filter_map(|e| e["token"].as_str())
            .collect();
        assert_eq!(tokens, text, "a choice's logprobs are its own tokens");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn choices_and_scoring_refusals_are_400s_naming_the_field() {
    let server = TestServer::start(opts()).await;
    let completion = |extra: Value| {
        let mut body = json!({"prompt": "hi", "max_tokens": 2});
        body.as_object_mut().expect("object").extend(extra.as_object().expect("object").clone());
        ("/v1/completions", body)
    };
    let cases = [
        (completion(json!({"n": 0})), "n"),
        (completion(json!({"n": 5})), "n"),
        (completion(json!({"max_tokens": 0})), "max_tokens"),
        (completion(json!({"prompt": [1, -2]})), "prompt"),
        (completion(json!({"prompt": [1, 4_000_000]})), "prompt"),
        (completion(json!({"prompt": [[1, 2], [3]]})), "prompt"),
        (("/v1/chat/completions", json!({"messages": [{"role": "user", "content": "hi"}], "echo": true})), "echo"),
        (("/v1/chat/completions", json!({"messages": [{"role": "user", "content": "hi"}], "n": 9})), "n"),
    ];
    for ((path, body), param) in cases {
        let response = server.post(path, body.clone()).await;
        assert_eq!(response.status(), 400, "{body}");
        let error: Value = response.json().await.expect("JSON");
        assert_eq!(error["error"]["param"], param, "{body}: {error}");
    }
    // A tokenizer-info probe, as lm-evaluation-harness's remote tokenizer sends first.
    let info: Value = reqwest::get(server.url("/tokenizer_info")).await.expect("GET").json().await.expect("JSON");
    assert!(info["eos_token"].is_string() && info["chat_template"].is_string(), "{info}");
}
