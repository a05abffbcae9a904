//! What idle, slow and too many clients can hold: raw TCP against `run` over the scripted
//! backend, with short limits so each case takes a few seconds at most.

mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use rillm_backend::scripted::{Script, ScriptedBackend};
use rillm_server::{Backend, ConnectionLimits, ServerConfig};
use serde_json::json;
use support::scripted::{post, Running};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

async fn start(limits: ConnectionLimits, script: Script) -> Running {
    let config = ServerConfig { connections: limits, ..ServerConfig::default() };
    let server = Running::start(config, move || Ok(ScriptedBackend::start(script) as Arc<dyn Backend>)).await;
    server.wait_ready().await;
    server
}

async fn connect(server: &Running) -> TcpStream {
    TcpStream::connect(server.base.trim_start_matches("http://")).await.unwrap()
}

/// Reads until the server closes the connection; returns what it sent and how long that took.
async fn read_until_closed(tcp: &mut TcpStream, limit: Duration) -> (String, Duration) {
    let started = Instant::now();
    let mut received = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match tokio::time::timeout_at((started + limit).into(), tcp.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return (String::from_utf8_lossy(&received).into_owned(), started.elapsed()),
            Ok(Ok(n)) => received.extend_from_slice(&buf[..n]),
            Err(_) => panic!("still open after {limit:?}; received {:?}", String::from_utf8_lossy(&received)),
        }
    }
}

#[tokio::test]
async fn headers_that_never_finish_arriving_lose_the_connection_after_the_header_read_timeout() {
    let limits = ConnectionLimits { header_read_timeout: Duration::from_millis(300), ..ConnectionLimits::default() };
    let server = start(limits, Script::default()).await;
    let mut slow = connect(&server).await;
    slow.write_all(b"GET /health HTTP/1.1\r\nHost: loc").await.unwrap();
    let (_, took) = read_until_closed(&mut slow, Duration::from_secs(3)).await;
    assert!(took >= Duration::from_millis(250), "closed before the timeout: {took:?}");

    let mut silent = connect(&server).await;
    let (_, took) = read_until_closed(&mut silent, Duration::from_secs(3)).await;
    assert!(took >= Duration::from_millis(250), "{took:?}");
}

#[tokio::test]
async fn an_idle_kept_alive_connection_is_closed_but_a_slow_silent_response_is_not_cut_off() {
    let limits = ConnectionLimits { idle_timeout: Duration::from_millis(300), ..ConnectionLimits::default() };
    // A non-streamed completion of 6 tokens at 150 ms: ~0.9 s without a byte on the wire.
    let script = Script { step: Duration::from_millis(150), reply_tokens: 6, ..Script::default() };
    let server = start(limits, script).await;

    let mut idle = connect(&server).await;
    idle.write_all(b"GET /health HTTP/1.1\r\nHost: localhost\r\n\r\n").await.unwrap();
    let (sent, took) = read_until_closed(&mut idle, Duration::from_secs(3)).await;
    assert!(sent.starts_with("HTTP/1.1 200"), "{sent:?}");
    assert!(took >= Duration::from_millis(250), "{took:?}");

    let response = post(&server.base, "/v1/completions", json!({"prompt": "slow answer"})).await;
    assert_eq!(response.status(), 200);
    let body: serde_json::Value = response.json().await.unwrap();
    assert_eq!(body["choices"][0]["text"], "w0 w1 w2 w3 w4 w5");
}

/// Sends `request` on `tcp` and reads one response (headers and a `Content-Length` body).
async fn exchange(tcp: &mut TcpStream, request: &str) -> String {
    tcp.write_all(request.as_bytes()).await.expect("sent");
    let mut received = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let text = String::from_utf8_lossy(&received).into_owned();
        if let Some(head_end) = text.find("\r\n\r\n") {
            let length = text[..head_end]
                .lines()
                .find_map(|l| l.to_ascii_lowercase().strip_prefix("content-length: ").map(|v| v.trim().to_string()))
                .and_then(|v| v.parse::<usize>().ok())
                .unwrap_or(0);
            if received.len() >= head_end + 4 + length {
                return text;
            }
        }
        match tokio::time::timeout(Duration::from_secs(3), tcp.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return String::from_utf8_lossy(&received).into_owned(),
            Ok(Ok(n)) => received.extend_from_slice(&buf[..n]),
            Err(_) => panic!("no whole response in 3 s; received {:?}", String::from_utf8_lossy(&received)),
        }
    }
}

const HEALTH: &str = "GET /health HTTP/1.1\r\nHost: localhost\r\n\r\n";

