//! Servers over the scripted backend: no model, no serial guard, milliseconds to start.

use std::sync::Arc;
use std::time::Duration;

use rillm_server::{AppState, Backend, ServeError, ServerConfig};
use serde_json::Value;
use tokio::sync::oneshot;

/// The router over `backend` on a loopback port, without `run`'s lifecycle.
pub async fn serve_router(backend: Arc<dyn Backend>) -> String {
    let state = AppState::new(ServerConfig::default());
    state.set_backend(backend);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, rillm_server::router(state)).await });
    base
}

pub async fn post(base: &str, path: &str, body: Value) -> reqwest::Response {
    reqwest::Client::new().post(format!("{base}{path}")).json(&body).send().await.unwrap()
}

pub async fn get(base: &str, path: &str) -> (u16, Value) {
    let r = reqwest::get(format!("{base}{path}")).await.unwrap();
    (r.status().as_u16(), r.json().await.unwrap())
}

/// `run` over the scripted backend, with a load step the test controls.
pub struct Running {
    pub base: String,
    pub stop: Option<oneshot::Sender<()>>,
    pub task: tokio::task::JoinHandle<Result<(), ServeError>>,
}

impl Running {
    pub async fn start(
        config: ServerConfig,
        load: impl FnOnce() -> Result<Arc<dyn Backend>, String> + Send + 'static,
    ) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(rillm_server::run(listener, config, load, async move {
            let _ = stopped.await;
        }));
        Self { base, stop: Some(stop), task }
    }

    pub async fn wait_ready(&self) {
        let ready = format!("{}/ready", self.base);
        rillm_test_support::wait_ready(&reqwest::Client::new(), &ready, Duration::from_secs(5)).await;
    }

    pub async fn join(self) -> Result<(), ServeError> {
        tokio::time::timeout(Duration::from_secs(10), self.task).await.expect("run returns").unwrap()
    }
}
