//! rillm replicas behind a real router from PyPI (`scripts/cluster`: SGLang's model
//! gateway, `sglang-router`), as a cluster runs them: real processes over loopback. Prefix
//! routing keeps each prefix on one replica's cache, round robin spreads; a replica killed
//! or drained is taken out by the router's health check, and back once it serves again.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

mod support;

use support::{http, json_body, serial, BIN};

/// `scripts/cluster` running, with its replicas' ports and pids; stopped (SIGTERM: the
/// script stops its children) on drop.
struct Cluster {
    script: Child,
    port: u16,
    replicas: Vec<(u16, u32)>,
}

impl Cluster {
    /// Two replicas of the default model behind `sglang-router` with `policy`, or `None`
    /// (the test skips) where the router's venv is not set up.
    fn start(policy: &str) -> Option<Self> {
        Self::start_behind("sglang", policy)
    }

    /// The same behind `router` (`sglang` or `vllm`).
    fn start_behind(router: &str, policy: &str) -> Option<Self> {
        let python = router_python()?;
        let port = free_ports();
        let mut script = Command::new("../../scripts/cluster")
            .args(["--router", router, "--policy", policy, "--port", &port.to_string()])
            .args(["--", "--max-running", "4"])
            .env("RILLM_BIN", BIN)
            .env("RILLM_ROUTER_PYTHON", python)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("scripts/cluster starts");
        let mut replicas = Vec::new();
        let mut lines = BufReader::new(script.stdout.take().expect("stdout")).lines();
        for line in lines.by_ref() {
            let line = line.expect("a line");
            // "replica 0: http://127.0.0.1:P pid N (T threads)"
            if let Some(rest) = line.strip_prefix("replica ") {
                let words: Vec<&str> = rest.split_whitespace().collect();
                let replica_port = words[1].rsplit(':').next().and_then(|p| p.parse().ok()).expect("a port");
                replicas.push((replica_port, words[3].parse().expect("a pid")));
            }
            if line.starts_with("logs:") {
                break;
            }
        }
        std::thread::spawn(move || lines.for_each(drop));
        assert_eq!(replicas.len(), 2, "the cluster did not start");
        Some(Self { script, port, replicas })
    }

    fn post(&self, path: &str, body: &str) -> String {
        http(self.port, "POST", path, body)
    }

    /// Whether the router holds replica `i` healthy (`/workers`).
    fn healthy(&self, i: usize) -> bool {
        let workers = json_body(&http(self.port, "GET", "/workers", ""));
        let url = format!("http://127.0.0.1:{}", self.replicas[i].0);
        workers["workers"].as_array().into_iter().flatten().any(|w| w["url"] == url.as_str() && w["is_healthy"] == true)
    }

    fn wait_until(&self, what: &str, mut done: impl FnMut(&Self) -> bool) -> Duration {
        let started = Instant::now();
        while !done(self) {
            assert!(started.elapsed() < Duration::from_secs(30), "{what}: not within 30 s");
            std::thread::sleep(Duration::from_millis(100));
        }
        started.elapsed()
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = Command::new("kill").args(["-TERM", &self.script.id().to_string()]).status();
        let _ = self.script.wait();
    }
}

/// The router venv's Python (`RILLM_ROUTER_PYTHON`, set by `scripts/test`), or `None` with
/// a note; under `RILLM_REQUIRE_SDK` (CI) its absence fails the test.
fn router_python() -> Option<String> {
    let python = std::env::var("RILLM_ROUTER_PYTHON").ok().filter(|p| {
        Command::new(p).args(["-c", "import sglang_router"]).output().is_ok_and(|out| out.status.success())
    });
    if python.is_none() {
        assert!(std::env::var_os("RILLM_REQUIRE_SDK").is_none(), "RILLM_REQUIRE_SDK is set but no router venv");
        eprintln!("skipped: RILLM_ROUTER_PYTHON has no sglang_router (scripts/test sets it up)");
    }
    python
}

/// A base port P with P, P+1, P+2 (router, replicas) and P+100 (router metrics) free.
fn free_ports() -> u16 {
    for _ in 0..100 {
        let base = TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).unwrap_or(0);
        if (20_000..60_000).contains(&base)
            && [0, 1, 2, 100].iter().all(|d| TcpListener::bind(("127.0.0.1", base + d)).is_ok())
        {
            return base;
        }
    }
    panic!("no free ports");
}

/// A chat request whose system prompt is `prefix`, with `question` after it.
fn chat(prefix: &str, question: &str, max_tokens: u32) -> String {
    chat_body(prefix, question, max_tokens).to_string()
}

