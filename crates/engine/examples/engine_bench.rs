//! Engine figures on the default model, printed (not asserted: these machines are noisy).
//!
//!     cargo run --release -p rillm-engine --example engine_bench
//!
//! Environment: RILLM_MODEL (GGUF path), RILLM_THREADS, RILLM_PREFILL_CHUNK.

use std::time::{Duration, Instant};

use rillm_engine::{Engine, EngineConfig, GenerateRequest, RequestStream, SamplingParams, StreamEvent};

fn env<T: std::str::FromStr>(name: &str) -> Option<T> {
    std::env::var(name).ok()?.parse().ok()
}

/// A text prompt of about `tokens` tokens (the exact count is measured, not assumed). The
/// `tag` leads, so prompts with different tags share no prefix to reuse.
fn prompt_of(engine: &Engine, tag: usize, tokens: usize) -> (String, usize) {
    let sentence = "The quick brown fox jumps over the lazy dog near the river bank. ";
    let mut text = format!("Passage {tag}. ");
    loop {
        let n = engine.tokenize_prompt(&rillm_engine::Prompt::Text(text.clone())).map_or(0, |t| t.len());
        if n >= tokens {
            return (text, n);
        }
        text.push_str(sentence);
    }
}

fn request(prompt: &str, max_tokens: u32) -> GenerateRequest {
    let mut r = GenerateRequest::text(prompt).with_max_tokens(max_tokens).with_sampling(SamplingParams::greedy());
    r.ignore_eos = true;
    r
}

