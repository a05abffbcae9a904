//! `rillm bench` on an embedding server: `rillm serve --model all-minilm-l6-v2` (the name
//! resolves to the converted GGUF) loaded with batches of inputs, every input answered and
//! counted, the figures in the result and the summary.

use std::process::{Command, Stdio};

mod support;

use support::{serial, Server, BIN};

#[test]
fn the_bench_measures_an_embedding_server_by_inputs() {
    let _g = serial();
    rillm_models::embedding_model_for_tests();
    let server = Server::start(std::path::Path::new(BIN), &["--model", "all-minilm-l6-v2", "--max-running", "16"]);
    let url = server.url("/v1/embeddings");
    let dir = tempfile::tempdir().expect("a temp dir");
    let out = dir.path().join("embed.json");
    let run = Command::new(BIN)
        .args(["bench", "--url", &url, "--endpoint", "embeddings", "--batch-size", "4", "--input-tokens", "40"])
        .args(["--requests", "24", "--concurrency", "4", "--output"])
        .arg(&out)
        .stderr(Stdio::null())
        .output()
        .unwrap();
    assert!(run.status.success());
    let summary = String::from_utf8_lossy(&run.stdout);
    assert!(summary.contains("inputs ") && summary.contains(" /s"), "{summary}");
    let result: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    assert_eq!(result["completed"], 24, "{}", result["limits"]);
    assert_eq!(result["protocol"], "embeddings");
    for request in result["requests"].as_array().unwrap() {
        assert_eq!(request["content_events"], 4, "four vectors per request");
        let tokens = request["prompt_tokens"].as_u64().unwrap();
        assert!((4 * 40..=4 * 50).contains(&tokens), "four inputs of about 40 tokens: {tokens}");
        let (first, whole) = (request["ttft_ms"].as_f64().unwrap(), request["e2e_ms"].as_f64().unwrap());
        assert!(first <= whole && whole - first < 50.0, "one answer: ttft {first} ms, e2e {whole} ms");
    }
    assert!(result["prompt_tokens_per_s"].as_f64().unwrap() > 0.0);
}
