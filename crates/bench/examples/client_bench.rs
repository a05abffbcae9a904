//! How much the benchmark client itself adds: TTFT and ITL error against the mock server
//! (50 ms TTFT, 10 ms ITL, 100 tokens) at 1, 100 and 1000 concurrent streams. Printed, not
//! asserted.
//!
//!     cargo run --release -p rillm-bench --example client_bench
//!
//! The mock runs in this process on its own runtime thread; on a small machine the two
//! share cores, so the error shown bounds client and mock together.

use std::time::Duration;

use clap::Parser;
use rillm_bench::mock::MockConfig;
use rillm_bench::BenchArgs;

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    args: BenchArgs,
}

fn main() {
    let config = MockConfig::new(Duration::from_millis(50), Duration::from_millis(10), 100, 100_000);
    let (addr_tx, addr_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
        rt.block_on(async move {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            addr_tx.send(listener.local_addr().unwrap()).unwrap();
            rillm_bench::mock::serve(listener, config, std::future::pending()).await.unwrap();
        });
    });
    let addr = addr_rx.recv().unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    println!("client_bench: mock 50 ms TTFT, 10 ms ITL, 100 tokens; client and mock on one runtime thread each");
    println!(
        "{:>8} {:>14} {:>14} {:>14} {:>14} {:>12}",
        "streams", "TTFT err mean", "TTFT err p99", "ITL err mean", "ITL err p99", "client CPU"
    );
    for streams in [1usize, 100, 1000] {
        let url = format!("http://{addr}/v1/completions");
        let requests = (streams * 2).max(5).to_string();
        let argv = [
            "bench",
            "--url",
            &url,
            "--concurrency",
            &streams.to_string(),
            "--requests",
            &requests,
            "--max-tokens",
            "100",
            "--model",
            "mock",
        ];
        let cli = Cli::parse_from(argv);
        let out = rt.block_on(rillm_bench::run(cli.args, argv.join(" "))).expect("bench");
        let r = &out.levels[0];
        let ttft = r.latency.ttft_ms.expect("ttft");
        let itl = r.latency.itl_ms.expect("itl");
        println!(
            "{streams:>8} {:>11.2} ms {:>11.2} ms {:>11.2} ms {:>11.2} ms {:>9.2} cores   ({} of {} completed)",
            ttft.mean - 50.0,
            ttft.p99 - 50.0,
            itl.mean - 10.0,
            itl.p99 - 10.0,
            r.client.cpu_cores_used,
            r.completed,
            r.offered_requests
        );
    }
}