fn finish(mut s: RequestStream) -> rillm_engine::Completion {
    loop {
        match s.blocking_next() {
            Some(StreamEvent::Finished(c)) => return c,
            Some(_) => {}
            None => panic!("stream ended early"),
        }
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Aggregate decode tok/s of `n` concurrent streams, counted once all are decoding.
fn aggregate_decode(engine: &Engine, n: usize, tokens: u32) -> f64 {
    let mut streams: Vec<_> =
        (0..n).map(|i| engine.submit(request(&format!("Story {i}: once upon a time"), tokens)).unwrap()).collect();
    for s in &mut streams {
        assert!(matches!(s.blocking_next(), Some(StreamEvent::Text { .. })));
    }
    let t0 = Instant::now();
    let mut after = 0usize;
    for s in streams {
        let mut s = s;
        while let Some(e) = s.blocking_next() {
            match e {
                StreamEvent::Text { token_ids, .. } | StreamEvent::Reasoning { token_ids, .. } => {
                    after += token_ids.len()
                }
                StreamEvent::Finished(_) => break,
                StreamEvent::Prompt(_) | StreamEvent::Restarted { .. } => {}
            }
        }
    }
    after as f64 / t0.elapsed().as_secs_f64()
}

fn main() {
    let model = rillm_models::model_for_tests();
    let mut config = EngineConfig::new(model);
    config.max_running = 16;
    config.ctx_per_sequence = 1024;
    if let Some(t) = env("RILLM_THREADS") {
        config.threads = t;
    }
    if let Some(c) = env("RILLM_PREFILL_CHUNK") {
        config.prefill_chunk = c;
    }
    if let Some(p) = env("RILLM_PREFIX_CACHING") {
        config.prefix_caching = p;
    }
    let engine = Engine::start(config.clone()).expect("engine");
    println!(
        "engine_bench: threads={} prefill_chunk={} max_running=16 prefix_caching={}",
        config.threads, config.prefill_chunk, config.prefix_caching
    );
    // Warm up caches and the thread pool.
    finish(engine.submit(request("Hello", 16)).unwrap());

    let mut n = 0;
    let prefill: Vec<f64> = (0..3)
        .map(|i| {
            let (long, tokens) = prompt_of(&engine, i, 500);
            n = tokens;
            let c = finish(engine.submit(request(&long, 1)).unwrap());
            // Only the leading "Passage" words can be shared with an earlier prompt.
            assert!(c.usage.cached_tokens < 5, "prefill must not be served from the prefix cache");
            f64::from(c.usage.prompt_tokens - c.usage.cached_tokens) / (c.timings.prefill_ms / 1000.0)
        })
        .collect();
    println!("prefill ({n}-token prompt):            {:8.1} tok/s", median(prefill));

    let single: Vec<f64> = (0..3)
        .map(|_| {
            let c = finish(engine.submit(request("Once upon a time", 128)).unwrap());
            f64::from(c.usage.completion_tokens - 1) / (c.timings.decode_ms / 1000.0)
        })
        .collect();
    println!("single-stream decode (128 tokens):     {:8.1} tok/s", median(single));
    for n in [1, 4, 16] {
        let agg = median((0..2).map(|_| aggregate_decode(&engine, n, 128)).collect());
        println!("aggregate decode, {n:>2} sequences:        {agg:8.1} tok/s");
    }

    // Holes: 8 sequences start, every other one is cancelled, and the 4 left decode. Their
    // slots are 1, 3, 5, 7 unless the engine packs them.
    let mut streams: Vec<_> =
        (0..8).map(|i| engine.submit(request(&format!("Fable {i}: long ago"), 128)).unwrap()).collect();
    for s in &mut streams {
        s.blocking_next();
    }
    let survivors: Vec<_> = streams.into_iter().enumerate().filter(|(i, _)| i % 2 == 1).map(|(_, s)| s).collect();
    let t0 = Instant::now();
    let mut tokens = 0usize;
    for mut s in survivors {
        while let Some(StreamEvent::Text { token_ids, .. }) = s.blocking_next() {
            tokens += token_ids.len();
        }
    }
    println!("aggregate decode, 4 left of 8 started:  {:8.1} tok/s", tokens as f64 / t0.elapsed().as_secs_f64());

    // A 200-token request arriving while 8 sequences decode: its TTFT, and the longest
    // gap the running streams saw meanwhile.
    let (p200, n200) = prompt_of(&engine, 99, 200);
    let mut running: Vec<_> = (0..8).map(|i| engine.submit(request(&format!("Tale {i}:"), 400)).unwrap()).collect();
    for s in &mut running {
        s.blocking_next();
    }
    let watcher = std::thread::spawn(move || {
        let mut worst = Duration::ZERO;
        let mut last = Instant::now();
        let deadline = Instant::now() + Duration::from_secs(3);
        while Instant::now() < deadline {
            if let Some(StreamEvent::Text { .. }) = running[0].blocking_next() {
                worst = worst.max(last.elapsed());
                last = Instant::now();
            }
        }
        drop(running);
        worst
    });
    std::thread::sleep(Duration::from_millis(300));
    let c = finish(engine.submit(request(&p200, 1)).unwrap());
    let stall = watcher.join().unwrap();
    println!(
        "TTFT of a {n200}-token prompt while 8 decode: {:6.1} ms (worst gap of a running stream {:.1} ms)",
        c.timings.ttft_ms,
        stall.as_secs_f64() * 1000.0
    );

    // A 1000-token prompt pushed out of its slot by another request, then sent again: its
    // KV comes back from host memory instead of being prefilled.
    let (p1k, n1k) = prompt_of(&engine, 1234, 1000);
    let cold = finish(engine.submit(request(&p1k, 1)).unwrap());
    finish(engine.submit(request("Zebras live in Africa.", 1)).unwrap());
    let before = engine.stats().snapshot().prefix;
    let warm = finish(engine.submit(request(&p1k, 1)).unwrap());
    let after = engine.stats().snapshot().prefix;
    let restored = after.host_restored_tokens - before.host_restored_tokens;
    let restore_ms = (after.host_restore_micros - before.host_restore_micros) as f64 / 1000.0;
    println!(
        "{n1k}-token prompt again after eviction: TTFT {:.1} ms (cold prefill {:.1} ms); {} tokens restored in {:.1} ms = {:.1} ms per 1000 (prefill: {:.0} ms per 1000); host tier {:.1} MiB",
        warm.timings.ttft_ms,
        cold.timings.ttft_ms,
        restored,
        restore_ms,
        restore_ms * 1000.0 / restored.max(1) as f64,
        cold.timings.prefill_ms * 1000.0 / f64::from(cold.usage.prompt_tokens),
        after.host_bytes as f64 / f64::from(1 << 20),
    );
}
