//! A reasoning model's output in the step: the thought's budget closes it by forced tokens
//! fed in one step, and a constraint holds only from the answer on.

use rillm_backend::{Reasoning, ThinkingStart};

use super::*;
use crate::request::thinking::{Phase, ThinkingPlan, FORCED_CLOSE};

/// A "model" that thinks `abcde…` after a prompt that opened its thought.
const SCRIPT: &str = "Q<think>abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ";

fn thinking(budget: Option<u32>) -> ThinkingPlan {
    let close = ByteTokenizer.tokenize(FORCED_CLOSE, false, true);
    ThinkingPlan { start: Phase::Thinking, unmarked: ThinkingStart::Thinking, budget, close }
}

#[test]
fn a_spent_budget_closes_the_thought_with_forced_tokens_fed_in_one_step() {
    let mut h = Harness::new(1, 64);
    h.scheduler.executor.script = Some(SCRIPT.as_bytes().to_vec());
    let mut events = h.submit_with("Q<think>", 30, |r| r.thinking = Some(thinking(Some(5))));
    h.run_to_idle();
    let forced_step = h.scheduler.executor.batches.iter().find(|b| b.len() > 1 && b[0].pos > 0).expect("a wide step");
    let fed: Vec<u8> = forced_step.iter().map(|t| t.token as u8).collect();
    assert_eq!(fed, b"e\n</think>\n\n", "the fifth thought token, then the closing marker, in one step");
    assert_eq!(forced_step.iter().filter(|t| t.logits).count(), 1, "one output row");
    let (thought, answer, done) = drain_parts(&mut events);
    assert_eq!(thought, "abcde");
    // The row after the last forced token (position 23) continues the script at 24.
    assert_eq!(answer, &SCRIPT[24..38], "the answer after the forced close, no whitespace before it");
    assert_eq!(done.usage.completion_tokens, 30);
    assert_eq!(done.usage.reasoning_tokens, 5 + "\n</think>".len() as u32, "the forced marker is thought");
}

#[test]
fn a_thought_within_its_budget_ends_on_its_own_and_a_cut_one_is_all_reasoning() {
    let mut h = Harness::new(1, 64);
    h.scheduler.executor.script = Some(b"Q<think>ab</think>answer".to_vec());
    let mut closed = h.submit_with("Q<think>", 16, |r| r.thinking = Some(thinking(Some(50))));
    h.run_to_idle();
    let (thought, answer, done) = drain_parts(&mut closed);
    assert_eq!((thought.as_str(), answer.as_str()), ("ab", "answer"));
    assert_eq!(done.usage.reasoning_tokens, 10);
    let mut cut = h.submit_with("Q<think>", 4, |r| r.thinking = Some(thinking(None)));
    h.run_to_idle();
    let (thought, answer, done) = drain_parts(&mut cut);
    assert_eq!((thought.as_str(), answer.as_str(), done.finish_reason), ("ab</", "", FinishReason::Length));
}

#[test]
fn a_constraint_holds_only_from_the_answer_on() {
    let mut h = Harness::new(1, 64);
    // Free, the "model" writes letters: a mask on the thought would have forced digits.
    h.scheduler.executor.script = Some(b"Q<think>no digits here</think>xyz".to_vec());
    let compiler = GrammarCompiler::new(&byte_env()).expect("compiler");
    let constraint = Constraint::Regex("[0-9]{3}".into());
    let matcher = compiler.matcher(&constraint, &ConstraintCounters::default()).expect("compiles");
    let mut events = h.submit_with("Q<think>", 40, |r| {
        r.constraint = Some(SequenceConstraint::new(matcher));
        r.thinking = Some(thinking(None));
    });
    h.run_to_idle();
    let (thought, answer, done) = drain_parts(&mut events);
    assert_eq!(thought, "no digits here");
    assert_eq!(answer, "000", "the answer follows the grammar (the lowest digit where `x` is refused)");
    assert_eq!(done.finish_reason, FinishReason::Stop, "the grammar is complete");
}

#[test]
fn a_turn_ended_inside_the_thought_of_a_shaped_reply_closes_the_thought_instead() {
    let mut h = Harness::new(1, 64);
    // The "model" ends its turn (token 0) inside its thought; unshaped, that ends the reply.
    h.scheduler.executor.script = Some(b"Q<think>ab\0zzzzzzzzzzzzzzzzzzzz".to_vec());
    let mut plain = h.submit_with("Q<think>", 40, |r| r.thinking = Some(thinking(None)));
    h.run_to_idle();
    let (thought, answer, done) = drain_parts(&mut plain);
    assert_eq!((thought.as_str(), answer.as_str(), done.finish_reason), ("ab", "", FinishReason::Eos));
    let compiler = GrammarCompiler::new(&byte_env()).expect("compiler");
    let matcher =
        compiler.matcher(&Constraint::Regex("[0-9]{3}".into()), &ConstraintCounters::default()).expect("compiles");
    let mut shaped = h.submit_with("Q<think>", 40, |r| {
        r.constraint = Some(SequenceConstraint::new(matcher));
        r.thinking = Some(thinking(None));
    });
    h.run_to_idle();
    let (thought, answer, done) = drain_parts(&mut shaped);
    assert_eq!((thought.as_str(), answer.as_str(), done.finish_reason), ("ab", "000", FinishReason::Stop));
    assert_eq!(done.usage.completion_tokens, 2 + FORCED_CLOSE.len() as u32 + 3, "the end token was not taken");
}

#[test]
fn no_thinking_closes_the_thought_in_the_prompt_and_a_constrained_reply_opens_it() {
    let reasoning = |budget| Reasoning { unmarked_start: ThinkingStart::Answer, budget };
    let text = |tokens: &[TokenId]| String::from_utf8(tokens.iter().map(|&t| t as u8).collect()).expect("utf8");
    for (prompt, budget, constrained, expected, start) in [
        ("A:<think>\n", Some(0), false, "A:<think>\n\n</think>\n\n", Phase::Answer),
        ("A:", Some(0), false, "A:<think>\n\n</think>\n\n", Phase::Answer),
        ("A:<think>\n\n</think>\n\n", Some(0), false, "A:<think>\n\n</think>\n\n", Phase::Answer),
        ("A:", None, true, "A:<think>\n", Phase::Thinking),
        ("A:", None, false, "A:", Phase::Undecided),
    ] {
        let mut tokens = ByteTokenizer.tokenize(prompt, false, false);
        let plan = ThinkingPlan::for_prompt(&reasoning(budget), &mut tokens, constrained, &ByteTokenizer);
        assert_eq!((text(&tokens).as_str(), plan.start), (expected, start), "{prompt:?} {budget:?}");
        assert!(plan.budget.is_none(), "a budget of 0 (or none) forces nothing later");
    }
}
