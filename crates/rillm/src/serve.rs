//! `rillm serve`: the engine behind HTTP.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use rillm_engine::Engine;
use rillm_server::{Backend, ServerConfig};

use crate::model_args::ModelArgs;

#[derive(clap::Args, Debug)]
pub struct ServeArgs {
    #[command(flatten)]
    model: ModelArgs,
    /// Address to bind. Loopback by default: exposing a model server is a decision.
    #[arg(long, default_value = "127.0.0.1")]
    host: String,
    /// 8767 is the prototype's port, so its benchmark command works unchanged. 0 picks one.
    #[arg(long, default_value_t = 8767)]
    port: u16,
    /// Sequences decoded together (continuous batching width).
    #[arg(long, default_value_t = 16)]
    max_running: usize,
    /// Requests that may wait for a sequence; beyond this, 429.
    #[arg(long, default_value_t = 64)]
    max_waiting: usize,
    /// Require `Authorization: Bearer KEY` on generation endpoints.
    #[arg(long, env = "RILLM_API_KEY", hide_env_values = true)]
    api_key: Option<String>,
    /// Seconds in-flight requests may run after SIGINT/SIGTERM before they are cancelled.
    #[arg(long, default_value_t = 30)]
    shutdown_timeout: u64,
    /// Name to report and accept as `model` (default: the model file's stem).
    #[arg(long)]
    served_model_name: Option<String>,
    /// Log prompt text. Off by default: prompts are user data.
    #[arg(long)]
    log_prompts: bool,
    /// Request body limit in bytes.
    #[arg(long, default_value_t = 1 << 20)]
    max_body_bytes: usize,
}

pub fn run(args: ServeArgs) -> anyhow::Result<()> {
    let engine_config = args.model.engine_config(args.max_running, args.max_waiting)?;
    let server_config = ServerConfig {
        api_key: args.api_key.filter(|k| !k.is_empty()),
        log_prompts: args.log_prompts,
        shutdown_timeout: Duration::from_secs(args.shutdown_timeout),
        max_body_bytes: args.max_body_bytes,
        served_model_name: args.served_model_name,
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        // The compute threads need the cores; the HTTP side is light.
        .worker_threads(2)
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        let addr: SocketAddr = format!("{}:{}", args.host, args.port).parse()?;
        let listener = tokio::net::TcpListener::bind(addr).await?;
        let local = listener.local_addr()?;
        // Machine-readable: tests and scripts wait for this line.
        println!("rillm: listening on http://{local}");
        tracing::info!(%local, threads = engine_config.threads, max_running = engine_config.max_running, "listening; loading model");
        let load = move || {
            Engine::start(engine_config).map(|e| Arc::new(e) as Arc<dyn Backend>).map_err(|e| e.to_string())
        };
        rillm_server::run(listener, server_config, load, shutdown_signal()).await?;
        tracing::info!("stopped");
        Ok(())
    })
}

async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut term) => tokio::select! {
                _ = ctrl_c => {},
                _ = term.recv() => {},
            },
            Err(_) => {
                let _ = ctrl_c.await;
            }
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
    tracing::info!("shutdown signal received");
}
