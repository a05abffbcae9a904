//! `rillm serve` as a child process on a loopback port it picks itself, and plain HTTP/1.1
//! to it (the CLI's tests check the binary as users run it).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running `rillm serve`; killed on drop.
pub struct ServeProcess {
    pub child: Child,
    pub port: u16,
}

impl ServeProcess {
    /// Runs `binary serve --port 0 <args>`, reads the address it prints, and waits for
    /// `/ready`.
    pub fn start(binary: &Path, args: &[&str]) -> Self {
        let mut child = Command::new(binary)
            .args(["serve", "--port", "0"])
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("rillm serve starts");
        let mut line = String::new();
        if let Some(stdout) = child.stdout.take() {
            let _ = BufReader::new(stdout).read_line(&mut line);
        }
        let port =
            line.trim().rsplit(':').next().and_then(|p| p.parse().ok()).unwrap_or_else(|| panic!("bad line {line:?}"));
        let server = Self { child, port };
        let deadline = Instant::now() + Duration::from_secs(60);
        while !http(port, "GET", "/ready", "").starts_with("HTTP/1.1 200") {
            assert!(Instant::now() < deadline, "never ready");
            std::thread::sleep(Duration::from_millis(50));
        }
        server
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }
}

impl Drop for ServeProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One HTTP/1.1 exchange over loopback (`Connection: close`); the raw response, or ""
/// when nothing listens.
pub fn http(port: u16, method: &str, path: &str, body: &str) -> String {
    let Ok(mut stream) = TcpStream::connect(("127.0.0.1", port)) else { return String::new() };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(60)));
    let request = format!(
        "{method} {path} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\
         connection: close\r\n\r\n{body}",
        body.len()
    );
    if stream.write_all(request.as_bytes()).is_err() {
        return String::new();
    }
    let mut out = String::new();
    let _ = stream.read_to_string(&mut out);
    out
}
