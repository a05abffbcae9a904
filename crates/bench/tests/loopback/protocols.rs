//! Every engine's stream, read from a fixture server that frames it as that engine does:
//! SGLang's cumulative text, TGI's token objects, Triton's text_output, llama.cpp's native
//! stream, reasoning deltas; and the broken cases: a stream cut off before its end marker,
//! an error event midway.

use std::time::Duration;

use rillm_bench::mock::{Fault, Framing, MockConfig};
use rillm_bench::results::result::BenchResult;
use rillm_bench::run::record::Status;

use crate::support::{bench, Mock};

const TOKENS: u32 = 6;

fn mock(framing: Framing, fault: Option<Fault>) -> Mock {
    Mock::with(MockConfig {
        framing,
        fault,
        ..MockConfig::new(Duration::from_millis(20), Duration::from_millis(10), TOKENS, 1000)
    })
}

/// (framing, path, --protocol) for each protocol the bench reads.
fn targets() -> Vec<(Framing, &'static str, &'static str)> {
    vec![
        (Framing::Openai, "/generate", "auto"),
        (Framing::Openai, "/v1/completions", "auto"),
        (Framing::Openai, "/v1/chat/completions", "auto"),
        (Framing::OpenaiReasoning, "/v1/chat/completions", "chat"),
        (Framing::Sglang, "/generate", "sglang"),
        (Framing::Tgi, "/generate_stream", "auto"),
        (Framing::Triton, "/v2/models/ensemble/generate_stream", "auto"),
        (Framing::Llamacpp, "/completion", "auto"),
    ]
}

async fn run(m: &Mock, path: &str, protocol: &str, extra: &[&str]) -> BenchResult {
    let url = format!("{}{path}", m.base);
    let mut args =
        vec!["--url", &url, "--protocol", protocol, "--requests", "2", "--concurrency", "2", "--max-tokens", "6"];
    args.extend_from_slice(extra);
    bench(&args).await.remove(0)
}

fn expected_text() -> String {
    (0..TOKENS).map(|i| format!(" t{i}")).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_engines_stream_is_read_in_full() {
    for (framing, path, protocol) in targets() {
        let m = mock(framing, None);
        let r = run(&m, path, protocol, &[]).await;
        let what = format!("{framing:?} {path}: {}", r.limits);
        assert_eq!(r.completed, 2, "{what}");
        for q in &r.requests {
            let ttft = q.ttft_ms.unwrap();
            // A sanity range only (machines are noisy); the reasoning case below tells the
            // first token from the first answer token by their order.
            assert!((18.0..300.0).contains(&ttft), "TTFT at the first token, reasoning included: {ttft} ({what})");
            if framing == Framing::OpenaiReasoning {
                // Half the tokens are reasoning: the answer starts three tokens later.
                assert_eq!(q.text.as_deref(), Some(" t3 t4 t5"), "{what}");
                assert!(q.reasoning_chars > 0);
                assert!(q.time_to_first_answer_ms.unwrap() >= ttft + 25.0, "{q:?}");
            } else {
                assert_eq!(q.text.as_deref(), Some(expected_text().as_str()), "no repeated cumulative text: {what}");
            }
            assert_eq!(q.content_events, Some(TOKENS as usize), "{what}");
            if framing != Framing::Triton {
                assert_eq!(q.completion_tokens, Some(TOKENS), "{what}");
            }
        }
        if matches!(framing, Framing::Sglang | Framing::Tgi | Framing::Llamacpp) || path == "/generate" {
            assert!(r.latency.itl_ms.is_some(), "tokens per event are known: {what}");
        }
        if framing == Framing::Triton {
            assert_eq!(r.output_tokens_per_s, None, "no usage and no tokenizer: {what}");
            assert!(r.limits.contains("no end-of-stream marker"), "{what}");
        }
        if framing == Framing::Llamacpp {
            assert!(r.requests.iter().all(|q| q.cached_tokens == Some(0) && q.prompt_tokens == Some(4)), "{what}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_cut_off_before_its_end_marker_is_failed_not_completed() {
    for (framing, path, protocol) in targets() {
        let m = mock(framing, Some(Fault::Truncate { after: 3 }));
        let r = run(&m, path, protocol, &[]).await;
        let what = format!("{framing:?} {path}: {}", r.limits);
        if framing == Framing::Triton {
            // Triton has no end marker: the cut cannot be seen, and the limits say so.
            assert_eq!(r.completed, 2, "{what}");
            continue;
        }
        assert_eq!((r.completed, r.failed), (0, 2), "{what}");
        for q in &r.requests {
            assert_eq!(q.status, Status::Failed);
            assert!(q.error.as_deref().unwrap().contains("truncated"), "{q:?}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_error_event_midway_fails_the_request_with_its_message() {
    for (framing, path, protocol) in targets() {
        let m = mock(framing, Some(Fault::Error { after: 2 }));
        let r = run(&m, path, protocol, &[]).await;
        let what = format!("{framing:?} {path}: {}", r.limits);
        assert_eq!((r.completed, r.failed), (0, 2), "{what}");
        for q in &r.requests {
            assert!(q.error.as_deref().unwrap().contains("mock: injected failure"), "{what}: {q:?}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tokenizer_counts_output_the_server_did_not_and_says_so() {
    let temp = tempfile::tempdir().expect("a temp dir");
    let dir = temp.path();
    // A word-level tokenizer.json: " t0 t1 ..." is one token per word.
    let vocab: serde_json::Map<String, serde_json::Value> = (0..TOKENS)
        .map(|i| (format!("t{i}"), serde_json::json!(i + 2)))
        .chain([("<unk>".to_string(), serde_json::json!(0))])
        .collect();
    let tokenizer = serde_json::json!({
        "version": "1.0", "truncation": null, "padding": null, "added_tokens": [], "normalizer": null,
        "pre_tokenizer": {"type": "Whitespace"}, "post_processor": null, "decoder": null,
        "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "<unk>"}
    });
    let path = dir.join("tokenizer.json");
    std::fs::write(&path, tokenizer.to_string()).unwrap();
    let m = mock(Framing::Triton, None);
    let r = run(&m, "/v2/models/ensemble/generate_stream", "auto", &["--tokenizer", path.to_str().unwrap()]).await;
    assert!(
        r.requests.iter().all(|q| q.completion_tokens == Some(TOKENS) && q.completion_tokens_estimated),
        "{:?}",
        r.requests
    );
    assert!(r.output_tokens_per_s.is_some());
    assert!(r.limits.contains("2 requests' output token counts are estimates"), "{}", r.limits);
}
