//! Structured outputs on the real model over loopback HTTP: every shipped schema gives
//! schema-valid JSON, regex, choice and grammar constraints hold, jump-forward forces
//! tokens, unconstrained streams beside a constrained one are untouched, and every
//! constraint rillm cannot honour is a 400 naming its field.

mod support;

use std::path::PathBuf;
use std::time::Duration;

use futures::future::join_all;
use serde_json::{json, Value};
use support::{read_sse, Options, TestServer};

fn schemas() -> Vec<(String, Value)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../bench/schemas");
    let mut out: Vec<(String, Value)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| {
            let path = entry.expect("dir entry").path();
            let text = std::fs::read_to_string(&path).expect("schema file");
            let name = path.file_stem().expect("name").to_string_lossy().into_owned();
            (name, serde_json::from_str(&text).expect("schema JSON"))
        })
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

fn options() -> Options {
    Options { max_running: 8, max_waiting: 128, ctx: 1024, ..Options::default() }
}

async fn chat(server: &TestServer, body: Value) -> Value {
    let response = server.post("/v1/chat/completions", body).await;
    let status = response.status();
    let value: Value = response.json().await.expect("JSON body");
    assert_eq!(status, 200, "{value}");
    value
}

fn content(response: &Value) -> (&str, &str) {
    let choice = &response["choices"][0];
    (choice["message"]["content"].as_str().expect("content"), choice["finish_reason"].as_str().expect("reason"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_shipped_schema_gives_schema_valid_json_at_temperature_0_and_1() {
    let schemas = schemas();
    assert!(schemas.len() >= 30, "{} schemas shipped", schemas.len());
    let server = TestServer::start(options()).await;
    let mut results = Vec::new();
    // Temperature 0 first, then 1: the second round finds every schema compiled.
    for temperature in [0.0, 1.0] {
        let requests = schemas.iter().map(|(name, schema)| {
            let description = schema["description"].as_str().unwrap_or(name).to_string();
            let body = json!({
                "messages": [{"role": "user", "content": format!("Give an example as JSON: {description}")}],
                "temperature": temperature,
                "seed": 7,
                "max_tokens": 300,
                "response_format": {"type": "json_schema", "json_schema": {"name": name, "schema": schema, "strict": true}},
            });
            let server = &server;
            async move { (name.clone(), temperature, chat(server, body).await) }
        });
        results.extend(join_all(requests).await);
    }
    let mut finished = 0;
    for (name, temperature, response) in &results {
        let (text, reason) = content(response);
        if reason != "stop" {
            assert_eq!(reason, "length", "{name} at {temperature}: {text}");
            continue;
        }
        finished += 1;
        let schema = &schemas.iter().find(|(n, _)| n == name).expect("schema").1;
        let value: Value =
            serde_json::from_str(text).unwrap_or_else(|e| panic!("{name} at {temperature}: not JSON ({e}): {text}"));
        let validator = jsonschema::options().should_validate_formats(true).build(schema).expect("valid schema");
        let errors: Vec<String> = validator.iter_errors(&value).map(|e| e.to_string()).collect();
        assert!(errors.is_empty(), "{name} at {temperature}: {text}\n{errors:?}");
    }
    // Most finish well inside 300 tokens; the rest ran out of tokens, never into invalid JSON.
    assert!(finished * 10 >= results.len() * 8, "only {finished} of {} finished", results.len());
    let forced = server.metric("rillm_structured_forced_tokens_total").await;
    let constrained = server.metric("rillm_structured_tokens_total").await;
    assert!(forced > 0.0 && forced < constrained, "jump-forward forced {forced} of {constrained} tokens");
    assert_eq!(server.metric("rillm_structured_compiles_total").await, schemas.len() as f64, "one compile each");
    assert_eq!(server.metric("rillm_structured_cache_hits_total").await, schemas.len() as f64, "the second is cached");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn regex_choice_grammar_and_json_object_constraints_hold() {
    let server = TestServer::start(options()).await;
    let ask = |extra: Value| {
        let mut body = json!({
            "messages": [{"role": "user", "content": "Answer the question: what is the capital of France?"}],
            "temperature": 1.0,
            "max_tokens": 60,
        });
        body.as_object_mut().expect("object").extend(extra.as_object().expect("object").clone());
        body
    };
    let phone = chat(&server, ask(json!({"structured_outputs": {"regex": "\\+33 [1-9]( [0-9]{2}){4}"}}))).await;
    let (text, reason) = content(&phone);
    assert_eq!(reason, "stop", "{text}");
    assert!(
        text.starts_with("+33 ") && text.len() == 17 && text[4..].chars().all(|c| c == ' ' || c.is_ascii_digit()),
        "{text}"
    );

    let choice = chat(&server, ask(json!({"guided_choice": ["Paris", "Lyon", "Marseille"]}))).await;
    let (text, reason) = content(&choice);
    assert!(["Paris", "Lyon", "Marseille"].contains(&text) && reason == "stop", "{text} {reason}");

    let grammar = "start: answer \".\"\nanswer: \"The capital is \" CITY\nCITY: /[A-Z][a-z]{2,12}/";
    let lark = chat(&server, ask(json!({"structured_outputs": {"grammar": grammar}}))).await;
    let (text, reason) = content(&lark);
    assert!(text.starts_with("The capital is ") && text.ends_with('.'), "{text}");
    assert_eq!(reason, "stop");

    let object = chat(&server, ask(json!({"response_format": {"type": "json_object"}}))).await;
    let (text, reason) = content(&object);
    if reason == "stop" {
        assert!(serde_json::from_str::<Value>(text).expect(text).is_object(), "{text}");
    }

    // llama.cpp's spelling, on the completions endpoint; and on /generate.
    let response = server
        .post(
            "/v1/completions",
            json!({"prompt": "The year the Eiffel Tower opened:", "max_tokens": 8, "json_schema": {"type": "integer", "minimum": 1800, "maximum": 1999}}),
        )
        .await;
    let value: Value = response.json().await.expect("JSON");
    let year: i64 = value["choices"][0]["text"].as_str().expect("text").parse().expect("an integer");
    assert!((1800..=1999).contains(&year), "{value}");

    let events = read_sse(
        server
            .post("/generate", json!({"prompt": "Is water wet?", "chat": true, "guided_choice": ["yes", "no"]}))
            .await,
    )
    .await;
    let text: String = events
        .iter()
        .filter(|e| e.event == "message")
        .filter_map(|e| e.json()["text"].as_str().map(String::from))
        .collect();
    assert!(text == "yes" || text == "no", "{text}");
    let done = events.last().expect("done event").json();
    assert_eq!(done["finish_reason"], "stop", "{done}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamed_schema_reassembles_into_valid_json_and_unconstrained_neighbours_are_untouched() {
    let server = TestServer::start(options()).await;
    let plain = |i: usize| {
        json!({"messages": [{"role": "user", "content": format!("Write a story about robot number {i}.")}],
               "max_tokens": 48, "ignore_eos": true, "temperature": 0.0, "stream": true,
               "stream_options": {"include_usage": true}})
    };
    let schema = json!({"type": "object", "properties": {"name": {"type": "string", "maxLength": 20},
        "skills": {"type": "array", "items": {"type": "string", "maxLength": 20}, "minItems": 2, "maxItems": 3}},
        "required": ["name", "skills"], "additionalProperties": false});
    let constrained = json!({"messages": [{"role": "user", "content": "Describe a robot as JSON."}], "max_tokens": 200,
        "stream": true, "stream_options": {"include_usage": true},
        "response_format": {"type": "json_schema", "json_schema": {"name": "robot", "schema": schema}}});
    let mut bodies: Vec<Value> = (0..3).map(plain).collect();
    bodies.push(constrained);
    let responses = join_all(bodies.into_iter().map(|b| server.post("/v1/chat/completions", b))).await;
    let streams = tokio::time::timeout(Duration::from_secs(120), join_all(responses.into_iter().map(read_sse)))
        .await
        .expect("every stream ends");
    for (i, events) in streams.iter().enumerate() {
        let chunks: Vec<Value> = events.iter().filter(|e| e.data != "[DONE]").map(|e| e.json()).collect();
        let text: String =
            chunks.iter().filter_map(|c| c["choices"][0]["delta"]["content"].as_str()).collect::<Vec<_>>().concat();
        let reason = chunks.iter().find_map(|c| c["choices"][0]["finish_reason"].as_str()).expect("finish_reason");
        let usage = &chunks.iter().find(|c| c["usage"].is_object()).expect("usage chunk")["usage"];
        if i < 3 {
            assert_eq!(reason, "length", "plain stream {i} runs to max_tokens");
            assert_eq!(usage["completion_tokens"], 48, "plain stream {i}: {text}");
        } else {
            assert_eq!(reason, "stop", "{text}");
            let value: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"));
            let validator = jsonschema::validator_for(&schema).expect("schema");
            assert!(validator.is_valid(&value), "{text}");
            assert!(usage["completion_tokens"].as_u64().expect("count") > 0);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn constraints_that_cannot_be_honoured_are_400s_naming_the_field() {
    let server = TestServer::start(options()).await;
    let messages = json!([{"role": "user", "content": "hi"}]);
    let cases = [
        (
            json!({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object", "properties": {"a": {"type": "string", "format": "no-such-format"}}}}}}),
            "response_format.json_schema.schema",
        ),
        (
            json!({"response_format": {"type": "json_schema", "json_schema": {"name": "x"}}}),
            "response_format.json_schema.schema",
        ),
        (json!({"response_format": {"type": "regex"}}), "response_format.type"),
        (json!({"structured_outputs": {"grammar": "start: undefined_rule"}}), "structured_outputs.grammar"),
        (json!({"structured_outputs": {"regex": "(unclosed"}}), "structured_outputs.regex"),
        (json!({"structured_outputs": {"structural_tag": "{}"}}), "structured_outputs.structural_tag"),
        (json!({"guided_json": {"type": "object"}, "guided_regex": "a"}), "guided_regex"),
        (json!({"grammar": "root ::= \"a\""}), "grammar"),
        (json!({"prediction": {"type": "content", "content": "hi"}}), "prediction"),
        (json!({"reasoning_effort": "extreme"}), "reasoning_effort"),
        (json!({"max_reasoning_tokens": -5}), "max_reasoning_tokens"),
        (json!({"chat_template_kwargs": {"enable_thinking": "yes"}}), "chat_template_kwargs.enable_thinking"),
    ];
    for (extra, param) in cases {
        let mut body = json!({"messages": messages, "max_tokens": 4});
        body.as_object_mut().expect("object").extend(extra.as_object().expect("object").clone());
        let response = server.post("/v1/chat/completions", body.clone()).await;
        assert_eq!(response.status(), 400, "{body}");
        let error: Value = response.json().await.expect("JSON");
        assert_eq!(error["error"]["param"], param, "{body}: {error}");
        assert!(error["error"]["message"].as_str().is_some_and(|m| !m.is_empty()), "{error}");
    }
    // The format's own message reaches the client.
    let response = server
        .post(
            "/v1/completions",
            json!({"prompt": "x", "structured_outputs": {"json": {"type": "string", "format": "no-such-format"}}}),
        )
        .await;
    let error: Value = response.json().await.expect("JSON");
    assert!(error["error"]["message"].as_str().expect("message").contains("no-such-format"), "{error}");
    assert_eq!(error["error"]["param"], "structured_outputs.json");
    // Fields that change nothing are accepted.
    let ok = server
        .post("/v1/chat/completions", json!({"messages": messages, "max_tokens": 2, "user": "u1", "store": false}))
        .await;
    assert_eq!(ok.status(), 200);
}
