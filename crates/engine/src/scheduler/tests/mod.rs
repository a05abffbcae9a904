//! The scheduler against a recording executor and a byte tokenizer: which tokens go into a
//! step, and in what order, is invisible from the outside but decides its cost. This file
//! is the harness; the tests are split by concern, one file each.

mod admission;
mod batching;
mod choices;
mod constraints;
mod draft_model;
mod kv;
mod reuse;
mod speculation;
mod thinking;
mod widening;

use std::sync::Arc;
use std::time::Instant;

use super::{Scheduler, SchedulerConfig};
use crate::chat::ChatTemplate;
use crate::queue::WaitQueue;
use crate::request::constraint::test_env::byte_env;
use crate::request::constraint::{ConstraintCounters, GrammarCompiler, SequenceConstraint};
use crate::request::pending::PendingRequest;
use crate::runtime::{BatchToken, Executor, RuntimeError, TokenId, Tokenizer};
use crate::stats::EngineStats;
use rillm_backend::{ChoiceControls, Constraint, FinishReason, RequestStream, SamplingParams, StreamEvent};

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

/// Keeps every batch and move it is given and samples `x` (or the script's next byte),
/// or under a mask the lowest token it allows when the mask refuses that (unless
/// `ignore_masks`).
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
    /// A text the "model" always continues: row at position p samples `script[p + 1]`.
    script: Option<Vec<u8>>,
    /// (slot, keep) of every truncation.
    truncations: Vec<(usize, u32)>,
    /// A "model" that samples bytes from fixed weights, whatever came before, with a seeded
    /// generator: one draw per sample, as a real sampler.
    random: Option<(rand::rngs::StdRng, Vec<(u8, f64)>)>,
    /// A draft model, if the test gives one.
    draft_model: Option<ScriptedDraftModel>,
}

