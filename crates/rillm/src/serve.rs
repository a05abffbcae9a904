//! `rillm serve`: the engine behind HTTP.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use rillm_server::{ConnectionLimits, OutputOptions, SchemaReading, ServerConfig, ToolCallFormat};

use crate::embedding_args::EmbeddingArgs;
use crate::model_args::{engine_defaults, ModelArgs};
use crate::models_args::{EngineLoader, ModelsArgs};
use crate::reasoning_args::ReasoningArgs;

#[derive(clap::Args, Debug)]
pub struct ServeArgs {
    #[command(flatten)]
    model: ModelArgs,
    #[command(flatten)]
    embedding: EmbeddingArgs,
    #[command(flatten)]
    reasoning: ReasoningArgs,
    #[command(flatten)]
    models: ModelsArgs,
    /// Address to bind. Loopback by default: exposing a model server is a decision (the
    /// container image makes it with RILLM_HOST=0.0.0.0).
    #[arg(long, env = "RILLM_HOST", default_value = "127.0.0.1")]
    host: String,
    /// 8767 is the prototype's port, so its benchmark command works unchanged. 0 picks one.
    #[arg(long, env = "RILLM_PORT", default_value_t = 8767)]
    port: u16,
    /// Sequences decoded together (continuous batching width).
    #[arg(long, default_value_t = engine_defaults().max_running)]
    max_running: usize,
    /// Requests that may wait for a sequence; beyond this, 429.
    #[arg(long, default_value_t = engine_defaults().max_waiting)]
    max_waiting: usize,
    /// Bound on the wait for a first token, in milliseconds: a request predicted to wait 1.5
    /// times longer is refused at once (429, Retry-After from the prediction); one whose wait
    /// runs out in the queue is refused when it reaches the head, its response held until
    /// then (still a 429, no stream). An embedding model bounds the wait before a request's
    /// first batch, from the tokens queued ahead. Off by default: requests queue up to
    /// --max-waiting.
    #[arg(long)]
    max_queue_ms: Option<u64>,
    /// Require `Authorization: Bearer KEY` on generation endpoints.
    #[arg(long, env = "RILLM_API_KEY", hide_env_values = true)]
    api_key: Option<String>,
    /// `/metrics` requires the API key too (by default it is open, as `/health` and `/ready` are).
    #[arg(long, requires = "api_key")]
    metrics_require_key: bool,
    /// Seconds in-flight requests may run after SIGINT/SIGTERM before they are cancelled.
    #[arg(long, default_value_t = ServerConfig::default().shutdown_timeout.as_secs())]
    shutdown_timeout: u64,
    /// Name to report and accept as `model` (default: the model file's stem).
    #[arg(long)]
    served_model_name: Option<String>,
    /// The format tool calls are asked for, constrained to and read in: hermes
    /// (`<tool_call>` tags), llama3_json or mistral (`[TOOL_CALLS]`). Default: the one the
    /// chat template writes, else hermes.
    #[arg(long, value_parser = crate::models_config::parse_tool_call_parser)]
    tool_call_parser: Option<ToolCallFormat>,
    /// Read JSON Schemas (output formats and tools' parameters) to the letter: an object
    /// without `additionalProperties` may then carry keys it does not name, an array items
    /// beyond `prefixItems`. By default only what a schema names is generated, as vLLM's
    /// xgrammar and llama.cpp do.
    #[arg(long)]
    literal_json_schemas: bool,
    /// Keep a tool call identical (name and arguments) to one the reply already made, and
    /// let the reply go on. By default the reply ends there, without the repeat.
    #[arg(long)]
    keep_repeated_calls: bool,
    /// Log prompt text. Off by default: prompts are user data.
    #[arg(long)]
    log_prompts: bool,
    /// Memory (MiB) for Responses API responses kept for `previous_response_id` and
    /// `GET /v1/responses/{id}` (OpenAI's `store`, on unless a request says false), least
    /// recently used out. 0 keeps none.
    #[arg(long, default_value_t = ServerConfig::default().responses_store_bytes >> 20)]
    responses_store_mib: usize,
    /// Request body limit in bytes.
    #[arg(long, default_value_t = ServerConfig::default().max_body_bytes)]
    max_body_bytes: usize,
    /// Most client connections with requests in flight; at the cap the longest-idle
    /// keep-alive connection is closed to admit a new client, and with every one busy a
    /// reserve of 32 answers probes and tells others 503. Default: the open-file limit
    /// (raised to its hard limit at start) less 64, at most 16,384.
    #[arg(long)]
    max_connections: Option<usize>,
    /// Seconds a request's headers may take to arrive before the connection is closed.
    #[arg(long, default_value_t = ConnectionLimits::default().header_read_timeout.as_secs())]
    header_read_timeout: u64,
    /// Seconds a connection may stay silent (no request, no response bytes) before it is closed.
    #[arg(long, default_value_t = ConnectionLimits::default().idle_timeout.as_secs())]
    idle_timeout: u64,
}

