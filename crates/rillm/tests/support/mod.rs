//! What the CLI's tests share: the binary, the model, one model process at a time, a
//! `rillm serve` child process and a plain HTTP client.
#![allow(dead_code)] // each test binary uses its own subset

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub const BIN: &str = env!("CARGO_BIN_EXE_rillm");

/// One model process at a time: the tests share two cores.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

pub fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

pub fn model() -> PathBuf {
    rillm_models::model_for_tests()
}

pub struct Server {
    pub child: Child,
    pub port: u16,
}

impl Server {
    pub fn start(ctx: u32, extra: &[&str]) -> Self {
        let mut child = Command::new(BIN)
            .args(["serve", "--port", "0", "--max-running", "4", "--ctx-size", &ctx.to_string(), "--model"])
            .arg(model())
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("rillm serve starts");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        let port =
            line.trim().rsplit(':').next().and_then(|p| p.parse().ok()).unwrap_or_else(|| panic!("bad line {line:?}"));
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
pub fn http(port: u16, method: &str, path: &str, body: &str) -> String {
    let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) else { return String::new() };
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let req = format!("{method} {path} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}", body.len());
    s.write_all(req.as_bytes()).unwrap();
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out
}

impl Server {
    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }
}

/// Runs `rillm bench` with `args` (it must succeed) and returns its result file; `name`
/// keeps concurrent callers' files apart.
pub fn bench_result(args: &[&str], name: &str) -> serde_json::Value {
    let out = std::env::temp_dir().join(format!("rillm-bench-{}-{name}.json", std::process::id()));
    let status =
        Command::new(BIN).arg("bench").args(args).arg("--output").arg(&out).stdout(Stdio::null()).status().unwrap();
    assert!(status.success(), "rillm bench {args:?}");
    let result = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    let _ = std::fs::remove_file(out);
    result
}
