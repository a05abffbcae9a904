//! The `rillm` binary end to end: serve, bench the prototype's way, drain on SIGTERM.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

mod support;

use support::{http, model, serial, start_server, BIN};

#[test]
fn the_prototypes_bench_command_runs_against_rillm_serve_with_no_rejections() {
    let _g = serial();
    let server = start_server(512, &[]);
    let dir = tempfile::tempdir().expect("a temp dir");
    let out = dir.path().join("run.json");
    let url = format!("http://127.0.0.1:{}/generate", server.port);
    let status = Command::new(BIN)
        .args(["bench", "--url", &url, "--requests", "6", "--rate", "2", "--output"])
        .arg(&out)
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert!(status.success());
    let result: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    assert_eq!(result["offered_requests"], 6);
    assert_eq!(result["rejected_429"], 0, "{}", result["limits"]);
    assert_eq!(result["completed"], 6, "{}", result["limits"]);
    // Goodput is whatever met the TTFT SLO, per second of the run; how many did depends on
    // how busy this machine is, so the test checks the arithmetic, not the speed.
    let slo = result["ttft_slo_ms"].as_f64().unwrap();
    let met = result["requests"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["ttft_ms"].as_f64().is_some_and(|t| t <= slo))
        .count();
    let expected = met as f64 / result["duration_s"].as_f64().unwrap();
    let goodput = result["ttft_goodput_rps"].as_f64().unwrap();
    assert!((goodput - expected).abs() < 0.01, "ttft_goodput_rps {goodput}, but {met} of 6 met the SLO: {expected}");
    for r in result["requests"].as_array().unwrap() {
        assert!(r["content_events"].as_u64().unwrap() > 0 && !r["text"].as_str().unwrap().is_empty());
    }
}

#[test]
fn sigterm_lets_the_in_flight_stream_finish_then_exits_zero() {
    let _g = serial();
    let mut server = start_server(512, &["--shutdown-timeout", "30"]);
    let port = server.port;
    let stream = std::thread::spawn(move || {
        http(port, "POST", "/generate", r#"{"prompt": "Count to fifty:", "max_tokens": 80, "ignore_eos": true}"#)
    });
    std::thread::sleep(Duration::from_millis(300));
    let pid = server.child.id().to_string();
    assert!(Command::new("kill").args(["-TERM", &pid]).status().unwrap().success());
    let response = stream.join().unwrap();
    assert!(response.contains("event: done") && response.contains("\"finish_reason\":\"length\""), "{response}");
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = server.child.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "did not exit");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "{status:?}");
}

#[test]
fn sigterm_while_the_model_loads_exits_zero_promptly() {
    let _g = serial();
    let mut child = Command::new(BIN)
        .args(["serve", "--port", "0", "--model"])
        .arg(model())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(child.stdout.take().unwrap()), &mut line).unwrap();
    assert!(line.contains("listening"), "{line:?}");
    // At once: the model is loading now.
    assert!(Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap().success());
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "did not exit");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "a signal during load is a clean stop: {status:?}");
}

#[test]
fn an_empty_api_key_is_refused_at_start() {
    let out = Command::new(BIN)
        .args(["serve", "--port", "0", "--model", "/nonexistent.gguf"])
        .env("RILLM_API_KEY", "")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("API key is empty"), "{stderr}");
}

#[test]
fn generate_streams_text_and_reports_timing() {
    let _g = serial();
    let out = Command::new(BIN)
        .args(["generate", "--prompt", "The capital of France is", "--max-tokens", "8", "--ctx-size", "256", "--model"])
        .arg(model())
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("Paris"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("completion_tokens=8") && stderr.contains("ttft_ms="), "{stderr}");
}

#[test]
fn a_missing_or_bad_model_fails_with_a_message_naming_the_file() {
    let _g = serial();
    let out =
        Command::new(BIN).args(["generate", "--prompt", "x", "--model", "/nonexistent/model.gguf"]).output().unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("/nonexistent/model.gguf"), "{stderr}");
}

#[test]
fn draft_model_flags_that_contradict_each_other_are_refused_before_loading() {
    let refused = |args: &[&str]| {
        let out = Command::new(BIN)
            .args(["generate", "--prompt", "x", "--model", "/nonexistent/model.gguf"])
            .args(args)
            .output()
            .unwrap();
        assert!(!out.status.success(), "{args:?}");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let stderr = refused(&["--speculative", "draft"]);
    assert!(stderr.contains("--speculative draft needs --draft-model"), "{stderr}");
    let stderr = refused(&["--speculative", "off", "--draft-model", "/nonexistent/draft.gguf"]);
    assert!(stderr.contains("--draft-model is used only with --speculative draft"), "{stderr}");
    // A draft model that is not there is named, as the model would be.
    let out = Command::new(BIN)
        .args(["generate", "--prompt", "x", "--draft-model", "/nonexistent/draft.gguf", "--model"])
        .arg(model())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && stderr.contains("/nonexistent/draft.gguf"), "{stderr}");
}