fn chat_body(prefix: &str, question: &str, max_tokens: u32) -> serde_json::Value {
    serde_json::json!({
        "messages": [{"role": "system", "content": prefix}, {"role": "user", "content": question}],
        "max_tokens": max_tokens, "temperature": 0,
    })
}

/// A system prompt of about 200 tokens, distinct per `tenant`.
fn system_prompt(tenant: &str) -> String {
    let rules = (1..=20).map(|i| format!("Rule {i} of {tenant}: answer politely and briefly.")).collect::<Vec<_>>();
    format!("You are the assistant of {tenant}. {}", rules.join(" "))
}

/// A replica's counter `name` (summed over labels) from its `/metrics`.
fn counter(port: u16, name: &str) -> f64 {
    let response = http(port, "GET", "/metrics", "");
    response
        .lines()
        .filter(|l| l.starts_with(name) && l[name.len()..].starts_with(['{', ' ']))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

fn finished(cluster: &Cluster) -> Vec<f64> {
    cluster.replicas.iter().map(|&(port, _)| counter(port, "vllm:request_success_total")).collect()
}

fn cached_tokens(response: &str) -> u64 {
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    json_body(response)["usage"]["prompt_tokens_details"]["cached_tokens"].as_u64().expect("cached_tokens")
}

/// The replica that served `body` (sent alone: the one whose finished count grew), and
/// the response.
fn served_by(cluster: &Cluster, body: &str) -> (usize, String) {
    let before = finished(cluster);
    let response = cluster.post("/v1/chat/completions", body);
    let grew = finished(cluster).iter().zip(&before).position(|(after, before)| after > before);
    (grew.expect("a replica finished the request"), response)
}

#[test]
fn cache_aware_keeps_each_prefix_on_one_replica_and_round_robin_spreads_it() {
    let _g = serial();
    let Some(cluster) = Cluster::start("cache_aware") else { return };
    let (acme, globex) = (system_prompt("Acme"), system_prompt("Globex"));
    // Acme's first request runs long on one replica; Globex's first matches nothing the
    // router has seen, so it goes to the least loaded: the other one.
    let port = cluster.port;
    let mut long = chat_body(&acme, "Tell me everything.", 200);
    long["ignore_eos"] = true.into();
    let long = long.to_string();
    let acme_first = std::thread::spawn(move || http(port, "POST", "/v1/chat/completions", &long));
    let acme_replica = busy_replica(&cluster);
    let (globex_replica, response) = served_by(&cluster, &chat(&globex, "Hi", 4));
    cached_tokens(&response);
    assert_ne!(acme_replica, globex_replica, "a new prefix goes to the less loaded replica");
    cached_tokens(&acme_first.join().expect("Acme's first request"));
    // Every later request of a tenant goes where its prefix is cached, and finds it there.
    for question in ["What time is it?", "Who are you?", "Tell me a joke"] {
        for (tenant, prefix, replica) in [("Acme", &acme, acme_replica), ("Globex", &globex, globex_replica)] {
            let (served, response) = served_by(&cluster, &chat(prefix, question, 4));
            assert_eq!(served, replica, "{tenant}'s request went to the other replica");
            let cached = cached_tokens(&response);
            assert!(cached >= 150, "{tenant}'s request found only {cached} tokens cached");
        }
    }
    // The router says so too: each replica answered requests through it.
    let metrics = http(cluster.port + 100, "GET", "/metrics", "");
    for (port, _) in &cluster.replicas {
        let outcome = format!("smg_worker_cb_outcomes_total{{worker=\"http://127.0.0.1:{port}\",outcome=\"success\"}}");
        assert!(metrics.contains(&outcome), "the router's metrics lack {outcome}");
    }
    drop(cluster);

    let Some(cluster) = Cluster::start("round_robin") else { return };
    let before = finished(&cluster);
    let prefix = system_prompt("Initech");
    let cached: Vec<u64> = ["Hi", "Hello", "Hey", "Yo"]
        .iter()
        .map(|q| cached_tokens(&cluster.post("/v1/chat/completions", &chat(&prefix, q, 4))))
        .collect();
    let served: Vec<f64> = finished(&cluster).iter().zip(&before).map(|(after, before)| after - before).collect();
    assert_eq!(served, [2.0, 2.0], "round robin alternates");
    assert!(cached[1] < 150, "the second request went to the other, cold replica: {cached:?}");
}

/// Sends a streaming chat request through the router and returns the connection once its
/// first chunk arrived.
fn start_stream(port: u16) -> BufReader<TcpStream> {
    let body = serde_json::json!({
        "messages": [{"role": "user", "content": "Write a long story."}],
        "max_tokens": 300, "ignore_eos": true, "stream": true,
    })
    .to_string();
    let mut stream = TcpStream::connect(("127.0.0.1", port)).expect("the router listens");
    stream.set_read_timeout(Some(Duration::from_secs(60))).expect("a timeout");
    let request = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n\
         content-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).expect("sent");
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    while !line.starts_with("data: ") {
        line.clear();
        assert!(reader.read_line(&mut line).expect("a line") > 0, "the stream ended before its first chunk");
    }
    reader
}

