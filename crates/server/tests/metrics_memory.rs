//! Metrics memory with and without scraping. Histogram samples wait in the recorder until
//! upkeep folds them into buckets, which a scrape does; a server nobody scrapes would keep
//! every token's sample. `serve` runs `upkeep_forever`, so its memory stays flat either way.
//! Measured as the process's resident memory: its own test binary, so nothing else records.

use std::time::Duration;

use rillm_server::metrics::{handle, render, upkeep_forever, RequestMetrics, ITL};

/// 4 M samples: 32 MB of f64 if kept, far above allocator noise.
const SAMPLES: usize = 4_000_000;
/// Between two upkeeps (or scrapes): ~1.6 MB.
const CHUNK: usize = 200_000;

fn resident_bytes() -> i64 {
    let statm = std::fs::read_to_string("/proc/self/statm").expect("Linux /proc");
    let pages: i64 = statm.split_whitespace().nth(1).and_then(|p| p.parse().ok()).expect("resident pages");
    pages * 4096
}

fn record(metrics: &RequestMetrics, n: usize) {
    for _ in 0..n {
        metrics.inter_token(0.01, 1);
    }
}

/// The ITL histogram's sample count as rendered (every sample, folded in).
fn rendered_count() -> u64 {
    let text = render(&[]);
    let line = text.lines().find(|l| l.starts_with(&format!("{ITL}_count"))).expect("ITL count rendered");
    line.rsplit(' ').next().and_then(|v| v.parse().ok()).expect("a count")
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn unscraped_histograms_stay_flat_because_upkeep_runs() {
    let _ = handle();
    let metrics = RequestMetrics::new("memory-test");
    // Warm the allocator and the recorder's structures.
    record(&metrics, CHUNK);
    let _ = rendered_count();

    // 1. Nobody scrapes; the upkeep task ticks every 5 s (time is paused and advanced).
    let upkeep = tokio::spawn(upkeep_forever());
    tokio::task::yield_now().await;
    let start = resident_bytes();
    for _ in 0..SAMPLES / CHUNK {
        record(&metrics, CHUNK);
        tokio::time::advance(Duration::from_secs(5)).await;
        tokio::task::yield_now().await;
    }
    let with_upkeep = resident_bytes() - start;
    upkeep.abort();

    // 2. No upkeep task, but a scraper every chunk.
    let start = resident_bytes();
    for _ in 0..SAMPLES / CHUNK {
        record(&metrics, CHUNK);
        let _ = render(&[]);
    }
    let with_scrapes = resident_bytes() - start;

    // 3. Neither: every sample stays until the next fold.
    let start = resident_bytes();
    record(&metrics, SAMPLES);
    let neither = resident_bytes() - start;

    let mib = |b: i64| b as f64 / (1 << 20) as f64;
    eprintln!(
        "resident growth over {SAMPLES} samples: upkeep {:.1} MiB, scrapes {:.1} MiB, neither {:.1} MiB",
        mib(with_upkeep),
        mib(with_scrapes),
        mib(neither)
    );
    assert!(
        neither > 24 << 20,
        "without upkeep the samples should pile up ({:.1} MiB): is the test measuring?",
        mib(neither)
    );
    assert!(with_upkeep < neither / 4, "upkeep left {:.1} MiB of {:.1}", mib(with_upkeep), mib(neither));
    assert!(with_scrapes < neither / 4, "scrapes left {:.1} MiB of {:.1}", mib(with_scrapes), mib(neither));
    // Nothing was lost: every sample is counted once folded in.
    assert_eq!(rendered_count(), (CHUNK + 3 * SAMPLES) as u64);
}
