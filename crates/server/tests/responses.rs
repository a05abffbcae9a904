//! The Responses API's kept responses, on the real model over loopback: a conversation goes
//! on from `previous_response_id` (its prefix reused from the prefix cache), a kept response
//! is retrieved and deleted, and what is not kept cannot be referred to.

mod support;

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
    assert!(second["usage"]["input_tokens_details"]["cached_tokens"].as_u64().unwrap() > 0, "{second}");
    assert!(second_in < first_in + first_out + 40, "{second_in}");

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