/// The connection cap: as given, or from the open-file limit after raising it (logged).
fn connection_cap(given: Option<usize>) -> usize {
    let raised = crate::open_files::raise_limit();
    let cap = match (given, raised) {
        (Some(cap), _) => cap,
        (None, Some((_, limit))) => crate::open_files::default_max_connections(limit),
        (None, None) => ConnectionLimits::default().max_connections,
    };
    match raised {
        Some((before, after)) => tracing::info!(before, after, max_connections = cap, "open-file limit"),
        None => tracing::info!(max_connections = cap, "open-file limit unknown"),
    }
    cap
}

pub fn run(args: ServeArgs) -> anyhow::Result<()> {
    // An empty key (RILLM_API_KEY= set by a broken deployment) must not silently mean "no auth".
    if args.api_key.as_deref().is_some_and(|k| k.trim().is_empty()) {
        anyhow::bail!(
            "the API key is empty (--api-key or RILLM_API_KEY); give a key, or unset it to serve without auth"
        );
    }
    let max_connections = connection_cap(args.max_connections);
    let several = args.models.several(&args.model.model);
    let mut engine_config = if several {
        // Each model's own path is set when it loads.
        args.model.engine_config_for(std::path::PathBuf::new(), args.max_running, args.max_waiting)?
    } else {
        args.model.engine_config(args.max_running, args.max_waiting)?
    };
    engine_config.max_queue_ms = args.max_queue_ms;
    let server_config = ServerConfig {
        api_key: args.api_key,
        metrics_require_key: args.metrics_require_key,
        log_prompts: args.log_prompts,
        shutdown_timeout: Duration::from_secs(args.shutdown_timeout),
        max_body_bytes: args.max_body_bytes,
        sse_keep_alive: ServerConfig::default().sse_keep_alive,
        served_model_name: args.served_model_name,
        outputs: OutputOptions {
            tool_call_parser: args.tool_call_parser,
            schemas: if args.literal_json_schemas { SchemaReading::Literal } else { SchemaReading::Closed },
            keep_repeated_calls: args.keep_repeated_calls,
        },
        responses_store_bytes: args.responses_store_mib.saturating_mul(1 << 20),
        embeddings: args.embedding.options(),
        reasoning: args.reasoning.options(),
        connections: ConnectionLimits {
            max_connections,
            reserve: ConnectionLimits::default().reserve,
            header_read_timeout: Duration::from_secs(args.header_read_timeout),
            idle_timeout: Duration::from_secs(args.idle_timeout),
        },
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        // The compute threads need the cores; the HTTP side is light.
        .worker_threads(2)
        .enable_all()
        .build()?;
    let served = runtime.block_on(async move {
        let addr: SocketAddr = format!("{}:{}", args.host, args.port).parse()?;
        let listener = tokio::net::TcpListener::bind(addr).await?;
        let local = listener.local_addr()?;
        let shutdown = shutdown_signal()?;
        // Machine-readable: tests and scripts wait for this line.
        println!("rillm: listening on http://{local}");
        tracing::info!(%local, threads = engine_config.threads, max_running = engine_config.max_running, "listening; loading model");
        let pooling = args.embedding.pooling();
        if several {
            let models = args.models.models(&args.model.model)?;
            let preload = models.iter().filter(|m| m.preload).map(|m| m.name.clone()).collect();
            let loader = Arc::new(EngineLoader::new(engine_config, &models, pooling));
            let specs = models.iter().map(crate::models_args::spec).collect();
            let registry = Arc::new(rillm_server::ModelRegistry::new(specs, loader, args.models.limits(if args.model.no_prefix_cache { 0 } else { args.model.prefix_cache_mib })));
            rillm_server::run_models(listener, server_config, registry, preload, shutdown).await?;
        } else {
            let load = move || rillm_engine::start_backend(engine_config, pooling);
            rillm_server::run(listener, server_config, load, shutdown).await?;
        }
        tracing::info!("stopped");
        Ok(())
    });
    // A model still loading on a blocking thread is not waited for.
    runtime.shutdown_timeout(Duration::from_secs(1));
    served
}

/// The first SIGINT/SIGTERM starts a drain; a second one ends the process at once. The
/// handlers are installed here, before the caller announces it is listening, so a signal
/// that arrives while the model loads is a clean stop, not a kill.
fn shutdown_signal() -> std::io::Result<impl std::future::Future<Output = ()> + Send + 'static> {
    let mut signals = Signals::install()?;
    Ok(async move {
        signals.next().await;
        tracing::info!("shutdown signal received; a second signal exits at once");
        tokio::spawn(async move {
            signals.next().await;
            tracing::warn!("second signal: exiting without waiting for in-flight requests");
            std::process::exit(1);
        });
    })
}

struct Signals {
    #[cfg(unix)]
    term: tokio::signal::unix::Signal,
    #[cfg(unix)]
    int: tokio::signal::unix::Signal,
}

impl Signals {
    fn install() -> std::io::Result<Self> {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{signal, SignalKind};
            Ok(Self { term: signal(SignalKind::terminate())?, int: signal(SignalKind::interrupt())? })
        }
        #[cfg(not(unix))]
        Ok(Self {})
    }

    async fn next(&mut self) {
        #[cfg(unix)]
        tokio::select! {
            _ = self.term.recv() => {},
            _ = self.int.recv() => {},
        }
        #[cfg(not(unix))]
        let _ = tokio::signal::ctrl_c().await;
    }
}
