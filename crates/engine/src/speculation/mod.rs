//! Speculative decoding: drafts from a sequence's own tokens (prompt lookup, `lookup`),
//! from earlier requests (`ngram_pool`) or from a draft model (`model_drafts`), how often
//! each kind is kept (`acceptance`), and how many rows each sequence feeds in a step
//! (`draft_lengths`, which the step's layout also lays grammar-forced runs out with: both
//! are rows beyond a sequence's one). Verifying drafts is the scheduler's
//! (`scheduler::decode`).
//!
//! [`Drafter`] is the one type the scheduler talks to. A step asks it twice: `offer` says
//! what each generating sequence could draft (prompt lookup finds its tokens then; a draft
//! model's are only a room), the step's layout chooses every sequence's length together
//! with the forced runs, and `take` makes the chosen drafts (a draft model drafts then).
//! It owns each slot's drafting state (`SlotDrafts`): this step's drafts, the acceptance
//! estimates that price the next ones, and the token predicted where nothing was drafted.

pub(crate) mod acceptance;
pub(crate) mod draft_lengths;
pub(crate) mod lookup;
pub(crate) mod model_drafts;
pub(crate) mod ngram_pool;
pub(crate) mod state;

use draft_lengths::{DraftOption, FairnessGuard};
use model_drafts::ModelDrafts;
use ngram_pool::NgramPool;
pub(crate) use state::{DraftStep, SlotDrafts};

use crate::request::sequence::Sequence;
use crate::runtime::{Executor, TokenId};

/// How tokens are drafted.
pub(crate) enum DraftMode {
    /// Nothing is drafted (`--speculative off`).
    Off,
    /// Prompt lookup, and copies from earlier requests' tokens.
    Lookups { pool: NgramPool },
    /// The executor's draft model.
    Model(ModelDrafts),
}

pub(crate) struct Drafter {
    mode: DraftMode,
    guard: FairnessGuard,
    slots: Vec<SlotDrafts>,
    /// Buffers reused across steps: a sequence's history, what a lookup found.
    history: Vec<TokenId>,
    found: Vec<TokenId>,
}

impl Drafter {
    pub fn new(mode: DraftMode, guard: FairnessGuard, slots: usize) -> Self {
        Self {
            mode,
            guard,
            slots: (0..slots).map(|_| SlotDrafts::default()).collect(),
            history: Vec::new(),
            found: Vec::new(),
        }
    }

    pub fn enabled(&self) -> bool {
        !matches!(self.mode, DraftMode::Off)
    }

    pub fn guard(&self) -> FairnessGuard {
        self.guard
    }

    /// What a draft model's drafts cost before the step, a token (0 for lookups).
    pub fn pass_ms<E: Executor>(&self, executor: &E) -> f64 {
        match self.mode {
            DraftMode::Model(_) => executor.draft_pass_ms().unwrap_or(0.0),
            _ => 0.0,
        }
    }

    pub fn slot_mut(&mut self, slot: usize) -> &mut SlotDrafts {
        &mut self.slots[slot]
    }

    /// Drafts fed for `slot` this step.
    pub fn drafts(&self, slot: usize) -> &[TokenId] {
        &self.slots[slot].drafts
    }

    /// Drafted rows this step, in all.
    pub fn drafted(&self) -> usize {
        self.slots.iter().map(|s| s.drafts.len()).sum()
    }

    /// `slot`'s prompt completes this step, and `tokens`, a call's opening, are fed after
    /// it as drafts (`Sequence::opening_drafts`).
    pub fn open_with(&mut self, slot: usize, tokens: Vec<TokenId>) {
        let state = &mut self.slots[slot];
        state.drafts = tokens;
        state.opening = true;
    }

    /// A new sequence took `slot`: it starts with fresh estimates.
    pub fn reset(&mut self, slot: usize) {
        self.slots[slot] = SlotDrafts::default();
    }

    /// A sequence moved from slot `from` to `to`, its drafting state with it.
    pub fn move_slot(&mut self, from: usize, to: usize) {
        self.slots[to] = std::mem::take(&mut self.slots[from]);
    }

    /// Drafts go into KV with the step but are no sequence's until verified: after the
    /// step, each slot's count of them (the sequences' cells are adjusted by it).
    pub fn fed_counts(&self) -> impl Iterator<Item = (usize, usize)> + '_ {
        self.slots.iter().enumerate().map(|(slot, s)| (slot, s.drafts.len()))
    }

    /// A sequence that ended on its own: its tokens go to the n-gram pool, to draft from
    /// where a later one goes on like it.
    pub fn learn_from(&mut self, seq: &Sequence) {
        if let DraftMode::Lookups { pool } = &mut self.mode {
            seq.history_into(&mut self.history);
            pool.insert(&self.history);
        }
    }

    /// What each slot could draft this step, into `options` (one per slot; `None`: nothing
    /// on offer). With `lookups` false (saturated, or a first token due) nothing is.
    /// Lookups find their tokens now; a draft model's are made once lengths are chosen.
    pub fn offer(
        &mut self,
        seqs: &mut [Option<Sequence>],
        step: DraftStep,
        lookups: bool,
        options: &mut Vec<Option<DraftOption>>,
    ) {
        options.clear();
        if let DraftMode::Model(model) = &mut self.mode {
            model.begin(seqs.len());
        }
        for (slot, seq) in seqs.iter_mut().enumerate() {
            let state = &mut self.slots[slot];
            state.drafts.clear();
            state.predicted = None;
            state.opening = false;
            // A sequence with forced tokens to feed drafts nothing: the layout feeds those.
            let room = match seq.as_ref() {
                Some(seq) if lookups && seq.uncached_generated().len() == 1 => seq.draft_room(step.ctx_limit),
                _ => 0,
            };
            let (Some(seq), true) = (seq.as_mut(), room > 0) else {
                options.push(None);
                continue;
            };
            let room = room.min(step.budget);
            let option = match &mut self.mode {
                DraftMode::Off => None,
                DraftMode::Lookups { pool } => {
                    seq.history_into(&mut self.history);
                    Some(lookup::offer(seq, state, pool, &self.history, room, &mut self.found))
                }
                DraftMode::Model(model) => model.offer(slot, state, room, step.prices),
            };
            options.push(option);
        }
    }

    /// Makes the drafts the layout chose: `lengths[slot]` tokens of each slot's offer.
    /// Lookups keep that much of what they found; a draft model drafts now.
    pub fn take<E: Executor>(
        &mut self,
        seqs: &mut [Option<Sequence>],
        executor: &mut E,
        step: DraftStep,
        options: &[Option<DraftOption>],
        lengths: &[usize],
    ) {
        match &mut self.mode {
            DraftMode::Off => {}
            DraftMode::Lookups { .. } => {
                for ((state, option), &k) in self.slots.iter_mut().zip(options).zip(lengths) {
                    if option.is_none() {
                        continue;
                    }
                    // Not drafting still teaches: was the lookup's first token the model's next?
                    if k == 0 {
                        state.predicted = state.drafts.first().copied();
                    }
                    state.drafts.truncate(k);
                }
            }
            DraftMode::Model(model) => model.take(seqs, &mut self.slots, executor, step, options, lengths),
        }
    }
}
