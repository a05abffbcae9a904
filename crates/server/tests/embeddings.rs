//! `/v1/embeddings` on a real embedding model (all-MiniLM-L6-v2, converted from its PyPI
//! wheel at set-up) over real HTTP: vectors against a numpy forward pass of the original
//! safetensors, the openai SDK's calls, every refusal naming its field, a burst answered
//! whole and in order, a dropped request cancelled.

mod support;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::{Options, TestServer};

fn options() -> Options {
    Options { max_running: 16, max_waiting: 256, ..Options::default() }
}

async fn embed(server: &TestServer, body: Value) -> Value {
    let response = server.post("/v1/embeddings", body).await;
    assert_eq!(response.status(), 200);
    response.json().await.unwrap()
}

fn vector(data: &Value) -> Vec<f64> {
    data["embedding"].as_array().expect("floats").iter().map(|x| x.as_f64().expect("a float")).collect()
}

fn cosine(a: &[f64], b: &[f64]) -> f64 {
    let dot: f64 = a.iter().zip(b).map(|(x, y)| x * y).sum();
    dot / (a.iter().map(|x| x * x).sum::<f64>().sqrt() * b.iter().map(|x| x * x).sum::<f64>().sqrt())
}

/// `scripts/bert-reference.py` against the server: 60 varied sentences, one request each
/// and all in one request (packed into shared batches), cosine ≥ 0.999 each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vectors_match_a_numpy_forward_pass_of_the_original_weights() {
    let Some(python) = support::python_with("numpy, tokenizers") else { return };
    let server = TestServer::start_embedding(options()).await;
    let source = rillm_models::embedding_model_for_tests().source_dir;
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../scripts/bert-reference.py");
    for batch in [false, true] {
        let mut command = tokio::process::Command::new(&python);
        command.arg(&script).arg(&source).arg("--compare").arg(server.url("/v1/embeddings"));
        if batch {
            command.arg("--batch");
        }
        let run = tokio::time::timeout(Duration::from_secs(300), command.kill_on_drop(true).output());
        let out = run.await.expect("the reference finishes").expect("runs");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "batch {batch}\n{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
        let summary = stdout.lines().last().unwrap_or_default();
        assert!(summary.starts_with("60 sentences: cosine min 0.99"), "{summary}");
        eprintln!("batch {batch}: {summary}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openai_sdk_embeds_with_base64_and_float() {
    let Some(python) = support::python_with("openai") else { return };
    let server = TestServer::start_embedding(options()).await;
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/sdk/embeddings.py");
    let run = tokio::process::Command::new(&python).arg(&script).arg(&server.base).kill_on_drop(true).output();
    let out = tokio::time::timeout(Duration::from_secs(120), run).await.expect("finishes").expect("runs");
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "stdout:\n{stdout}\nstderr:\n{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_refusal_is_a_400_naming_its_field() {
    let server = TestServer::start_embedding(options()).await;
    let long = "word ".repeat(600);
    let refused = [
        (json!({}), "input"),
        (json!({"input": ""}), "input"),
        (json!({"input": []}), "input"),
        (json!({"input": ["a", ""]}), "input"),
        (json!({"input": ["a", 3]}), "input"),
        (json!({"input": [[1, 2], []]}), "input"),
        (json!({"input": [1, -2]}), "input"),
        (json!({"input": {"text": "a"}}), "input"),
        (json!({"input": [999_999]}), "input"),
        (json!({"input": long}), "input"),
        (json!({"input": "a", "encoding_format": "binary"}), "encoding_format"),
        (json!({"input": "a", "dimensions": 128}), "dimensions"),
        (json!({"input": "a", "dimensions": 0}), "dimensions"),
    ];
    for (body, param) in refused {
        let response = server.post("/v1/embeddings", body.clone()).await;
        assert_eq!(response.status(), 400, "{body}");
        let error: Value = response.json().await.unwrap();
        assert_eq!(error["error"]["param"], param, "{body}: {error}");
        assert_eq!(error["error"]["type"], "invalid_request_error");
    }
    let unknown = server.post("/v1/embeddings", json!({"input": "a", "model": "gpt-4"})).await;
    assert_eq!(unknown.status(), 404);

    // The input over the context is kept by its last 8 tokens when asked.
    let kept = embed(&server, json!({"input": long, "truncate_prompt_tokens": 8})).await;
    assert_eq!(kept["usage"]["prompt_tokens"], 8);
    // The full width is a valid `dimensions`.
    let full = embed(&server, json!({"input": "a", "dimensions": 384})).await;
    assert_eq!(vector(&full["data"][0]).len(), 384);

    // The generation routes say the model does not generate; rerank wants a reranker.
    for (path, body) in [
        ("/v1/chat/completions", json!({"messages": [{"role": "user", "content": "hi"}]})),
        ("/v1/completions", json!({"prompt": "hi"})),
        ("/generate", json!({"prompt": "hi"})),
        ("/v1/rerank", json!({"query": "q", "documents": ["d"]})),
    ] {
        let response = server.post(path, body).await;
        assert_eq!(response.status(), 400, "{path}");
        let error: Value = response.json().await.unwrap();
        assert_eq!(error["error"]["param"], "model", "{path}: {error}");
        assert!(error["error"]["message"].as_str().unwrap().contains("embedding model"), "{error}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn models_and_tokenize_say_the_task_and_width() {
    let server = TestServer::start_embedding(options()).await;
    let models: Value = server.client.get(server.url("/v1/models")).send().await.unwrap().json().await.unwrap();
    let model = &models["data"][0];
    assert_eq!(model["task"], "embed");
    assert_eq!(model["embedding_width"], 384);
    assert_eq!(model["max_model_len"], 512);
    let tokens: Value = server.post("/tokenize", json!({"prompt": "Hello world"})).await.json().await.unwrap();
    assert_eq!(tokens["task"], "embed");
    let embedded = embed(&server, json!({"input": "Hello world"})).await;
    assert_eq!(embedded["usage"]["prompt_tokens"], tokens["count"], "[CLS] hello world [SEP]");
    assert_eq!(tokens["count"], 4);
}

/// 200 single-input requests at once: every one answered 200, each with its own input's
/// vector (the one a single batched request gives for it), none lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_single_input_requests_is_answered_whole_and_in_order() {
    let server = TestServer::start_embedding(options()).await;
    let before = server.metric("rillm_embedding_requests_total").await;
    let texts: Vec<String> = (0..200).map(|i| format!("Sentence number {i} is about topic {}.", i % 7)).collect();
    let batched = embed(&server, json!({"input": texts, "encoding_format": "float"})).await;
    let expected: Vec<Vec<f64>> = batched["data"].as_array().unwrap().iter().map(vector).collect();
    let requests = texts.iter().map(|text| {
        let (client, url) = (server.client.clone(), server.url("/v1/embeddings"));
        let body = json!({"input": text});
        async move {
            let response = client.post(url).json(&body).timeout(Duration::from_secs(120)).send().await.unwrap();
            assert_eq!(response.status(), 200);
            let answer: Value = response.json().await.unwrap();
            vector(&answer["data"][0])
        }
    });
    let answers = futures::future::join_all(requests).await;
    assert_eq!(answers.len(), 200);
    for (i, (answer, expected)) in answers.iter().zip(&expected).enumerate() {
        assert!(cosine(answer, expected) > 0.9999, "request {i} got another input's vector");
    }
    let answered = server.metric("rillm_embedding_requests_total").await - before;
    assert_eq!(answered, 201.0, "200 single requests and the batched one");
}

/// A client that leaves a large request cancels what is not computed yet: a request after
/// it is answered at once, not after the large one's ~20 s of batches.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_large_request_is_cancelled() {
    let server = TestServer::start_embedding(options()).await;
    let before = server.metric("rillm_embedding_requests_total").await;
    let long = "word ".repeat(400);
    let inputs: Vec<&str> = (0..240).map(|_| long.as_str()).collect();
    let left = server
        .client
        .post(server.url("/v1/embeddings"))
        .json(&json!({"input": inputs}))
        .timeout(Duration::from_millis(500))
        .send()
        .await;
    assert!(left.is_err(), "the client gave up before the answer");
    let started = Instant::now();
    embed(&server, json!({"input": "after"})).await;
    let waited = started.elapsed();
    assert!(waited < Duration::from_secs(5), "waited {waited:?}: the dropped request kept the engine busy");
    let answered = server.metric("rillm_embedding_requests_total").await - before;
    assert_eq!(answered, 1.0, "only the second was answered");
}

/// `--pooling last` serves a generating model's last-token states as embeddings (how
/// Qwen3-Embedding-style decoders are served): one vector per input, the same alone as
/// batched beside others, and its generation routes refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_decoder_serves_its_last_token_embeddings_with_pooling_last() {
    let pooling = Some(rillm_engine::Pooling::Last);
    let server = TestServer::start_model(options(), rillm_test_support::model(), pooling).await;
    let texts = ["The cat sat on the mat.", "Interest rates rose in March.", "fn main() {}"];
    let batched = embed(&server, json!({"input": texts, "encoding_format": "float"})).await;
    let vectors: Vec<Vec<f64>> = batched["data"].as_array().unwrap().iter().map(vector).collect();
    assert!(vectors.iter().all(|v| v.len() == 576), "SmolLM2-135M's width");
    assert!(cosine(&vectors[0], &vectors[1]) < 0.9999, "different inputs, different vectors");
    for (text, expected) in texts.iter().zip(&vectors) {
        let alone = embed(&server, json!({"input": text, "encoding_format": "float"})).await;
        assert!(cosine(&vector(&alone["data"][0]), expected) > 0.999, "{text}: alone vs batched");
    }
    let chat = server.post("/v1/chat/completions", json!({"messages": [{"role": "user", "content": "hi"}]})).await;
    assert_eq!(chat.status(), 400);
}

