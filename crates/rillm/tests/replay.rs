//! Real traffic against `rillm serve` on the real model, through the `rillm bench` binary:
//! the shared Azure trace, a Mooncake trace whose repeated hash ids must show up as cached
//! prompt tokens, and multi-turn sessions whose later turns reuse the conversation's KV.

use std::path::PathBuf;

use serde_json::Value;

mod support;

use support::{bench_result, serial, start_server, Server};

/// A server for these tests: a context long enough for a few turns of conversation.
fn server() -> (tokio::sync::MutexGuard<'static, ()>, Server) {
    let guard = serial();
    (guard, start_server(1024, &[]))
}

/// Runs `rillm bench` with `args` and returns its result file.
fn bench(args: &[&str]) -> Value {
    bench_result(args, &format!("replay-{}", args.len()))
}

fn requests(result: &Value) -> &Vec<Value> {
    result["requests"].as_array().unwrap()
}

#[test]
fn the_azure_trace_replays_against_rillm_with_exact_prompt_lengths() {
    let trace =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../bench/tests/fixtures/azure-llm-2023-conv-head200.csv");
    let (_serial, server) = server();
    let url = server.url("/v1/chat/completions");
    let args = [
        "--url",
        &url,
        "--trace",
        trace.to_str().unwrap(),
        "--requests",
        "8",
        "--input-scale",
        "0.1",
        "--output-scale",
        "0.05",
        "--max-output-tokens",
        "8",
        "--time-scale",
        "2",
    ];
    let r = bench(&args);
    assert_eq!(r["offered_requests"], 8);
    assert_eq!(r["completed"], 8, "{}", r["limits"]);
    let w = &r["run_context"]["workload"];
    assert_eq!((w["kind"].as_str(), w["format"].as_str()), (Some("trace"), Some("azure")));
    assert_eq!(w["scaling"]["input_scale"], 0.1);
    assert!(w["prompts"].as_str().unwrap().contains("/tokenize"), "{w}");
    // The trace's first rows, scaled as the bench was told.
    let text = std::fs::read_to_string(&trace).unwrap();
    let expected: Vec<u64> = text
        .lines()
        .skip(1)
        .take(8)
        .map(|l| (l.split(',').nth(1).unwrap().parse::<f64>().unwrap() * 0.1).round() as u64)
        .collect();
    for (q, want) in requests(&r).iter().zip(&expected) {
        // A target below the chat template's own tokens cannot be met; the limits say so.
        if *want > 40 {
            assert_eq!(q["prompt_tokens"].as_u64(), Some(*want), "{q}");
        }
        assert!(q["completion_tokens"].as_u64().is_some_and(|c| (1..=8).contains(&c)), "{q}");
    }
    let rows: Vec<f64> = requests(&r).iter().map(|q| q["scheduled_ms"].as_f64().unwrap()).collect();
    assert!(rows.windows(2).all(|w| w[0] <= w[1]) && rows[7] > 1000.0, "recorded gaps, stretched twice: {rows:?}");
}

#[test]
fn repeated_mooncake_hash_ids_come_back_as_cached_prompt_tokens() {
    let (_serial, server) = server();
    let dir = tempfile::tempdir().expect("a temp dir");
    let trace = dir.path().join("mooncake.jsonl");
    // Blocks of 64 tokens: request 1 shares two blocks with request 0, request 2 shares none.
    std::fs::write(
        &trace,
        "{\"timestamp\": 0, \"input_length\": 180, \"output_length\": 4, \"hash_ids\": [1, 2, 3]}\n\
         {\"timestamp\": 1500, \"input_length\": 180, \"output_length\": 4, \"hash_ids\": [1, 2, 4]}\n\
         {\"timestamp\": 3000, \"input_length\": 180, \"output_length\": 4, \"hash_ids\": [5, 6, 7]}\n",
    )
    .unwrap();
    let url = server.url("/v1/completions");
    let r = bench(&["--url", &url, "--trace", trace.to_str().unwrap(), "--trace-block-tokens", "64"]);
    assert_eq!(r["completed"], 3, "{}", r["limits"]);
    let q = requests(&r);
    let cached: Vec<u64> = q.iter().map(|q| q["cached_tokens"].as_u64().unwrap()).collect();
    for q in q {
        assert_eq!(q["prompt_tokens"], 180, "{q}");
    }
    // Two shared blocks reused, less what widening the 52 new tokens to llama.cpp's 64-row
    // CPU attention tile computes again where that pays on this CPU (not reported as cached).
    assert!(cached[1] >= 180 - 65 && cached[1] < 180, "two shared blocks reused: {cached:?}");
    assert!(cached[0] < 16 && cached[2] < 16, "nothing shared: {cached:?}");
    assert!(r["tokens"]["prefix_cache_hit_pct"].as_f64().unwrap() > 20.0, "{}", r["tokens"]);
}

#[test]
fn later_turns_of_a_session_reuse_the_conversation_so_far() {
    let (_serial, server) = server();
    let url = server.url("/v1/chat/completions");
    let args = [
        "--url",
        &url,
        "--sessions",
        "2",
        "--turns",
        "3",
        "--opening-tokens",
        "120",
        "--input-tokens",
        "20",
        "--output-tokens",
        "12",
        "--concurrency",
        "1",
    ];
    let r = bench(&args);
    assert_eq!(r["completed"], 6, "{}", r["limits"]);
    let turns = r["per_turn"].as_array().expect("per-turn summary");
    assert_eq!(turns.len(), 3);
    let q = requests(&r);
    for pair in q.windows(2).filter(|p| p[0]["session_id"] == p[1]["session_id"]) {
        let (before, after) = (&pair[0], &pair[1]);
        let grown = before["prompt_tokens"].as_u64().unwrap() + before["completion_tokens"].as_u64().unwrap();
        // The next turn's prompt is the last one plus the reply plus the new message...
        assert!(after["prompt_tokens"].as_u64().unwrap() > grown, "{before} -> {after}");
        // ...and the server reused at least the last turn's prompt.
        assert!(
            after["cached_tokens"].as_u64().unwrap() >= before["prompt_tokens"].as_u64().unwrap() - 1,
            "{before} -> {after}"
        );
    }
    assert!(turns[1]["mean_cached_tokens"].as_f64().unwrap() > 100.0, "{turns:?}");
}
