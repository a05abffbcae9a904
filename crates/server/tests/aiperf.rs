//! NVIDIA's AIPerf, a load generator serving engineers run against vLLM, SGLang and
//! TensorRT-LLM, against a real server on loopback (`tests/sdk/aiperf_profile.py`): every
//! request succeeds, its output length is the server's own count (on chat from per-chunk
//! usage, vLLM's `continuous_usage_stats`; on the Responses API from its last event), and its
//! scrape of `/metrics` finds vLLM's names.
//!
//! `scripts/test` installs `aiperf` into its venv (`RILLM_TEST_PYTHON`); without it the
//! test says it skipped, unless `RILLM_REQUIRE_SDK` is set (CI), when it fails.

mod support;

use std::path::PathBuf;
use std::time::Duration;

use support::{Options, TestServer};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aiperf_profiles_streamed_chat_and_responses_with_the_servers_token_counts() {
    let Some(python) = support::python_with("aiperf, transformers, gguf") else { return };
    let server = TestServer::start(Options { max_running: 4, max_waiting: 16, ctx: 1024, ..Options::default() }).await;
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/sdk/aiperf_profile.py");
    let run = tokio::process::Command::new(&python)
        .arg(&script)
        .arg(&server.base)
        .arg(rillm_test_support::model())
        // Not HF_HUB_OFFLINE: with it AIPerf 0.13 takes a tokenizer's local path for a hub id.
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(300), run).await.expect("aiperf finishes").expect("runs");
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "aiperf_profile.py failed\nstdout:\n{stdout}\nstderr:\n{stderr}");
    eprintln!("{stdout}");
}
