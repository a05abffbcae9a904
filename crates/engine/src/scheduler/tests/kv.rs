//! KV residency on its own (`kv/residency.rs`): what idle slots keep, what is saved to host
//! memory before it is lost, when another slot's cells are worth copying, and which slot a
//! new sequence takes while copies are pending.

use super::*;
use crate::kv::residency::KvResidency;
use crate::request::sequence::Sequence;

fn tokens(text: &str) -> Vec<TokenId> {
    ByteTokenizer.tokenize(text, false, false)
}

fn residency(
    slots: usize,
    host_bytes: usize,
) -> (KvResidency<usize>, RecordingExecutor, EngineStats, Vec<Option<Sequence>>) {
    let stats = EngineStats::new(512 * slots as u64);
    let kv = KvResidency::new(slots, true, host_bytes, &stats);
    (kv, recording_executor(64), stats, (0..slots).map(|_| None).collect())
}

#[test]
fn a_slot_about_to_be_overwritten_is_saved_and_its_prompt_restored_when_it_returns() {
    let (mut kv, mut executor, stats, slots) = residency(1, 1 << 20);
    let (a, b) = (tokens(PROMPT_A), tokens(PROMPT_B));
    assert_eq!(kv.load_prefix(&mut executor, &stats, &slots, 0, &a), 0, "nothing held yet");
    kv.release(&mut executor, 0, a.clone(), false);
    assert_eq!(kv.load_prefix(&mut executor, &stats, &slots, 0, &a), a.len() - 1, "the idle slot keeps A");
    kv.release(&mut executor, 0, a.clone(), false);
    assert!(executor.saves.is_empty(), "nothing was lost yet");
    // B shares nothing with A: A's cells are saved before B overwrites them.
    assert_eq!(kv.load_prefix(&mut executor, &stats, &slots, 0, &b), 0);
    assert_eq!(executor.saves, [0]);
    kv.release(&mut executor, 0, b, false);
    let next_turn = tokens(&format!("{PROMPT_A} and more"));
    assert_eq!(kv.load_prefix(&mut executor, &stats, &slots, 0, &next_turn), a.len(), "A comes back from host memory");
    assert_eq!(executor.restores, [(0, 0)]);
    assert!(kv.take_changed() && !kv.take_changed(), "a change is reported once");
}

#[test]
fn another_slots_prefix_is_copied_when_it_saves_enough_and_copy_ends_are_taken_last() {
    let (mut kv, mut executor, stats, slots) = residency(3, 0);
    let a = tokens(PROMPT_A);
    kv.release(&mut executor, 1, a.clone(), false);
    // Five shared tokens are not worth a copy of the whole stream.
    assert_eq!(kv.load_prefix(&mut executor, &stats, &slots, 0, &tokens(&PROMPT_A[..5])), 0);
    let next_turn = tokens(&format!("{PROMPT_A} and more"));
    assert_eq!(kv.load_prefix(&mut executor, &stats, &slots, 0, &next_turn), a.len(), "copied from slot 1");
    // Slots 0 and 1 are the two ends of a copy the next decode carries out.
    assert_eq!(kv.free_slot(&slots, &[]), Some(2));
    kv.copies_done();
    // Both hold the same prefix now: the lowest loses nothing.
    assert_eq!(kv.free_slot(&slots, &[]), Some(0));
}

#[test]
fn cells_a_failed_decode_left_are_not_reused() {
    let (mut kv, mut executor, stats, slots) = residency(1, 1 << 20);
    let a = tokens(PROMPT_A);
    kv.release(&mut executor, 0, a.clone(), true);
    assert_eq!(kv.load_prefix(&mut executor, &stats, &slots, 0, &a), 0);
    assert!(executor.saves.is_empty(), "nothing untrusted is saved");
}

#[test]
fn a_returning_prompt_takes_the_idle_slot_holding_it_and_a_new_one_the_slot_that_loses_least() {
    let (mut kv, mut executor, _stats, slots) = residency(3, 1 << 20);
    let (a, b) = (tokens(PROMPT_A), tokens(PROMPT_B));
    kv.release(&mut executor, 0, b.clone(), false);
    kv.release(&mut executor, 1, a.clone(), false);
    // A's next turn is reused in place in slot 1, not copied into slot 0 (two copies of A).
    let next_turn = tokens(&format!("{PROMPT_A} and more"));
    assert_eq!(kv.free_slot(&slots, &next_turn), Some(1));
    // An unrelated prompt takes slot 2, which holds nothing: B and A stay.
    let other = tokens("an unrelated prompt that shares nothing with the others");
    assert_eq!(kv.free_slot(&slots, &other), Some(2));
    // With A in slots 1 and 2, overwriting either loses nothing; B's slot is kept.
    kv.release(&mut executor, 2, a, false);
    assert_eq!(kv.free_slot(&slots, &other), Some(1));
    // A few shared tokens (a chat template's header) do not count as holding the prompt.
    assert_eq!(kv.free_slot(&slots, &tokens(&PROMPT_B[..5])), Some(1));
}
