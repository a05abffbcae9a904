//! The HTTP layer's CPU per streamed token: 16 streams through the real router and real
//! SSE over loopback, tokens from the scripted backend (no model), the client on other
//! threads. Reads each thread's CPU time from /proc (Linux), so the figure is the server's
//! own work: routing, admission, formatting each chunk, writing it.
//!
//!     cargo run --release -p rillm-server --example stream_cpu [-- STREAMS TOKENS ROUNDS]

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use rillm_backend::scripted::{Script, ScriptedBackend};
use rillm_server::{AppState, Backend, ServerConfig};
use serde_json::json;

/// CPU seconds of this process's threads whose name starts with `prefix`.
fn thread_cpu_s(prefix: &str) -> f64 {
    let ticks = 100.0; // USER_HZ on Linux
    let mut total = 0.0;
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else { return f64::NAN };
    for task in tasks.flatten() {
        let Ok(stat) = std::fs::read_to_string(task.path().join("stat")) else { continue };
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else { continue };
        if !stat[open + 1..close].starts_with(prefix) {
            continue;
        }
        let fields: Vec<&str> = stat[close + 2..].split(' ').collect();
        let utime: f64 = fields.get(11).and_then(|v| v.parse().ok()).unwrap_or(0.0);
        let stime: f64 = fields.get(12).and_then(|v| v.parse().ok()).unwrap_or(0.0);
        total += (utime + stime) / ticks;
    }
    total
}

fn main() {
    let args: Vec<usize> = std::env::args().skip(1).filter_map(|a| a.parse().ok()).collect();
    let streams = args.first().copied().unwrap_or(16);
    let tokens = args.get(1).copied().unwrap_or(2000) as u32;
    let rounds = args.get(2).copied().unwrap_or(3);

    let server = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("http-server")
        .enable_all()
        .build()
        .expect("server runtime");
    let client = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("bench-client")
        .enable_all()
        .build()
        .expect("client runtime");

    // 1 ms steps: tokens arrive as fast as a GPU would send them; the server must keep up.
    let script = Script { step: Duration::from_millis(1), reply_tokens: tokens, slots: streams, ..Script::default() };
    let backend = ScriptedBackend::start(script) as Arc<dyn Backend>;
    let base = server.block_on(async move {
        let state = AppState::new(ServerConfig::default());
        state.set_backend(backend);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let base = format!("http://{}", listener.local_addr().expect("addr"));
        tokio::spawn(async move { axum::serve(listener, rillm_server::router(state)).await });
        base
    });

    println!("{streams} streams x {tokens} tokens, {rounds} rounds; server CPU per streamed token:");
    for (path, body) in [
        (
            "/v1/chat/completions",
            json!({"messages": [{"role": "user", "content": "hi"}], "stream": true, "max_tokens": tokens}),
        ),
        ("/v1/completions", json!({"prompt": "hi", "stream": true, "max_tokens": tokens})),
        ("/generate", json!({"prompt": "hi", "max_tokens": tokens})),
    ] {
        let mut per_token_us = Vec::new();
        for _ in 0..rounds {
            let before = thread_cpu_s("http-server");
            let events: usize = client.block_on(async {
                let http = reqwest::Client::new();
                let runs = (0..streams).map(|_| {
                    let (http, url, body) = (http.clone(), format!("{base}{path}"), body.clone());
                    async move {
                        let response = http.post(url).json(&body).send().await.expect("send");
                        let mut bytes = response.bytes_stream();
                        let mut events = 0;
                        while let Some(chunk) = bytes.next().await {
                            events += chunk.expect("chunk").windows(2).filter(|w| w == b"\n\n").count();
                        }
                        events
                    }
                });
                futures::future::join_all(runs).await.into_iter().sum()
            });
            let cpu = thread_cpu_s("http-server") - before;
            let streamed = streams as f64 * f64::from(tokens);
            assert!(events as f64 >= streamed, "{path}: {events} events for {streamed} tokens");
            per_token_us.push(cpu / streamed * 1e6);
        }
        per_token_us.sort_by(f64::total_cmp);
        let median = per_token_us[per_token_us.len() / 2];
        println!("  {path:<22} {median:6.2} us (rounds: {per_token_us:.2?})");
    }
}
