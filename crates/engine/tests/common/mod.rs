//! What the real-model test files share: one engine at a time, draining streams, and the
//! near-tie rule for comparing greedy outputs computed in different batch shapes.
#![allow(dead_code)] // each test file uses some of these

use std::sync::{Mutex, MutexGuard};

use rillm_engine::{
    Completion, Engine, EngineConfig, GenerateRequest, Prompt, RequestStream, SamplingParams, StreamEvent, TokenLogprob,
};

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

/// An engine that prefills every prompt from scratch: the same request computes the same
/// rows in the same shape every time, so its greedy output may be compared token for token.
/// (With prefix reuse a repeated prompt computes only its tail, in another batch shape, and
/// llama.cpp rounds that a little differently: where the model's top two are within a few
/// hundredths of a nat, the greedy token flips.)
pub fn cold_engine(max_running: usize, max_waiting: usize, ctx: u32) -> Engine {
    let mut config = EngineConfig::new(model_path());
    config.max_running = max_running;
    config.max_waiting = max_waiting;
    config.ctx_per_sequence = ctx;
    config.prefix_caching = false;
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

/// Alternatives asked per token where outputs are compared by the near-tie rule: enough
/// that the token the other output chose is among them wherever the two were close.
pub const TIE_TOPS: u32 = 5;

/// `request` asking the log-probabilities the near-tie rule reads.
pub fn with_tops(mut request: GenerateRequest) -> GenerateRequest {
    request.logprobs = Some(TIE_TOPS);
    request
}

/// A greedy output with each token's alternatives (token id, log-probability), most likely
/// first.
#[derive(Debug, Clone)]
pub struct Scored {
    pub text: String,
    pub ids: Vec<u32>,
    pub tops: Vec<Vec<(u32, f32)>>,
    pub done: Completion,
}

/// Drains a stream of a request that asked log-probabilities (`with_tops`).
pub fn collect_scored(mut stream: RequestStream) -> Scored {
    let (mut text, mut ids, mut tops) = (String::new(), Vec::new(), Vec::new());
    while let Some(event) = stream.blocking_next() {
        match event {
            StreamEvent::Text { text: t, token_ids, logprobs, .. } => {
                text.push_str(&t);
                ids.extend(token_ids);
                tops.extend(logprobs.iter().map(alternatives));
            }
            StreamEvent::Finished(done) => return Scored { text, ids, tops, done },
            // Not asked for: these requests read no thought apart.
            StreamEvent::Prompt(_) | StreamEvent::Restarted { .. } | StreamEvent::Reasoning { .. } => {}
        }
    }
    panic!("stream ended without a Finished event");
}

fn alternatives(logprob: &TokenLogprob) -> Vec<(u32, f32)> {
    logprob.top.iter().map(|t| (t.token, t.logprob)).collect()
}

/// Largest gap, in nats, between two tokens that a different batch shape may swap: the
/// model's top two within this are all but tied, and llama.cpp's kernels round rows
/// computed in another shape (prefix reuse, widening, batch size, verified drafts) by up to
/// a few hundredths.
pub const NEAR_TIE_NATS: f32 = 0.1;

/// The near-tie rule: two greedy outputs of the same request, computed in different batch
/// shapes, are the same tokens among their first `within` (all where `None`), or part only
/// where the token each chose and the one the other chose were within `NEAR_TIE_NATS` of
/// each other in either computation (after parting, nothing more is compared: each goes
/// its own way).
pub fn assert_parts_only_at_a_tie(reference: &Scored, other: &Scored, within: Option<usize>) {
    let n = within.unwrap_or(usize::MAX).min(reference.ids.len().max(other.ids.len()));
    let (a, b) = (&reference.ids[..n.min(reference.ids.len())], &other.ids[..n.min(other.ids.len())]);
    let Some(at) = a.iter().zip(b).position(|(x, y)| x != y) else {
        assert_eq!(a.len(), b.len(), "one output ended early: {:?} vs {:?}", reference.text, other.text);
        if within.is_none() {
            assert_eq!(reference.text, other.text, "the same tokens, the same text");
        }
        return;
    };
    let (chosen, instead) = (a[at], b[at]);
    let margins = [gap(&reference.tops, at, chosen, instead), gap(&other.tops, at, instead, chosen)];
    assert!(
        margins.iter().flatten().any(|&m| m < NEAR_TIE_NATS),
        "parted at token {at} ({chosen} vs {instead}) with margins {margins:?} \
         (reference's tops {:?}, other's {:?}): {:?} vs {:?}",
        reference.tops.get(at),
        other.tops.get(at),
        reference.text,
        other.text
    );
    eprintln!("parted at token {at} at a near-tie (margins {margins:?})");
}

/// How much more likely `chosen` was than `instead` at `at`, where both are among its
/// alternatives.
fn gap(tops: &[Vec<(u32, f32)>], at: usize, chosen: u32, instead: u32) -> Option<f32> {
    let top = tops.get(at)?;
    let logprob = |token| top.iter().find(|(t, _)| *t == token).map(|&(_, l)| l);
    Some(logprob(chosen)? - logprob(instead)?)
}

/// The near-tie rule for outputs generated without log-probabilities (a constrained request
/// asking them would feed no forced tokens ahead, the very thing under test): where they
/// part, the position is scored afresh, the prompt and the common tokens as the prompt, and
/// the two tokens chosen there must be within `NEAR_TIE_NATS`.
pub fn assert_parts_only_at_a_scored_tie(engine: &Engine, prompt: &str, reference: &[u32], other: &[u32], n: usize) {
    let (a, b) = (&reference[..n.min(reference.len())], &other[..n.min(other.len())]);
    let Some(at) = a.iter().zip(b).position(|(x, y)| x != y) else {
        assert_eq!(a.len(), b.len(), "one output ended early: {reference:?} vs {other:?}");
        return;
    };
    let mut tokens = engine.tokenize_text(prompt, true);
    tokens.extend_from_slice(&a[..at]);
    let mut request = GenerateRequest::new(Prompt::Tokens(tokens)).with_max_tokens(1);
    request.sampling = SamplingParams::greedy();
    request.logprobs = Some(20);
    let scored = collect_scored(engine.submit(request).expect("admitted"));
    let margin = gap(&scored.tops, 0, a[at], b[at]).map(f32::abs);
    assert!(
        margin.is_some_and(|m| m < NEAR_TIE_NATS),
        "parted at token {at} ({} vs {}) with margin {margin:?} ({:?}): {reference:?} vs {other:?}",
        a[at],
        b[at],
        scored.tops.first()
    );
    eprintln!("parted at token {at} at a near-tie (margin {margin:?})");
}
