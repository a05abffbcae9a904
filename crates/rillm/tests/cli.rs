//! The `rillm` binary end to end: serve, bench the prototype's way, drain on SIGTERM.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_rillm");

/// One model process at a time: the tests share two cores.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

fn model() -> PathBuf {
    match std::env::var_os("RILLM_MODEL") {
        Some(p) => p.into(),
        None => rillm_engine::fetch::ensure_default_model(|m| eprintln!("{m}")).expect("default model"),
    }
}

struct Server {
    child: Child,
    port: u16,
}

impl Server {
    fn start(extra: &[&str]) -> Self {
        let mut child = Command::new(BIN)
            .args(["serve", "--port", "0", "--ctx-size", "512", "--max-running", "4", "--model"])
            .arg(model())
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("rillm serve starts");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        let port = line.trim().rsplit(':').next().and_then(|p| p.parse().ok()).unwrap_or_else(|| panic!("bad line {line:?}"));
        let server = Self { child, port };
        server.wait_ready();
        server
    }

    fn wait_ready(&self) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while !http(self.port, "GET", "/ready", "").starts_with("HTTP/1.1 200") {
            assert!(Instant::now() < deadline, "never ready");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A plain HTTP/1.1 exchange over loopback; returns the raw response.
fn http(port: u16, method: &str, path: &str, body: &str) -> String {
    let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) else { return String::new() };
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let req = format!("{method} {path} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}", body.len());
    s.write_all(req.as_bytes()).unwrap();
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out
}

#[test]
fn the_prototypes_bench_command_runs_against_rillm_serve_with_no_rejections() {
    let _g = serial();
    let server = Server::start(&[]);
    let out = std::env::temp_dir().join(format!("rillm-run-{}.json", std::process::id()));
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
    let met = result["requests"].as_array().unwrap().iter().filter(|r| r["ttft_ms"].as_f64().is_some_and(|t| t <= slo)).count();
    let expected = met as f64 / result["duration_s"].as_f64().unwrap();
    let goodput = result["ttft_goodput_rps"].as_f64().unwrap();
    assert!((goodput - expected).abs() < 0.01, "ttft_goodput_rps {goodput}, but {met} of 6 met the SLO: {expected}");
    for r in result["requests"].as_array().unwrap() {
        assert!(r["content_events"].as_u64().unwrap() > 0 && !r["text"].as_str().unwrap().is_empty());
    }
    let _ = std::fs::remove_file(out);
}

#[test]
fn sigterm_lets_the_in_flight_stream_finish_then_exits_zero() {
    let _g = serial();
    let mut server = Server::start(&["--shutdown-timeout", "30"]);
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
    let out = Command::new(BIN).args(["generate", "--prompt", "x", "--model", "/nonexistent/model.gguf"]).output().unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("/nonexistent/model.gguf"), "{stderr}");
}
