//! Real-traffic workloads against the mock server over loopback: trace replay at recorded
//! times, sessions with live replies in the history, synthetic lengths and shared prefixes.
//! The mock counts one token per word, so prompt lengths can be checked exactly.

use rillm_bench::run::record::Status;

use crate::support::{bench, Mock};

/// `content` in a file named `name` in the test's own directory (removed when it ends).
fn write(dir: &tempfile::TempDir, name: &str, content: &str) -> String {
    let path = dir.path().join(name);
    std::fs::write(&path, content).unwrap();
    path.display().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_azure_trace_replays_at_its_scaled_times_with_exact_lengths_and_provenance() {
    let mock = Mock::start(5, 1, 100, 10_000);
    let dir = tempfile::tempdir().expect("a temp dir");
    let trace = write(
        &dir,
        "az.csv",
        "TIMESTAMP,ContextTokens,GeneratedTokens\n\
         2023-11-16 18:00:00.0000000,100,10\n2023-11-16 18:00:00.2000000,200,20\n2023-11-16 18:00:00.5000000,300,30\n\
         2023-11-16 18:00:00.9000000,50,40\n2023-11-16 18:00:01.0000000,10,50\n2023-11-16 18:00:09.0000000,10,50\n",
    );
    let url = format!("{}/v1/completions", mock.base);
    let args = [
        "--url",
        &url,
        "--trace",
        &trace,
        "--time-scale",
        "0.5",
        "--input-scale",
        "0.5",
        "--output-scale",
        "0.5",
        "--max-output-tokens",
        "12",
        "--requests",
        "5",
    ];
    let r = &bench(&args).await[0];
    assert_eq!((r.offered_requests, r.completed), (5, 5), "{}", r.limits);
    assert_eq!(r.load.mode, rillm_bench::results::result::LoadMode::Trace);
    let scheduled: Vec<f64> = r.requests.iter().map(|q| q.scheduled_ms).collect();
    assert_eq!(scheduled, vec![0.0, 100.0, 250.0, 450.0, 500.0]);
    for q in &r.requests {
        assert!(q.dispatch_lag_ms < 50.0, "sent on schedule: {q:?}");
    }
    let prompts: Vec<Option<u32>> = r.requests.iter().map(|q| q.prompt_tokens).collect();
    assert_eq!(prompts, [50, 100, 150, 25, 5].map(Some), "exact through the target's /tokenize");
    let outputs: Vec<Option<u32>> = r.requests.iter().map(|q| q.completion_tokens).collect();
    assert_eq!(outputs, [5, 10, 12, 12, 12].map(Some), "scaled, then capped");
    assert_eq!(r.requests.iter().map(|q| q.index).collect::<Vec<_>>(), vec![0, 1, 2, 3, 4]);
    let w = &r.run_context.workload;
    assert_eq!((w["kind"].as_str(), w["format"].as_str()), (Some("trace"), Some("azure")));
    assert_eq!((w["scaling"]["time_scale"].as_f64(), w["scaling"]["input_scale"].as_f64()), (Some(0.5), Some(0.5)));
    assert_eq!(w["sha256"].as_str().map(str::len), Some(64));
    assert!(w["prompts"].as_str().unwrap().starts_with("exact"), "{w}");
    assert_eq!(r.tokens.mean_input_tokens, Some(66.0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_carry_the_live_reply_and_wait_their_think_time() {
    let mock = Mock::start(5, 2, 100, 10_000);
    let dir = tempfile::tempdir().expect("a temp dir");
    let sessions = write(
        &dir,
        "s.jsonl",
        "{\"session_id\":\"a\",\"turns\":[{\"text\":\"one two three\",\"max_tokens\":4},{\"text\":\"four five\",\"max_tokens\":6,\"delay_ms\":100},{\"text\":\"six\",\"max_tokens\":2,\"delay_ms\":100}]}\n\
         {\"session_id\":\"b\",\"turns\":[{\"text\":\"seven\",\"max_tokens\":3},{\"text\":\"eight nine\",\"max_tokens\":3,\"delay_ms\":100}]}\n",
    );
    let url = format!("{}/v1/chat/completions", mock.base);
    let r = &bench(&["--url", &url, "--dataset", &sessions, "--concurrency", "2"]).await[0];
    assert_eq!((r.offered_requests, r.completed), (5, 5), "{}", r.limits);
    let a: Vec<_> = r.requests.iter().filter(|q| q.session_id.as_deref() == Some("a")).collect();
    assert_eq!(a.iter().map(|q| q.turn).collect::<Vec<_>>(), vec![Some(1), Some(2), Some(3)]);
    // The history holds every earlier turn and the server's reply to it.
    assert_eq!(a[0].prompt_tokens, Some(3));
    assert_eq!(a[1].prompt_tokens, Some(3 + 4 + 2));
    assert_eq!(a[2].prompt_tokens, Some(9 + 6 + 1));
    for pair in a.windows(2) {
        let think = pair[1].sent_ms - (pair[0].sent_ms + pair[0].e2e_ms);
        assert!(think >= 99.0, "think time {think} ms");
    }
    let turns = r.per_turn.as_ref().expect("per-turn summary");
    assert_eq!(turns.iter().map(|t| (t.turn, t.completed)).collect::<Vec<_>>(), vec![(1, 2), (2, 2), (3, 1)]);
    assert_eq!(r.sessions.map(|s| s.turns_not_sent), Some(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exponential_think_times_spread_the_next_turns_of_sessions() {
    let mock = Mock::start(5, 1, 100, 10_000);
    let url = format!("{}/v1/chat/completions", mock.base);
    let mut args = vec!["--url", &url];
    args.extend(
        "--sessions 4 --turns 3 --input-tokens 5 --output-tokens 2 --think-ms exp:100 --concurrency 4".split(' '),
    );
    let r = &bench(&args).await[0];
    assert_eq!(r.completed, 12, "{}", r.limits);
    assert_eq!(r.run_context.workload["think_ms"]["kind"], "exp");
    let mut gaps = Vec::new();
    for s in 0..4 {
        let id = format!("s{s}");
        let turns: Vec<_> = r.requests.iter().filter(|q| q.session_id.as_deref() == Some(id.as_str())).collect();
        gaps.extend(turns.windows(2).map(|p| p[1].sent_ms - (p[0].sent_ms + p[0].e2e_ms)));
    }
    assert_eq!(gaps.len(), 8);
    // A fixed pause would give eight equal gaps; these are drawn, so they differ.
    let (lo, hi) = gaps.iter().fold((f64::MAX, f64::MIN), |(lo, hi), &g| (lo.min(g), hi.max(g)));
    assert!(hi - lo > 40.0, "think times {gaps:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rejected_turn_ends_its_session_and_the_unsent_turns_are_disclosed() {
    // One stream at a time: two sessions opening together, one gets 429.
    let mock = Mock::start(100, 10, 5, 1);
    let url = format!("{}/v1/chat/completions", mock.base);
    let args = [
        "--url",
        &url,
        "--sessions",
        "2",
        "--turns",
        "3",
        "--input-tokens",
        "5",
        "--output-tokens",
        "5",
        "--concurrency",
        "2",
    ];
    let r = &bench(&args).await[0];
    assert_eq!(r.rejected_429, 1, "{}", r.limits);
    assert_eq!(r.completed, 3);
    assert_eq!(r.offered_requests, 4);
    let counts = r.sessions.expect("session counts");
    assert_eq!((counts.cut_short, counts.turns_not_sent), (1, 2));
    assert!(r.limits.contains("1 sessions ended early") && r.limits.contains("2 remaining turns"), "{}", r.limits);
    let rejected = r.requests.iter().find(|q| q.status == Status::Rejected).unwrap();
    assert_eq!(rejected.turn, Some(1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn synthetic_sessions_and_shared_prefixes_have_the_lengths_asked_for() {
    let mock = Mock::start(5, 1, 100, 10_000);
    let url = format!("{}/v1/chat/completions", mock.base);
    let args = [
        "--url",
        &url,
        "--sessions",
        "2",
        "--turns",
        "2",
        "--opening-tokens",
        "30",
        "--input-tokens",
        "10",
        "--output-tokens",
        "5",
        "--think-ms",
        "20",
    ];
    let r = &bench(&args).await[0];
    let prompts: Vec<(Option<u32>, Option<u32>)> = r.requests.iter().map(|q| (q.turn, q.prompt_tokens)).collect();
    assert_eq!(prompts, vec![(Some(1), Some(30)), (Some(2), Some(45)), (Some(1), Some(30)), (Some(2), Some(45))]);
    assert_eq!(r.run_context.workload["kind"], "sessions");

    let args = [
        "--url",
        &url,
        "--requests",
        "6",
        "--rate",
        "50",
        "--input-tokens",
        "20",
        "--shared-prefix-tokens",
        "30",
        "--prefix-groups",
        "2",
        "--output-tokens",
        "uniform:2-4",
    ];
    let r = &bench(&args).await[0];
    assert_eq!(r.completed, 6, "{}", r.limits);
    assert!(
        r.requests.iter().all(|q| q.prompt_tokens == Some(50)),
        "{:?}",
        r.requests.iter().map(|q| q.prompt_tokens).collect::<Vec<_>>()
    );
    assert!(r.requests.iter().all(|q| q.completion_tokens.is_some_and(|c| (2..=4).contains(&c))));
    assert_eq!(r.run_context.workload["prefix_groups"], 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workload_mistakes_are_refused_with_a_reason() {
    let mock = Mock::start(5, 1, 10, 10_000);
    let url = format!("{}/v1/completions", mock.base);
    let dir = tempfile::tempdir().expect("a temp dir");
    let trace = write(&dir, "t.jsonl", "{\"timestamp\": 0, \"input_length\": 10, \"output_length\": 2}\n");
    for (args, needle) in [
        (vec!["--url", &url, "--trace", &trace, "--rate", "2"], "own arrival times"),
        (vec!["--url", &url, "--trace", &trace, "--time-scale", "0"], "--time-scale"),
        (vec!["--url", &url, "--sessions", "2", "--requests", "3"], "--sessions"),
        (vec!["--url", &url, "--multi-turn"], "--dataset"),
    ] {
        let err = crate::support::bench_err(&args).await;
        assert!(err.contains(needle), "{args:?}: {err}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trace_replays_whole_unless_told_and_says_how_much_of_it() {
    let mock = Mock::start(1, 1, 4, 10_000);
    let dir = tempfile::tempdir().expect("a temp dir");
    let trace = write(
        &dir,
        "whole.csv",
        "TIMESTAMP,ContextTokens,GeneratedTokens\n\
         2023-11-16 18:00:00.0000000,20,2\n2023-11-16 18:00:00.2000000,20,2\n2023-11-16 18:00:00.5000000,20,2\n\
         2023-11-16 18:00:00.9000000,20,2\n2023-11-16 18:00:01.0000000,20,2\n2023-11-16 18:00:09.0000000,20,2\n",
    );
    let url = format!("{}/v1/completions", mock.base);
    let base = ["--url", &url, "--trace", &trace, "--time-scale", "0.05"];
    let r = &bench(&base).await[0];
    assert_eq!((r.offered_requests, r.completed), (6, 6), "the whole trace: {}", r.limits);
    assert!(r.limits.contains("Replayed 6 of the trace's 6 records."), "{}", r.limits);
    assert_eq!(r.run_context.workload["per_level"]["requests"], 6);
    let r = &bench(&[&base[..], &["--requests", "2", "--trace-offset", "1"]].concat()).await[0];
    assert_eq!(r.offered_requests, 2);
    assert!(r.limits.contains("Replayed 2 of the trace's 5 records, after skipping 1."), "{}", r.limits);
    assert_eq!(r.run_context.workload["records_in_trace"], 5);
}
