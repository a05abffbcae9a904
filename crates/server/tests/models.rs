//! Several models behind one server (`run_models`), over real HTTP on the real models: the
//! chat model and the embedding model, loaded as requests name them.

mod support;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use rillm_engine::EngineConfig;
use rillm_server::{Backend, ModelLimits, ModelLoader, ModelRegistry, ModelSpec, ServerConfig};
use serde_json::{json, Value};
use tokio::sync::oneshot;

/// Starts the real engines: `chat` (SmolLM2), `embed` (all-MiniLM-L6-v2), `broken` (a
/// file that is not a GGUF).
struct Loader {
    broken: PathBuf,
}

impl ModelLoader for Loader {
    fn load(&self, name: &str) -> Result<Arc<dyn Backend>, String> {
        let path = match name {
            "chat" => rillm_test_support::model(),
            "embed" => rillm_models::embedding_model_for_tests().gguf,
            "broken" => self.broken.clone(),
            other => return Err(format!("no model {other}")),
        };
        let mut config = EngineConfig::new(path);
        config.max_running = 4;
        config.ctx_per_sequence = 512;
        rillm_engine::start_backend(config, None).map_err(|e| e.to_string())
    }
}

struct Server {
    base: String,
    client: reqwest::Client,
    stop: Option<oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<Result<(), rillm_server::ServeError>>>,
    _dir: tempfile::TempDir,
    _serial: tokio::sync::MutexGuard<'static, ()>,
}

impl Server {
    async fn start(max_loaded: Option<usize>) -> Self {
        let serial = rillm_test_support::model_lock().await;
        let dir = tempfile::tempdir().unwrap();
        let broken = dir.path().join("broken.gguf");
        std::fs::write(&broken, b"GGUF but not really a model").unwrap();
        let spec = |name: &str, aliases: &[&str]| ModelSpec {
            name: name.into(),
            aliases: aliases.iter().map(|a| a.to_string()).collect(),
            pinned: false,
            file_bytes: 0,
            tool_call_parser: None,
            reasoning_parser: None,
        };
        let specs = vec![spec("chat", &["smollm2"]), spec("embed", &[]), spec("broken", &[])];
        let limits = ModelLimits {
            max_loaded,
            load_timeout: Duration::from_secs(60),
            idle_unload: None,
            memory_bytes: None,
            prefix_cache_bytes: 0,
        };
        let registry = Arc::new(ModelRegistry::new(specs, Arc::new(Loader { broken }), limits));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(rillm_server::run_models(
            listener,
            ServerConfig::default(),
            registry,
            Vec::new(),
            async move {
                let _ = stopped.await;
            },
        ));
        let client = reqwest::Client::new();
        rillm_test_support::wait_ready(&client, &format!("{base}/ready"), Duration::from_secs(30)).await;
        Self { base, client, stop: Some(stop), task: Some(task), _dir: dir, _serial: serial }
    }

    async fn post(&self, path: &str, body: Value) -> reqwest::Response {
        self.client.post(format!("{}{path}", self.base)).json(&body).send().await.unwrap()
    }

    async fn status(&self, model: &str) -> String {
        let models: Value =
            self.client.get(format!("{}/v1/models", self.base)).send().await.unwrap().json().await.unwrap();
        let entry = models["data"].as_array().unwrap().iter().find(|m| m["id"] == model).cloned().unwrap();
        entry["status"].as_str().unwrap().to_string()
    }

