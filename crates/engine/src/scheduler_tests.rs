//! The scheduler's batch layout, against a recording executor: which tokens go into a
//! step, and in what order, is invisible from the outside but decides its cost.

use std::sync::Arc;
use std::time::Instant;

use super::Scheduler;
use crate::chat::ChatTemplate;
use crate::constraint::test_env::byte_env;
use crate::constraint::{ConstraintCounters, GrammarCompiler, SequenceConstraint};
use crate::queue::WaitQueue;
use crate::runtime::{BatchToken, Executor, RuntimeError, TokenId, Tokenizer};
use crate::sequence::PendingRequest;
use crate::stats::EngineStats;
use rillm_backend::{Constraint, FinishReason, SamplingParams, StreamEvent};

/// One token per byte; token 0 ends generation.
struct ByteTokenizer;

impl Tokenizer for ByteTokenizer {
    fn tokenize(&self, text: &str, _add_special: bool, _parse_special: bool) -> Vec<TokenId> {
        text.bytes().map(TokenId::from).collect()
    }
    fn append_token_bytes(&self, token: TokenId, out: &mut Vec<u8>) {
        out.push(token as u8);
    }
    fn is_end_of_generation(&self, token: TokenId) -> bool {
        token == 0
    }
    fn chat_template(&self) -> Option<&ChatTemplate> {
        None
    }
    fn vocab_size(&self) -> u32 {
        256
    }
}

/// Keeps every batch and move it is given and samples `x`, or under a mask the lowest
/// token it allows (unless `ignore_masks`).
struct RecordingExecutor {
    ignore_masks: bool,
    max_batch_tokens: usize,
    batches: Vec<Vec<BatchToken>>,
    moves: Vec<(usize, usize)>,
    /// Slots saved, in order; a snapshot is the slot it was saved from.
    saves: Vec<usize>,
    /// (slot, snapshot) of each restore.
    restores: Vec<(usize, usize)>,
    fail_restores: bool,
    /// A prefill of fewer new tokens than this is widened to it (`prefill_width`)...
    widen_to: usize,
    /// ...or than this, when other sequences prefill in the same step.
    widen_beside_others_to: usize,
}

impl Executor for RecordingExecutor {
    type Snapshot = usize;

    fn ctx_per_sequence(&self) -> u32 {
        512
    }
    fn max_batch_tokens(&self) -> usize {
        self.max_batch_tokens
    }
    fn prefill_width(&self, cached: usize, left: usize, beside_others: bool) -> usize {
        let to = if beside_others { self.widen_beside_others_to } else { self.widen_to };
        left.max(to).min(cached + left)
    }
    fn decode(&mut self, batch: &[BatchToken]) -> Result<(), RuntimeError> {
        // llama.cpp refuses a batch over n_batch and fails every sequence in it.
        assert!(batch.len() <= self.max_batch_tokens, "a batch of {} tokens", batch.len());
        self.batches.push(batch.to_vec());
        Ok(())
    }
    fn start_sequence(&mut self, _seq: usize, _sampling: &SamplingParams, _ban_eog: bool) {}
    fn sample(&mut self, _seq: usize, _batch_index: usize, mask: Option<&toktrie::SimpleVob>) -> TokenId {
        match mask.and_then(toktrie::SimpleVob::first_bit_set) {
            Some(allowed) if !self.ignore_masks => allowed as TokenId,
            _ => TokenId::from(b'x'),
        }
    }
    fn logprobs(&self, _batch_index: usize, token: TokenId, top: usize) -> (f32, Vec<(TokenId, f32)>) {
        (-0.5, (0..top as TokenId).map(|i| (token + i, -0.5 - i as f32)).collect())
    }
    fn end_sequence(&mut self, _seq: usize) {}
    fn copy_sequence(&mut self, _src: usize, _dst: usize) {}
    fn move_sequence(&mut self, src: usize, dst: usize) {
        self.moves.push((src, dst));
    }
    fn truncate_sequence(&mut self, _seq: usize, _keep: u32) {}
    fn sequence_cells(&self, _seq: usize) -> u32 {
        0
    }
    fn save_sequence(&mut self, seq: usize) -> Result<(usize, usize), RuntimeError> {
        self.saves.push(seq);
        Ok((seq, 1000))
    }
    fn restore_sequence(&mut self, seq: usize, snapshot: &usize) -> Result<(), RuntimeError> {
        self.restores.push((seq, *snapshot));
        if self.fail_restores {
            Err(RuntimeError::Restore("state size mismatch".into()))
        } else {
            Ok(())
        }
    }
}

type Events = tokio::sync::mpsc::UnboundedReceiver<StreamEvent>;

