//! Widened prefills (`scheduler/batch.rs`, `Executor::prefill_width`).

use super::*;

#[test]
fn a_short_prefill_behind_a_cached_prefix_is_widened_as_the_runtime_asks_and_reported_as_such() {
    let mut h = Harness::with_cache(1, 256, true, 1 << 20);
    h.scheduler.executor.widen_to = 20;
    let mut first = h.submit_n(PROMPT_A, 4);
    h.run_to_idle();
    assert_eq!(cached_tokens(&mut first), 0);
    // Nine new tokens behind A's 49: twenty are computed, eleven of them cached ones again.
    let next_prompt = format!("{PROMPT_A} and more");
    let mut next = h.submit_n(&next_prompt, 4);
    assert_eq!(h.step(), [(0, 20)]);
    h.run_to_idle();
    assert_eq!(cached_tokens(&mut next), next_prompt.len() as u32 - 20, "only what was not recomputed");
    // A prompt with nothing cached is not widened beyond itself.
    let mut tiny = h.submit_n("tiny", 4);
    assert_eq!(h.step(), [(0, 4)]);
    h.run_to_idle();
    assert_eq!(cached_tokens(&mut tiny), 0);
}

#[test]
fn a_chat_turn_that_arrives_behind_a_long_prompt_gets_the_next_step_to_itself() {
    let mut h = Harness::new(4, 128);
    let _running = h.submit_n("r", 200);
    h.step();
    let _long = h.submit(&"d".repeat(600));
    h.step();
    let mut turn = h.submit("a short turn");
    // The long prompt's chunks pause for one step, the decode token goes on.
    assert_eq!(h.step(), [(0, 1), (2, 12)]);
    assert!(matches!(turn.try_recv(), Ok(StreamEvent::Text { .. })), "its first token");
    assert_eq!(h.step(), [(0, 1), (1, 126), (2, 1)]);
}

#[test]
fn short_prefills_that_share_a_step_are_widened_as_the_runtime_asks_for_company() {
    let mut h = Harness::with_cache(2, 256, true, 1 << 20);
    h.prompts_join();
    h.scheduler.executor.widen_to = 0;
    h.scheduler.executor.widen_beside_others_to = 20;
    let _a = h.submit_n(PROMPT_A, 4);
    let _b = h.submit_n(PROMPT_B, 4);
    h.run_to_idle();
    // Each conversation's next turn: nine new tokens behind its own cached history.
    let mut next_a = h.submit_n(&format!("{PROMPT_A} and more"), 4);
    let mut next_b = h.submit_n(&format!("{PROMPT_B} and more"), 4);
    assert_eq!(h.step(), [(0, 20), (1, 20)]);
    h.run_to_idle();
    assert_eq!(cached_tokens(&mut next_a), PROMPT_A.len() as u32 + 9 - 20);
    assert_eq!(cached_tokens(&mut next_b), PROMPT_B.len() as u32 + 9 - 20);
    // Alone, the same kind of turn is not widened.
    let mut alone = h.submit_n(&format!("{PROMPT_A} and more, again"), 4);
    assert_eq!(h.step(), [(0, 7)]);
    h.run_to_idle();
    assert_eq!(cached_tokens(&mut alone), PROMPT_A.len() as u32 + 9);
    let p = h.scheduler.stats.snapshot().prefix;
    let (a, b) = (PROMPT_A.len() as u64, PROMPT_B.len() as u64);
    assert_eq!(p.hit_tokens, (a + 9 - 20) + (b + 9 - 20) + (a + 9), "recomputed tokens are not hits");
}

#[test]
fn widening_uses_the_room_between_the_step_budget_and_the_batch_limit_and_no_more() {
    // A cold 50-token prompt and A's next turn (9 new tokens) share a step: 59 tokens.
    let run = |batch_limit: usize| {
        let mut h = Harness::configured(3, batch_limit, |c| {
            c.prefix_caching = true;
            c.host_cache_bytes = 1 << 20;
            c.step_budget = 64;
        });
        h.prompts_join();
        h.scheduler.executor.widen_beside_others_to = 20;
        let _a = h.submit_n(PROMPT_A, 4);
        h.run_to_idle();
        let _cold = h.submit_n(&"z".repeat(50), 4);
        let _next = h.submit_n(&format!("{PROMPT_A} and more"), 4);
        h.step().iter().map(|&(_, n)| n).sum::<usize>()
    };
    assert_eq!(run(80), 70, "widened by 11 past the step budget of 64");
    assert_eq!(run(64), 59, "no room to widen by 11");
}

#[test]
fn widening_the_last_chunk_of_a_prompt_takes_back_no_hits_it_never_had() {
    let mut h = Harness::with_cache(2, 64, true, 1 << 20);
    h.prompts_join();
    h.scheduler.executor.widen_beside_others_to = 20;
    let _a = h.submit_n(PROMPT_A, 4);
    h.run_to_idle();
    // A cold 70-token prompt: 64 tokens now, its last 6 next step beside A's next turn,
    // widened to 20 over tokens its own first chunk computed.
    // It takes slot 1, which holds nothing; A stays in slot 0.
    let mut cold = h.submit_n(&"z".repeat(70), 4);
    assert_eq!(h.step(), [(1, 64)]);
    let _next = h.submit_n(&format!("{PROMPT_A} and more"), 4);
    assert_eq!(h.step(), [(0, 20), (1, 20)]);
    h.run_to_idle();
    assert_eq!(cached_tokens(&mut cold), 0);
    let a = PROMPT_A.len() as u64;
    assert_eq!(h.scheduler.stats.snapshot().prefix.hit_tokens, a + 9 - 20, "only A's turn had hits");
}
