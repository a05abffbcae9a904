//! Speculative decoding seen from outside: `rillm bench` against `rillm serve` on the real
//! model reads the server's `vllm:spec_decode_*` counters before and after the level and
//! reports what was drafted and kept; `--speculative off` drafts nothing; with per-chunk
//! usage asked for, the bench counts each event's tokens from the server's running count.

mod support;

use support::{bench_result, serial, start_server};

/// Text the model continues by repeating it: prompt lookup drafts from it.
const REPEATING: &str =
    "1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 1, 2, 3,";

fn run(extra: &[&str], name: &str) -> serde_json::Value {
    run_with(extra, &[], name)
}

fn run_with(extra: &[&str], bench_extra: &[&str], name: &str) -> serde_json::Value {
    let server = start_server(512, extra);
    let url = server.url("/v1/completions");
    let args = ["--url", &url, "--prompt", REPEATING, "--requests", "2", "--max-tokens", "60", "--temperature", "0"];
    bench_result(&[&args[..], bench_extra].concat(), name)
}

#[test]
fn the_bench_reports_the_servers_drafted_and_kept_tokens() {
    let _serial = serial();
    let on = run(&[], "spec-on");
    let spec = &on["speculation"];
    let n = |k: &str| spec[k].as_f64().unwrap_or_else(|| panic!("{k} in {spec}"));
    assert!(n("drafts") > 0.0 && n("accepted_tokens") > 0.0, "{spec}");
    assert!(n("acceptance_pct") > 50.0 && n("acceptance_pct") <= 100.0, "{spec}");
    assert!(n("mean_accepted_length") > 1.0, "{spec}");
    assert!(n("accepted_tokens") <= n("draft_tokens"), "{spec}");
    // Usage on every chunk (vLLM's continuous_usage_stats) is accepted, and the counts add
    // up: a gap per token after the first. (rillm streams one token an event, so this run
    // would read the same without it; the decoder's unit test covers events of several.)
    let per_chunk = r#"{"stream_options": {"continuous_usage_stats": true}}"#;
    let counted = run_with(&[], &["--extra-body", per_chunk], "spec-per-chunk");
    assert!(counted["speculation"]["accepted_tokens"].as_f64().unwrap() > 0.0, "{}", counted["speculation"]);
    let tokens: u64 =
        counted["requests"].as_array().unwrap().iter().map(|r| r["completion_tokens"].as_u64().unwrap() - 1).sum();
    assert_eq!(counted["latency"]["itl_ms"]["count"].as_u64(), Some(tokens), "{}", counted["latency"]);
    let off = run(&["--speculative", "off"], "spec-off");
    assert_eq!(off["speculation"]["drafts"], 0, "{}", off["speculation"]);
    assert!(off["speculation"]["acceptance_pct"].is_null(), "nothing drafted, no rate");
}
