//! Prefix reuse through the scheduler: host-memory saves and restores, donors, the forecast's view of held prefixes (`kv/residency.rs`).

use super::*;

#[test]
fn an_overwritten_slot_is_saved_to_host_memory_and_a_returning_prompt_restored() {
    let mut h = Harness::with_cache(1, 64, true, 1 << 20);
    let _a = h.submit_n(PROMPT_A, 4);
    h.run_to_idle();
    assert!(h.scheduler.executor.saves.is_empty(), "nothing was overwritten yet");
    let _b = h.submit_n(PROMPT_B, 4);
    assert_eq!(h.step(), [(0, PROMPT_B.len())], "B shares nothing: a full prefill");
    assert_eq!(h.scheduler.executor.saves, [0], "A's cells were saved before B overwrote them");
    h.run_to_idle();
    let _again = h.submit_n(PROMPT_A, 4);
    // A's whole prompt but its last token comes back from host memory.
    assert_eq!(h.step(), [(0, 1)]);
    assert_eq!(h.scheduler.executor.restores, [(0, 0)]);
    assert_eq!(h.scheduler.executor.saves, [0, 0], "B was saved before A was restored over it");
    let p = h.scheduler.stats.snapshot().prefix;
    assert_eq!((p.host_restores, p.host_restored_tokens, p.host_entries), (1, PROMPT_A.len() as u64 - 1, 2));
    assert_eq!(p.hit_tokens, PROMPT_A.len() as u64 - 1);
    assert_eq!(p.queried_tokens, 3 * PROMPT_A.len() as u64);
}

#[test]
fn an_idle_slot_that_lends_its_prefix_and_is_then_overwritten_is_saved_first() {
    // Slot 0 keeps running; slot 1 ends up holding B and slot 2 holding A, both idle.
    let mut h = Harness::with_cache(3, 256, true, 1 << 20);
    let _running = h.submit_n("r", 200);
    let _b = h.submit_n(PROMPT_B, 4);
    let _a = h.submit_n(PROMPT_A, 4);
    for _ in 0..6 {
        h.step();
    }
    assert!(h.scheduler.running[1].is_none() && h.scheduler.running[2].is_none());
    // A new conversation shares A's first 20 tokens: it goes into slot 1 and copies them
    // from slot 2; an unrelated prompt admitted in the same step takes slot 2, the donor.
    let _shares = h.submit_n(&format!("{}{}", &PROMPT_A[..20], "zzzzzzzzzzzzzzzzzzzzzzzzzzzz"), 4);
    let _other = h.submit_n("yyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyy", 4);
    h.step();
    assert_eq!(h.scheduler.executor.saves, [1, 2], "B, then A before the donor was overwritten");
    h.run_to_idle();
    // A comes back: restored from host memory, not prefilled again, into slot 1, whose
    // cells hold A's first 20 tokens.
    let restores = h.scheduler.executor.restores.len();
    let _again = h.submit_n(PROMPT_A, 4);
    assert_eq!(h.step(), [(1, 1)], "all of A but its last token restored");
    assert_eq!(h.scheduler.executor.restores.len(), restores + 1);
}

#[test]
fn a_prompt_in_host_memory_is_restored_even_when_the_lowest_free_slot_is_lending_its_prefix() {
    let mut h = Harness::with_cache(4, 256, true, 1 << 20);
    h.prompts_join();
    let c = "Sphinx of black quartz, judge my vow, said the judge";
    // Every slot holds a prompt of its own: C in slot 0.
    let fill: Vec<_> =
        [c.to_string(), "x".repeat(40), "y".repeat(40), "w".repeat(40)].iter().map(|p| h.submit_n(p, 4)).collect();
    h.run_to_idle();
    drop(fill);
    // Slot 0: a long-running request (C goes to host memory); slots 1 and 2: B and A, idle.
    let _running = h.submit_n("r", 200);
    let _b = h.submit_n(PROMPT_B, 4);
    let _a = h.submit_n(PROMPT_A, 4);
    for _ in 0..6 {
        h.step();
    }
    assert_eq!(h.scheduler.executor.saves, [0, 1, 2]);
    // A prompt sharing A's start copies it from slot 2 into slot 1; C's next turn, admitted
    // in the same step, is restored into slot 3 rather than prefilled into slot 2.
    let _shares = h.submit_n(&format!("{}{}", &PROMPT_A[..20], "zzzzzzzzzzzzzzzzzzzzzzzzzzzz"), 4);
    let _next_turn = h.submit_n(&format!("{c}, and more"), 4);
    let runs = h.step();
    assert_eq!(h.scheduler.executor.restores, [(3, 0)]);
    assert_eq!(runs.last(), Some(&(3, ", and more".len())), "only the new tokens are prefilled");
    assert!(h.scheduler.running[2].is_none(), "the donor keeps its prefix");
}

#[test]
fn a_failed_restore_falls_back_to_prefill_and_is_counted() {
    let mut h = Harness::with_cache(1, 64, true, 1 << 20);
    h.scheduler.executor.fail_restores = true;
    for prompt in [PROMPT_A, PROMPT_B] {
        let _r = h.submit_n(prompt, 4);
        h.run_to_idle();
    }
    let _again = h.submit_n(PROMPT_A, 4);
    assert_eq!(h.step(), [(0, PROMPT_A.len())], "the whole prompt is computed");
    assert_eq!(h.scheduler.executor.restores.len(), 1);
    let p = h.scheduler.stats.snapshot().prefix;
    assert_eq!((p.host_restores, p.host_restore_failures, p.hit_tokens), (0, 1, 0));
}

