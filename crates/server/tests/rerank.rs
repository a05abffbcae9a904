//! `/v1/rerank` on a cross-encoder over real HTTP. No cross-encoder ships on PyPI, so the
//! test makes a tiny random-weight one (`scripts/make-tiny-reranker.py`, MiniLM's
//! tokenizer), converts it as the embedding model is converted, and checks rillm's scores
//! and order against a numpy forward pass of the same weights.

mod support;

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{json, Value};
use support::{Options, TestServer};

fn script(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../scripts").join(name)
}

/// The tiny cross-encoder's folder and its F32 GGUF, made in `dir`.
fn make_reranker(python: &str, dir: &Path) -> (PathBuf, PathBuf) {
    let tokenizer = rillm_models::embedding_model_for_tests().source_dir;
    let (folder, gguf) = (dir.join("tiny-reranker"), dir.join("tiny-reranker.gguf"));
    let made = std::process::Command::new(python)
        .arg(script("make-tiny-reranker.py"))
        .arg(&tokenizer)
        .arg(&folder)
        .status()
        .expect("python runs");
    assert!(made.success(), "make-tiny-reranker.py failed");
    let converted = std::process::Command::new(python)
        .arg(script("bert-to-gguf.py"))
        .arg(&folder)
        .arg(&gguf)
        .args(["--outtype", "f32"])
        .status()
        .expect("python runs");
    assert!(converted.success(), "bert-to-gguf.py failed");
    (folder, gguf)
}

async fn reranker() -> Option<(TestServer, PathBuf, tempfile::TempDir)> {
    let python = support::python_with("numpy, tokenizers, gguf")?;
    let dir = tempfile::tempdir().unwrap();
    let (folder, gguf) = make_reranker(&python, dir.path());
    let server = TestServer::start_model(Options { max_running: 16, ..Options::default() }, gguf, None).await;
    Some((server, folder, dir))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scores_and_order_match_a_numpy_forward_pass() {
    let Some((server, folder, _dir)) = reranker().await else { return };
    let python = support::python_with("numpy, tokenizers").expect("checked above");
    let run = tokio::process::Command::new(&python)
        .arg(script("bert-reference.py"))
        .arg(&folder)
        .arg("--rerank")
        .arg(server.url("/v1/rerank"))
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(300), run).await.expect("finishes").expect("runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    eprintln!("{}", stdout.lines().last().unwrap_or_default());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rerank_api_in_jinas_and_cohere_s_shape() {
    let Some((server, _folder, _dir)) = reranker().await else { return };
    let documents =
        json!(["Paris is the capital of France.", {"text": "Bananas are berries."}, "Rust has a borrow checker."]);
    let all: Value = server
        .post("/v1/rerank", json!({"query": "capital of France", "documents": documents}))
        .await
        .json()
        .await
        .unwrap();
    let results = all["results"].as_array().expect("results");
    assert_eq!(results.len(), 3);
    let scores: Vec<f64> = results.iter().map(|r| r["relevance_score"].as_f64().unwrap()).collect();
    assert!(scores.windows(2).all(|w| w[0] >= w[1]), "best first: {scores:?}");
    assert!(scores.iter().all(|s| (0.0..=1.0).contains(s)));
    let mut indices: Vec<u64> = results.iter().map(|r| r["index"].as_u64().unwrap()).collect();
    indices.sort_unstable();
    assert_eq!(indices, vec![0, 1, 2]);
    let best = results[0]["index"].as_u64().unwrap() as usize;
    let texts = ["Paris is the capital of France.", "Bananas are berries.", "Rust has a borrow checker."];
    assert_eq!(results[0]["document"]["text"], texts[best]);
    assert!(all["usage"]["prompt_tokens"].as_u64().unwrap() > 10);

    // `/rerank` is the same; `top_n` and `return_documents` shape the answer.
    let top: Value = server
        .post(
            "/rerank",
            json!({"query": "capital of France", "documents": documents, "top_n": 1, "return_documents": false}),
        )
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(top["results"].as_array().unwrap().len(), 1);
    assert_eq!(top["results"][0]["index"], results[0]["index"]);
    assert!(top["results"][0].get("document").is_none());

    for (body, param) in [
        (json!({"documents": ["a"]}), "query"),
        (json!({"query": "", "documents": ["a"]}), "query"),
        (json!({"query": "q"}), "documents"),
        (json!({"query": "q", "documents": []}), "documents"),
        (json!({"query": "q", "documents": [3]}), "documents"),
        (json!({"query": "q", "documents": ["a"], "top_n": 0}), "top_n"),
    ] {
        let response = server.post("/v1/rerank", body.clone()).await;
        assert_eq!(response.status(), 400, "{body}");
        let error: Value = response.json().await.unwrap();
        assert_eq!(error["error"]["param"], param, "{body}: {error}");
    }
    // vLLM's /score: the same scores, in pair order.
    let scored: Value =
        server.post("/score", json!({"text_1": "capital of France", "text_2": texts})).await.json().await.unwrap();
    for result in results {
        let index = result["index"].as_u64().unwrap() as usize;
        let score = scored["data"][index]["score"].as_f64().unwrap();
        assert!((score - result["relevance_score"].as_f64().unwrap()).abs() < 1e-6, "{scored}");
    }

    // A reranker embeds nothing, and says its task.
    let embed = server.post("/v1/embeddings", json!({"input": "a"})).await;
    assert_eq!(embed.status(), 400);
    let models: Value = server.client.get(server.url("/v1/models")).send().await.unwrap().json().await.unwrap();
    assert_eq!(models["data"][0]["task"], "rerank");
}
