//! What the bench's loopback tests share: a mock server on its own runtime thread and a
//! way to run `rillm bench` arguments in-process.
#![allow(dead_code)] // each test binary uses its own subset

use std::time::Duration;

use clap::Parser;
use rillm_bench::mock::MockConfig;
use rillm_bench::result::BenchResult;
use rillm_bench::BenchArgs;

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    args: BenchArgs,
}

/// A mock server on its own runtime thread, so its timing does not depend on the client's.
pub struct Mock {
    pub base: String,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Mock {
    pub fn start(ttft_ms: u64, itl_ms: u64, tokens: u32, capacity: usize) -> Self {
        Self::with(MockConfig::new(Duration::from_millis(ttft_ms), Duration::from_millis(itl_ms), tokens, capacity))
    }

    pub fn with(config: MockConfig) -> Self {
        let (addr_tx, addr_rx) = std::sync::mpsc::channel();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
            rt.block_on(async move {
                let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
                addr_tx.send(listener.local_addr().unwrap()).unwrap();
                rillm_bench::mock::serve(listener, config, async move {
                    let _ = stopped.await;
                })
                .await
                .unwrap();
            });
        });
        let addr = addr_rx.recv().unwrap();
        Self { base: format!("http://{addr}"), stop: Some(stop), thread: Some(thread) }
    }
}

impl Drop for Mock {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
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
