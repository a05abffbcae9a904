//! The agent-loop workload through the `rillm bench` binary against `rillm serve` on the
//! real model: the shipped tools are offered, the bench plays them (a result per call and
//! another round), and the result checks every call and counts the rounds.

use std::path::{Path, PathBuf};

mod support;

use support::{bench_result, serial, start_server};

/// The shipped tools offered under `required`, two rounds a turn, greedy.
fn agent_loop<'a>(url: &'a str, prompts: &'a Path, tools: &'a Path, concurrency: &'a str) -> Vec<&'a str> {
    let (prompts, tools) = (prompts.to_str().unwrap(), tools.to_str().unwrap());
    vec![
        "--url",
        url,
        "--dataset",
        prompts,
        "--tools",
        tools,
        "--tool-choice",
        "required",
        "--max-tool-rounds",
        "2",
        "--concurrency",
        concurrency,
        "--temperature",
        "0",
        "--timeout",
        "300",
    ]
}

/// The shipped tools (`crates/bench/tools/tools.json`): all 24, a block of ~2,300 prompt
/// tokens, or only those `named` (written into `dir`): the tests that check something other
/// than the whole list take four, a prompt a sixth as long to compute.
fn shipped_tools(dir: &Path, named: Option<&[&str]>) -> PathBuf {
    let shipped = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../bench/tools/tools.json");
    let Some(named) = named else { return shipped };
    let all: Vec<serde_json::Value> = serde_json::from_str(&std::fs::read_to_string(&shipped).unwrap()).unwrap();
    let some: Vec<&serde_json::Value> =
        all.iter().filter(|t| named.contains(&t["function"]["name"].as_str().unwrap_or_default())).collect();
    assert_eq!(some.len(), named.len(), "every named tool is shipped");
    let path = dir.join("tools.json");
    std::fs::write(&path, serde_json::to_string(&some).unwrap()).unwrap();
    path
}

/// Four of the shipped tools, the ones the tests' prompts ask for among them.
const FOUR_TOOLS: &[&str] = &["get_weather", "get_forecast", "calculate", "get_time"];

