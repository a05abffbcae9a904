//! The bench's timing against the mock server, in a test binary of its own: at 100
//! streams the figure depends on how busy the machine is, so nothing else runs beside it.

mod support;

use support::{bench, close, Mock};

/// The mock sends on an absolute schedule (first token at `received + 50 ms`, then every
/// 10 ms), so a measured TTFT can never be below 50 ms and gaps average 10 ms whatever the
/// load. What 100 simultaneous connections add on top depends on how busy this machine is,
/// so there the test bounds the median's overhead (60 ms) instead of pinning it; the mean
/// is not bounded there, as a few connections set up late on a busy 2-core CI machine
/// move it (CI saw a mean of 80.7 ms over a min of 52.0). A bench that measured from the
/// wrong instant (after the headers, or from the schedule's start) would still fail the
/// floor or the one-stream check.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ttft_and_gaps_match_the_mock_at_one_and_a_hundred_streams() {
    let mock = Mock::start(50, 10, 20, 10_000);
    for (concurrency, requests, overhead_ms) in [("1", "5", 5.0), ("100", "100", 60.0)] {
        let url = format!("{}/v1/completions", mock.base);
        let r =
            bench(&["--url", &url, "--concurrency", concurrency, "--requests", requests, "--max-tokens", "20"]).await;
        let r = &r[0];
        assert_eq!(r.completed, requests.parse::<usize>().unwrap(), "{}", r.limits);
        let l = &r.latency;
        let ttft = l.ttft_ms.unwrap();
        eprintln!(
            "{concurrency} streams: TTFT mean {:.2} p50 {:.2} min {:.2} ms, gap mean {:.2} ms",
            ttft.mean,
            ttft.p50,
            ttft.min,
            l.event_gap_ms.unwrap().mean
        );
        assert!(
            ttft.min >= 49.0,
            "TTFT min {:.2} ms is below the mock's 50 ms: measured from the wrong instant",
            ttft.min
        );
        close(ttft.p50, 50.0 + overhead_ms / 2.0, overhead_ms / 2.0, "TTFT p50");
        close(l.event_gap_ms.unwrap().mean, 10.0, 3.0, "event gap mean");
        close(l.tpot_ms.unwrap().mean, 10.0, 3.0, "TPOT mean");
        assert_eq!(l.itl_ms.unwrap().count, r.completed * 19, "one ITL per token after the first");
        assert!(r.requests.iter().all(|q| q.completion_tokens == Some(20) && q.content_events == Some(20)));
    }
}
