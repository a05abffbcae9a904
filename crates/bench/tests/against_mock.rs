//! The benchmark against the mock server and a scripted raw-TCP server, over loopback.

use std::time::Duration;

use rillm_bench::run::record::Status;
use serde_json::Value;
use tokio::io::AsyncWriteExt;

mod support;

use support::{bench, bench_err, Mock};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rejections_are_counted_apart_from_failures_with_retry_after() {
    let mock = Mock::start(10, 10, 30, 2);
    let url = format!("{}/generate", mock.base);
    let r = &bench(&["--url", &url, "--rate", "100", "--arrival", "constant", "--requests", "10"]).await[0];
    assert!(r.rejected_429 > 0, "{}", r.limits);
    assert_eq!(r.failed, 0);
    assert_eq!(r.completed + r.rejected_429, 10);
    for q in r.requests.iter().filter(|q| q.status == Status::Rejected) {
        assert_eq!(q.http_status, Some(429));
        assert_eq!(q.retry_after_s, Some(1.0));
        assert!(q.error.as_deref().unwrap().contains("429"));
    }
    assert!(r.limits.contains(&format!("{} rejected with 429", r.rejected_429)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn arrivals_beyond_max_inflight_are_shed_and_disclosed() {
    let mock = Mock::start(10, 10, 30, 10_000);
    let url = format!("{}/v1/chat/completions", mock.base);
    let r =
        &bench(&["--url", &url, "--rate", "100", "--arrival", "constant", "--requests", "10", "--max-inflight", "1"])
            .await[0];
    assert!(r.client_shed_requests > 0);
    assert_eq!(r.offered_requests, 10);
    assert_eq!(r.completed + r.client_shed_requests, 10);
    assert_eq!(r.sent, r.completed);
    assert!(r.requests.iter().filter(|q| q.status == Status::Shed).all(|q| q.http_status.is_none()));
}

fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn assert_superset(seed: &Value, ours: &Value, at: &str) {
    for (key, seed_value) in seed.as_object().unwrap() {
        let ours_value = ours.get(key).unwrap_or_else(|| panic!("{at}.{key} missing"));
        assert_eq!(json_type(ours_value), json_type(seed_value), "{at}.{key}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn result_file_has_every_seed_field_with_the_same_type() {
    let seed: Value = serde_json::from_str(include_str!("fixtures/seed-result.json")).unwrap();
    let mock = Mock::start(5, 5, 10, 1);
    let dir = tempfile::tempdir().expect("a temp dir");
    let out = dir.path().join("bench.json");
    let url = format!("{}/generate", mock.base);
    bench(&[
        "--url",
        &url,
        "--rate",
        "200",
        "--arrival",
        "constant",
        "--requests",
        "4",
        "--output",
        out.to_str().unwrap(),
    ])
    .await;
    let ours: Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    assert_superset(&seed, &ours, "result");
    assert_superset(&seed["run_context"], &ours["run_context"], "run_context");
    let completed =
        ours["requests"].as_array().unwrap().iter().find(|r| r["status"] == "completed").expect("a completed request");
    let seed_completed = seed["requests"].as_array().unwrap().iter().find(|r| r["status"] == "completed").unwrap();
    assert_superset(seed_completed, completed, "requests[completed]");
    let rejected = ours["requests"].as_array().unwrap().iter().find(|r| r["status"] == "rejected").expect("a 429");
    let seed_failed = seed["requests"].as_array().unwrap().iter().find(|r| r["status"] == "failed").unwrap();
    assert_superset(seed_failed, rejected, "requests[rejected]");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sweep_reports_each_level_a_knee_and_an_offline_html_report() {
    let mock = Mock::start(5, 5, 10, 10_000);
    let dir = tempfile::tempdir().expect("a temp dir");
    let (out, html) = (dir.path().join("sweep.json"), dir.path().join("sweep.html"));
    let url = format!("{}/v1/completions", mock.base);
    let levels = bench(&[
        "--url",
        &url,
        "--rate",
        "20,40",
        "--requests",
        "10",
        "--ttft-slo-ms",
        "1000",
        "--output",
        out.to_str().unwrap(),
        "--report",
        html.to_str().unwrap(),
    ])
    .await;
    assert_eq!(levels.len(), 2);
    let file: Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    assert_eq!(file["levels"].as_array().unwrap().len(), 2);
    assert_eq!(file["sweep"].as_array().unwrap().len(), 2);
    assert_eq!(file["knee_level"], 1);
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(page.contains("<svg") && page.contains("Goodput and throughput against load") && page.contains("TTFT CDF"));
    assert!(!page.contains("src=\"http") && !page.contains("href=\"http"), "report must not load anything");
}

/// Serves one HTTP response whose body is written in the given pieces, with pauses.
async fn scripted_server(pieces: Vec<&'static [u8]>) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let (mut socket, _) = listener.accept().await.unwrap();
        let mut buf = vec![0u8; 8192];
        let _ = tokio::io::AsyncReadExt::read(&mut socket, &mut buf).await;
        let head = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n";
        socket.write_all(head).await.unwrap();
        for piece in pieces {
            socket.write_all(piece).await.unwrap();
            socket.flush().await.unwrap();
            tokio::time::sleep(Duration::from_millis(15)).await;
        }
    });
    format!("http://{addr}/v1/completions")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sse_parsing_survives_split_reads_comments_crlf_event_lines_and_garbage() {
    let url = scripted_server(vec![
        b": keep-alive comment\r\n\r\n",
        b"data: {\"choices\":[{\"te",
        b"xt\":\"Hel\"}]}\r\n\r\n",
        b"event: message\ndata: {\"choices\":[{\"text\":\"lo\"}]}\n\n",
        b"data: this is not json\n\n",
        b"garbage line without colon\n\n",
        b"data: {\"choices\":[{\"text\":\" w\\u00f6rld\"}]}\r\n\r\n",
        b"data: {\"choices\":[],\"usage\":{\"completion_tokens\":3}}\n\n",
        b"data: [DONE]\n\n",
    ])
    .await;
    // The scripted server answers one request: the bench must not read its /metrics.
    let r = &bench(&["--url", &url, "--requests", "1", "--model", "m", "--no-server-metrics"]).await[0];
    let q = &r.requests[0];
    assert_eq!(q.status, Status::Completed, "{:?}", q.error);
    assert_eq!(q.text.as_deref(), Some("Hello wörld"));
    assert_eq!(q.content_events, Some(3));
    assert_eq!(q.completion_tokens, Some(3));
    assert!(q.ttft_ms.unwrap() >= 15.0, "TTFT is taken when the split event completes");
    assert_eq!(q.event_gaps_ms.as_ref().unwrap().len(), 2);

    // Pure garbage: no panic, an honest failure.
    let url = scripted_server(vec![b"\x00\x01 nothing here\n\n", b"data: {]\n\n"]).await;
    let r = &bench(&["--url", &url, "--requests", "1", "--model", "m", "--no-server-metrics"]).await[0];
    assert_eq!(r.requests[0].status, Status::Failed);
    assert_eq!(r.failed, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_level_of_a_sweep_sends_its_own_prompts() {
    let mock = Mock::start(2, 2, 4, 10_000);
    let url = format!("{}/v1/completions", mock.base);
    let args = ["--url", &url, "--rate", "50,100", "--requests", "8", "--input-tokens", "uniform:10-400"];
    let levels = bench(&args).await;
    // Prompt lengths are drawn per prompt: the same prompts would repeat the same lengths.
    let lengths = |l: usize| levels[l].requests.iter().map(|q| q.prompt_tokens.expect("counted")).collect::<Vec<_>>();
    assert_eq!(lengths(0).len(), 8);
    assert_ne!(lengths(0), lengths(1), "the second level re-sent the first level's prompts");
    // Recurring prompts stay recurring: --distinct-prompts N cycles N prompts in every
    // level, each level its own N (a later level would otherwise find them all cached).
    let recurring = bench(&[&args[..], &["--distinct-prompts", "2"]].concat()).await;
    let distinct = |l: usize| {
        let mut seen: Vec<u32> = recurring[l].requests.iter().map(|q| q.prompt_tokens.unwrap()).collect();
        seen.sort_unstable();
        seen.dedup();
        seen
    };
    assert_eq!(recurring[0].requests.len(), 8);
    assert!(distinct(0).len() <= 2 && distinct(1).len() <= 2, "{:?} {:?}", distinct(0), distinct(1));
    assert_ne!(distinct(0), distinct(1), "the second level re-sent the first level's recurring prompts");
    // Sessions too: each level plays its own conversations.
    let chat = format!("{}/v1/chat/completions", mock.base);
    let sessions = ["--sessions", "4", "--turns", "1", "--opening-tokens", "uniform:10-400", "--output-tokens", "2"];
    let levels = bench(&[&["--url", chat.as_str(), "--rate", "50,100"][..], &sessions[..]].concat()).await;
    let openings = |l: usize| levels[l].requests.iter().map(|q| q.prompt_tokens.expect("counted")).collect::<Vec<_>>();
    assert_eq!(openings(0).len(), 4);
    assert_ne!(openings(0), openings(1), "the second level replayed the first level's sessions");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn several_urls_share_the_load_and_each_gets_its_own_figures() {
    let (fast, slow) = (Mock::start(10, 2, 8, 10_000), Mock::start(60, 40, 8, 10_000));
    let (a, b) = (format!("{}/v1/completions", fast.base), format!("{}/v1/completions", slow.base));
    let urls = ["--url", a.as_str(), "--url", b.as_str()];
    let even = &bench(&[&urls[..], &["--rate", "100", "--arrival", "constant", "--requests", "20"]].concat()).await[0];
    let targets = even.per_target.as_ref().expect("a breakdown per endpoint");
    assert_eq!((targets[0].url.as_str(), targets[1].url.as_str()), (a.as_str(), b.as_str()));
    assert_eq!((targets[0].sent, targets[1].sent), (10, 10), "round-robin");
    assert!(even.requests.iter().all(|q| q.target == q.index % 2));
    let ttft = |t: usize| targets[t].ttft_ms.unwrap().p50;
    assert!(ttft(0) < 40.0 && ttft(1) > 55.0, "each endpoint's own TTFT: {} vs {}", ttft(0), ttft(1));
    assert_eq!(even.completed, 20);

    // Least-in-flight: the slow endpoint holds its requests longer, so it gets fewer.
    let balanced = ["--balance", "least-in-flight", "--rate", "100", "--arrival", "constant", "--requests", "40"];
    let r = &bench(&[&urls[..], &balanced].concat()).await[0];
    let t = r.per_target.as_ref().unwrap();
    assert_eq!(t[0].sent + t[1].sent, 40);
    assert!(t[0].sent > t[1].sent + 8, "fast {} vs slow {}", t[0].sent, t[1].sent);

    // One protocol for all: a path that resolves to another is refused.
    let other = format!("{}/generate", slow.base);
    let refused = bench_err(&["--url", &a, "--url", &other, "--requests", "1"]).await;
    assert!(refused.contains("same protocol"), "{refused}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slos_calibrated_on_the_target_scale_its_idle_ttft_line_and_tpot_and_can_be_reused() {
    // 40 ms to the first token plus 0.2 ms per prompt word, 10 ms between tokens.
    let mock = Mock::with(rillm_bench::mock::MockConfig {
        ttft_per_prompt_token: Duration::from_micros(200),
        ..rillm_bench::mock::MockConfig::new(Duration::from_millis(40), Duration::from_millis(10), 40, 100)
    });
    let url = format!("{}/v1/completions", mock.base);
    let dir = tempfile::tempdir().expect("a temp dir");
    let out = dir.path().join("calibration.json");
    let out_arg = out.to_str().expect("a UTF-8 path");
    let args = ["--url", &url, "--rate", "20", "--requests", "6", "--slo-scale", "3", "--output", out_arg];
    let r = &bench(&args).await[0];
    let c = r.slos.calibration.expect("calibrated");
    assert_eq!((c.scale, c.requests), (3.0, 6));
    support::close(c.idle_ttft_ms, 40.0, 15.0, "idle TTFT's fixed part");
    assert!((c.idle_ttft_per_prompt_token_ms - 0.2).abs() < 0.05, "{c:?}");
    support::close(c.idle_tpot_ms, 10.0, 3.0, "idle TPOT");
    assert!((r.slos.ttft_ms - 3.0 * c.idle_ttft_ms).abs() < 1e-3, "{:?}", r.slos);
    assert!(r.slos.tpot_ms.is_some_and(|t| (t - 3.0 * c.idle_tpot_ms).abs() < 1e-3), "{:?}", r.slos);
    assert!(r.limits.contains("SLOs calibrated: 3x"), "{}", r.limits);
    // An idle-speed target meets objectives three times its idle latency.
    assert_eq!(r.slo_attainment_pct, 100.0, "{}", r.limits);
    // Another run judged by the same objectives, without calibrating again.
    let reused = &bench(&["--url", &url, "--requests", "2", "--slos-from", out_arg]).await[0];
    assert_eq!(reused.slos, r.slos);
    let refused = bench_err(&["--url", &url, "--slo-scale", "0"]).await;
    assert!(refused.contains("--slo-scale must be positive"), "{refused}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prompt_repeated_goes_out_that_many_times_in_a_row_and_its_answers_are_timed_together() {
    let mock = Mock::start(30, 5, 8, 100);
    let url = format!("{}/v1/completions", mock.base);
    let args =
        ["--url", &url, "--input-tokens", "40,15", "--prompt-repeats", "3", "--concurrency", "3", "--requests", "9"];
    let r = &bench(&args).await[0];
    let mut records: Vec<&_> = r.requests.iter().collect();
    records.sort_by_key(|q| q.index);
    let lengths: Vec<Option<u32>> = records.iter().map(|q| q.prompt_tokens).collect();
    for group in lengths.chunks(3) {
        assert!(group.iter().all(|l| *l == group[0]), "one prompt per three requests: {lengths:?}");
    }
    assert_ne!(lengths[0], lengths[3], "the next prompt differs: {lengths:?}");
    let all = r.latency.all_answers_ms.expect("three answers a prompt are timed together");
    assert_eq!(all.count, 3);
    // Three at once, each ~30 ms + 7 x 5 ms: the group takes about one request's time.
    assert!(all.p50 < 200.0, "{all:?}");
    assert_eq!(r.run_context.workload["prompt_repeats"], 3);
}