#[test]
fn the_bench_plays_the_tools_and_checks_every_call() {
    let _serial = serial();
    // The 24 tools' block is ~2,300 prompt tokens.
    let server = start_server(4096, &[]);
    let temp = tempfile::tempdir().expect("a temp dir");
    let dir = temp.path();
    let tools = shipped_tools(dir, None);
    let (prompts, report, saved) = (dir.join("agents.jsonl"), dir.join("agents.html"), dir.join("agents-saved.jsonl"));
    std::fs::write(
        &prompts,
        "{\"messages\": [{\"role\": \"user\", \"content\": \"What is 1234 multiplied by 56?\"}], \"max_tokens\": 120}\n\
         {\"messages\": [{\"role\": \"user\", \"content\": \"What's the weather in Lisbon?\"}], \"max_tokens\": 120}\n",
    )
    .unwrap();
    let url = server.url("/v1/chat/completions");
    let mut args = agent_loop(&url, &prompts, &tools, "2");
    args.extend(["--report", report.to_str().unwrap(), "--save-sessions", saved.to_str().unwrap()]);
    let result = bench_result(&args, "agents");
    let summary = &result["tool_calls"];
    let n = |k: &str| summary[k].as_u64().unwrap_or_else(|| panic!("{k} in {summary}"));
    assert!(n("calls") >= 2, "every first round calls under `required`: {summary}");
    assert_eq!(n("valid"), n("calls"), "every call rillm emits is valid: {summary}");
    assert!(n("later_rounds") >= 1, "a reply to tool results was asked for: {summary}");
    assert!(summary["ttft_p50_later_rounds_ms"].as_f64().is_some(), "{summary}");
    let requests = result["requests"].as_array().unwrap();
    let rounds: Vec<u64> = requests.iter().filter_map(|r| r["round"].as_u64()).collect();
    assert_eq!(rounds.len(), requests.len(), "every request says its round");
    assert!(rounds.contains(&2), "{rounds:?}");
    assert_eq!(result["run_context"]["workload"]["tools"]["count"], 24);
    let html = std::fs::read_to_string(&report).unwrap();
    assert!(html.contains("valid tool calls"), "the report shows the calls' check");

    // The saved requests, replayed as recorded: the same requests, rounds and tools, whatever
    // the server replies now (how agent traffic is replayed against a server that makes no calls).
    let saved_lines = std::fs::read_to_string(&saved).unwrap().lines().count();
    assert_eq!(saved_lines, requests.len(), "one line per request sent");
    let replay = ["--url", &url, "--dataset", saved.to_str().unwrap(), "--concurrency", "2", "--temperature", "0"];
    let replayed = bench_result(&[&replay[..], &["--timeout", "300"]].concat(), "agents-replay");
    assert!(replayed["run_context"]["workload"]["replies"].as_str().unwrap().starts_with("recorded"));
    let replayed_requests = replayed["requests"].as_array().unwrap();
    let mut replayed_rounds: Vec<u64> = replayed_requests.iter().filter_map(|r| r["round"].as_u64()).collect();
    let mut recorded_rounds = rounds.clone();
    replayed_rounds.sort();
    recorded_rounds.sort();
    assert_eq!(replayed_rounds, recorded_rounds, "every request replayed, in its round");
    let again = &replayed["tool_calls"];
    assert_eq!(again["later_rounds"], summary["later_rounds"], "{again}");
    assert!(again["ttft_p50_later_rounds_ms"].as_f64().is_some(), "{again}");
    let with_tools = [&replay[..], &["--tools", tools.to_str().unwrap()]].concat();
    let refused = std::process::Command::new(support::BIN).arg("bench").args(&with_tools).output().unwrap();
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("--tools would change them"));

    // Recorded agent traffic: OpenAI chat requests with their own tools, replayed as they are.
    let recorded = dir.join("recorded.jsonl");
    let tool = r#"{"type": "function", "function": {"name": "add", "parameters": {"type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"]}}}"#
        .replace('\n', " ");
    let history = r#"[{"role": "user", "content": "Add 2 and 3."}, {"role": "assistant", "content": null,
        "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "add", "arguments": "{\"a\": 2, \"b\": 3}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "5"}]"#
        .replace('\n', " ");
    std::fs::write(
        &recorded,
        format!(
            "{{\"messages\": [{{\"role\": \"user\", \"content\": \"Add 2 and 3.\"}}], \"tools\": [{tool}], \"tool_choice\": \"required\", \"max_tokens\": 60}}\n\
             {{\"messages\": {history}, \"tools\": [{tool}], \"max_tokens\": 40}}\n"
        ),
    )
    .unwrap();
    let args = ["--url", &url, "--dataset", recorded.to_str().unwrap(), "--requests", "4", "--concurrency", "2"];
    let result = bench_result(&[&args[..], &["--temperature", "0", "--timeout", "300"]].concat(), "recorded");
    assert_eq!(result["run_context"]["workload"]["tools"]["source"], "dataset", "{}", result["run_context"]);
    let summary = &result["tool_calls"];
    let n = |k: &str| summary[k].as_u64().unwrap_or_else(|| panic!("{k} in {summary}"));
    assert_eq!(n("replies"), 4, "{summary}");
    assert!(n("calls") >= 2, "the `required` records call: {summary}");
    assert_eq!(n("valid"), n("calls"), "checked against the records' own tool: {summary}");
}

