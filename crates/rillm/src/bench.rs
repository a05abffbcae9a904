//! `rillm bench` and `rillm mock-server`.

use std::time::Duration;

use rillm_bench::merge::MergeArgs;
use rillm_bench::mock::{Fault, Framing, MockConfig};
use rillm_bench::results::compare::CompareArgs;
use rillm_bench::BenchArgs;

/// `rillm bench [OPTIONS]` runs a benchmark; `rillm bench compare A.json B.json` compares
/// result files.
#[derive(clap::Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct BenchCommand {
    #[command(subcommand)]
    action: Option<BenchAction>,
    #[command(flatten)]
    run: Option<BenchArgs>,
}

#[derive(clap::Subcommand)]
enum BenchAction {
    /// Compare result files of the same workload: figures side by side, ratios to the first
    /// with the better direction marked; refuses different workloads unless --force.
    Compare(CompareArgs),
    /// Draw the HTML report of a result file again (as `--report` would have).
    Report(ReportArgs),
    /// Merge the result files of a run's shards (`--shard I/N`) into one result, every
    /// statistic recomputed from the per-request records.
    Merge(MergeArgs),
}

#[derive(clap::Args)]
struct ReportArgs {
    /// A result file written by `rillm bench --output`.
    file: std::path::PathBuf,
    /// Where to write the page.
    #[arg(long)]
    output: std::path::PathBuf,
}

pub fn command(command: BenchCommand) -> anyhow::Result<()> {
    match (command.action, command.run) {
        (Some(BenchAction::Compare(args)), _) => compare(&args),
        (Some(BenchAction::Merge(args)), _) => {
            print!("{}", rillm_bench::merge::run(&args)?);
            eprintln!("rillm: wrote {}", args.output.display());
            Ok(())
        }
        (Some(BenchAction::Report(args)), _) => {
            let run = rillm_bench::results::compare::load(&args.file, None)?;
            let output = rillm_bench::BenchOutput { levels: run.levels };
            output.write_files(None, Some(&args.output))?;
            eprintln!("rillm: wrote {}", args.output.display());
            Ok(())
        }
        (None, Some(args)) => run(args),
        // clap requires --url when no subcommand is given.
        (None, None) => anyhow::bail!("rillm bench needs --url (or a subcommand: compare, merge, report)"),
    }
}

fn compare(args: &CompareArgs) -> anyhow::Result<()> {
    print!("{}", rillm_bench::report::compare::run(args)?);
    if let Some(path) = &args.report {
        eprintln!("rillm: wrote {}", path.display());
    }
    Ok(())
}

fn run(args: BenchArgs) -> anyhow::Result<()> {
    let command = std::env::args().collect::<Vec<_>>().join(" ");
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let output = runtime.block_on(rillm_bench::run(args.clone(), command))?;
    print!("{}", rillm_bench::report::summary(&output.levels));
    if let Some(path) = &args.output {
        eprintln!("rillm: wrote {}", path.display());
    }
    if let Some(path) = &args.report {
        eprintln!("rillm: wrote {}", path.display());
    }
    Ok(())
}

#[derive(clap::Args, Debug)]
pub struct MockArgs {
    #[arg(long, default_value = "127.0.0.1")]
    host: String,
    #[arg(long, default_value_t = 8780)]
    port: u16,
    /// Time to the first token.
    #[arg(long, default_value_t = 50.0)]
    ttft_ms: f64,
    /// Time between tokens.
    #[arg(long, default_value_t = 10.0)]
    itl_ms: f64,
    /// Tokens per response (capped by the request's max_tokens).
    #[arg(long, default_value_t = 100)]
    tokens: u32,
    /// Concurrent streams before answering 429.
    #[arg(long, default_value_t = 100_000)]
    capacity: usize,
    /// Stream format on /generate and chat (TGI, Triton and llama.cpp have their own paths).
    #[arg(long, value_enum, default_value_t = Framing::Openai)]
    framing: Framing,
    /// Cut every stream after this many tokens, with no end marker.
    #[arg(long, conflicts_with = "error_after")]
    truncate_after: Option<u32>,
    /// Send an error event after this many tokens, then end the stream.
    #[arg(long)]
    error_after: Option<u32>,
}

pub fn mock_server(args: MockArgs) -> anyhow::Result<()> {
    let fault = match (args.truncate_after, args.error_after) {
        (Some(after), _) => Some(Fault::Truncate { after }),
        (None, Some(after)) => Some(Fault::Error { after }),
        (None, None) => None,
    };
    let config = MockConfig {
        framing: args.framing,
        fault,
        ..MockConfig::new(
            Duration::from_secs_f64(args.ttft_ms / 1000.0),
            Duration::from_secs_f64(args.itl_ms / 1000.0),
            args.tokens,
            args.capacity,
        )
    };
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    runtime.block_on(async move {
        let listener = tokio::net::TcpListener::bind((args.host.as_str(), args.port)).await?;
        println!("rillm: mock server listening on http://{}", listener.local_addr()?);
        rillm_bench::mock::serve(listener, config, async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await?;
        Ok(())
    })
}
