//! Bad input gets the right 4xx with an OpenAI-style error naming the field.

mod support;

use serde_json::{json, Value};
use support::{Options, TestServer};

struct Case {
    path: &'static str,
    body: String,
    status: u16,
    /// Expected `error.param`, when the error is about one field.
    param: Option<&'static str>,
}

fn case(path: &'static str, body: Value, status: u16, param: Option<&'static str>) -> Case {
    Case { path, body: body.to_string(), status, param }
}

fn raw(path: &'static str, body: &str, status: u16, param: Option<&'static str>) -> Case {
    Case { path, body: body.to_string(), status, param }
}

fn cases() -> Vec<Case> {
    let msg = json!([{"role": "user", "content": "Hi"}]);
    vec![
        raw("/v1/completions", "{\"prompt\": \"Hi\"", 400, None),
        // A generating model serves no embeddings and scores no pairs.
        case("/v1/embeddings", json!({"input": "Hi"}), 400, Some("model")),
        case("/v1/rerank", json!({"query": "Hi", "documents": ["a"]}), 400, Some("model")),
        raw("/v1/chat/completions", "not json at all", 400, None),
        raw("/generate", "", 400, None),
        raw("/v1/completions", "{\"prompt\": \"Hi\", \"max_tokens\": 2} xyz", 400, None),
        raw("/generate", "{\"prompt\": \"Hi\"}{\"prompt\": \"again\"}", 400, None),
        case("/generate", json!({"prompt": 42}), 400, Some("prompt")),
        case("/generate", json!({"max_tokens": 5}), 400, Some("prompt")),
        case("/generate", json!({"prompt": ""}), 400, Some("prompt")),
        case("/generate", json!({"prompt": "Hi", "max_tokens": -3}), 400, Some("max_tokens")),
        case("/generate", json!({"prompt": "Hi", "max_new_tokens": 0}), 400, Some("max_new_tokens")),
        case("/generate", json!({"prompt": "Hi", "max_tokens": "ten"}), 400, Some("max_tokens")),
        case("/generate", json!({"prompt": "Hi", "temperature": -0.5}), 400, Some("temperature")),
        case("/generate", json!({"prompt": "Hi", "top_p": 0}), 400, Some("top_p")),
        case("/v1/completions", json!({"prompt": "Hi", "top_p": 1.5}), 400, Some("top_p")),
        case("/v1/completions", json!({"prompt": "Hi", "temperature": 9}), 400, Some("temperature")),
        case("/v1/completions", json!({"prompt": "Hi", "n": 0}), 400, Some("n")),
        case("/v1/completions", json!({"prompt": "Hi", "top_k": -7}), 400, Some("top_k")),
        case("/v1/completions", json!({"prompt": ["a", "b"]}), 400, Some("prompt")),
        case("/v1/completions", json!({"prompt": [[]]}), 400, Some("prompt")),
        case("/v1/completions", json!({"prompt": "Hi", "model": "gpt-4"}), 404, Some("model")),
        case("/v1/completions", json!({"prompt": "Hi", "logprobs": 6}), 400, Some("logprobs")),
        case("/v1/completions", json!({"prompt": "word ".repeat(600), "max_tokens": 8}), 400, Some("prompt")),
        // Large enough to be tokenized on the blocking pool: the overflow still comes back.
        case("/v1/completions", json!({"prompt": "word ".repeat(20_000), "max_tokens": 8}), 400, Some("prompt")),
        case("/v1/completions", json!({"prompt": "Hi", "max_tokens": 100000}), 400, Some("prompt")),
        case("/v1/completions", json!({"prompt": "Hi", "stop": 5}), 400, Some("stop")),
        case("/v1/completions", json!({"prompt": "Hi", "stream": "yes"}), 400, Some("stream")),
        case(
            "/v1/completions",
            json!({"prompt": "Hi", "stream": true, "stream_options": {"include_usage": true, "chunk_usage": true}}),
            400,
            Some("stream_options.chunk_usage"),
        ),
        case(
            "/v1/chat/completions",
            json!({"messages": msg, "stream": true, "stream_options": {"usage": 1}}),
            400,
            Some("stream_options.usage"),
        ),
        // Options for a stream on a request that is not streamed, as OpenAI and vLLM refuse.
        case(
            "/v1/completions",
            json!({"prompt": "Hi", "stream_options": {"include_usage": true}}),
            400,
            Some("stream_options"),
        ),
        case("/v1/completions", json!({"prompt": "Hi", "presence_penalty": 2.5}), 400, Some("presence_penalty")),
        case("/v1/chat/completions", json!({"messages": msg, "frequency_penalty": -3}), 400, Some("frequency_penalty")),
        case("/generate", json!({"prompt": "Hi", "repetition_penalty": 0}), 400, Some("repetition_penalty")),
        case("/v1/completions", json!({"prompt": "Hi", "min_p": 1.5}), 400, Some("min_p")),
        case("/v1/chat/completions", json!({"messages": msg, "logit_bias": {"cat": 5}}), 400, Some("logit_bias")),
        case("/v1/completions", json!({"prompt": "Hi", "logit_bias": {"42": 150}}), 400, Some("logit_bias")),
        // Only the engine knows the vocabulary: refused before any work, naming the field.
        case("/v1/chat/completions", json!({"messages": msg, "logit_bias": {"999999": 1}}), 400, Some("logit_bias")),
        case("/generate", json!({"prompt": "Hi", "temperature": "hot"}), 400, Some("temperature")),
        case("/v1/completions", json!({"prompt": "Hi", "min_tokens": 17}), 400, Some("min_tokens")),
        case("/generate", json!({"prompt": "Hi", "max_new_tokens": 4, "min_tokens": 5}), 400, Some("min_tokens")),
        case("/v1/chat/completions", json!({"messages": msg, "min_tokens": -1}), 400, Some("min_tokens")),
        case("/v1/chat/completions", json!({"messages": msg, "stop_token_ids": [-4]}), 400, Some("stop_token_ids")),
        case("/v1/completions", json!({"prompt": "Hi", "stop_token_ids": [1, 999999]}), 400, Some("stop_token_ids")),
        case(
            "/v1/chat/completions",
            json!({"messages": msg, "continue_final_message": true, "add_generation_prompt": true}),
            400,
            Some("continue_final_message"),
        ),
        case(
            "/v1/chat/completions",
            json!({"messages": msg, "chat_template_kwargs": {"bos_token": "x"}}),
            400,
            Some("chat_template_kwargs.bos_token"),
        ),
        case(
            "/v1/chat/completions",
            json!({"messages": msg, "add_generation_prompt": "yes"}),
            400,
            Some("add_generation_prompt"),
        ),
        case("/tokenize", json!({"prompt": "Hi", "add_generation_prompt": false}), 400, Some("prompt")),
        case(
            "/v1/completions",
            json!({"prompt": "Hi", "truncate_prompt_tokens": 0}),
            400,
            Some("truncate_prompt_tokens"),
        ),
        case(
            "/v1/chat/completions",
            json!({"messages": msg, "include_stop_str_in_output": 1}),
            400,
            Some("include_stop_str_in_output"),
        ),
        case("/v1/completions", json!({"prompt": "Hi", "allowed_token_ids": [999999]}), 400, Some("allowed_token_ids")),
        case(
            "/v1/chat/completions",
            json!({"messages": msg, "skip_special_tokens": false}),
            400,
            Some("skip_special_tokens"),
        ),
        case("/v1/completions", json!({"prompt": "Hi", "priority": 3}), 400, Some("priority")),
        case("/v1/chat/completions", json!({"messages": msg, "seed": "7"}), 400, Some("seed")),
        case("/v1/chat/completions", json!({"messages": []}), 400, Some("messages")),
        case("/v1/chat/completions", json!({"messages": "Hi"}), 400, Some("messages")),
        case(
            "/v1/chat/completions",
            json!({"messages": [{"role": "wizard", "content": "Hi"}]}),
            400,
            Some("messages[0].role"),
        ),
        case("/v1/chat/completions", json!({"messages": [{"content": "Hi"}]}), 400, Some("messages[0].role")),
        case(
            "/v1/chat/completions",
            json!({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}),
            400,
            Some("messages[0].content[0]"),
        ),
        case("/v1/chat/completions", json!({"messages": msg, "n": 99}), 400, Some("n")),
        case(
            "/v1/chat/completions",
            json!({"messages": msg, "max_completion_tokens": 0}),
            400,
            Some("max_completion_tokens"),
        ),
        case("/v1/chat/completions", json!({"messages": msg, "model": "llama-70b"}), 404, Some("model")),
        case(
            "/v1/chat/completions",
            json!({"messages": msg, "tools": [{"type": "function"}]}),
            400,
            Some("tools[0].function"),
        ),
        case("/v1/chat/completions", json!({"messages": msg, "max_tokens": 1000}), 400, Some("messages")),
        case("/v1/responses", json!({}), 400, Some("input")),
        case("/v1/responses", json!({"input": []}), 400, Some("input")),
        case(
            "/v1/responses",
            json!({"input": "Hi", "previous_response_id": "resp_1"}),
            400,
            Some("previous_response_id"),
        ),
        case("/v1/responses", json!({"input": "Hi", "tools": [{"type": "web_search"}]}), 400, Some("tools[0].type")),
        case("/v1/responses", json!({"input": "Hi", "tools": [{"type": "function"}]}), 400, Some("tools[0].name")),
        case(
            "/v1/responses",
            json!({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]}),
            400,
            Some("input[0].content[0].type"),
        ),
        case("/v1/responses", json!({"input": [{"type": "item_reference", "id": "m"}]}), 400, Some("input[0].type")),
        case(
            "/v1/responses",
            json!({"input": "Hi", "text": {"format": {"type": "xml"}}}),
            400,
            Some("text.format.type"),
        ),
        case("/v1/responses", json!({"input": "Hi", "include": ["file_search_call.results"]}), 400, Some("include[0]")),
        case("/v1/responses", json!({"input": "Hi", "top_logprobs": 50}), 400, Some("top_logprobs")),
        case("/v1/responses", json!({"input": "Hi", "max_output_tokens": 0}), 400, Some("max_output_tokens")),
        case(
            "/v1/responses",
            json!({"input": "Hi", "reasoning": {"effort": "extreme"}}),
            400,
            Some("reasoning.effort"),
        ),
        case("/v1/responses", json!({"input": "Hi", "reasoning": {"budget": 3}}), 400, Some("reasoning.budget")),
        case("/v1/responses", json!({"input": "Hi", "truncation": "auto"}), 400, Some("truncation")),
        case("/v1/responses", json!({"input": "Hi", "prompt": {"id": "p"}}), 400, Some("prompt")),
        case("/v1/responses", json!({"input": "Hi", "model": "gpt-5"}), 404, Some("model")),
        case("/v1/responses", json!({"input": "Hi", "max_output_tokens": 1000}), 400, Some("input")),
        case("/tokenize", json!({}), 400, Some("prompt")),
        case("/tokenize", json!({"prompt": "Hi", "messages": msg}), 400, Some("messages")),
        case("/tokenize", json!({"messages": [{"role": "wizard", "content": "Hi"}]}), 400, Some("messages[0].role")),
        case("/tokenize", json!({"prompt": "Hi", "model": "gpt-4"}), 404, Some("model")),
        case("/detokenize", json!({"tokens": [1, -1]}), 400, Some("tokens[1]")),
        case("/detokenize", json!({"tokens": [4_000_000_000u64]}), 400, Some("tokens")),
        case("/detokenize", json!({"tokens": "abc"}), 400, Some("tokens")),
    ]
}