async fn post_many(server: &TestServer, body: Value, n: usize) -> Vec<reqwest::Response> {
    let requests = (0..n).map(|_| {
        let request = server.client.post(server.url("/v1/embeddings")).json(&body).timeout(Duration::from_secs(120));
        async move { request.send().await.unwrap() }
    });
    futures::future::join_all(requests).await
}

/// Full (one running, one waiting), a request is refused at once with a 429, Retry-After
/// and an OpenAI error body, before any answer; the admitted ones are answered whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_server_refuses_with_429_before_answering() {
    let server = TestServer::start_embedding(Options { max_running: 1, max_waiting: 1, ..options() }).await;
    let long = "word ".repeat(300);
    let body = json!({"input": vec![long.as_str(); 16]});
    let (mut answered, mut refused) = (0, 0);
    for response in post_many(&server, body, 8).await {
        match response.status().as_u16() {
            200 => {
                let answer: Value = response.json().await.unwrap();
                assert_eq!(answer["data"].as_array().unwrap().len(), 16);
                answered += 1;
            }
            429 => {
                assert!(response.headers().get("retry-after").is_some());
                let error: Value = response.json().await.unwrap();
                assert_eq!(error["error"]["type"], "rate_limit_error");
                refused += 1;
            }
            other => panic!("unexpected status {other}"),
        }
    }
    assert!(answered >= 2 && refused >= 1, "{answered} answered, {refused} refused");
    assert_eq!(answered + refused, 8);
}

/// With `--max-queue-ms`, a request predicted (from the work queued ahead and the measured
/// rate) to wait well past the bound is refused at once; the first ones are answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_queue_ms_refuses_what_would_wait_too_long() {
    let server = TestServer::start_embedding(Options { max_queue_ms: Some(200), ..options() }).await;
    embed(&server, json!({"input": vec!["a warm-up measures the rate"; 8]})).await;
    let long = "word ".repeat(300);
    let body = json!({"input": vec![long.as_str(); 32]});
    let statuses: Vec<u16> = post_many(&server, body, 8).await.iter().map(|r| r.status().as_u16()).collect();
    let refused = statuses.iter().filter(|&&s| s == 429).count();
    assert!(statuses.contains(&200) && refused >= 4, "{statuses:?}");
    assert!(statuses.iter().all(|&s| s == 200 || s == 429), "{statuses:?}");
}