/// A "draft model" that continues its own script: after a history of n tokens it proposes
/// `script[n..]`. Keeps every call's wants as (slot, history length, count).
struct ScriptedDraftModel {
    script: Vec<u8>,
    pass_ms: f64,
    calls: Vec<Vec<(usize, usize, usize)>>,
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
    fn sample(
        &mut self,
        _seq: usize,
        batch_index: usize,
        mask: Option<&toktrie::SimpleVob>,
        _adjust: Option<&crate::LogitAdjust>,
    ) -> TokenId {
        if let Some((rng, weights)) = self.random.as_mut() {
            let mut draw = rand::Rng::gen::<f64>(rng) * weights.iter().map(|w| w.1).sum::<f64>();
            for &(byte, weight) in weights.iter() {
                draw -= weight;
                if draw <= 0.0 {
                    return TokenId::from(byte);
                }
            }
            return TokenId::from(weights.last().map_or(b'x', |w| w.0));
        }
        if let Some(script) = &self.script {
            let pos = self.batches.last().expect("a decode")[batch_index].pos as usize;
            let next = TokenId::from(script.get(pos + 1).copied().unwrap_or(0));
            if mask.is_none_or(|m| m.is_allowed(next)) {
                return next;
            }
        }
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
    fn truncate_sequence(&mut self, seq: usize, keep: u32) {
        self.truncations.push((seq, keep));
    }
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
    fn draft(&mut self, wants: &[crate::runtime::DraftWant<'_>]) -> Result<Vec<Vec<TokenId>>, RuntimeError> {
        let model = self.draft_model.as_mut().expect("drafting asks only a draft model");
        model.calls.push(wants.iter().map(|w| (w.seq, w.history.len(), w.count)).collect());
        let script = &model.script;
        Ok(wants
            .iter()
            .map(|w| script.iter().skip(w.history.len()).take(w.count).map(|&b| TokenId::from(b)).collect())
            .collect())
    }
    fn draft_pass_ms(&self) -> Option<f64> {
        self.draft_model.as_ref().map(|m| m.pass_ms)
    }
}

fn recording_executor(max_batch_tokens: usize) -> RecordingExecutor {
    RecordingExecutor {
        ignore_masks: false,
        max_batch_tokens,
        batches: Vec::new(),
        moves: Vec::new(),
        saves: Vec::new(),
        restores: Vec::new(),
        fail_restores: false,
        widen_to: 0,
        widen_beside_others_to: 0,
        script: None,
        truncations: Vec::new(),
        random: None,
        draft_model: None,
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
        Self::configured(max_running, max_batch_tokens, |c| {
            c.prefix_caching = prefix_caching;
            c.host_cache_bytes = host_bytes;
        })
    }

    /// A scheduler over `max_running` slots and a decode call of `max_batch_tokens`, set
    /// up as `adjust` says (by default: no prefix caching, the step budget a whole batch).
    fn configured(max_running: usize, max_batch_tokens: usize, adjust: impl FnOnce(&mut SchedulerConfig)) -> Self {
        let queue = Arc::new(WaitQueue::new(16, max_running).weighted(|r: &PendingRequest| r.n as usize));
        let executor = recording_executor(max_batch_tokens);
        let stats = Arc::new(EngineStats::new(512 * max_running as u64));
        let mut config = SchedulerConfig {
            max_running,
            step_budget: max_batch_tokens,
            prefix_caching: false,
            host_cache_bytes: 0,
            forecast_prefixes: false,
            max_queue_ms: None,
            speculative: false,
            draft_tokens: None,
            tpot_slo_ms: None,
            draft_guard: crate::speculation::draft_lengths::FairnessGuard::default(),
            fixed_step_prices: false,
        };
        adjust(&mut config);
        let forecast = Arc::new(crate::cost::wait_forecast::Forecast::new(0));
        let mut scheduler =
            Scheduler::new(executor, Arc::new(ByteTokenizer), Arc::clone(&queue), stats, forecast, config);
        // The fake steps take no time: costs as on a small model on two cores.
        scheduler
            .costs
            .step
            .freeze(crate::cost::step_costs::StepCosts { decode_step_ms: 7.0, prefill_token_ms: 2.5 }, 2.5);
        Self { scheduler, queue, next_id: 0 }
    }

    /// Prices a prompt token at next to nothing beside a step (as on a GPU), so every prompt
    /// within the budget joins the step (`prefill_plan`): for tests of steps that prefill
    /// several prompts at once.
    fn prompts_join(&mut self) {
        self.scheduler
            .costs
            .step
            .freeze(crate::cost::step_costs::StepCosts { decode_step_ms: 7.0, prefill_token_ms: 0.01 }, 2.5);
    }

    /// Prompt tokens of `prompt` the last published forecast expects to be cached.
    fn forecast_cached(&mut self, prompt: &str) -> usize {
        self.scheduler.publish(false);
        self.scheduler.costs.wait.outlook().cached_estimate(&ByteTokenizer.tokenize(prompt, false, false))
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
        let prompt = ByteTokenizer.tokenize(prompt, false, false);
        let (mut request, receiver) = PendingRequest::for_test(self.next_id, prompt, max_tokens);
        adjust(&mut request);
        assert!(self.queue.push(request).is_ok());
        receiver
    }

    /// Steps until nothing runs or waits.
    fn run_to_idle(&mut self) {
        for _ in 0..1000 {
            if self.scheduler.running.is_idle() && self.queue.is_empty() {
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

/// Two prompts of 48 distinct bytes each.
const PROMPT_A: &str = "The quick brown fox jumps over the lazy dog again";
const PROMPT_B: &str = "Pack my box with five dozen liquor jugs, said she";

/// The `Finished` event's cached-token count, once the request has finished.
fn cached_tokens(events: &mut Events) -> u32 {
    while let Ok(event) = events.try_recv() {
        if let StreamEvent::Finished(done) = event {
            return done.usage.cached_tokens;
        }
    }
    panic!("the request has not finished");
}

/// Every event of a finished request: its text, and the final event.
fn drain(events: &mut Events) -> (String, rillm_backend::Completion) {
    let (_, text, done) = drain_parts(events);
    (text, done)
}

/// Every event of a finished request: its thought, its answer, and the final event.
fn drain_parts(events: &mut Events) -> (String, String, rillm_backend::Completion) {
    let (mut thought, mut text) = (String::new(), String::new());
    while let Ok(event) = events.try_recv() {
        match event {
            StreamEvent::Text { text: piece, .. } => text.push_str(&piece),
            StreamEvent::Reasoning { text: piece, .. } => thought.push_str(&piece),
            StreamEvent::Finished(done) => return (thought, text, done),
            StreamEvent::Prompt(_) | StreamEvent::Restarted { .. } => {}
        }
    }
    panic!("no final event; text so far {text:?}");
}