    async fn metric(&self, name: &str, model: &str) -> f64 {
        let text = self.client.get(format!("{}/metrics", self.base)).send().await.unwrap().text().await.unwrap();
        let label = format!("model_name=\"{model}\"");
        text.lines()
            .filter(|l| l.starts_with(name) && l.contains(&label))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

fn chat(model: &str, max_tokens: u32) -> Value {
    json!({"model": model, "messages": [{"role": "user", "content": "Name three colours."}], "max_tokens": max_tokens, "temperature": 0})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_route_by_model_and_alias_loading_each_once_on_demand() {
    let server = Server::start(None).await;
    assert_eq!(server.status("chat").await, "unloaded");
    // Four requests at once for an unloaded model: one load, all answered.
    let loads_before = server.metric("rillm_model_loads_total", "chat").await;
    let requests = (0..4).map(|_| server.post("/v1/chat/completions", chat("chat", 4)));
    for response in futures::future::join_all(requests).await {
        assert_eq!(response.status(), 200);
        let answer: Value = response.json().await.unwrap();
        assert_eq!(answer["model"], "chat");
    }
    assert_eq!(server.metric("rillm_model_loads_total", "chat").await - loads_before, 1.0);
    assert_eq!(server.status("chat").await, "loaded");

    let by_alias = server.post("/v1/completions", json!({"model": "smollm2", "prompt": "Hi", "max_tokens": 2})).await;
    assert_eq!(by_alias.status(), 200);
    let embedded = server.post("/v1/embeddings", json!({"model": "embed", "input": "hello"})).await;
    assert_eq!(embedded.status(), 200);
    let answer: Value = embedded.json().await.unwrap();
    assert_eq!(answer["data"][0]["embedding"].as_array().unwrap().len(), 384);

    // The embedding model does not chat; unknown names are 404; with several, `model` is needed.
    assert_eq!(server.post("/v1/chat/completions", chat("embed", 2)).await.status(), 400);
    assert_eq!(server.post("/v1/chat/completions", chat("gpt-4", 2)).await.status(), 404);
    let unnamed = server.post("/v1/completions", json!({"prompt": "Hi", "max_tokens": 2})).await;
    assert_eq!(unnamed.status(), 400);
    let error: Value = unnamed.json().await.unwrap();
    assert_eq!(error["error"]["param"], "model");

    // /v1/models says each model's status and task; /ready?model= says whether it is loaded.
    let models: Value =
        server.client.get(format!("{}/v1/models", server.base)).send().await.unwrap().json().await.unwrap();
    let tasks: Vec<(String, String)> = models["data"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["status"] == "loaded")
        .map(|m| (m["id"].as_str().unwrap().to_string(), m["task"].as_str().unwrap().to_string()))
        .collect();
    assert_eq!(tasks, vec![("chat".into(), "generate".into()), ("embed".into(), "embed".into())]);
    let ready = |model: &str| server.client.get(format!("{}/ready?model={model}", server.base)).send();
    assert_eq!(ready("chat").await.unwrap().status(), 200);
    assert_eq!(ready("broken").await.unwrap().status(), 503);

    // Per-model metrics: both engines' gauges, each under its name.
    let text = server.client.get(format!("{}/metrics", server.base)).send().await.unwrap().text().await.unwrap();
    assert!(text.contains("vllm:num_requests_running{model_name=\"chat\"}"), "{text}");
    assert!(text.contains("vllm:num_requests_running{model_name=\"embed\"}"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_that_fails_to_load_is_reported_and_the_others_serve() {
    let server = Server::start(None).await;
    let refused = server.post("/v1/completions", json!({"model": "broken", "prompt": "Hi", "max_tokens": 2})).await;
    assert_eq!(refused.status(), 503);
    assert_eq!(server.status("broken").await, "failed");
    let models: Value =
        server.client.get(format!("{}/v1/models", server.base)).send().await.unwrap().json().await.unwrap();
    let broken = models["data"].as_array().unwrap().iter().find(|m| m["id"] == "broken").cloned().unwrap();
    assert!(broken["failure"].as_str().is_some_and(|f| !f.is_empty()), "{broken}");
    assert_eq!(
        server.post("/v1/completions", json!({"model": "chat", "prompt": "Hi", "max_tokens": 2})).await.status(),
        200
    );
    let health = server.client.get(format!("{}/health", server.base)).send().await.unwrap();
    assert_eq!(health.status(), 200, "a failed model does not take the server down");
}

/// With room for one model, the next model's load waits while the loaded one streams
/// (never past `--models-max`, never cutting the stream), then unloads it once idle; an
/// explicit unload lets a stream finish on its engine.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unloading_never_cuts_a_stream_and_models_max_waits_for_a_busy_model() {
    let server = Arc::new(Server::start(Some(1)).await);
    let stream_chat = |max_tokens: u32| {
        let mut body = chat("chat", max_tokens);
        body["stream"] = json!(true);
        body["ignore_eos"] = json!(true);
        let server = Arc::clone(&server);
        async move { server.post("/v1/chat/completions", body).await }
    };
    let stream = stream_chat(120).await;
    assert_eq!(stream.status(), 200);
    // Loading the embedding model needs room, but the chat model is busy: the load waits.
    let embedding = tokio::spawn({
        let server = Arc::clone(&server);
        async move { server.post("/v1/embeddings", json!({"model": "embed", "input": "x"})).await.status() }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(server.status("chat").await, "loaded");
    assert_eq!(server.status("embed").await, "loading");
    assert!(streamed_text(stream).await.split_whitespace().count() > 20, "the stream ran to its end");
    assert_eq!(embedding.await.unwrap(), 200, "answered once the chat model went idle");
    assert_eq!(server.status("chat").await, "unloaded");

    // Asked to unload mid-stream, a model lets go at once, and the stream still runs to its end.
    let stream = stream_chat(120).await;
    assert_eq!(stream.status(), 200);
    assert_eq!(server.status("embed").await, "unloaded", "room for one");
    let unloaded = server.post("/models/unload", json!({"model": "chat"})).await;
    assert_eq!(unloaded.status(), 200);
    assert_eq!(server.status("chat").await, "unloaded");
    assert!(streamed_text(stream).await.split_whitespace().count() > 20, "120 tokens came");
}

/// The text of a chat stream, checked to end with `[DONE]`.
async fn streamed_text(stream: reqwest::Response) -> String {
    let events = rillm_test_support::read_sse(stream).await;
    assert!(events.last().is_some_and(|e| e.data == "[DONE]"), "the stream ended properly");
    events
        .iter()
        .filter(|e| e.data != "[DONE]")
        .filter_map(|e| e.json()["choices"][0]["delta"]["content"].as_str().map(str::to_string))
        .collect()
}

fn rss_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm.split_whitespace().nth(1).and_then(|p| p.parse().ok()).unwrap_or(0);
    pages * 4096
}

/// Unloading frees the model: the process's resident memory drops by most of its file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unloading_frees_the_models_memory() {
    let server = Server::start(None).await;
    assert_eq!(
        server.post("/v1/completions", json!({"model": "chat", "prompt": "Hi", "max_tokens": 8})).await.status(),
        200
    );
    let loaded = rss_bytes();
    assert_eq!(server.post("/models/unload", json!({"model": "chat"})).await.status(), 200);
    let file = std::fs::metadata(rillm_test_support::model()).unwrap().len();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let mut now = rss_bytes();
    while loaded.saturating_sub(now) < file * 8 / 10 && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
        now = rss_bytes();
    }
    assert!(loaded.saturating_sub(now) >= file * 8 / 10, "RSS {loaded} -> {now}, model file {file}");
}
