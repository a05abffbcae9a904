//! Requests for `n` choices and scored prompts (`scheduler/choices.rs`).

use super::*;

/// Every event of a request until its `n`-th final event: text per choice, the scored
/// prompt if any, and the final events in the order they came.
struct Drained {
    texts: Vec<String>,
    prompt: Option<Vec<rillm_backend::PromptToken>>,
    finished: Vec<rillm_backend::Completion>,
}

fn drain_choices(events: &mut Events, n: usize) -> Drained {
    let mut out = Drained { texts: vec![String::new(); n], prompt: None, finished: Vec::new() };
    while let Ok(event) = events.try_recv() {
        match event {
            StreamEvent::Text { index, text, .. } => out.texts[index as usize].push_str(&text),
            StreamEvent::Prompt(tokens) => {
                assert!(out.prompt.is_none(), "the prompt is sent once");
                out.prompt = Some(tokens);
            }
            StreamEvent::Finished(done) => out.finished.push(done),
            StreamEvent::Restarted { index } => panic!("choice {index} restarted unasked"),
            StreamEvent::Reasoning { index, .. } => panic!("choice {index} thought unasked"),
        }
    }
    assert_eq!(out.finished.len(), n, "one final event per choice");
    out
}

#[test]
fn n_choices_compute_the_prompt_once_and_then_decode_side_by_side() {
    let mut h = Harness::new(4, 64);
    let mut events = h.submit_with("abcd", 2, |r| r.n = 3);
    assert_eq!(h.step(), [(0, 4)], "only the first choice computes the prompt");
    assert_eq!(h.step(), [(0, 1), (1, 1), (2, 1)], "then every choice decodes its own token");
    let batch = h.scheduler.executor.batches.last().cloned().expect("a batch");
    assert!(batch.iter().all(|t| t.pos == 4), "each choice continues at the prompt's end: {batch:?}");
    h.run_to_idle();
    let out = drain_choices(&mut events, 3);
    assert_eq!(out.texts, ["xx", "xx", "xx"]);
    let mut indexes: Vec<u32> = out.finished.iter().map(|d| d.index).collect();
    indexes.sort_unstable();
    assert_eq!(indexes, [0, 1, 2]);
    assert!(out.finished.iter().all(|d| d.usage.completion_tokens == 2 && d.usage.prompt_tokens == 4));
    let stats = h.scheduler.stats.snapshot();
    assert_eq!(stats.prompt_tokens_computed, 4, "the prompt ran once, not three times");
    assert_eq!(stats.prompt_tokens, 4, "and counts once");
    assert_eq!(stats.generation_tokens, 6);
}

#[test]
fn a_request_for_n_choices_waits_for_n_free_slots_and_keeps_its_turn() {
    let mut h = Harness::new(3, 64);
    let mut first = h.submit_n("a", 3);
    h.step();
    let mut wide = h.submit_with("bb", 1, |r| r.n = 3);
    let mut behind = h.submit_n("c", 1);
    assert_eq!(h.step(), [(0, 1)], "two slots are free, but neither request behind the wide one jumps it");
    h.run_to_idle();
    assert_eq!(drain(&mut first).1.finish_reason, FinishReason::Length);
    assert_eq!(drain_choices(&mut wide, 3).texts, ["x", "x", "x"]);
    assert_eq!(drain(&mut behind).0, "x");
    assert!(h.queue.is_empty() && !h.queue.is_full());
}

#[test]
fn a_dropped_client_ends_every_choice_and_frees_their_slots() {
    let mut h = Harness::new(4, 64);
    let events = h.submit_with("abc", 50, |r| r.n = 3);
    h.step();
    h.step();
    assert_eq!(h.scheduler.running.count(), 3);
    drop(events);
    h.step();
    assert!(h.scheduler.running.is_idle());
    assert!(h.scheduler.running.iter().all(Option::is_none));
    let _next = h.submit_with("d", 1, |r| r.n = 4);
    assert_eq!(h.step(), [(0, 1)], "all four slots are free again");
}

#[test]
fn a_scored_prompt_gets_logits_on_every_row_and_with_max_tokens_0_nothing_is_generated() {
    let mut h = Harness::with_cache(2, 64, true, 0);
    let _warm = h.submit_n("abcd", 1);
    h.run_to_idle();
    let mut events = h.submit_with("abcd", 0, |r| r.prompt_logprobs = Some(2));
    assert_eq!(h.step(), [(0, 4)], "the whole prompt again: a cached prefix has no logits");
    let batch = h.scheduler.executor.batches.last().cloned().expect("a batch");
    assert!(batch.iter().all(|t| t.logits));
    h.run_to_idle();
    let out = drain_choices(&mut events, 1);
    assert_eq!(out.texts, [""]);
    assert_eq!(out.finished[0].finish_reason, FinishReason::Length);
    assert_eq!(out.finished[0].usage.completion_tokens, 0);
    let prompt = out.prompt.expect("the scored prompt");
    let tokens: Vec<TokenId> = prompt.iter().map(|p| p.token).collect();
    assert_eq!(tokens, ByteTokenizer.tokenize("abcd", false, false));
    assert_eq!(prompt[0].logprob, None, "nothing predicts the first token");
    assert!(prompt[1..].iter().all(|p| p.logprob == Some(-0.5) && p.top.len() == 2));
    assert_eq!(prompt[1].top[0].token, TokenId::from(b'b'), "scored against the next prompt token");
}

#[test]
fn a_scored_prompt_is_chunked_like_any_prefill_and_scored_in_order() {
    let mut h = Harness::new(2, 3);
    let mut running = h.submit_n("z", 20);
    h.step();
    let mut events = h.submit_with("abcdefg", 1, |r| r.prompt_logprobs = Some(0));
    assert_eq!(h.step(), [(0, 1), (1, 2)], "the running stream keeps its token each step");
    assert_eq!(h.step(), [(0, 1), (1, 2)]);
    h.run_to_idle();
    let out = drain_choices(&mut events, 1);
    let prompt = out.prompt.expect("the scored prompt");
    assert_eq!(prompt.iter().map(|p| p.token as u8 as char).collect::<String>(), "abcdefg");
    assert!(prompt[1..].iter().all(|p| p.logprob.is_some() && p.top.is_empty()));
    assert_eq!(out.texts, ["x"]);
    assert_eq!(drain(&mut running).1.usage.completion_tokens, 20);
}

#[test]
fn scoring_a_prompt_for_n_choices_sends_it_once_and_ends_every_choice() {
    let mut h = Harness::new(3, 64);
    let mut events = h.submit_with("abc", 0, |r| {
        r.n = 3;
        r.prompt_logprobs = Some(0);
    });
    h.run_to_idle();
    let out = drain_choices(&mut events, 3);
    assert_eq!(out.prompt.map(|p| p.len()), Some(3));
    assert!(out.finished.iter().all(|d| d.finish_reason == FinishReason::Length && d.usage.completion_tokens == 0));
    assert!(h.scheduler.running.iter().all(Option::is_none));
}
