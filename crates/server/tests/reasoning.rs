//! Reasoning models on the real model over loopback HTTP. SmolLM2 is no reasoning model,
//! but given a template whose generation prompt opens `<think>` (QwQ-32B's) everything it
//! writes is a thought it never closes: the budget's forced `</think>` is then the only way
//! to an answer, which makes the machinery visible. Qwen3's own template (ChatML, as
//! SmolLM2's vocabulary is) checks its `enable_thinking` switch and earlier thoughts.

mod support;

use rillm_server::{EffortBudgets, ReasoningOptions, ServerConfig};
use serde_json::{json, Value};
use support::{read_sse, Options, TestServer};

const QWQ: &str = include_str!("../../engine/tests/fixtures/qwq-32b.jinja");
const QWEN3: &str = include_str!("../../engine/tests/fixtures/qwen3.jinja");

fn with_template(template: &str) -> Options {
    let reasoning =
        ReasoningOptions { budgets: EffortBudgets { low: Some(6), ..EffortBudgets::default() }, ..Default::default() };
    Options {
        max_running: 4,
        ctx: 1024,
        chat_template: Some(template.to_string()),
        // Whole and streamed replies to one prompt are compared token for token.
        prefix_caching: false,
        server: ServerConfig { reasoning, ..ServerConfig::default() },
        ..Options::default()
    }
}

fn story(extra: Value) -> Value {
    let mut body = json!({"messages": [{"role": "user", "content": "Write a short story about a cat."}],
        "max_tokens": 60, "temperature": 0});
    body.as_object_mut().expect("object").extend(extra.as_object().expect("object").clone());
    body
}

async fn chat(server: &TestServer, body: Value) -> Value {
    let response = server.post("/v1/chat/completions", body.clone()).await;
    assert_eq!(response.status(), 200, "{body}");
    response.json().await.expect("JSON")
}

