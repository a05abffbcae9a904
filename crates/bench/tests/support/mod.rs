//! What the bench's loopback tests share: the mock server on a runtime thread of its own
//! (`rillm-test-support`'s) and a way to run `rillm bench` arguments in-process.
#![allow(dead_code)] // each test binary uses its own subset

use std::time::Duration;

use clap::Parser;
use rillm_bench::mock::MockConfig;
use rillm_bench::results::result::BenchResult;
use rillm_bench::BenchArgs;
use rillm_test_support::thread_server::ThreadServer;

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    args: BenchArgs,
}

/// A mock server on its own runtime thread, so its timing does not depend on the client's.
pub struct Mock {
    pub base: String,
    _server: ThreadServer,
}

impl Mock {
    pub fn start(ttft_ms: u64, itl_ms: u64, tokens: u32, capacity: usize) -> Self {
        Self::with(MockConfig::new(Duration::from_millis(ttft_ms), Duration::from_millis(itl_ms), tokens, capacity))
    }

    pub fn with(config: MockConfig) -> Self {
        let server = ThreadServer::start(move |listener, stopped| async move {
            rillm_bench::mock::serve(listener, config, stopped).await.expect("the mock serves");
        });
        Self { base: server.base.clone(), _server: server }
    }
}

pub async fn bench(args: &[&str]) -> Vec<BenchResult> {
    let argv = std::iter::once("bench").chain(args.iter().copied());
    let cli = Cli::try_parse_from(argv).expect("valid arguments");
    rillm_bench::run(cli.args, args.join(" ")).await.expect("bench runs").levels
}

pub fn close(actual: f64, expected: f64, tolerance: f64, what: &str) {
    assert!((actual - expected).abs() <= tolerance, "{what}: {actual:.2} ms, expected {expected} ± {tolerance}");
}

/// The error `rillm bench` stops with for these arguments.
pub async fn bench_err(args: &[&str]) -> String {
    let argv = std::iter::once("bench").chain(args.iter().copied());
    let cli = Cli::try_parse_from(argv).expect("valid arguments");
    match rillm_bench::run(cli.args, args.join(" ")).await {
        Ok(_) => panic!("expected {args:?} to be refused"),
        Err(e) => e.to_string(),
    }
}
