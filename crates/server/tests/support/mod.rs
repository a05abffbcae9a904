//! A real rillm server on loopback over the real model, in the test's process (so a test
//! can reach its engine too); the shared helpers come from `rillm-test-support`.

#![allow(dead_code, unused_imports)]

pub mod scripted;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rillm_engine::{Engine, EngineConfig};
use rillm_server::{Backend, ServerConfig};
pub use rillm_test_support::{python_with, read_sse, SseEvent};
use tokio::sync::{oneshot, MutexGuard};
use tokio::task::JoinHandle;

pub struct TestServer {
    pub base: String,
    pub client: reqwest::Client,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<Result<(), rillm_server::ServeError>>>,
    _serial: MutexGuard<'static, ()>,
}

pub struct Options {
    pub max_running: usize,
    pub max_waiting: usize,
    pub ctx: u32,
    pub max_queue_ms: Option<u64>,
    /// A chat template instead of the model's own.
    pub chat_template: Option<String>,
    /// Off: every prompt is prefilled from scratch, so two requests for the same prompt
    /// compute the same rows in the same shape and their greedy outputs are equal to the
    /// token (with reuse the second computes only its tail, where a near-tie may flip).
    pub prefix_caching: bool,
    pub server: ServerConfig,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            max_running: 8,
            max_waiting: 16,
            ctx: 512,
            max_queue_ms: None,
            chat_template: None,
            prefix_caching: true,
            server: ServerConfig::default(),
        }
    }
}

impl TestServer {
    pub async fn start(opts: Options) -> Self {
        let serial = rillm_test_support::model_lock().await;
        let config = Self::engine_config(&opts);
        let load = move || Engine::start(config).map(|e| Arc::new(e) as Arc<dyn Backend>);
        Self::serve(opts, load, serial).await
    }

    /// A server over the embedding model (`rillm_models::embedding_model_for_tests`), its
    /// engine chosen from the GGUF as `rillm serve` chooses it.
    pub async fn start_embedding(opts: Options) -> Self {
        Self::start_model(opts, rillm_models::embedding_model_for_tests().gguf, None).await
    }

    /// A server over the GGUF at `path`, its engine chosen as `rillm serve` chooses it
    /// (`pooling` as `--pooling`).
    pub async fn start_model(opts: Options, path: std::path::PathBuf, pooling: Option<rillm_engine::Pooling>) -> Self {
        let serial = rillm_test_support::model_lock().await;
        let mut config = Self::engine_config(&opts);
        config.model_path = path;
        let load = move || rillm_engine::start_backend(config, pooling);
        Self::serve(opts, load, serial).await
    }

    /// A server over an engine the test can also call directly (to check what the HTTP
    /// path reports against the engine's own answers).
    pub async fn start_sharing_engine(opts: Options) -> (Self, Engine) {
        let serial = rillm_test_support::model_lock().await;
        let engine = Engine::start(Self::engine_config(&opts)).expect("engine starts");
        let shared = engine.clone();
        let load = move || Ok(Arc::new(shared) as Arc<dyn Backend>);
        (Self::serve(opts, load, serial).await, engine)
    }

    fn engine_config(opts: &Options) -> EngineConfig {
        let mut config = EngineConfig::new(rillm_test_support::model());
        config.max_running = opts.max_running;
        config.max_waiting = opts.max_waiting;
        config.ctx_per_sequence = opts.ctx;
        config.max_queue_ms = opts.max_queue_ms;
        config.chat_template = opts.chat_template.clone();
        config.prefix_caching = opts.prefix_caching;
        config
    }

    async fn serve(
        opts: Options,
        load: impl FnOnce() -> Result<Arc<dyn Backend>, rillm_engine::EngineError> + Send + 'static,
        serial: MutexGuard<'static, ()>,
    ) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr: SocketAddr = listener.local_addr().unwrap();
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(rillm_server::run(listener, opts.server, load, async move {
            let _ = stopped.await;
        }));
        let server = Self {
            base: format!("http://{addr}"),
            client: reqwest::Client::new(),
            stop: Some(stop),
            task: Some(task),
            _serial: serial,
        };
        server.wait_ready().await;
        server
    }

    async fn wait_ready(&self) {
        rillm_test_support::wait_ready(&self.client, &self.url("/ready"), Duration::from_secs(60)).await;
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    pub async fn post(&self, path: &str, body: serde_json::Value) -> reqwest::Response {
        self.client.post(self.url(path)).json(&body).send().await.unwrap()
    }

    /// Value of one metric line (exact name and labels as rendered, or a prefix match on
    /// the name when `labels` is empty); 0 when absent.
    pub async fn metric(&self, name: &str) -> f64 {
        let text = self.client.get(self.url("/metrics")).send().await.unwrap().text().await.unwrap();
        text.lines()
            .filter(|l| !l.starts_with('#'))
            .filter(|l| l.split(['{', ' ']).next() == Some(name))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    }

    pub async fn wait_metric(&self, name: &str, timeout: Duration, pred: impl Fn(f64) -> bool) -> f64 {
        let deadline = Instant::now() + timeout;
        loop {
            let v = self.metric(name).await;
            if pred(v) {
                return v;
            }
            assert!(Instant::now() < deadline, "{name} stuck at {v}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Triggers the shutdown future and waits for `run` to return.
    pub async fn shutdown(mut self) -> Result<(), rillm_server::ServeError> {
        self.trigger_shutdown();
        self.join().await
    }

    pub fn trigger_shutdown(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }

    pub async fn join(&mut self) -> Result<(), rillm_server::ServeError> {
        let task = self.task.take().expect("joined once");
        tokio::time::timeout(Duration::from_secs(60), task).await.expect("server stops").unwrap()
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.trigger_shutdown();
    }
}
