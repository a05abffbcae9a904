//! What idle, slow and too many clients can hold: raw TCP against `run` over the scripted
//! backend, with short limits so each case takes well under a second.

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

#[tokio::test]
async fn past_the_connection_cap_new_connections_are_closed_and_a_freed_place_is_reused() {
    let limits = ConnectionLimits { max_connections: 3, ..ConnectionLimits::default() };
    let server = start(limits, Script::default()).await;
    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(connect(&server).await);
    }
    // The accept loop sees them in order; the fourth is closed at once, unanswered.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let mut refused = connect(&server).await;
    let _ = refused.write_all(b"GET /health HTTP/1.1\r\nHost: localhost\r\n\r\n").await;
    let (sent, took) = read_until_closed(&mut refused, Duration::from_secs(2)).await;
    assert_eq!(sent, "", "a connection past the cap got an answer");
    assert!(took < Duration::from_secs(1), "{took:?}");

    drop(held.pop());
    let deadline = Instant::now() + Duration::from_secs(3);
    loop {
        let mut again = connect(&server).await;
        let _ = again.write_all(b"GET /health HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n").await;
        let (sent, _) = read_until_closed(&mut again, Duration::from_secs(2)).await;
        if sent.starts_with("HTTP/1.1 200") {
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
