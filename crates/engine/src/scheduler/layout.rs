//! The step's rows beyond each generating sequence's one: tokens its grammar forced and
//! drafts to verify, laid out together (`speculation::draft_lengths` chooses how many of
//! each a sequence feeds, by what the step's passes over the weights cost); and how many
//! passes the batch the step built makes. This happens every step, speculation on or off:
//! forced runs are laid out whether or not anything drafts.

use crate::cost::step_costs::DraftPrices;
use crate::request::sequence::Sequence;
use crate::runtime::ubatch_passes::{self, Pass};
use crate::runtime::BatchToken;
use crate::speculation::draft_lengths::{self, DraftOption, StepBounds};

pub(crate) struct StepLayout {
    /// What the drafter offers each slot this step (`Drafter::offer`).
    pub offers: Vec<Option<DraftOption>>,
    /// Per slot: rows fed anyway, what it could feed beyond them, the lengths chosen, and
    /// the forced tokens left for a later step. Buffers reused across steps.
    base: Vec<usize>,
    options: Vec<Option<DraftOption>>,
    lengths: Vec<usize>,
    held: Vec<usize>,
    /// Rows one pass over the weights computes, and buffers to count a batch's passes.
    ubatch_rows: usize,
    rows_per_slot: Vec<usize>,
    passes: Vec<Pass>,
}

impl StepLayout {
    pub fn new(slots: usize, ubatch_rows: usize) -> Self {
        Self {
            offers: Vec::with_capacity(slots),
            base: Vec::with_capacity(slots),
            options: Vec::with_capacity(slots),
            lengths: Vec::with_capacity(slots),
            held: vec![0; slots],
            ubatch_rows: ubatch_rows.max(1),
            rows_per_slot: Vec::with_capacity(slots),
            passes: Vec::new(),
        }
    }

    pub fn ubatch_rows(&self) -> usize {
        self.ubatch_rows
    }

    /// Chooses each slot's extra rows: a forced run (fed whole unless holding some of it
    /// back is faster), or the draft on offer. Returns whether the fairness guard cut
    /// drafts that would otherwise have been fed.
    pub fn lay_out(&mut self, seqs: &[Option<Sequence>], prices: DraftPrices, bounds: StepBounds) -> bool {
        self.base.clear();
        self.options.clear();
        for (slot, seq) in seqs.iter().enumerate() {
            let uncached = seq.as_ref().map_or(0, |s| s.uncached_generated().len());
            if uncached > 1 {
                // The last sampled token, then the ones its constraint forced after it.
                self.base.push(1);
                self.options.push(Some(DraftOption::forced(uncached - 1)));
            } else {
                self.base.push(uncached);
                self.options.push(self.offers.get(slot).copied().flatten());
            }
        }
        let cut = draft_lengths::choose(&self.base, &self.options, prices, bounds, &mut self.lengths);
        self.held.clear();
        self.held.extend(self.options.iter().zip(&self.lengths).map(|(option, &k)| match option {
            Some(o) if o.forced => o.available - k,
            _ => 0,
        }));
        cut
    }

    /// How many tokens each slot feeds beyond its one (drafts, or forced tokens).
    pub fn lengths(&self) -> &[usize] {
        &self.lengths
    }

    /// Forced tokens `slot` leaves for a later step: it samples again only once the last of
    /// them is fed. 0 after the step (`clear_held`).
    pub fn held(&self, slot: usize) -> usize {
        self.held.get(slot).copied().unwrap_or(0)
    }

    /// The step is done: held forced tokens wait for the next step's layout.
    pub fn clear_held(&mut self) {
        self.held.iter_mut().for_each(|h| *h = 0);
    }

    /// How many passes over the weights the runtime makes of `batch`.
    pub fn passes(&mut self, batch: &[BatchToken]) -> usize {
        ubatch_passes::rows_per_sequence(batch, self.held.len(), &mut self.rows_per_slot);
        ubatch_passes::passes_into(&mut self.rows_per_slot, self.ubatch_rows, &mut self.passes);
        self.passes.len()
    }
}
