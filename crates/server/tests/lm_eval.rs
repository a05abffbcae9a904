//! lm-evaluation-harness against a real server: its `local-completions` backend scores a
//! small multiple-choice task on local data (`tests/lm_eval/`) through `echo` + `logprobs`,
//! tokenizing through the server (`tokenizer_backend=remote`: `/tokenizer_info`,
//! `/tokenize`). Every loglikelihood it reports must equal the one computed from the engine
//! directly on the same tokens, and its accuracy the one those scores give.
//!
//! `scripts/test` installs `lm_eval[api]` into its venv (`RILLM_TEST_PYTHON`); without it
//! the test says it skipped, unless `RILLM_REQUIRE_SDK` is set (CI), when it fails.

mod support;

use std::path::PathBuf;
use std::time::Duration;

use rillm_backend::{GenerateRequest, Prompt, StreamEvent};
use rillm_engine::Engine;
use serde_json::Value;
use support::{Options, TestServer};

/// The loglikelihood of `continuation` after `context`, from the engine: the tokens split
/// as lm-evaluation-harness splits them (trailing spaces of the context move to the
/// continuation; the whole is tokenized once and the context's tokens cut off).
async fn engine_loglikelihood(engine: &Engine, context: &str, continuation: &str) -> f64 {
    let kept = context.trim_end().len();
    let (context, continuation) = (&context[..kept], format!("{}{continuation}", &context[kept..]));
    let whole = engine.tokenize_text(&format!("{context}{continuation}"), false);
    let context_len = engine.tokenize_text(context, false).len();
    let mut request = GenerateRequest::new(Prompt::Tokens(whole.clone()));
    request.prompt_logprobs = Some(0);
    request.max_tokens = Some(0);
    let mut stream = engine.submit(request).expect("admitted");
    while let Some(event) = stream.next_event().await {
        if let StreamEvent::Prompt(tokens) = event {
            assert_eq!(tokens.len(), whole.len());
            return tokens[context_len..].iter().map(|t| f64::from(t.logprob.expect("scored"))).sum();
        }
    }
    panic!("no prompt scores for {context:?} + {continuation:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lm_eval_scores_a_local_task_as_the_engine_scores_it() {
    let Some(python) = support::python_with("lm_eval, aiohttp, tenacity") else { return };
    let (server, engine) =
        TestServer::start_sharing_engine(Options { max_running: 4, max_waiting: 16, ctx: 512, ..Options::default() })
            .await;
    let tasks = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/lm_eval");
    let temp = tempfile::tempdir().expect("a temp dir");
    let out = temp.path().join("lm-eval");
    let model_args = format!(
        "model={},base_url={}/v1/completions,tokenizer_backend=remote,num_concurrent=2,max_retries=1",
        engine.model_name(),
        server.base
    );
    let run = tokio::process::Command::new(&python)
        .args(["-m", "lm_eval", "--model", "local-completions", "--model_args", &model_args])
        .args(["--tasks", "rillm_mc", "--include_path", ".", "--log_samples", "--output_path"])
        .arg(&out)
        .current_dir(&tasks)
        .env("HF_DATASETS_OFFLINE", "1")
        .env("HF_HUB_OFFLINE", "1")
        .kill_on_drop(true)
        .output();
    let result = tokio::time::timeout(Duration::from_secs(300), run).await.expect("lm_eval finishes").expect("runs");
    let (stdout, stderr) = (String::from_utf8_lossy(&result.stdout), String::from_utf8_lossy(&result.stderr));
    assert!(result.status.success(), "lm_eval failed\nstdout:\n{stdout}\nstderr:\n{stderr}");

    let samples_file = walk(&out).into_iter().find(|p| p.to_string_lossy().contains("samples_rillm_mc"));
    let samples = std::fs::read_to_string(samples_file.expect("a samples file")).expect("read samples");
    let (mut docs, mut correct, mut worst) = (0, 0, 0f64);
    for line in samples.lines().filter(|l| !l.trim().is_empty()) {
        let sample: Value = serde_json::from_str(line).expect("JSON line");
        let arguments = sample["arguments"].as_object().expect("arguments");
        let mut direct = Vec::new();
        for i in 0..arguments.len() {
            let args = &arguments[&format!("gen_args_{i}")];
            let (context, continuation) =
                (args["arg_0"].as_str().expect("context"), args["arg_1"].as_str().expect("c"));
            let reported: f64 = sample["resps"][i][0][0].as_str().and_then(|v| v.parse().ok()).expect("loglikelihood");
            let expected = engine_loglikelihood(&engine, context, continuation).await;
            worst = worst.max((reported - expected).abs());
            direct.push(expected);
        }
        let best = (0..direct.len()).max_by(|&a, &b| direct[a].total_cmp(&direct[b])).expect("choices");
        let answer = sample["doc"]["answer"].as_u64().expect("answer") as usize;
        let acc = sample["acc"].as_f64().expect("acc");
        assert_eq!(acc, f64::from(u8::from(best == answer)), "{sample}");
        correct += usize::from(best == answer);
        docs += 1;
    }
    assert_eq!(docs, 8, "every document of the task was scored");
    assert!(worst < 1e-3, "lm_eval's loglikelihoods differ from the engine's by up to {worst}");
    eprintln!("lm_eval rillm_mc: acc {correct}/{docs}; largest difference from the engine's scores {worst:.2e}");
}

fn walk(dir: &std::path::Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            files.extend(walk(&path));
        } else {
            files.push(path);
        }
    }
    files
}
