//! `rillm bench` and `rillm mock-server`.

use std::time::Duration;

use rillm_bench::mock::MockConfig;
use rillm_bench::BenchArgs;

pub fn run(args: BenchArgs) -> anyhow::Result<()> {
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
}

pub fn mock_server(args: MockArgs) -> anyhow::Result<()> {
    let config = MockConfig {
        ttft: Duration::from_secs_f64(args.ttft_ms / 1000.0),
        itl: Duration::from_secs_f64(args.itl_ms / 1000.0),
        tokens: args.tokens,
        capacity: args.capacity,
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
