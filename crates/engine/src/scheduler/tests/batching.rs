//! Batch layout and prefill budget (`scheduler/batch.rs`), and closing slot holes.

use super::*;

#[test]
fn a_step_lays_its_batch_out_in_slot_order_whatever_the_admission_order() {
    let mut h = Harness::new(4, 64);
    h.prompts_join();
    let first = h.submit("aaa");
    let _second = h.submit("bbb");
    let _third = h.submit("ccc");
    assert_eq!(h.step(), [(0, 3), (1, 3), (2, 3)], "three prompts prefilled in one step");
    assert_eq!(h.step(), [(0, 1), (1, 1), (2, 1)]);
    drop(first);
    // The newest request takes the lowest free slot, 0, though it was admitted last.
    let _fourth = h.submit("dddd");
    assert_eq!(h.step(), [(0, 4), (1, 1), (2, 1)]);
    assert_eq!(*h.scheduler.running.order(), [1, 2, 0]);
    assert_eq!(h.step(), [(0, 1), (1, 1), (2, 1)]);
}

#[test]
fn prefill_budget_goes_to_the_prompt_with_fewest_tokens_left_first_and_decode_tokens_are_never_starved() {
    let mut h = Harness::new(4, 6);
    h.prompts_join();
    let _running = h.submit("a");
    assert_eq!(h.step(), [(0, 1)]);
    let old = h.submit("bbbbbbbb");
    let _new = h.submit("cc");
    // Budget 6: one decode token, the shorter prompt, then three of the older one's.
    assert_eq!(h.step(), [(0, 1), (1, 3), (2, 2)]);
    assert_eq!(h.step(), [(0, 1), (1, 4), (2, 1)]);
    drop(old);
    // The newer one moved down into the hole the cancelled one left.
    assert_eq!(h.step(), [(0, 1), (1, 1)]);
}

#[test]
fn where_a_prompt_costs_more_than_a_step_prompts_are_prefilled_one_step_each() {
    // Costs as on two CPU cores: a step 7 ms, a prompt token 2.5 ms.
    let mut h = Harness::new(4, 64);
    let _running = h.submit_n("r", 100);
    h.step();
    let _first = h.submit(&"a".repeat(20));
    let _second = h.submit(&"b".repeat(20));
    let _one_token = h.submit("c");
    // The one-token prompt goes first, alone: the others cost more than a step each. Then
    // the oldest (it was passed over), then the other, each in a step of its own.
    assert_eq!(h.step(), [(0, 1), (3, 1)]);
    assert_eq!(h.step(), [(0, 1), (1, 20), (3, 1)]);
    assert_eq!(h.step(), [(0, 1), (1, 1), (2, 20), (3, 1)]);
    // With prompt tokens next to free beside a step, both would have shared the first.
    let mut h = Harness::new(4, 64);
    h.prompts_join();
    let _running = h.submit_n("r", 100);
    h.step();
    let _first = h.submit(&"a".repeat(20));
    let _second = h.submit(&"b".repeat(20));
    assert_eq!(h.step(), [(0, 1), (1, 20), (2, 20)]);
}

#[test]
fn a_hole_left_by_a_finished_request_is_closed_by_moving_the_highest_sequence_down() {
    let mut h = Harness::new(4, 64);
    h.prompts_join();
    let _first = h.submit("aaa");
    let second = h.submit("bbb");
    let mut third = h.submit("ccc");
    h.step();
    drop(second);
    while third.try_recv().is_ok() {}
    // Nobody waits, so slot 2's sequence moves into the hole at slot 1: the batch is one run.
    assert_eq!(h.step(), [(0, 1), (1, 1)]);
    assert_eq!(h.scheduler.executor.moves, [(2, 1)]);
    assert_eq!(*h.scheduler.running.order(), [0, 1]);
    assert!(matches!(third.try_recv(), Ok(StreamEvent::Text { .. })), "the moved request still streams");
    // Slots 1 and 2 running are one run already, wherever it starts: nothing moves.
    let mut h = Harness::new(4, 64);
    h.prompts_join();
    let first = h.submit("aaa");
    let _second = h.submit("bbb");
    let _third = h.submit("ccc");
    h.step();
    drop(first);
    assert_eq!(h.step(), [(1, 1), (2, 1)]);
    assert!(h.scheduler.executor.moves.is_empty());
    // A waiting request fills a hole itself; nothing moves.
    let mut h = Harness::new(4, 64);
    h.prompts_join();
    let first = h.submit("aaa");
    let _second = h.submit("bbb");
    let _third = h.submit("ccc");
    h.step();
    drop(first);
    let _fourth = h.submit("d");
    assert_eq!(h.step(), [(0, 1), (1, 1), (2, 1)]);
    assert!(h.scheduler.executor.moves.is_empty());
}

#[test]
fn a_tpot_objective_caps_the_prefill_beside_generating_sequences_but_not_alone() {
    // Frozen costs: a 1-row decode step 7 ms, 2.5 ms per further row and per prompt token.
    let mut h = Harness::configured(4, 256, |c| c.tpot_slo_ms = Some(200));
    let long = "p".repeat(200);
    // Nothing generating: a prompt takes the whole budget.
    let _alone = h.submit(&long);
    assert_eq!(h.step(), [(0, 200)]);
    // Beside one generating row, (200 - 7) / 2.5 = 77 prompt tokens keep its next token
    // within 200 ms; each such step spends what its token is allowed, so the next is alike.
    let _second = h.submit(&long);
    assert_eq!(h.step(), [(0, 1), (1, 77)]);
    assert_eq!(h.step(), [(0, 1), (1, 77)]);
    assert_eq!(h.step(), [(0, 1), (1, 46)]);
    // Beside two rows, the tightest is the one that just had its first token:
    // (200 - 9.5) / 2.5 = 76.
    let _third = h.submit(&long);
    assert_eq!(h.step(), [(0, 1), (1, 1), (2, 76)]);
}

#[test]
fn under_a_tight_tpot_objective_prompts_wait_for_the_slack_fast_steps_leave() {
    // A 10 ms objective over 7 ms decode steps: each step leaves 3 ms, and a prompt waits
    // until they add up to a whole attention tile (64 tokens, 160 ms, plus the decode).
    let mut h = Harness::configured(4, 256, |c| c.tpot_slo_ms = Some(10));
    let _first = h.submit_n("a", 200);
    h.step();
    let _second = h.submit(&"p".repeat(200));
    let runs: Vec<Vec<(usize, usize)>> = (0..60).map(|_| h.step()).collect();
    let first_prefill = runs.iter().position(|r| r.len() == 2).expect("the prompt starts within 60 steps");
    assert!(runs[..first_prefill].iter().all(|r| r == &[(0, 1)]), "decode only until then");
    // 3 ms a step: (64 * 2.5 + 7 - 10) / 3 = 52.3 steps.
    assert!((50..=55).contains(&first_prefill), "{first_prefill}");
    assert!(runs[first_prefill][1].1 >= 64, "{:?}", runs[first_prefill]);
    // The chunk spent the slack: the rest of the prompt waits again.
    assert_eq!(h.step(), [(0, 1)]);
    // An objective a stream cannot make (under a decode step) holds nothing back.
    let mut h = Harness::configured(4, 256, |c| c.tpot_slo_ms = Some(5));
    let _first = h.submit_n("a", 200);
    h.step();
    let _second = h.submit(&"p".repeat(200));
    assert_eq!(h.step(), [(0, 1), (1, 200)]);
}