fn no_markup(text: &str) {
    assert!(!text.contains("<think>") && !text.contains("</think>"), "markup leaked: {text:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_budget_closes_the_thought_and_the_answer_comes_apart_whole_and_streamed() {
    let server = TestServer::start(with_template(QWQ)).await;
    let whole = chat(&server, story(json!({"max_reasoning_tokens": 12}))).await;
    let message = &whole["choices"][0]["message"];
    let (thought, answer) = (message["reasoning_content"].as_str().expect("a thought"), message["content"].as_str());
    assert_eq!(message["reasoning"].as_str(), Some(thought), "both names by default");
    let answer = answer.expect("an answer");
    assert!(!thought.is_empty() && !answer.is_empty(), "{message}");
    no_markup(thought);
    no_markup(answer);
    let usage = &whole["usage"];
    let reasoning_tokens = usage["completion_tokens_details"]["reasoning_tokens"].as_u64().expect("count");
    assert!((12..=18).contains(&reasoning_tokens), "12 thought tokens and the forced marker: {usage}");
    assert!(usage["completion_tokens"].as_u64() > Some(reasoning_tokens), "{usage}");

    let events = read_sse(
        server
            .post(
                "/v1/chat/completions",
                story(json!({"max_reasoning_tokens": 12, "stream": true,
        "stream_options": {"include_usage": true}})),
            )
            .await,
    )
    .await;
    let (mut streamed_thought, mut streamed_answer, mut thought_after_answer) = (String::new(), String::new(), false);
    let mut last_usage = Value::Null;
    for chunk in events.iter().filter(|e| e.data != "[DONE]").map(|e| e.json()) {
        if !chunk["usage"].is_null() {
            last_usage = chunk["usage"].clone();
        }
        let Some(delta) = chunk["choices"].get(0).map(|c| &c["delta"]) else { continue };
        if let Some(piece) = delta["reasoning_content"].as_str() {
            assert_eq!(delta["reasoning"].as_str(), Some(piece));
            assert!(delta["content"].is_null(), "a thought delta carries no content: {delta}");
            thought_after_answer |= !streamed_answer.is_empty();
            streamed_thought.push_str(piece);
        }
        streamed_answer.push_str(delta["content"].as_str().unwrap_or_default());
    }
    assert!(!thought_after_answer, "the thought streams before the answer");
    assert_eq!((streamed_thought.as_str(), streamed_answer.as_str()), (thought, answer));
    assert_eq!(last_usage["completion_tokens_details"]["reasoning_tokens"].as_u64(), Some(reasoning_tokens));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn effort_sets_the_budget_none_turns_thinking_off_and_a_cut_thought_is_all_reasoning() {
    let server = TestServer::start(with_template(QWQ)).await;
    // --reasoning-budgets low=6 (this server's).
    let low = chat(&server, story(json!({"reasoning_effort": "low"}))).await;
    let low_tokens = low["usage"]["completion_tokens_details"]["reasoning_tokens"].as_u64().expect("count");
    assert!((6..=12).contains(&low_tokens), "{}", low["usage"]);
    assert!(low["choices"][0]["message"]["content"].as_str().is_some_and(|c| !c.is_empty()));

    let off = chat(&server, story(json!({"reasoning_effort": "none"}))).await;
    let message = &off["choices"][0]["message"];
    assert!(message.get("reasoning_content").is_none() && message.get("reasoning").is_none(), "{message}");
    assert!(message["content"].as_str().is_some_and(|c| c.len() > 20), "the model answers at once: {message}");
    assert_eq!(off["usage"]["completion_tokens_details"]["reasoning_tokens"], 0);

    let cut = chat(&server, story(json!({"max_tokens": 5}))).await;
    let choice = &cut["choices"][0];
    assert_eq!(choice["finish_reason"], "length");
    assert_eq!(choice["message"]["content"], "", "cut inside the thought: no answer yet");
    assert!(choice["message"]["reasoning_content"].as_str().is_some_and(|t| !t.is_empty()), "{choice}");
    assert_eq!(cut["usage"]["completion_tokens_details"]["reasoning_tokens"], 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tools_and_formats_shape_the_answer_after_the_thought() {
    let server = TestServer::start(with_template(QWQ)).await;
    let schema = json!({"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
        "required": ["name", "age"]});
    let typed = chat(
        &server,
        json!({"messages": [{"role": "user", "content": "A person as JSON."}], "max_tokens": 80,
        "temperature": 0, "max_reasoning_tokens": 16,
        "response_format": {"type": "json_schema", "json_schema": {"name": "p", "schema": schema}}}),
    )
    .await;
    let message = &typed["choices"][0]["message"];
    let answer: Value = serde_json::from_str(message["content"].as_str().expect("content")).expect("the answer parses");
    assert!(answer["name"].is_string() && answer["age"].is_i64(), "{answer}");
    assert!(message["reasoning_content"].as_str().is_some_and(|t| !t.is_empty()), "the thought was free: {message}");

    let tools = json!([{"type": "function", "function": {"name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]);
    let called = chat(
        &server,
        json!({"messages": [{"role": "user", "content": "Weather in Paris?"}], "max_tokens": 120,
        "temperature": 0, "max_reasoning_tokens": 16, "tools": tools, "tool_choice": "required", "n": 2,
        "parallel_tool_calls": false,
        "logprobs": true}),
    )
    .await;
    for choice in called["choices"].as_array().expect("choices") {
        assert_eq!(choice["finish_reason"], "tool_calls", "{choice}");
        let call = &choice["message"]["tool_calls"][0]["function"];
        let arguments: Value = serde_json::from_str(call["arguments"].as_str().expect("arguments")).expect("parses");
        assert!(arguments["city"].is_string(), "{call}");
        no_markup(choice["message"]["reasoning_content"].as_str().expect("a thought"));
        let entries = choice["logprobs"]["content"].as_array().expect("logprobs");
        assert!(entries.len() > 16, "thought and answer tokens both scored: {}", entries.len());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn qwen3_s_switch_and_earlier_thoughts_reach_its_template() {
    let server = TestServer::start(with_template(QWEN3)).await;
    let rendered = |body: Value| {
        let server = &server;
        async move {
            let tokens: Value = server.post("/tokenize", body).await.json().await.expect("JSON");
            let text: Value =
                server.post("/detokenize", json!({"tokens": tokens["tokens"]})).await.json().await.expect("JSON");
            text["prompt"].as_str().expect("text").to_string()
        }
    };
    let user = json!({"role": "user", "content": "What is 2+2?"});
    let off = rendered(json!({"messages": [user], "chat_template_kwargs": {"enable_thinking": false}})).await;
    assert!(off.ends_with("assistant\n<think>\n\n</think>\n\n"), "{off:?}");
    for name in ["reasoning_content", "reasoning"] {
        let answered = json!({"role": "assistant", "content": "4", name: "Two and two make four."});
        let prompt = rendered(json!({"messages": [user, answered], "add_generation_prompt": false})).await;
        assert!(prompt.contains("<think>\nTwo and two make four.\n</think>\n\n4"), "{name}: {prompt:?}");
    }
    // Thinking off through the effort: the template's own switch closes the thought, and the
    // model (which writes no `<think>` of its own, Qwen3's rule) answers in content.
    let reply = chat(
        &server,
        json!({"messages": [user], "max_tokens": 20, "temperature": 0,
        "reasoning_effort": "none"}),
    )
    .await;
    let switched_off = json!({"messages": [user], "chat_template_kwargs": {"enable_thinking": false}});
    let tokens: Value = server.post("/tokenize", switched_off).await.json().await.expect("JSON");
    assert_eq!(reply["usage"]["prompt_tokens"], tokens["count"], "the switch was set");
    assert!(reply["choices"][0]["message"]["content"].as_str().is_some_and(|c| !c.is_empty()));
    let bad = server
        .post(
            "/v1/chat/completions",
            json!({"messages": [user], "chat_template_kwargs":
        {"enable_thinking": "no"}}),
        )
        .await;
    assert_eq!(bad.status(), 400);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_responses_api_gives_a_reasoning_item_before_the_message() {
    let server = TestServer::start(with_template(QWQ)).await;
    let body = json!({"input": "Write a short story about a cat.", "max_output_tokens": 40, "temperature": 0,
        "reasoning": {"effort": "low"}});
    let response = server.post("/v1/responses", body.clone()).await;
    assert_eq!(response.status(), 200);
    let whole: Value = response.json().await.expect("JSON");
    let output = whole["output"].as_array().expect("output");
    assert_eq!(output[0]["type"], "reasoning", "{whole}");
    let thought = output[0]["content"][0]["text"].as_str().expect("reasoning_text");
    assert!(!thought.is_empty() && output[0]["summary"] == json!([]));
    assert_eq!(output[1]["type"], "message");
    assert_eq!(whole["reasoning"]["effort"], "low");
    assert!(whole["usage"]["output_tokens_details"]["reasoning_tokens"].as_u64() >= Some(6), "{}", whole["usage"]);

    let mut streamed = body.clone();
    streamed["stream"] = json!(true);
    let events = read_sse(server.post("/v1/responses", streamed).await).await;
    let kinds: Vec<&str> = events.iter().map(|e| e.event.as_str()).collect();
    let first_thought = kinds.iter().position(|k| *k == "response.reasoning_text.delta").expect("thought deltas");
    let first_answer = kinds.iter().position(|k| *k == "response.output_text.delta").expect("answer deltas");
    assert!(first_thought < first_answer, "{kinds:?}");
    let deltas: String = events
        .iter()
        .filter(|e| e.event == "response.reasoning_text.delta")
        .map(|e| e.json()["delta"].as_str().unwrap_or_default().to_string())
        .collect();
    assert_eq!(deltas, thought);

    // Sent back as input (as the Agents SDK does), the reasoning item is the turn's thought.
    let next = json!({"input": [{"role": "user", "content": "Hi"}, output[0], output[1],
        {"role": "user", "content": "Again."}], "max_output_tokens": 4, "reasoning": {"effort": "none"}});
    assert_eq!(server.post("/v1/responses", next).await.status(), 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rillm_s_own_stream_sends_the_thought_as_reasoning_pieces() {
    let server = TestServer::start(with_template(QWQ)).await;
    let body = json!({"messages": [{"role": "user", "content": "Write a short story about a cat."}],
        "max_tokens": 30, "max_reasoning_tokens": 8});
    let events = read_sse(server.post("/generate", body).await).await;
    let pieces: Vec<Value> = events.iter().filter(|e| e.event == "message").map(|e| e.json()).collect();
    let thought: String = pieces.iter().filter_map(|p| p["reasoning"].as_str()).collect();
    let answer: String = pieces.iter().filter_map(|p| p["text"].as_str()).collect();
    let first_answer = pieces.iter().position(|p| p["text"].is_string()).expect("an answer");
    assert!(pieces[..first_answer].iter().all(|p| p["reasoning"].is_string()), "the thought comes first");
    assert!(!thought.is_empty() && !answer.is_empty());
    no_markup(&thought);
    no_markup(&answer);
    let done = events.iter().find(|e| e.event == "done").expect("done").json();
    assert!(done["usage"]["completion_tokens_details"]["reasoning_tokens"].as_u64() >= Some(8), "{done}");
}