struct Harness {
    scheduler: Scheduler<RecordingExecutor>,
    queue: Arc<WaitQueue<PendingRequest>>,
    next_id: u64,
}

impl Harness {
    fn new(max_running: usize, max_batch_tokens: usize) -> Self {
        Self::with_cache(max_running, max_batch_tokens, false, 0)
    }

    fn with_cache(max_running: usize, max_batch_tokens: usize, prefix_caching: bool, host_bytes: usize) -> Self {
        let queue = Arc::new(WaitQueue::new(16, max_running).weighted(|r: &PendingRequest| r.n as usize));
        let executor = RecordingExecutor {
            ignore_masks: false,
            max_batch_tokens,
            batches: Vec::new(),
            moves: Vec::new(),
            saves: Vec::new(),
            restores: Vec::new(),
            fail_restores: false,
            widen_to: 0,
            widen_beside_others_to: 0,
        };
        let stats = Arc::new(EngineStats::new(512 * max_running as u64));
        let scheduler = Scheduler::new(
            executor,
            Arc::new(ByteTokenizer),
            Arc::clone(&queue),
            stats,
            max_running,
            prefix_caching,
            host_bytes,
        );
        Self { scheduler, queue, next_id: 0 }
    }

    /// Publishes the held prefixes with each forecast, as `--max-queue-ms` asks.
    fn forecasting(mut self) -> Self {
        self.scheduler = self.scheduler.forecasting_cached_prefixes(true);
        self
    }

    /// Prompt tokens of `prompt` the last published forecast expects to be cached.
    fn forecast_cached(&mut self, prompt: &str) -> usize {
        self.scheduler.publish(false);
        self.scheduler.stats.forecast.read().cached_estimate(&ByteTokenizer.tokenize(prompt, false, false))
    }

    /// Queues a request (admitted at the next step); returns its events (drop to cancel).
    fn submit(&mut self, prompt: &str) -> Events {
        self.submit_n(prompt, 100)
    }

    fn submit_n(&mut self, prompt: &str, max_tokens: u32) -> Events {
        self.submit_constrained(prompt, max_tokens, None)
    }

    /// Queues a request whose output must match `regex` (over the byte vocabulary).
    fn submit_regex(&mut self, prompt: &str, max_tokens: u32, regex: &str) -> Events {
        let compiler = GrammarCompiler::new(&byte_env()).expect("compiler");
        let constraint = Constraint::Regex(regex.into());
        let matcher = compiler.matcher(&constraint, &ConstraintCounters::default()).expect("compiles");
        self.submit_constrained(prompt, max_tokens, Some(SequenceConstraint::new(matcher)))
    }

    fn submit_constrained(&mut self, prompt: &str, max_tokens: u32, constraint: Option<SequenceConstraint>) -> Events {
        self.submit_with(prompt, max_tokens, |r| r.constraint = constraint)
    }

    /// Queues a request after `adjust` has set what the test needs.
    fn submit_with(&mut self, prompt: &str, max_tokens: u32, adjust: impl FnOnce(&mut PendingRequest)) -> Events {
        self.next_id += 1;
        let (events, receiver) = tokio::sync::mpsc::unbounded_channel();
        let prompt = ByteTokenizer.tokenize(prompt, false, false);
        let mut request = PendingRequest {
            id: self.next_id,
            index: 0,
            n: 1,
            prompt_logprobs: None,
            expected_prefill: prompt.len(),
            prompt,
            max_tokens,
            sampling: SamplingParams::greedy(),
            stop: Vec::new(),
            ignore_eos: false,
            constraint: None,
            logprobs: None,
            submitted: Instant::now(),
            events,
        };
        adjust(&mut request);
        assert!(self.queue.push(request).is_ok());
        receiver
    }

    /// Steps until nothing runs or waits.
    fn run_to_idle(&mut self) {
        for _ in 0..1000 {
            if self.scheduler.admission_order.is_empty() && self.queue.is_empty() {
                return;
            }
            self.step();
        }
        panic!("still busy after 1000 steps");
    }

    /// Runs one step; returns (slot, token count) for each run of one slot in the batch.
    fn step(&mut self) -> Vec<(usize, usize)> {
        self.scheduler.arrange_slots();
        self.scheduler.step();
        let batch = self.scheduler.executor.batches.last().cloned().unwrap_or_default();
        let mut runs: Vec<(usize, usize)> = Vec::new();
        for t in batch {
            match runs.last_mut() {
                Some((seq, n)) if *seq == t.seq => *n += 1,
                _ => runs.push((t.seq, 1)),
            }
        }
        runs
    }
}

