//! Constraint workloads through the `rillm bench` binary against `rillm serve` on the real
//! model: every request asks for structured output, and the result says how many outputs
//! were valid, request by request and in all.

use std::path::PathBuf;

use serde_json::Value;

mod support;

use support::{bench_result, serial, start_server};

fn bench<S: AsRef<str>>(args: &[S], name: &str) -> Value {
    let args: Vec<&str> = args.iter().map(AsRef::as_ref).collect();
    bench_result(&args, &format!("structured-{name}"))
}

/// The shipped schemas, round-robin, greedy, 300 tokens at most.
fn schema_workload(url: &str, requests: &str, concurrency: &str) -> Vec<String> {
    let schemas = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../bench/schemas");
    let args = ["--url", url, "--response-format", "json_schema", "--schemas", schemas.to_str().unwrap_or_default()];
    let load = ["--requests", requests, "--concurrency", concurrency, "--max-tokens", "300", "--temperature", "0"];
    args.iter().chain(&load).map(|a| a.to_string()).collect()
}

#[test]
fn a_json_schema_workload_checks_every_output_against_its_schema() {
    let _serial = serial();
    let server = start_server(1024, &[]);
    let result = bench(&schema_workload(&server.url("/v1/chat/completions"), "32", "4"), "schema");
    let summary = &result["structured_outputs"];
    let (checked, finished, valid) = (
        summary["checked"].as_u64().unwrap(),
        summary["finished"].as_u64().unwrap(),
        summary["valid"].as_u64().unwrap(),
    );
    assert_eq!(checked, result["completed"].as_u64().unwrap(), "{summary}");
    assert_eq!(checked, 32, "{summary}");
    assert_eq!(valid, finished, "every finished output is schema-valid on rillm: {summary}");
    assert!(finished >= 24, "{summary}");
    let requests = result["requests"].as_array().unwrap();
    for r in requests {
        let check = &r["output_check"];
        let reason = r["finish_reason"].as_str().unwrap_or_default();
        assert!(reason == "stop" || reason == "length", "{r}");
        if reason == "stop" {
            assert_eq!(check["valid"], true, "{r}");
        }
    }
    let names = result["run_context"]["workload"]["constraints"]["names"].as_array().unwrap();
    assert!(names.len() >= 30, "the workload names its schemas");
}

#[test]
fn choice_and_regex_workloads_over_generate_and_completions() {
    let _serial = serial();
    let server = start_server(512, &[]);
    let generate = server.url("/generate");
    let choice = bench(
        &[
            "--url",
            &generate,
            "--response-format",
            "choice",
            "--choices",
            "yes,no",
            "--prompt",
            "Is the sky blue?",
            "--requests",
            "4",
            "--concurrency",
            "2",
            "--temperature",
            "1",
        ],
        "choice",
    );
    let s = &choice["structured_outputs"];
    assert_eq!((s["finished"].as_u64(), s["valid"].as_u64()), (Some(4), Some(4)), "{s}");
    let completions = server.url("/v1/completions");
    let regex = bench(
        &[
            "--url",
            &completions,
            "--response-format",
            "regex",
            "--regex",
            "[0-9]{4}-[0-9]{2}-[0-9]{2}",
            "--prompt",
            "Today's date:",
            "--requests",
            "3",
            "--concurrency",
            "1",
            "--max-tokens",
            "20",
        ],
        "regex",
    );
    let s = &regex["structured_outputs"];
    assert_eq!((s["finished"].as_u64(), s["valid"].as_u64()), (Some(3), Some(3)), "{s}");
}

/// The Responses API as the bench speaks it: schemas in `text.format`, text from its deltas,
/// the server's usage and finish reason from the `response.completed` that ends each stream.
#[test]
fn a_json_schema_workload_over_the_responses_api() {
    let _serial = serial();
    let server = start_server(1024, &[]);
    let result = bench(&schema_workload(&server.url("/v1/responses"), "6", "2"), "responses");
    assert_eq!(result["protocol"], "responses", "picked from the URL path");
    let s = &result["structured_outputs"];
    assert_eq!(result["completed"].as_u64(), Some(6), "{s}");
    assert_eq!(s["valid"], s["finished"], "every finished output is schema-valid: {s}");
    for r in result["requests"].as_array().unwrap() {
        let reason = r["finish_reason"].as_str().unwrap_or_default();
        assert!(reason == "stop" || reason == "length", "{r}");
        assert!(r["completion_tokens"].as_u64().is_some_and(|n| n > 0), "the server's count: {r}");
        assert!(r["prompt_tokens"].as_u64().is_some_and(|n| n > 0), "{r}");
    }
}
