//! Constrained sequences in the step: forced tokens, refused tokens (`scheduler/decode.rs`).

use super::*;

#[test]
fn tokens_a_constraint_forces_are_fed_in_one_step_with_one_output_row() {
    let mut h = Harness::new(2, 64);
    let mut events = h.submit_regex("q", 50, "[ab] then [0-9]");
    let mut plain = h.submit_n("p", 3);
    h.step(); // both prompts; the constrained one samples `a` or `b`, then ` then ` is forced
    h.step();
    let batch = h.scheduler.executor.batches.last().cloned().expect("a batch");
    let constrained: Vec<&BatchToken> = batch.iter().filter(|t| t.seq == 0).collect();
    assert_eq!(constrained.len(), "a then ".len(), "the sampled letter and the 6 forced tokens together");
    assert_eq!(constrained.iter().filter(|t| t.logits).count(), 1, "one output row, on the last");
    assert!(constrained.last().is_some_and(|t| t.logits && t.token == TokenId::from(b' ')));
    let positions: Vec<u32> = constrained.iter().map(|t| t.pos).collect();
    assert!(positions.windows(2).all(|w| w[1] == w[0] + 1), "{positions:?}");
    assert_eq!(batch.iter().filter(|t| t.seq == 1).count(), 1, "the plain stream still decodes one token");
    h.run_to_idle();
    let (text, done) = drain(&mut events);
    assert!(text.ends_with(" then 0") && text.len() == 8, "{text:?}");
    assert_eq!(done.finish_reason, FinishReason::Stop, "the grammar is complete");
    assert_eq!(done.usage.completion_tokens, 8, "forced tokens are completion tokens");
    let snap = h.scheduler.stats.snapshot().constraints;
    assert_eq!((snap.constrained_tokens, snap.forced_tokens), (8, 6));
    assert_eq!(drain(&mut plain).1.usage.completion_tokens, 3);
}

#[test]
fn tokens_forced_before_the_first_choice_are_fed_with_the_prompt() {
    let mut h = Harness::new(1, 64);
    let mut events = h.submit_regex("qq", 50, "hello world [0-9]");
    h.step();
    let batch = h.scheduler.executor.batches.last().cloned().expect("a batch");
    let fed: Vec<u8> = batch.iter().map(|t| t.token as u8).collect();
    assert_eq!(fed, b"qqhello world ", "the prompt, then what the grammar forces first");
    assert_eq!(batch.iter().filter(|t| t.logits).count(), 1);
    assert!(batch.last().is_some_and(|t| t.logits), "the output row is the last forced token's");
    // That one step sampled the digit: the output is complete without a step per forced token.
    assert_eq!(h.scheduler.executor.batches.len(), 1);
    h.run_to_idle();
    let (text, done) = drain(&mut events);
    assert_eq!(text, "hello world 0");
    assert_eq!((done.finish_reason, done.usage.completion_tokens), (FinishReason::Stop, 13));
    let snap = h.scheduler.stats.snapshot().constraints;
    assert_eq!((snap.constrained_tokens, snap.forced_tokens), (13, 12));
}

#[test]
fn without_room_in_the_step_the_tokens_forced_first_go_one_by_one() {
    let mut h = Harness::new(1, 64);
    // The prompt fills the step's room: nothing is fed after it.
    let prompt = "q".repeat(h.scheduler.executor.max_batch_tokens());
    let mut events = h.submit_regex(&prompt, 50, "hello world [0-9]");
    h.step();
    let first = h.scheduler.executor.batches.last().cloned().expect("a batch");
    assert!(first.iter().all(|t| t.token == TokenId::from(b'q')), "only the prompt in the first step");
    h.run_to_idle();
    let (text, done) = drain(&mut events);
    assert_eq!(text, "hello world 0");
    assert_eq!(done.finish_reason, FinishReason::Stop);
    assert_eq!(h.scheduler.executor.batches.len(), 2, "the prompt, sampling `h`; the rest forced, sampling the digit");
}

#[test]
fn a_token_the_grammar_refuses_ends_the_request_with_an_error_not_a_hang() {
    let mut h = Harness::new(1, 64);
    h.scheduler.executor.ignore_masks = true;
    let mut events = h.submit_regex("q", 50, "[0-9]+");
    h.run_to_idle();
    let (text, done) = drain(&mut events);
    assert_eq!(done.finish_reason, FinishReason::Error);
    assert!(done.error.as_deref().is_some_and(|e| e.contains("constrained decoding failed")), "{:?}", done.error);
    assert!(text.is_empty(), "{text:?}");
}

#[test]
fn forced_tokens_stop_at_max_tokens() {
    let mut h = Harness::new(1, 64);
    let mut events = h.submit_regex("q", 5, "hello world [0-9]");
    h.run_to_idle();
    let (text, done) = drain(&mut events);
    assert_eq!((text.as_str(), done.finish_reason), ("hello", FinishReason::Length));
    assert_eq!(done.usage.completion_tokens, 5);
}