#[test]
fn a_step_lays_its_batch_out_in_slot_order_whatever_the_admission_order() {
    let mut h = Harness::new(4, 64);
    let first = h.submit("aaa");
    let _second = h.submit("bbb");
    let _third = h.submit("ccc");
    assert_eq!(h.step(), [(0, 3), (1, 3), (2, 3)], "three prompts prefilled in one step");
    assert_eq!(h.step(), [(0, 1), (1, 1), (2, 1)]);
    drop(first);
    // The newest request takes the lowest free slot, 0, though it was admitted last.
    let _fourth = h.submit("dddd");
    assert_eq!(h.step(), [(0, 4), (1, 1), (2, 1)]);
    assert_eq!(h.scheduler.admission_order, [1, 2, 0]);
    assert_eq!(h.step(), [(0, 1), (1, 1), (2, 1)]);
}

#[test]
fn prefill_budget_goes_to_the_oldest_prompt_first_and_decode_tokens_are_never_starved() {
    let mut h = Harness::new(4, 6);
    let _running = h.submit("a");
    assert_eq!(h.step(), [(0, 1)]);
    let old = h.submit("bbbbbbbb");
    let _new = h.submit("cc");
    // Budget 6: one decode token, then the older prompt takes the remaining five.
    assert_eq!(h.step(), [(0, 1), (1, 5)]);
    assert_eq!(h.step(), [(0, 1), (1, 3), (2, 2)]);
    drop(old);
    // The newer one moved down into the hole the cancelled one left.
    assert_eq!(h.step(), [(0, 1), (1, 1)]);
}

#[test]
fn a_hole_left_by_a_finished_request_is_closed_by_moving_the_highest_sequence_down() {
    let mut h = Harness::new(4, 64);
    let first = h.submit("aaa");
    let _second = h.submit("bbb");
    let mut third = h.submit("ccc");
    h.step();
    drop(first);
    while third.try_recv().is_ok() {}
    // Nobody waits, so slot 2's sequence moves into slot 0 and the batch is one run.
    assert_eq!(h.step(), [(0, 1), (1, 1)]);
    assert_eq!(h.scheduler.executor.moves, [(2, 0)]);
    assert_eq!(h.scheduler.admission_order, [1, 0]);
    assert!(matches!(third.try_recv(), Ok(StreamEvent::Text { .. })), "the moved request still streams");
    // A waiting request fills a hole itself; nothing moves.
    let mut h = Harness::new(4, 64);
    let first = h.submit("aaa");
    let _second = h.submit("bbb");
    let _third = h.submit("ccc");
    h.step();
    drop(first);
    let _fourth = h.submit("d");
    assert_eq!(h.step(), [(0, 1), (1, 1), (2, 1)]);
    assert!(h.scheduler.executor.moves.is_empty());
}

/// Two prompts of 48 distinct bytes each.
const PROMPT_A: &str = "The quick brown fox jumps over the lazy dog again";
const PROMPT_B: &str = "Pack my box with five dozen liquor jugs, said she";

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
    assert!(h.scheduler.slots[1].is_none() && h.scheduler.slots[2].is_none());
    // A new conversation shares A's first 20 tokens: it goes into slot 1 and copies them
    // from slot 2; an unrelated prompt admitted in the same step takes slot 2, the donor.
    let _shares = h.submit_n(&format!("{}{}", &PROMPT_A[..20], "zzzzzzzzzzzzzzzzzzzzzzzzzzzz"), 4);
    let _other = h.submit_n("yyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyy", 4);
    h.step();
    assert_eq!(h.scheduler.executor.saves, [1, 2], "B, then A before the donor was overwritten");
    h.run_to_idle();
    // A comes back: restored from host memory, not prefilled again.
    let restores = h.scheduler.executor.restores.len();
    let _again = h.submit_n(PROMPT_A, 4);
    assert_eq!(h.step(), [(0, 1)], "all of A but its last token restored");
    assert_eq!(h.scheduler.executor.restores.len(), restores + 1);
}