/// The replica running a request (by its `num_requests_running` gauge), once one does.
fn busy_replica(cluster: &Cluster) -> usize {
    let started = Instant::now();
    loop {
        let running = cluster.replicas.iter().map(|&(port, _)| counter(port, "vllm:num_requests_running"));
        if let Some(busy) = running.collect::<Vec<_>>().iter().position(|&r| r >= 1.0) {
            return busy;
        }
        assert!(started.elapsed() < Duration::from_secs(20), "no replica runs the request");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn signal(pid: u32, name: &str) {
    assert!(Command::new("kill").args([name, &pid.to_string()]).status().is_ok_and(|s| s.success()));
}

#[test]
fn a_killed_replica_is_taken_out_and_back_and_a_drained_one_finishes_its_streams() {
    let _g = serial();
    let Some(cluster) = Cluster::start("cache_aware") else { return };

    // SIGKILL the replica serving a stream: the stream breaks off without its end, the
    // router's health check takes the replica out, and no request fails after that.
    let mut stream = start_stream(cluster.port);
    let victim = busy_replica(&cluster);
    signal(cluster.replicas[victim].1, "-KILL");
    let mut rest = String::new();
    let _ = stream.read_to_string(&mut rest);
    assert!(!rest.contains("[DONE]"), "a stream cut by a dead replica must not look complete");
    let noticed = cluster.wait_until("the router takes the dead replica out", |c| !c.healthy(victim));
    eprintln!("the router noticed the dead replica after {noticed:?}");
    for i in 0..6 {
        let answer = cluster.post("/v1/chat/completions", &chat(&system_prompt("Umbrella"), &format!("Q{i}"), 4));
        assert!(answer.starts_with("HTTP/1.1 200"), "request {i} after the router noticed: {answer}");
    }

    // Restarted on its port, it is taken back.
    let port = cluster.replicas[victim].0.to_string();
    let mut restarted = Command::new(BIN)
        .args(["serve", "--port", &port, "--threads", "1", "--max-running", "4"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("the replica restarts");
    let back = cluster.wait_until("the router takes the replica back", |c| c.healthy(victim));
    eprintln!("the router took the restarted replica back after {back:?}");

    // SIGTERM the replica serving a stream: it drains (its /ready turns 503, the router
    // stops sending to it) and the stream completes; requests sent meanwhile are answered.
    let mut stream = start_stream(cluster.port);
    let draining = busy_replica(&cluster);
    let pid = if draining == victim { restarted.id() } else { cluster.replicas[draining].1 };
    signal(pid, "-TERM");
    for i in 0..4 {
        let answer = cluster.post("/v1/chat/completions", &chat(&system_prompt("Hooli"), &format!("Q{i}"), 4));
        assert!(answer.starts_with("HTTP/1.1 200"), "request {i} during the drain: {answer}");
    }
    let mut rest = String::new();
    let _ = stream.read_to_string(&mut rest);
    assert!(rest.contains("[DONE]"), "the draining replica cut its stream: {rest}");
    cluster.wait_until("the router takes the draining replica out", |c| !c.healthy(draining));
    let _ = restarted.kill();
    let _ = restarted.wait();
}

#[test]
fn vllm_router_forwards_what_clients_send_and_rillm_answers_it() {
    let _g = serial();
    let Some(cluster) = Cluster::start_behind("vllm", "cache_aware") else { return };
    // vllm-router adds SGLang's fields and vLLM's `include_reasoning` to what it forwards,
    // and asks `/v1/chat/completions/render` first (rillm has none: it forwards anyway).
    let prefix = system_prompt("Wayne");
    let first = cluster.post("/v1/chat/completions", &chat(&prefix, "Hi", 4));
    cached_tokens(&first);
    assert!(cached_tokens(&cluster.post("/v1/chat/completions", &chat(&prefix, "Hello", 4))) >= 150);
    let completion = cluster.post("/v1/completions", r#"{"prompt": "Once upon a time", "max_tokens": 4}"#);
    assert!(completion.starts_with("HTTP/1.1 200"), "{completion}");
    assert_eq!(json_body(&completion)["usage"]["completion_tokens"], 4);
}