/// The same agent loop over the Responses API (the OpenAI Agents SDK's default): the tools
/// go flat, calls come back as output items, and the next round answers them with
/// `function_call_output` items, which rillm accepts only if each answers a call in the
/// conversation sent.
#[test]
fn the_agent_loop_runs_over_the_responses_api() {
    let _serial = serial();
    let server = start_server(4096, &[]);
    let temp = tempfile::tempdir().expect("a temp dir");
    let tools = shipped_tools(temp.path(), Some(FOUR_TOOLS));
    let prompts = temp.path().join("agents.jsonl");
    std::fs::write(
        &prompts,
        "{\"messages\": [{\"role\": \"user\", \"content\": \"What's the weather in Lisbon?\"}], \"max_tokens\": 120}\n",
    )
    .unwrap();
    let url = server.url("/v1/responses");
    let saved = temp.path().join("saved.jsonl");
    let mut args = agent_loop(&url, &prompts, &tools, "1");
    args.extend(["--save-sessions", saved.to_str().unwrap()]);
    let result = bench_result(&args, "agents-responses");
    assert_eq!(result["protocol"], "responses");
    assert_eq!(result["failed"], 0, "every round accepted, the answered calls included: {}", result["limits"]);
    let summary = &result["tool_calls"];
    let n = |k: &str| summary[k].as_u64().unwrap_or_else(|| panic!("{k} in {summary}"));
    assert!(n("calls") >= 1, "a first round calls under `required`: {summary}");
    assert_eq!(n("valid"), n("calls"), "every call rillm emits is valid: {summary}");
    assert!(n("later_rounds") >= 1, "a reply to the calls' outputs was asked for: {summary}");

    // The saved rounds (chat-shaped records) replayed as recorded over the Responses API.
    let replay = ["--url", &url, "--dataset", saved.to_str().unwrap(), "--concurrency", "1", "--timeout", "300"];
    let replayed = bench_result(&replay, "agents-responses-replay");
    assert_eq!(replayed["failed"], 0, "{}", replayed["limits"]);
    assert_eq!(replayed["tool_calls"]["later_rounds"], summary["later_rounds"], "{}", replayed["tool_calls"]);
}

/// `--final-schema`: every request also asks its answer in a schema, as the Agents SDK's
/// typed agents do; each round calls tools or gives the typed answer, and a reply without
/// calls is checked as the session's final answer. rillm answers every such request (it
/// composes calls and the answer format in one grammar), every call valid, no call repeated,
/// and every finished final answer schema-valid.
#[test]
fn a_final_schema_makes_replies_calls_or_a_typed_answer_and_each_is_checked() {
    let _serial = serial();
    let server = start_server(4096, &[]);
    let temp = tempfile::tempdir().expect("a temp dir");
    let tools = shipped_tools(temp.path(), Some(FOUR_TOOLS));
    let schema = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../bench/tools/final-answer.json");
    let prompts = temp.path().join("agents.jsonl");
    std::fs::write(
        &prompts,
        "{\"messages\": [{\"role\": \"user\", \"content\": \"What's the weather in Lisbon?\"}], \"max_tokens\": 160}\n\
         {\"messages\": [{\"role\": \"user\", \"content\": \"What is 1234 multiplied by 56?\"}], \"max_tokens\": 160}\n",
    )
    .unwrap();
    for path in ["/v1/chat/completions", "/v1/responses"] {
        let url = server.url(path);
        let mut args = agent_loop(&url, &prompts, &tools, "2");
        let choice = args.iter().position(|a| *a == "required").expect("a tool choice");
        args[choice] = "auto";
        let rounds = args.iter().position(|a| *a == "--max-tool-rounds").expect("a round limit") + 1;
        args[rounds] = "3";
        args.extend(["--final-schema", schema.to_str().unwrap()]);
        let result = bench_result(&args, "agents-typed");
        assert_eq!(result["failed"], 0, "{path}: {}", result["limits"]);
        let calls = &result["tool_calls"];
        let n = |k: &str| calls[k].as_u64().unwrap_or_else(|| panic!("{k} in {calls}"));
        assert_eq!((n("valid"), n("repeated"), n("undeclared")), (n("calls"), 0, 0), "{path}: {calls}");
        let answers = &result["structured_outputs"];
        let a = |k: &str| answers[k].as_u64().unwrap_or_else(|| panic!("{k} in {answers}"));
        assert!(a("finished") >= 1, "{path}: a session ended in its typed answer: {answers}");
        assert_eq!(a("valid"), a("finished"), "{path}: {answers}");
        assert!(result["run_context"]["workload"]["tools"]["final_schema"].is_object());
    }
}
