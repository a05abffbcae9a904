//! `--api-key` and `--metrics-require-key` over the scripted backend.

mod support;

use std::sync::Arc;

use rillm_backend::scripted::{Script, ScriptedBackend};
use rillm_server::{Backend, ServerConfig};
use support::scripted::Running;

async fn status(server: &Running, path: &str, key: Option<&str>) -> u16 {
    let mut request = reqwest::Client::new().get(format!("{}{path}", server.base));
    if let Some(key) = key {
        request = request.bearer_auth(key);
    }
    request.send().await.unwrap().status().as_u16()
}

#[tokio::test]
async fn metrics_need_the_key_only_when_asked_and_probes_never_do() {
    for metrics_require_key in [false, true] {
        let config = ServerConfig { api_key: Some("s3cret".into()), metrics_require_key, ..ServerConfig::default() };
        let server = Running::start(config, || Ok(ScriptedBackend::start(Script::default()) as Arc<dyn Backend>)).await;
        server.wait_ready().await;
        let expected = if metrics_require_key { 401 } else { 200 };
        assert_eq!(status(&server, "/metrics", None).await, expected, "require={metrics_require_key}");
        assert_eq!(status(&server, "/metrics", Some("wrong")).await, expected);
        assert_eq!(status(&server, "/metrics", Some("s3cret")).await, 200);
        assert_eq!(status(&server, "/v1/models", None).await, 401);
        assert_eq!(status(&server, "/health", None).await, 200);
        assert_eq!(status(&server, "/ready", None).await, 200);
    }
}