#[test]
fn no_host_tier_without_prefix_caching_or_budget() {
    for (caching, bytes) in [(false, 1 << 20), (true, 0)] {
        let mut h = Harness::with_cache(1, 64, caching, bytes);
        for prompt in [PROMPT_A, PROMPT_B, PROMPT_A] {
            let _r = h.submit_n(prompt, 4);
            h.run_to_idle();
        }
        assert!(h.scheduler.executor.saves.is_empty() && h.scheduler.executor.restores.is_empty());
    }
}

#[test]
fn the_wait_forecast_knows_which_prompts_a_slot_or_host_memory_holds() {
    let mut h = Harness::configured(1, 64, |c| {
        c.prefix_caching = true;
        c.host_cache_bytes = 1 << 20;
        c.forecast_prefixes = true;
    });
    assert_eq!(h.forecast_cached(PROMPT_A), 0, "nothing held yet");
    let _a = h.submit_n(PROMPT_A, 4);
    h.run_to_idle();
    // 48 tokens are three whole blocks; all but the last token would be reused.
    assert_eq!(h.forecast_cached(PROMPT_A), PROMPT_A.len() - 1);
    assert_eq!(h.forecast_cached(PROMPT_B), 0);
    let _b = h.submit_n(PROMPT_B, 4);
    h.run_to_idle();
    // A left its slot for host memory; B holds the slot.
    assert_eq!(h.forecast_cached(PROMPT_A), PROMPT_A.len() - 1);
    assert_eq!(h.forecast_cached(PROMPT_B), PROMPT_B.len() - 1);
    // A shared first block only.
    assert_eq!(h.forecast_cached(&format!("{}{}", &PROMPT_A[..20], PROMPT_B)), 16);

    // Without the forecast asking, nothing is gathered.
    let mut plain = Harness::with_cache(1, 64, true, 1 << 20);
    let _a = plain.submit_n(PROMPT_A, 4);
    plain.run_to_idle();
    assert_eq!(plain.forecast_cached(PROMPT_A), 0);
}

#[test]
fn a_flush_forgets_idle_slots_and_host_memory_but_not_a_running_sequence() {
    let mut h = Harness::with_cache(2, 256, true, 1 << 20);
    let _a = h.submit_n(PROMPT_A, 4);
    h.run_to_idle();
    let _b = h.submit_n(PROMPT_B, 4);
    h.run_to_idle();
    // Slot 0 holds A and slot 1 B (it took the slot that held nothing); now an unrelated
    // long request runs in slot 0 (A goes to host memory) while slot 1 keeps B, idle.
    let _running = h.submit_n("zzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzz", 200);
    h.step();
    let answered = h.scheduler.control.ask_flush();
    h.scheduler.serve_control();
    let flushed = answered.try_recv().expect("answered at once by the engine thread's next turn");
    assert_eq!((flushed.running, flushed.slots), (1, 1), "the running sequence keeps its cells");
    assert_eq!(flushed.host_entries, 1, "A was in host memory");
    assert!(flushed.host_bytes > 0);
    assert_eq!(h.scheduler.stats.snapshot().prefix.host_entries, 0);
    h.run_to_idle();
    // The long request's cells were kept and are cached again once it ends; a second
    // flush forgets them, and A is then prefilled in full.
    let truncations = h.scheduler.executor.truncations.len();
    let answered = h.scheduler.control.ask_flush();
    h.scheduler.serve_control();
    let flushed = answered.try_recv().expect("answered");
    assert_eq!((flushed.running, flushed.slots, flushed.host_entries), (0, 1, 0));
    assert_eq!(h.scheduler.executor.truncations[truncations..], [(0, 0)]);
    let mut again = h.submit_n(PROMPT_A, 4);
    assert_eq!(h.step(), [(0, PROMPT_A.len())], "nothing of A is left to reuse");
    h.run_to_idle();
    assert_eq!(cached_tokens(&mut again), 0);
}

#[test]
fn a_flush_with_nothing_asked_does_nothing() {
    let mut h = Harness::with_cache(1, 64, true, 1 << 20);
    let _a = h.submit_n(PROMPT_A, 4);
    h.run_to_idle();
    let truncations = h.scheduler.executor.truncations.len();
    h.scheduler.serve_control();
    assert_eq!(h.scheduler.executor.truncations.len(), truncations);
    let mut again = h.submit_n(PROMPT_A, 4);
    h.run_to_idle();
    assert_eq!(cached_tokens(&mut again), PROMPT_A.len() as u32 - 1);
}

#[test]
fn a_slot_whose_prompt_another_slot_holds_is_not_saved_until_the_last_copy_goes() {
    let mut h = Harness::with_cache(2, 256, true, 1 << 20);
    h.prompts_join();
    let _a = h.submit_n(PROMPT_A, 4);
    let _a_again = h.submit_n(PROMPT_A, 4);
    h.run_to_idle();
    // Both slots hold A. An unrelated prompt takes slot 0: slot 1 keeps A, nothing is saved.
    let _b = h.submit_n(PROMPT_B, 4);
    assert_eq!(h.step(), [(0, PROMPT_B.len())]);
    h.run_to_idle();
    assert!(h.scheduler.executor.saves.is_empty(), "A is still in slot 1");
    // A long request takes slot 0 (B is saved), then another prompt takes slot 1: A's last
    // copy is saved before it is overwritten.
    let _running = h.submit_n("r", 200);
    h.step();
    let _c = h.submit_n("Sphinx of black quartz, judge my vow, said the judge", 4);
    h.step();
    assert_eq!(h.scheduler.executor.saves, [0, 1], "B from slot 0, then A from slot 1");
    let _again = h.submit_n(PROMPT_A, 4);
    h.run_to_idle();
    assert_eq!(h.scheduler.executor.restores.len(), 1, "A came back from host memory");
}
