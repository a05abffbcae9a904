//! The qwen2 family end to end. No qwen2 weights can be fetched on these machines, so the
//! test builds a tiny random-weight qwen2 GGUF (SmolLM2's tokenizer, 2 layers) with
//! `scripts/make-tiny-qwen2.py`: its text is noise, but loading, batching, the chat
//! template and stopping all run through the qwen2 code path of llama.cpp. The same script
//! makes a qwen3 one, shaped as a reasoning model: Qwen3's template, `<think>` and
//! `</think>` as single tokens.

use std::path::PathBuf;
use std::process::Command;

use rillm_engine::{
    ChatMessage, Constraint, Engine, EngineConfig, FinishReason, GenerateRequest, Prompt, Reasoning, SamplingParams,
    StreamEvent, TemplateThinking, ThinkingStart,
};

/// The tiny qwen2 GGUF, written into `dir`.
fn tiny_qwen2(dir: &tempfile::TempDir) -> PathBuf {
    tiny_model(dir, &[])
}

/// A tiny GGUF of the script's making (`extra`: its architecture and template), in `dir`.
fn tiny_model(dir: &tempfile::TempDir, extra: &[&str]) -> PathBuf {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let source = rillm_models::model_for_tests();
    let out = dir.path().join(format!("tiny-{}.gguf", extra.first().unwrap_or(&"qwen2")));
    let extra: Vec<PathBuf> =
        extra.iter().map(|a| if a.ends_with(".jinja") { root.join(a) } else { a.into() }).collect();
    let status = Command::new("python3")
        .arg(root.join("scripts/make-tiny-qwen2.py"))
        .arg(&source)
        .arg(&out)
        .args(&extra)
        .status()
        .expect("python3 runs");
    assert!(status.success(), "make-tiny-qwen2.py failed: install its needs with `python3 -m pip install gguf numpy`");
    out
}

fn finish(mut stream: rillm_engine::RequestStream) -> (Vec<u32>, rillm_engine::Completion) {
    let mut ids = Vec::new();
    loop {
        match stream.blocking_next().expect("a final event") {
            StreamEvent::Text { token_ids, .. } => ids.extend(token_ids),
            StreamEvent::Finished(done) => return (ids, done),
            other => panic!("neither prompt scores nor a restart were asked for: {other:?}"),
        }
    }
}

#[test]
fn a_qwen2_gguf_loads_batches_and_chats() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let path = tiny_qwen2(&dir);
    let mut config = EngineConfig::new(&path);
    config.max_running = 2;
    config.ctx_per_sequence = 256;
    let engine = Engine::start(config).expect("qwen2 loads");
    assert_eq!(engine.architecture(), "qwen2");

    let request = |prompt: &str| {
        let mut r = GenerateRequest::text(prompt).with_max_tokens(12).with_sampling(SamplingParams::greedy());
        r.ignore_eos = true;
        r
    };
    let a = engine.submit(request("Hello there")).unwrap();
    let b = engine.submit(request("Something else entirely")).unwrap();
    for (ids, done) in [finish(a), finish(b)] {
        assert_eq!(done.finish_reason, FinishReason::Length);
        assert_eq!((ids.len(), done.usage.completion_tokens), (12, 12));
    }
    let chat = GenerateRequest::chat(vec![ChatMessage::new("user", "Hi")])
        .with_max_tokens(4)
        .with_sampling(SamplingParams::greedy());
    let (_, done) = finish(engine.submit(chat).unwrap());
    // "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n" in SmolLM2's vocabulary.
    assert!(done.usage.prompt_tokens >= 8, "{:?}", done.usage);
    drop(engine);
}

/// Qwen3's shape: its template read as a thinking one with a switch; a constrained reply
/// to a prompt that leaves thinking undecided gets its thought opened in the prompt, the
/// budget closes it with the single `</think>` token fed as a forced one, and the answer
/// takes the shape asked.
#[test]
fn a_qwen3_gguf_thinks_between_single_token_markers_and_answers_in_the_shape_asked() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let path = tiny_model(&dir, &["qwen3", "crates/engine/tests/fixtures/qwen3.jinja"]);
    let mut config = EngineConfig::new(&path);
    config.max_running = 2;
    config.ctx_per_sequence = 256;
    let engine = Engine::start(config).expect("qwen3 loads");
    assert_eq!(engine.architecture(), "qwen3");
    let thinking = engine.tokenizer_info().chat_template_thinking;
    assert_eq!(thinking, Some(TemplateThinking { switch: Some("enable_thinking") }));
    let close = engine.tokenize_prompt(&Prompt::Text("</think>".into())).expect("tokenizes");
    assert_eq!(close.len(), 1, "a single token, as in Qwen3's vocabulary: {close:?}");

    let mut request = GenerateRequest::chat(vec![ChatMessage::new("user", "Hi")])
        .with_max_tokens(40)
        .with_sampling(SamplingParams::greedy())
        .with_constraint(Constraint::Choice(vec!["yes".into(), "no".into()]));
    request.reasoning = Some(Reasoning { unmarked_start: ThinkingStart::Answer, budget: Some(4) });
    let mut stream = engine.submit(request).expect("submitted");
    let (mut thought_ids, mut answer) = (Vec::new(), String::new());
    let done = loop {
        match stream.blocking_next().expect("a final event") {
            StreamEvent::Reasoning { token_ids, .. } => thought_ids.extend(token_ids),
            StreamEvent::Text { text, .. } => answer.push_str(&text),
            StreamEvent::Finished(done) => break done,
            other => panic!("{other:?}"),
        }
    };
    assert!(answer == "yes" || answer == "no", "{answer:?}");
    assert_eq!(done.finish_reason, FinishReason::Stop, "the grammar is complete");
    // Four thought tokens, then the forced `\n`, `</think>`.
    assert_eq!(done.usage.reasoning_tokens, 6, "{:?}", done.usage);
    assert!(thought_ids.contains(&close[0]), "the forced marker went with the thought: {thought_ids:?}");
}
