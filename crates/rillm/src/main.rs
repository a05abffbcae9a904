//! The `rillm` command line: one binary for serving, generating, benchmarking and the mock.

mod bench;
mod generate;
mod model_args;
mod open_files;
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
    Serve(serve::ServeArgs),
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
    /// Fetch the default model (SmolLM2-135M-Instruct Q4_1) into the cache directory.
    Fetch,
    /// Print the default model's cache path.
    Path,
}

fn main() -> anyhow::Result<()> {
    init_tracing();
    let cli = Cli::parse();
    match cli.command {
        Command::Serve(args) => serve::run(args),
        Command::Generate(args) => generate::run(args),
        Command::Bench(command) => bench::command(*command),
        Command::MockServer(args) => bench::mock_server(args),
        Command::Model { command: ModelCommand::Fetch } => {
            let path = rillm_models::default_model_path()?;
            rillm_models::fetch_default_model(&path, |m| eprintln!("rillm: {m}"))?;
            println!("{}", path.display());
            Ok(())
        }
        Command::Model { command: ModelCommand::Path } => {
            println!("{}", rillm_models::default_model_path()?.display());
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