#[tokio::test]
async fn a_cap_full_of_idle_keep_alive_connections_makes_room_for_every_new_client() {
    let limits = ConnectionLimits { max_connections: 3, ..ConnectionLimits::default() };
    let server = start(limits, Script::default()).await;
    // Three clients each finish a request and keep their connection open, as pools do.
    let mut pooled = Vec::new();
    for _ in 0..3 {
        let mut tcp = connect(&server).await;
        assert!(exchange(&mut tcp, HEALTH).await.starts_with("HTTP/1.1 200"));
        pooled.push(tcp);
    }
    let mut served = 0;
    for _ in 0..10 {
        let mut tcp = connect(&server).await;
        if exchange(&mut tcp, HEALTH).await.starts_with("HTTP/1.1 200") {
            served += 1;
        }
        // This one stays open too, idle, and is the next to give way.
        pooled.push(tcp);
    }
    assert_eq!(served, 10, "of 10 new clients at a cap full of idle keep-alives");
    // The pooled connections that gave way were closed, not left half-open.
    let (_, took) = read_until_closed(&mut pooled[0], Duration::from_secs(2)).await;
    assert!(took < Duration::from_secs(2));
}

#[tokio::test]
async fn a_cap_full_of_streams_still_answers_probes_and_tells_others_503_never_a_reset() {
    let limits = ConnectionLimits { max_connections: 2, reserve: 2, ..ConnectionLimits::default() };
    // Streams of 40 tokens at 100 ms: the two places stay busy for the whole test.
    let script = Script { step: Duration::from_millis(100), reply_tokens: 40, ..Script::default() };
    let server = start(limits, script).await;
    let body = r#"{"prompt": "a long story", "stream": true}"#;
    let stream = format!(
        "POST /v1/completions HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    );
    let mut streams = Vec::new();
    for _ in 0..2 {
        let mut tcp = connect(&server).await;
        tcp.write_all(stream.as_bytes()).await.expect("sent");
        let mut first = [0u8; 64];
        let n = tcp.read(&mut first).await.expect("the stream starts");
        assert!(String::from_utf8_lossy(&first[..n]).starts_with("HTTP/1.1 200"));
        streams.push(tcp);
    }
    // A probe gets through on a reserve place.
    let mut probe = connect(&server).await;
    let answer = exchange(&mut probe, HEALTH).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer:?}");
    // Anything else is told plainly, with a body and a Retry-After, and the connection closes.
    let mut late = connect(&server).await;
    let answer = exchange(&mut late, &stream).await;
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer:?}");
    assert!(answer.to_ascii_lowercase().contains("retry-after: 1"), "{answer:?}");
    assert!(answer.contains("\"code\":\"connections_busy\""), "{answer:?}");
    read_until_closed(&mut late, Duration::from_secs(2)).await;
    // The streams were never touched.
    for tcp in &mut streams {
        let mut more = [0u8; 256];
        let n = tcp.read(&mut more).await.expect("still streaming");
        assert!(n > 0);
    }
}

#[tokio::test]
async fn past_the_reserve_new_connections_are_closed_and_a_finished_stream_frees_its_place() {
    let limits = ConnectionLimits { max_connections: 1, reserve: 1, ..ConnectionLimits::default() };
    let script = Script { step: Duration::from_millis(100), reply_tokens: 10, ..Script::default() };
    let server = start(limits, script).await;
    let body = r#"{"prompt": "a story", "stream": true}"#;
    let stream = format!(
        "POST /v1/completions HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n\
         Connection: close\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    let mut busy = connect(&server).await;
    busy.write_all(stream.as_bytes()).await.expect("sent");
    let mut first = [0u8; 64];
    assert!(busy.read(&mut first).await.expect("streaming") > 0);
    // The reserve place is held by a silent client; the next is closed unanswered.
    let _reserve = connect(&server).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let mut refused = connect(&server).await;
    let _ = refused.write_all(HEALTH.as_bytes()).await;
    let (sent, took) = read_until_closed(&mut refused, Duration::from_secs(2)).await;
    assert_eq!(sent, "", "a connection past the reserve got an answer");
    assert!(took < Duration::from_secs(1), "{took:?}");
    // Once the stream is done its place is free again.
    read_until_closed(&mut busy, Duration::from_secs(5)).await;
    let deadline = Instant::now() + Duration::from_secs(3);
    loop {
        let mut again = connect(&server).await;
        if exchange(&mut again, HEALTH).await.starts_with("HTTP/1.1 200") {
            break;
        }
        assert!(Instant::now() < deadline, "the freed place was never reused");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn a_declared_oversized_body_gets_413_before_it_is_sent() {
    let server = start(ConnectionLimits::default(), Script::default()).await;
    for expect in ["", "Expect: 100-continue\r\n"] {
        let mut tcp = connect(&server).await;
        let head = format!(
            "POST /v1/completions HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n\
             Content-Length: 10000000\r\n{expect}\r\n"
        );
        tcp.write_all(head.as_bytes()).await.unwrap();
        // Not one byte of the body is sent: the answer must not wait for it.
        let mut buf = vec![0u8; 4096];
        let n = tokio::time::timeout(Duration::from_secs(2), tcp.read(&mut buf))
            .await
            .unwrap_or_else(|_| panic!("no early answer ({expect:?})"))
            .unwrap();
        let answer = String::from_utf8_lossy(&buf[..n]);
        assert!(answer.starts_with("HTTP/1.1 413"), "{expect:?}: {answer:?}");
        assert!(!answer.contains("100 Continue"), "{answer:?}");
        assert!(answer.contains("\"request_too_large\""), "{answer:?}");
    }
}
