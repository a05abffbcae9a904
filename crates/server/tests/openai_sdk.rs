//! The official `openai` Python SDK against a real server on loopback: the calls its users
//! make (`chat.completions.parse()` with a pydantic model, streamed `json_schema`, chat and
//! completions `logprobs`, prompt scoring and `n`, logit bias and penalties, tool loops, the
//! Responses API; Agents SDK agents on chat and on its default, the Responses API, typed
//! agents with tools and an `output_type`; a reasoning model's thought and effort), from
//! `tests/sdk/`. `scripts/test` installs the SDK into its venv and names the interpreter in
//! `RILLM_TEST_PYTHON`; without the SDK the test says it skipped, unless `RILLM_REQUIRE_SDK`
//! is set (CI), when it fails.

mod support;

use std::path::PathBuf;
use std::time::Duration;

use support::{Options, TestServer};

async fn run_script(script: &str) {
    run_script_with(script, true).await;
}

/// `script` against a server with prefix caching on or off. Off, a script that compares two
/// requests' greedy outputs for one prompt compares rows computed in the same shape, equal
/// to the token (with reuse the second computes only its tail, where a near-tie may flip).
async fn run_script_with(script: &str, prefix_caching: bool) {
    run_script_on(script, Options { prefix_caching, ..options() }).await;
}

fn options() -> Options {
    Options { max_running: 4, max_waiting: 16, ctx: 1024, ..Options::default() }
}

/// `script` against a server started with `options`.
async fn run_script_on(script: &str, options: Options) {
    let Some(python) = support::python_with("openai, pydantic, agents") else { return };
    let server = TestServer::start(options).await;
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/sdk").join(script);
    let run = tokio::process::Command::new(&python).arg(&path).arg(&server.base).kill_on_drop(true).output();
    let out =
        tokio::time::timeout(Duration::from_secs(300), run).await.expect("the SDK script finishes").expect("runs");
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{script} failed\nstdout:\n{stdout}\nstderr:\n{stderr}");
    eprintln!("{stdout}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn structured_outputs_through_the_openai_sdk() {
    run_script("structured_outputs.py").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logprobs_through_the_openai_sdk() {
    run_script_with("logprobs.py", false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_calls_through_the_openai_sdk_and_the_agents_sdk() {
    run_script("tools.py").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_responses_api_through_the_openai_sdk_and_the_agents_sdk_default_model() {
    run_script("responses.py").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tools_and_a_typed_answer_through_the_agents_sdk_and_the_openai_sdk() {
    run_script("typed_agents.py").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sampling_parameters_through_the_openai_sdk() {
    run_script_with("sampling.py", false).await;
}

/// With QwQ-32B's chat template SmolLM2's reply is a thought until the server closes it:
/// the SDK reads it apart from the answer (`reasoning.py`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thought_apart_from_the_answer_through_the_openai_sdk() {
    use rillm_server::{EffortBudgets, ReasoningOptions, ServerConfig};
    let budgets = EffortBudgets { low: Some(6), ..EffortBudgets::default() };
    let server = ServerConfig { reasoning: ReasoningOptions { budgets, ..Default::default() }, ..Default::default() };
    let template = include_str!("../../engine/tests/fixtures/qwq-32b.jinja").to_string();
    // Whole and streamed replies to one prompt are compared as text.
    let options = Options { chat_template: Some(template), prefix_caching: false, server, ..options() };
    run_script_on("reasoning.py", options).await;
}