#[tokio::test]
async fn every_bad_input_gets_its_4xx_and_an_openai_error_body() {
    let server = TestServer::start(Options::default()).await;
    let cases = cases();
    assert!(cases.len() >= 20);
    for c in cases {
        let r = server
            .client
            .post(server.url(c.path))
            .header("content-type", "application/json")
            .body(c.body.clone())
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        let v: Value = r.json().await.unwrap_or_else(|e| panic!("{} {}: non-JSON error body: {e}", c.path, c.body));
        assert_eq!(status, c.status, "{} {} -> {v}", c.path, c.body);
        let error = &v["error"];
        assert!(error["message"].as_str().is_some_and(|m| !m.is_empty()), "{v}");
        assert!(error["type"].is_string(), "{v}");
        assert!(error.get("param").is_some() && error.get("code").is_some(), "{v}");
        if let Some(param) = c.param {
            assert_eq!(error["param"], param, "{} {} -> {v}", c.path, c.body);
        }
    }
    // Nothing leaked: no request is left running.
    assert_eq!(server.metric("vllm:num_requests_running").await, 0.0);
}

#[tokio::test]
async fn oversized_body_is_413_unknown_path_404() {
    let server = TestServer::start(Options::default()).await;
    let huge = json!({"prompt": "x".repeat(2 << 20)});
    let r = server.post("/v1/completions", huge).await;
    assert_eq!(r.status(), 413);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["code"], "request_too_large");
    let r = server.client.get(server.url("/v2/nothing")).send().await.unwrap();
    assert_eq!(r.status(), 404);
    assert!(r.json::<Value>().await.unwrap()["error"]["message"].is_string());
    // A known path with the wrong method: 405, with the same JSON error shape.
    for (method, path) in [
        (reqwest::Method::GET, "/v1/completions"),
        (reqwest::Method::DELETE, "/generate"),
        (reqwest::Method::POST, "/health"),
    ] {
        let r = server.client.request(method.clone(), server.url(path)).send().await.unwrap();
        assert_eq!(r.status(), 405, "{method} {path}");
        let v: Value = r.json().await.unwrap_or_else(|e| panic!("{method} {path}: non-JSON 405 body: {e}"));
        assert_eq!(v["error"]["code"], "method_not_allowed", "{v}");
    }
}

#[tokio::test]
async fn api_key_is_required_on_generation_endpoints_only() {
    let mut opts = Options::default();
    opts.server.api_key = Some("s3cret".into());
    let server = TestServer::start(opts).await;
    let body = json!({"prompt": "Hi", "max_tokens": 2});
    for (auth, status) in
        [(None, 401), (Some("Bearer wrong"), 401), (Some("s3cret"), 401), (Some("Bearer s3cret"), 200)]
    {
        let mut request = server.client.post(server.url("/v1/completions")).json(&body);
        if let Some(auth) = auth {
            request = request.header("authorization", auth);
        }
        let r = request.send().await.unwrap();
        assert_eq!(r.status(), status, "{auth:?}");
        if status == 401 {
            assert_eq!(r.json::<Value>().await.unwrap()["error"]["code"], "invalid_api_key");
        }
    }
    assert_eq!(server.client.get(server.url("/v1/models")).send().await.unwrap().status(), 401);
    assert_eq!(server.client.get(server.url("/health")).send().await.unwrap().status(), 200);
    assert_eq!(server.client.get(server.url("/metrics")).send().await.unwrap().status(), 200);
}
