//! The Responses API's kept responses, on the real model over loopback: a conversation goes
//! on from `previous_response_id` (its prefix reused from the prefix cache), a kept response
//! is retrieved and deleted, what is not kept cannot be referred to, and a background
//! response is polled until it ends, or cancelled (and stops in the engine).

mod support;

use std::time::{Duration, Instant};

use rillm_server::ServerConfig;
use serde_json::{json, Value};
use support::{Options, TestServer};

async fn create(server: &TestServer, body: Value) -> Value {
    let response = server.post("/v1/responses", body).await;
    assert_eq!(response.status(), 200);
    response.json().await.unwrap()
}

async fn get(server: &TestServer, id: &str) -> reqwest::Response {
    server.client.get(server.url(&format!("/v1/responses/{id}"))).send().await.unwrap()
}

#[tokio::test]
async fn a_conversation_goes_on_from_a_kept_response_which_can_be_retrieved_and_deleted() {
    let server = TestServer::start(Options { ctx: 1024, ..Options::default() }).await;
    let first = create(
        &server,
        json!({"input": "My name is Ada.", "instructions": "Be brief.",
        "max_output_tokens": 12, "temperature": 0}),
    )
    .await;
    let id = first["id"].as_str().unwrap();
    assert!(id.starts_with("resp_") && id.len() > 20, "a unique id: {id}");
    assert_eq!(first["store"], true);

    let second = create(
        &server,
        json!({"input": "What is my name?", "previous_response_id": id,
        "max_output_tokens": 8, "temperature": 0}),
    )
    .await;
    assert_eq!(second["previous_response_id"], id);
    assert_eq!(second["instructions"], Value::Null, "instructions are not carried over");
    let (first_in, first_out) =
        (first["usage"]["input_tokens"].as_u64().unwrap(), first["usage"]["output_tokens"].as_u64().unwrap());
    let second_in = second["usage"]["input_tokens"].as_u64().unwrap();
    // The first turn minus its instructions, its reply, and the new question.
    assert!(second_in > first_out + 5, "the earlier conversation is in the prompt: {second_in} tokens");
    assert!(second_in < first_in + first_out + 40, "{second_in}");
    // Without the first turn's instructions the second shares only the template's opening
    // with it; a third turn goes on from the second and reuses the whole of its prompt.
    let third = create(
        &server,
        json!({"input": "And what is yours?", "previous_response_id": second["id"],
        "max_output_tokens": 4, "temperature": 0}),
    )
    .await;
    let third_cached = third["usage"]["input_tokens_details"]["cached_tokens"].as_u64().unwrap();
    assert!(third_cached >= second_in - 1, "{second_in} tokens in the second turn's prompt: {third}");

    assert!(server.metric("rillm_responses_store_entries").await >= 2.0);
    assert!(server.metric("rillm_responses_store_bytes").await > 0.0);
    let kept: Value = get(&server, id).await.json().await.unwrap();
    assert_eq!(kept["output"], first["output"]);
    let deleted = server.client.delete(server.url(&format!("/v1/responses/{id}"))).send().await.unwrap();
    assert_eq!(deleted.status(), 200);
    assert_eq!(deleted.json::<Value>().await.unwrap()["deleted"], true);
    let gone = get(&server, id).await;
    assert_eq!(gone.status(), 404);
    assert_eq!(gone.json::<Value>().await.unwrap()["error"]["param"], "response_id");
    let after = server.post("/v1/responses", json!({"input": "Hi", "previous_response_id": id})).await;
    assert_eq!(after.status(), 400);
    let error = &after.json::<Value>().await.unwrap()["error"];
    assert_eq!(
        (error["param"].as_str(), error["code"].as_str()),
        (Some("previous_response_id"), Some("previous_response_not_found"))
    );
}

#[tokio::test]
async fn what_is_not_kept_cannot_be_referred_to() {
    let server = TestServer::start(Options::default()).await;
    let unkept = create(&server, json!({"input": "Hi", "store": false, "max_output_tokens": 4})).await;
    assert_eq!(unkept["store"], false);
    assert_eq!(get(&server, unkept["id"].as_str().unwrap()).await.status(), 404);
    drop(server);

    let config = ServerConfig { responses_store_bytes: 0, ..ServerConfig::default() };
    let storeless = TestServer::start(Options { server: config, ..Options::default() }).await;
    let answered = create(&storeless, json!({"input": "Hi", "max_output_tokens": 4})).await;
    assert_eq!(answered["store"], false, "no store: nothing is kept, and the response says so");
    let refused = storeless.post("/v1/responses", json!({"input": "Hi", "previous_response_id": answered["id"]})).await;
    assert_eq!(refused.status(), 400);
    assert_eq!(refused.json::<Value>().await.unwrap()["error"]["param"], "previous_response_id");
}

const RUNNING: &str = "vllm:num_requests_running";

