//! Load from several processes: `--shard I/N` splits one seeded schedule, `bench merge`
//! puts the shards back together. Against the mock server over loopback.

use std::path::{Path, PathBuf};

use rillm_bench::merge::{self, MergeError};
use rillm_bench::results::compare;
use rillm_bench::results::result::BenchResult;

use crate::support::{bench, bench_err, Mock};

const RUN: [&str; 10] =
    ["--rate", "40", "--requests", "40", "--seed", "7", "--input-tokens", "uniform:10-300", "--ttft-slo-ms", "500"];

/// Runs the four shards of RUN at once against `url` (plus `extra` for shard 3), each to
/// its own file, starting together 1.5 s from now (time enough for each to build its prompts).
async fn four_shards(dir: &Path, url: &str, tag: &str, extra: &[&str]) -> Vec<PathBuf> {
    let start_at = (rillm_bench::run::shard::unix_ms_now() + 1500).to_string();
    let files: Vec<PathBuf> = (0..4).map(|i| dir.join(format!("{tag}-{i}.json"))).collect();
    let runs = (0..4).map(|i| {
        let shard = format!("{i}/4");
        let mut args = vec!["--url", url, "--shard", &shard, "--start-at", &start_at, "--output"];
        args.push(files[i].to_str().unwrap());
        args.extend(RUN);
        if i == 3 {
            args.extend(extra);
        }
        let args: Vec<String> = args.into_iter().map(String::from).collect();
        async move { bench(&args.iter().map(String::as_str).collect::<Vec<_>>()).await }
    });
    futures::future::join_all(runs).await;
    files
}

fn merged(files: &[PathBuf]) -> Result<BenchResult, MergeError> {
    let runs = files.iter().map(|f| compare::load(f, None)).collect::<Result<Vec<_>, _>>().unwrap();
    merge::merge(runs)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn four_shards_merge_into_the_unsharded_run() {
    let mock = Mock::start(20, 5, 8, 10_000);
    let url = format!("{}/v1/completions", mock.base);
    let whole = bench(&[&["--url", url.as_str()][..], &RUN].concat()).await.remove(0);
    let dir = tempfile::tempdir().expect("a temp dir");
    let files = four_shards(dir.path(), &url, "ok", &[]).await;

    // Each shard sent its quarter: arrivals i with i mod 4 == its index.
    for (i, file) in files.iter().enumerate() {
        let shard = &compare::load(file, None).unwrap().levels[0];
        assert_eq!(shard.offered_requests, 10);
        assert!(shard.requests.iter().all(|q| q.index % 4 == i), "shard {i} sent another's arrival");
    }
    let all = merged(&files).expect("the shards of one run merge");
    assert_eq!(all.offered_requests, whole.offered_requests);
    assert_eq!(all.completed, 40);
    let indices: Vec<usize> = all.requests.iter().map(|q| q.index).collect();
    assert_eq!(indices, (0..40).collect::<Vec<_>>());
    // The union is the unsharded schedule: the same send times (shards started within a few
    // ms of each other) and the same prompts (their counted lengths).
    for (m, w) in all.requests.iter().zip(&whole.requests) {
        assert!(
            (m.scheduled_ms - w.scheduled_ms).abs() < 30.0,
            "request {}: {} vs {}",
            m.index,
            m.scheduled_ms,
            w.scheduled_ms
        );
        assert_eq!(m.prompt_tokens, w.prompt_tokens, "request {}", m.index);
    }
    // Percentiles recomputed from the records match the unsharded run's within client noise.
    let (m, w) = (all.latency.ttft_ms.unwrap(), whole.latency.ttft_ms.unwrap());
    assert_eq!(m.count, 40);
    assert!((m.p50 - w.p50).abs() < 15.0 && (m.p90 - w.p90).abs() < 25.0, "merged {m:?} vs whole {w:?}");
    assert!(all.limits.contains("Merged from 4 shards"), "{}", all.limits);
    let merge = all.run_context.merged.as_ref().expect("merged");
    assert_eq!(merge.shards, 4);
    assert!(all.run_context.shard.is_none());
    assert!(merge.start_spread_ms < 100);

    // Not the shards of one run: refused, saying why.
    let missing = merged(&files[..3]).expect_err("a shard missing").to_string();
    assert!(missing.contains("missing") && missing.contains("[3]"), "{missing}");
    let twice = merged(&[files[0].clone(), files[0].clone(), files[2].clone(), files[3].clone()]);
    assert!(twice.expect_err("shard twice").to_string().contains("shard 0/4 is in both"));
    let other = four_shards(dir.path(), &url, "other", &["--output-tokens", "9"]).await;
    let mixed = [files[0].clone(), files[1].clone(), files[2].clone(), other[3].clone()];
    let mismatch = merged(&mixed).expect_err("another workload").to_string();
    assert!(mismatch.contains("not shards of one run") && mismatch.contains("output_tokens"), "{mismatch}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sessions_shard_by_conversation_and_merge_with_their_turns() {
    let mock = Mock::start(5, 2, 4, 10_000);
    let url = format!("{}/v1/chat/completions", mock.base);
    let run = ["--url", url.as_str(), "--sessions", "8", "--turns", "3", "--rate", "40", "--input-tokens", "20"];
    let whole = bench(&run).await.remove(0);
    let start_at = (rillm_bench::run::shard::unix_ms_now() + 1500).to_string();
    let dir = tempfile::tempdir().expect("a temp dir");
    let files: Vec<PathBuf> = (0..2).map(|i| dir.path().join(format!("sessions-{i}.json"))).collect();
    let shards = (0..2).map(|i| {
        let shard = format!("{i}/2");
        let mut args: Vec<String> = run.iter().map(|a| a.to_string()).collect();
        args.extend(["--shard".into(), shard, "--start-at".into(), start_at.clone(), "--output".into()]);
        args.push(files[i].display().to_string());
        async move { bench(&args.iter().map(String::as_str).collect::<Vec<_>>()).await }
    });
    futures::future::join_all(shards).await;
    for (i, file) in files.iter().enumerate() {
        let shard = &compare::load(file, None).unwrap().levels[0];
        assert_eq!(shard.offered_requests, 12, "four conversations of three turns");
        // Conversation k (turns 3k..3k+2) is shard k mod 2's.
        assert!(shard.requests.iter().all(|q| (q.index / 3) % 2 == i), "shard {i}");
    }
    let all = merged(&files).expect("merge");
    assert_eq!(all.offered_requests, whole.offered_requests);
    let indices: Vec<usize> = all.requests.iter().map(|q| q.index).collect();
    assert_eq!(indices, (0..24).collect::<Vec<_>>());
    let turns = all.per_turn.as_ref().expect("per-turn figures survive the merge");
    assert_eq!(turns.iter().map(|t| t.completed).collect::<Vec<_>>(), [8, 8, 8]);
    assert_eq!(all.sessions.map(|s| s.cut_short), Some(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sharding_is_refused_where_there_is_no_schedule_to_split() {
    let url = "http://127.0.0.1:9/v1/completions";
    let closed = bench_err(&["--url", url, "--shard", "0/2", "--concurrency", "4"]).await;
    assert!(closed.contains("open-loop schedule"), "{closed}");
    let sweep = bench_err(&["--url", url, "--shard", "0/2", "--rate", "1,2"]).await;
    assert!(sweep.contains("one load level"), "{sweep}");
}
