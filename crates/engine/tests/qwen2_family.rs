//! The qwen2 family end to end. No qwen2 weights can be fetched on these machines, so the
//! test builds a tiny random-weight qwen2 GGUF (SmolLM2's tokenizer, 2 layers) with
//! `scripts/make-tiny-qwen2.py`: its text is noise, but loading, batching, the chat
//! template and stopping all run through the qwen2 code path of llama.cpp.

use std::path::PathBuf;
use std::process::Command;

use rillm_engine::{ChatMessage, Engine, EngineConfig, FinishReason, GenerateRequest, SamplingParams, StreamEvent};

/// The tiny qwen2 GGUF, written into `dir`.
fn tiny_qwen2(dir: &tempfile::TempDir) -> PathBuf {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let source = rillm_models::model_for_tests();
    let out = dir.path().join("tiny-qwen2.gguf");
    let status = Command::new("python3")
        .arg(root.join("scripts/make-tiny-qwen2.py"))
        .arg(&source)
        .arg(&out)
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