#[test]
fn a_prompt_in_host_memory_is_restored_even_when_the_lowest_free_slot_is_lending_its_prefix() {
    let mut h = Harness::with_cache(4, 256, true, 1 << 20);
    let c = "Sphinx of black quartz, judge my vow, said the judge";
    let _c = h.submit_n(c, 4);
    h.run_to_idle();
    // Slot 0: a long-running request (C goes to host memory); slots 1 and 2: B and A, idle.
    let _running = h.submit_n("r", 200);
    let _b = h.submit_n(PROMPT_B, 4);
    let _a = h.submit_n(PROMPT_A, 4);
    for _ in 0..6 {
        h.step();
    }
    assert_eq!(h.scheduler.executor.saves, [0]);
    // A prompt sharing A's start copies it from slot 2 into slot 1; C's next turn, admitted
    // in the same step, is restored into slot 3 rather than prefilled into slot 2.
    let _shares = h.submit_n(&format!("{}{}", &PROMPT_A[..20], "zzzzzzzzzzzzzzzzzzzzzzzzzzzz"), 4);
    let _next_turn = h.submit_n(&format!("{c}, and more"), 4);
    let runs = h.step();
    assert_eq!(h.scheduler.executor.restores, [(3, 0)]);
    assert_eq!(runs.last(), Some(&(3, ", and more".len())), "only the new tokens are prefilled");
    assert!(h.scheduler.slots[2].is_none(), "the donor keeps its prefix");
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
    let mut h = Harness::with_cache(1, 64, true, 1 << 20).forecasting();
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

/// The `Finished` event's cached-token count, once the request has finished.
fn cached_tokens(events: &mut Events) -> u32 {
    while let Ok(event) = events.try_recv() {
        if let StreamEvent::Finished(done) = event {
            return done.usage.cached_tokens;
        }
    }
    panic!("the request has not finished");
}

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
    let _long = h.submit(&"d".repeat(300));
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
        let mut h = Harness::with_cache(3, batch_limit, true, 1 << 20);
        h.scheduler = h.scheduler.with_step_budget(64);
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
    h.scheduler.executor.widen_beside_others_to = 20;
    let _a = h.submit_n(PROMPT_A, 4);
    h.run_to_idle();
    // A cold 70-token prompt: 64 tokens now, its last 6 next step beside A's next turn,
    // widened to 20 over tokens its own first chunk computed.
    let mut cold = h.submit_n(&"z".repeat(70), 4);
    assert_eq!(h.step(), [(0, 64)]);
    let _next = h.submit_n(&format!("{PROMPT_A} and more"), 4);
    assert_eq!(h.step(), [(0, 20), (1, 20)]);
    h.run_to_idle();
    assert_eq!(cached_tokens(&mut cold), 0);
    let a = PROMPT_A.len() as u64;
    assert_eq!(h.scheduler.stats.snapshot().prefix.hit_tokens, a + 9 - 20, "only A's turn had hits");
}

#[path = "scheduler_tests_choices.rs"]
mod choices;

/// Every event of a finished request: its text, and the final event.
fn drain(events: &mut Events) -> (String, rillm_backend::Completion) {
    let mut text = String::new();
    while let Ok(event) = events.try_recv() {
        match event {
            StreamEvent::Text { text: piece, .. } => text.push_str(&piece),
            StreamEvent::Finished(done) => return (text, done),
            StreamEvent::Prompt(_) => {}
        }
    }
    panic!("no final event; text so far {text:?}");
}

#[test]
fn tokens_a_constraint_forces_are_fed_in_one_step_with_one_output_row() {
    let mut h = Harness::new(2, 64);
    let mut events = h.submit_regex("q", 50, "hello world [0-9]");
    let mut plain = h.submit_n("p", 3);
    h.step(); // both prompts; the constrained one samples `h`, then `ello world ` is forced
    h.step();
    let batch = h.scheduler.executor.batches.last().cloned().expect("a batch");
    let constrained: Vec<&BatchToken> = batch.iter().filter(|t| t.seq == 0).collect();
    assert_eq!(constrained.len(), "hello world ".len(), "the sampled `h` and the 11 forced tokens together");
    assert_eq!(constrained.iter().filter(|t| t.logits).count(), 1, "one output row, on the last");
    assert!(constrained.last().is_some_and(|t| t.logits && t.token == TokenId::from(b' ')));
    let positions: Vec<u32> = constrained.iter().map(|t| t.pos).collect();
    assert!(positions.windows(2).all(|w| w[1] == w[0] + 1), "{positions:?}");
    assert_eq!(batch.iter().filter(|t| t.seq == 1).count(), 1, "the plain stream still decodes one token");
    h.run_to_idle();
    let (text, done) = drain(&mut events);
    assert_eq!(text, "hello world 0");
    assert_eq!(done.finish_reason, FinishReason::Stop, "the grammar is complete");
    assert_eq!(done.usage.completion_tokens, 13, "forced tokens are completion tokens");
    let snap = h.scheduler.stats.snapshot().constraints;
    assert_eq!((snap.constrained_tokens, snap.forced_tokens), (13, 11));
    assert_eq!(drain(&mut plain).1.usage.completion_tokens, 3);
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
