//! What one step's drafting reads and writes: the step's bounds (`DraftStep`) and each
//! slot's drafting state (`SlotDrafts`), which the `Drafter` keeps with the slot.

use super::acceptance::Acceptance;
use super::draft_lengths::{FairnessGuard, PassRules, StepBounds};
use crate::cost::step_costs::DraftPrices;
use crate::runtime::TokenId;

/// One slot's drafting state, kept with the slot (moved with its sequence).
#[derive(Debug, Default)]
pub(crate) struct SlotDrafts {
    /// Tokens drafted for this step, fed after the uncached generated ones.
    pub drafts: Vec<TokenId>,
    /// How often the model keeps drafted tokens, by where they came from: how deep the
    /// next draft goes.
    pub acceptance: Acceptance,
    /// The token prompt lookup expected next when no draft was fed: checked against the
    /// sampled one, so the acceptance estimate keeps learning while nothing is drafted.
    pub predicted: Option<TokenId>,
    /// This step's drafts are a call's opening fed after the prompt
    /// (`Sequence::opening_drafts`), not a guess at the text: they say nothing of how
    /// deep the next drafts should go, nor count as speculation.
    pub opening: bool,
}

/// What bounds and prices the next step's drafts.
#[derive(Debug, Clone, Copy)]
pub(crate) struct DraftStep<'a> {
    pub prices: DraftPrices<'a>,
    /// KV cells per sequence.
    pub ctx_limit: u32,
    /// Drafted rows the step has room for, in all.
    pub budget: usize,
    /// How the runtime cuts the step into passes (`draft_lengths`).
    pub rules: PassRules,
}

impl DraftStep<'_> {
    /// The step's bounds for `draft_lengths`, drafts made at `draft_pass_ms` a token.
    pub fn bounds(&self, draft_pass_ms: f64, guard: FairnessGuard) -> StepBounds {
        StepBounds { budget: self.budget, rules: self.rules, draft_pass_ms, guard }
    }
}