/// `GET` until the response has ended (at most a minute).
async fn poll(server: &TestServer, id: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let response: Value = get(server, id).await.json().await.unwrap();
        if response["status"] != "in_progress" {
            return response;
        }
        assert!(Instant::now() < deadline, "still in progress after a minute: {response}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn cancel(server: &TestServer, id: &str) -> reqwest::Response {
    server.client.post(server.url(&format!("/v1/responses/{id}/cancel"))).send().await.unwrap()
}

fn output_text(response: &Value) -> String {
    let content = response["output"][0]["content"].as_array().cloned().unwrap_or_default();
    content.iter().filter_map(|part| part["text"].as_str()).collect()
}

#[tokio::test]
async fn a_background_response_is_polled_until_it_ends_and_can_be_gone_on_from() {
    let server = TestServer::start(Options { ctx: 1024, ..Options::default() }).await;
    let ask = json!({"input": "Name three colours.", "background": true, "max_output_tokens": 16, "temperature": 0});
    let started = create(&server, ask).await;
    assert_eq!((started["status"].as_str(), started["background"].as_bool()), (Some("in_progress"), Some(true)));
    assert_eq!(started["output"], json!([]), "answered before anything is generated");
    let id = started["id"].as_str().unwrap();
    let ended = poll(&server, id).await;
    assert!(matches!(ended["status"].as_str(), Some("completed" | "incomplete")), "{ended}");
    assert_eq!((ended["id"].as_str(), ended["background"].as_bool()), (Some(id), Some(true)));
    assert!(!output_text(&ended).trim().is_empty(), "{ended}");
    assert!(ended["usage"]["output_tokens"].as_u64().unwrap() > 0, "{ended}");
    let next = create(&server, json!({"input": "One more?", "previous_response_id": id, "max_output_tokens": 4})).await;
    assert!(next["usage"]["input_tokens_details"]["cached_tokens"].as_u64().unwrap() > 0, "{next}");
    let ended_twice = cancel(&server, id).await;
    assert_eq!(ended_twice.status(), 400);
    let error = &ended_twice.json::<Value>().await.unwrap()["error"];
    assert_eq!(error["param"], "response_id");
    assert!(error["message"].as_str().unwrap().contains("already"), "{error}");

    // What cannot run in the background says which field.
    for (body, param) in [
        (json!({"input": "Hi", "background": true, "stream": true}), "background"),
        (json!({"input": "Hi", "background": true, "store": false}), "background"),
    ] {
        let refused = server.post("/v1/responses", body).await;
        assert_eq!(refused.status(), 400);
        assert_eq!(refused.json::<Value>().await.unwrap()["error"]["param"], param);
    }
    let foreground = create(&server, json!({"input": "Hi", "max_output_tokens": 2})).await;
    let synchronous = cancel(&server, foreground["id"].as_str().unwrap()).await;
    assert_eq!(synchronous.status(), 400);
    assert_eq!(synchronous.json::<Value>().await.unwrap()["error"]["message"], "Cannot cancel a synchronous response.");
    assert_eq!(cancel(&server, "resp_unknown").await.status(), 404);
}

#[tokio::test]
async fn cancelling_or_deleting_a_background_response_stops_it_in_the_engine() {
    let server = TestServer::start(Options { ctx: 2048, ..Options::default() }).await;
    // Running for many seconds unless stopped: 1,800 tokens, end of text ignored.
    let long = json!({"input": "Write a long story about a ship.", "background": true,
        "max_output_tokens": 1800, "ignore_eos": true});
    let started = create(&server, long.clone()).await;
    let id = started["id"].as_str().unwrap();
    server.wait_metric(RUNNING, Duration::from_secs(30), |running| running == 1.0).await;
    let cancelled = cancel(&server, id).await;
    assert_eq!(cancelled.status(), 200);
    let cancelled: Value = cancelled.json().await.unwrap();
    assert_eq!((cancelled["id"].as_str(), cancelled["status"].as_str()), (Some(id), Some("cancelled")));
    server.wait_metric(RUNNING, Duration::from_secs(5), |running| running == 0.0).await;
    assert_eq!(get(&server, id).await.json::<Value>().await.unwrap()["status"], "cancelled", "kept as cancelled");
    let again = cancel(&server, id).await;
    assert_eq!(again.status(), 400);
    let refused = server.post("/v1/responses", json!({"input": "Go on.", "previous_response_id": id})).await;
    assert_eq!(refused.status(), 400);
    let error = &refused.json::<Value>().await.unwrap()["error"];
    assert_eq!(error["param"], "previous_response_id");
    assert!(error["message"].as_str().unwrap().contains("cancelled"), "{error}");

    let deleted_id = create(&server, long).await["id"].as_str().unwrap().to_string();
    server.wait_metric(RUNNING, Duration::from_secs(30), |running| running == 1.0).await;
    let deleted = server.client.delete(server.url(&format!("/v1/responses/{deleted_id}"))).send().await.unwrap();
    assert_eq!(deleted.status(), 200);
    server.wait_metric(RUNNING, Duration::from_secs(5), |running| running == 0.0).await;
    assert_eq!(get(&server, &deleted_id).await.status(), 404);
}
