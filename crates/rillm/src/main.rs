//! The `rillm` command line: one binary for serving, generating, benchmarking and the mock.

mod bench;
mod embedding_args;
mod generate;
mod model_args;
mod models_args;
mod models_config;
mod open_files;
mod reasoning_args;
mod serve;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "rillm", version, about = "Serve GGUF models with continuous batching; benchmark LLM servers")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve the model over HTTP: /generate, /v1/completions, /v1/chat/completions, /v1/responses.
    Serve(Box<serve::ServeArgs>),
    /// Generate text from a prompt, streamed to stdout.
    Generate(generate::GenerateArgs),
    /// Benchmark an LLM server (rillm, vLLM, SGLang, TensorRT-LLM, llama.cpp) under live HTTP
    /// load; `bench compare` puts result files side by side.
    Bench(Box<bench::BenchCommand>),
    /// A deterministic timing server for calibrating and testing the benchmark.
    MockServer(bench::MockArgs),
    /// Manage the default model.
    Model {
        #[command(subcommand)]
        command: ModelCommand,
    },
}

#[derive(Subcommand)]
enum ModelCommand {
    /// Fetch a model into the cache directory: the default (SmolLM2-135M-Instruct Q4_1),
    /// or by name `all-minilm-l6-v2` (an embedding model, converted to GGUF on the way).
    Fetch {
        /// smollm2-135m-instruct (the default) or all-minilm-l6-v2.
        name: Option<String>,
    },
    /// Print a model's cache path (the default model's without a name).
    Path { name: Option<String> },
}

fn main() -> anyhow::Result<()> {
    init_tracing();
    let cli = Cli::parse();
    match cli.command {
        Command::Serve(args) => serve::run(*args),
        Command::Generate(args) => generate::run(args),
        Command::Bench(command) => bench::command(*command),
        Command::MockServer(args) => bench::mock_server(args),
        Command::Model { command: ModelCommand::Fetch { name: None } } => {
            let path = rillm_models::default_model_path()?;
            rillm_models::fetch_default_model(&path, |m| eprintln!("rillm: {m}"))?;
            println!("{}", path.display());
            Ok(())
        }
        Command::Model { command: ModelCommand::Fetch { name: Some(name) } } => {
            println!("{}", rillm_models::ensure_known_model(&name, |m| eprintln!("rillm: {m}"))?.display());
            Ok(())
        }
        Command::Model { command: ModelCommand::Path { name } } => {
            let name = name.as_deref().unwrap_or(rillm_models::DEFAULT_MODEL_NAME);
            println!("{}", rillm_models::known_model_path(name)?.display());
            Ok(())
        }
    }
}

fn init_tracing() {
    // llama.cpp logs every tensor at info level; keep it to warnings unless asked.
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,llama-cpp-2=warn,llama_cpp_2=warn"));
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    tracing_subscriber::fmt().with_env_filter(filter).with_ansi(ansi).with_writer(std::io::stderr).init();
}
