//! `rillm serve` with several models, as users start it: `--model NAME=PATH` and a known
//! model's name, `--models-max`, `--idle-unload`.

use std::time::{Duration, Instant};

mod support;

use support::{http, json_body, model, serial, Server, BIN};

fn statuses(port: u16) -> Vec<(String, String)> {
    let models = json_body(&http(port, "GET", "/v1/models", ""));
    models["data"]
        .as_array()
        .map(|data| {
            data.iter()
                .map(|m| (m["id"].as_str().unwrap_or("").into(), m["status"].as_str().unwrap_or("").into()))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn several_models_load_on_demand_and_an_idle_one_unloads() {
    let _g = serial();
    rillm_models::embedding_model_for_tests();
    let chat = format!("chat={}", model().display());
    let args = ["--model", &chat, "--model", "all-minilm-l6-v2", "--idle-unload", "2", "--max-running", "4"];
    let server = Server::start(std::path::Path::new(BIN), &args);
    let names: Vec<String> = statuses(server.port).into_iter().map(|(name, _)| name).collect();
    assert_eq!(names, vec!["chat", "all-minilm-l6-v2"]);

    let embedded = http(server.port, "POST", "/v1/embeddings", r#"{"model": "all-minilm-l6-v2", "input": "hello"}"#);
    assert!(embedded.starts_with("HTTP/1.1 200"), "{embedded}");
    let completed =
        http(server.port, "POST", "/v1/completions", r#"{"model": "chat", "prompt": "Hi", "max_tokens": 2}"#);
    assert!(completed.starts_with("HTTP/1.1 200"), "{completed}");
    let unnamed = http(server.port, "POST", "/v1/completions", r#"{"prompt": "Hi", "max_tokens": 2}"#);
    assert!(unnamed.starts_with("HTTP/1.1 400") && unnamed.contains("\"param\":\"model\""), "{unnamed}");

    // Nobody uses either for two seconds: both unload.
    let deadline = Instant::now() + Duration::from_secs(20);
    while statuses(server.port).iter().any(|(_, status)| status != "unloaded") {
        assert!(Instant::now() < deadline, "still loaded: {:?}", statuses(server.port));
        std::thread::sleep(Duration::from_millis(200));
    }
    // And the next request loads its model again.
    let again = http(server.port, "POST", "/v1/embeddings", r#"{"model": "all-minilm-l6-v2", "input": "hello"}"#);
    assert!(again.starts_with("HTTP/1.1 200"), "{again}");
}

/// `rillm bench --model-mix` against two models of one server: each request names one by
/// its share, and the result breaks the figures down per model.
#[test]
fn the_bench_mixes_models_and_reports_each() {
    let _g = serial();
    let (one, two) = (format!("chat={}", model().display()), format!("chat2={}", model().display()));
    let server = Server::start(std::path::Path::new(BIN), &["--model", &one, "--model", &two, "--max-running", "4"]);
    let url = server.url("/v1/completions");
    let result = support::bench_result(
        &[
            "--url",
            &url,
            "--model-mix",
            "chat:0.5,chat2:0.5",
            "--model-status-ms",
            "100",
            "--requests",
            "16",
            "--concurrency",
            "4",
            "--max-tokens",
            "4",
            // Greedy: a sampled reply may end at its first token, which the bench counts failed.
            "--temperature",
            "0",
        ],
        "mix",
    );
    assert_eq!(result["completed"], 16, "{}", result["limits"]);
    let models = result["per_model"].as_array().expect("a breakdown per model");
    let names: Vec<&str> = models.iter().map(|m| m["model"].as_str().unwrap()).collect();
    assert_eq!(names, vec!["chat", "chat2"]);
    let sent: u64 = models.iter().map(|m| m["sent"].as_u64().unwrap()).sum();
    assert_eq!(sent, 16);
    assert!(models.iter().all(|m| m["completed"].as_u64().unwrap() > 0), "{models:?}");
    for request in result["requests"].as_array().unwrap() {
        assert!(request["model"] == "chat" || request["model"] == "chat2", "{request}");
    }
    // chat2 was not loaded when the run began: its first requests waited on its load, and
    // the server's model list, polled through the run, says so.
    let loads = &result["model_loads"];
    assert_eq!(loads["of"], 16, "{loads}");
    assert!(loads["requests"].as_u64().is_some_and(|n| (1..16).contains(&n)), "{loads}");
    assert!(loads["wait_ms"]["max"].as_f64().is_some_and(|ms| ms > 0.0), "{loads}");
}

/// `--models-max 1`: every switch unloads the other model; the one swapped back answers a
/// recurring prompt from the prefix cache its last engine left (`KeptPrefixes`), and the
/// restored state gives the same greedy reply as the first computation.
#[test]
fn a_swapped_back_model_answers_a_recurring_prompt_from_its_kept_prefix_cache() {
    let _g = serial();
    let (one, two) = (format!("chat={}", model().display()), format!("chat2={}", model().display()));
    let args = ["--model", &one, "--model", &two, "--models-max", "1", "--max-running", "2"];
    let server = Server::start(std::path::Path::new(BIN), &args);
    let prompt = "The history of the lighthouse keepers of the northern coast, told year by year: ".repeat(12);
    let ask = |name: &str| {
        let body = serde_json::json!({"model": name, "prompt": prompt, "max_tokens": 8, "temperature": 0});
        let response = http(server.port, "POST", "/v1/completions", &body.to_string());
        assert!(response.starts_with("HTTP/1.1 200"), "{response}");
        let body = response.split("\r\n\r\n").nth(1).unwrap_or_default();
        serde_json::from_str::<serde_json::Value>(body).expect("a JSON body")
    };
    let first = ask("chat");
    assert_eq!(first["usage"]["prompt_tokens_details"]["cached_tokens"], 0, "{first}");
    ask("chat2");
    let status = |name: &str| statuses(server.port).into_iter().find(|(n, _)| n == name).map(|(_, s)| s);
    assert_eq!(status("chat").as_deref(), Some("unloaded"), "chat2's load unloaded chat");

    let again = ask("chat");
    let prompt_tokens = again["usage"]["prompt_tokens"].as_u64().expect("prompt tokens");
    let cached = again["usage"]["prompt_tokens_details"]["cached_tokens"].as_u64().expect("cached tokens");
    assert!(prompt_tokens > 150 && cached + 16 >= prompt_tokens, "cached {cached} of {prompt_tokens}: {again}");
    assert_eq!(again["choices"][0]["text"], first["choices"][0]["text"], "the restored state computes the same reply");
}

/// `--models-config`: each model's own settings over the serve flags (here `max_running`,
/// which bounds `n`), aliases, and `preload` (loaded at start, the others on demand).
#[test]
fn a_models_config_gives_each_model_its_settings() {
    let _g = serial();
    let dir = tempfile::tempdir().expect("temp dir");
    let config = dir.path().join("models.toml");
    let text = format!(
        "[[model]]\nname = \"small\"\npath = \"{0}\"\nmax_running = 2\n\n\
         [[model]]\nname = \"wide\"\npath = \"{0}\"\naliases = [\"smollm2\"]\nmax_running = 4\npreload = true\n\
         tool_call_parser = \"llama3_json\"\n",
        model().display()
    );
    std::fs::write(&config, text).expect("written");
    let server = Server::start(std::path::Path::new(BIN), &["--models-config", config.to_str().expect("utf-8")]);
    let deadline = Instant::now() + Duration::from_secs(30);
    while statuses(server.port) != vec![("small".into(), "unloaded".into()), ("wide".into(), "loaded".into())] {
        assert!(Instant::now() < deadline, "wide preloaded, small not: {:?}", statuses(server.port));
        std::thread::sleep(Duration::from_millis(100));
    }
    let three = |model: &str| {
        let body = serde_json::json!({"model": model, "prompt": "Hi", "max_tokens": 2, "n": 3, "temperature": 1});
        http(server.port, "POST", "/v1/completions", &body.to_string())
    };
    assert!(three("smollm2").starts_with("HTTP/1.1 200"), "wide runs 4 at once, by its alias");
    let refused = three("small");
    assert!(refused.starts_with("HTTP/1.1 400") && refused.contains("\"param\":\"n\""), "small runs 2: {refused}");
    // wide's own tool-call format (llama3_json) lays tools out otherwise than small's (the
    // serve flags': Hermes, from the template), so the same messages and tools differ.
    let laid_out = |model: &str| {
        let tool = serde_json::json!({"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}});
        let body =
            serde_json::json!({"model": model, "messages": [{"role": "user", "content": "Hi"}], "tools": [tool]});
        json_body(&http(server.port, "POST", "/tokenize", &body.to_string()))["tokens"].clone()
    };
    let (small, wide) = (laid_out("small"), laid_out("wide"));
    assert!(small.is_array() && wide.is_array() && small != wide, "{small} / {wide}");

    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, "[[model]]\nname = \"a\"\npath = \"a.gguf\"\nctx = 4096\n").expect("written");
    let output = std::process::Command::new(BIN)
        .args(["serve", "--port", "0", "--models-config", bad.to_str().expect("utf-8")])
        .output()
        .expect("ran");
    let said = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success() && said.contains("unknown field `ctx`"), "{said}");
}

/// `--models-memory-mib`: each model's memory is measured at its load (`memory_mib` in
/// `/v1/models`); with room for one SmolLM2 (its file, KV cache and buffers, prefix-cache
/// budget), loading the other unloads it first.
#[test]
fn models_memory_keeps_the_loaded_models_within_the_budget() {
    let _g = serial();
    let (one, two) = (format!("chat={}", model().display()), format!("chat2={}", model().display()));
    let args = [
        "--model",
        &one,
        "--model",
        &two,
        "--max-running",
        "2",
        "--prefix-cache-mib",
        "16",
        "--models-memory-mib",
        "300",
    ];
    let server = Server::start(std::path::Path::new(BIN), &args);
    let ask = |name: &str| {
        let body = serde_json::json!({"model": name, "prompt": "Hi", "max_tokens": 2});
        let response = http(server.port, "POST", "/v1/completions", &body.to_string());
        assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    };
    let memory_mib = |name: &str| {
        let body = json_body(&http(server.port, "GET", "/v1/models", ""));
        let found = body["data"].as_array().and_then(|d| d.iter().find(|m| m["id"] == name).cloned());
        found.and_then(|m| m["memory_mib"].as_u64())
    };
    for (name, other) in [("chat", "chat2"), ("chat2", "chat"), ("chat", "chat2")] {
        ask(name);
        let statuses = statuses(server.port);
        let loaded: Vec<&str> = statuses.iter().filter(|(_, s)| s == "loaded").map(|(n, _)| n.as_str()).collect();
        assert_eq!(loaded, vec![name], "{other} unloaded to make room: {statuses:?}");
        let measured = memory_mib(name).expect("measured at its load");
        // The file alone is 92 MiB; its KV cache (2 × 2,048 cells) 90 MiB more.
        assert!((150..290).contains(&measured), "{name}: {measured} MiB");
    }
}

/// Three models of two architectures and two tasks behind one server, two at most loaded:
/// SmolLM2 (llama), a tiny random-weight qwen2 (`scripts/make-tiny-qwen2.py`) and the
/// embedding model, each answering its own routes, each load unloading the least recently
/// used.
#[test]
fn a_llama_a_qwen2_and_an_embedding_model_take_turns_in_two_places() {
    let _g = serial();
    rillm_models::embedding_model_for_tests();
    let dir = tempfile::tempdir().expect("temp dir");
    let qwen = dir.path().join("tiny-qwen2.gguf");
    let root = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let python = std::env::var("RILLM_TEST_PYTHON").unwrap_or_else(|_| "python3".into());
    let made = std::process::Command::new(python)
        .arg(root.join("scripts/make-tiny-qwen2.py"))
        .arg(model())
        .arg(&qwen)
        .status()
        .expect("python runs");
    assert!(made.success(), "make-tiny-qwen2.py needs gguf and numpy (scripts/test installs them)");
    let (chat, qwen) = (format!("chat={}", model().display()), format!("qwen={}", qwen.display()));
    let args =
        ["--model", &chat, "--model", &qwen, "--model", "all-minilm-l6-v2", "--models-max", "2", "--max-running", "2"];
    let server = Server::start(std::path::Path::new(BIN), &args);
    let post = |path: &str, body: serde_json::Value| {
        let response = http(server.port, "POST", path, &body.to_string());
        assert!(response.starts_with("HTTP/1.1 200"), "{path}: {response}");
    };
    let chat_body = |model: &str| serde_json::json!({"model": model, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4});
    post("/v1/chat/completions", chat_body("qwen"));
    post("/v1/embeddings", serde_json::json!({"model": "all-minilm-l6-v2", "input": ["one", "two"]}));
    let loaded = |port| statuses(port).into_iter().filter(|(_, s)| s == "loaded").map(|(n, _)| n).collect::<Vec<_>>();
    assert_eq!(loaded(server.port), vec!["qwen", "all-minilm-l6-v2"], "chat, least recently used, made room");
    post("/v1/chat/completions", chat_body("chat"));
    assert_eq!(loaded(server.port), vec!["chat", "all-minilm-l6-v2"], "then qwen made room");
    let refused =
        http(server.port, "POST", "/v1/embeddings", &serde_json::json!({"model": "qwen", "input": "x"}).to_string());
    assert!(refused.starts_with("HTTP/1.1 400") && refused.contains("\"param\":\"model\""), "{refused}");
}

/// A dataset whose records name their models (`--record-models`): each goes to its own,
/// and the result breaks the figures down per model.
#[test]
fn the_bench_sends_each_dataset_record_to_the_model_it_names() {
    let _g = serial();
    let (one, two) = (format!("chat={}", model().display()), format!("chat2={}", model().display()));
    let server = Server::start(std::path::Path::new(BIN), &["--model", &one, "--model", &two, "--max-running", "2"]);
    let dir = tempfile::tempdir().expect("temp dir");
    let dataset = dir.path().join("mixed.jsonl");
    let lines: Vec<String> = (0..6)
        .map(|i| {
            serde_json::json!({"prompt": format!("Count to {i}"), "model": if i < 4 { "chat" } else { "chat2" }})
                .to_string()
        })
        .collect();
    std::fs::write(&dataset, lines.join("\n")).expect("written");
    let url = server.url("/v1/completions");
    let dataset = dataset.to_str().expect("utf-8");
    let args = ["--url", &url, "--dataset", dataset, "--record-models", "--requests", "6", "--concurrency", "2"];
    let result = support::bench_result(&[&args[..], &["--max-tokens", "4", "--temperature", "0"]].concat(), "records");
    assert_eq!(result["completed"], 6, "{}", result["limits"]);
    let sent: Vec<(String, u64)> = result["per_model"]
        .as_array()
        .expect("a breakdown per model")
        .iter()
        .map(|m| (m["model"].as_str().unwrap_or_default().to_string(), m["sent"].as_u64().unwrap_or_default()))
        .collect();
    assert_eq!(sent, vec![("chat".to_string(), 4), ("chat2".to_string(), 2)]);
}
