//! What the real-model test files share: one engine at a time, and draining streams.
#![allow(dead_code)] // each test file uses some of these

use std::sync::{Mutex, MutexGuard};

use rillm_engine::{Completion, Engine, EngineConfig, GenerateRequest, RequestStream, SamplingParams, StreamEvent};

/// Tests share two cores; running engines one at a time keeps each test's timing sane.
static SERIAL: Mutex<()> = Mutex::new(());

pub fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

pub fn model_path() -> std::path::PathBuf {
    rillm_models::model_for_tests()
}

pub fn engine(max_running: usize, max_waiting: usize, ctx: u32) -> Engine {
    let mut config = EngineConfig::new(model_path());
    config.max_running = max_running;
    config.max_waiting = max_waiting;
    config.ctx_per_sequence = ctx;
    Engine::start(config).expect("engine starts")
}

pub fn greedy(prompt: &str, max_tokens: u32) -> GenerateRequest {
    GenerateRequest::text(prompt).with_max_tokens(max_tokens).with_sampling(SamplingParams::greedy())
}

/// Drains a stream: (text, token ids, final event).
pub fn collect(mut stream: RequestStream) -> (String, Vec<u32>, Completion) {
    let (mut text, mut ids) = (String::new(), Vec::new());
    while let Some(event) = stream.blocking_next() {
        match event {
            StreamEvent::Text { text: t, token_ids, .. } => {
                assert!(!t.is_empty(), "text events are never empty");
                text.push_str(&t);
                ids.extend(token_ids);
            }
            StreamEvent::Finished(done) => return (text, ids, done),
            other => panic!("neither prompt scores nor a restart were asked for: {other:?}"),
        }
    }
    panic!("stream ended without a Finished event");
}
