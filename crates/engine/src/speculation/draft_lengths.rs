//! How many of its drafted tokens each sequence feeds in a step, chosen for all sequences
//! together: a step costs what its passes over the weights cost (`ubatch_passes`), and
//! the passes depend on every sequence's rows at once. One sequence drafting four tokens
//! beside seven that draft none adds a pass of its own; the eight drafting a token each
//! add none. So lengths are searched jointly: the same depth for every sequence, then each
//! sequence's length in turn with the others held, keeping whatever raises the step's
//! expected output per millisecond.
//!
//! Tokens a constraint forced are laid out the same way, as drafts certain to be kept: a
//! run of them beside streams feeding one row each would take a pass of its own, and where
//! the rows are dear (a full batch on a CPU) feeding them one a step, in the pass every
//! stream's row takes anyway, computes the same rows without that pass.
//!
//! Output per millisecond is the whole batch's objective, and streams share the step: long
//! drafts of some make every step longer for all. So a layout must also keep each stream's
//! expected time per token within a `FairnessGuard` of the layout without drafts (by
//! default 1.2x; the TPOT objective where one is set): a stream that drafts nothing pays
//! the step's whole slowdown, one that drafts pays it spread over the tokens it expects to
//! keep. A lone stream, or streams that all draft and keep, still draft as deep as pays.

use crate::cost::step_costs::DraftPrices;
use crate::runtime::ubatch_passes::{passes_into, Pass};

/// A layout with drafts must promise this much more output per millisecond than none:
/// prices are measured on a noisy machine, and a draft that only breaks even costs latency.
pub(crate) const MIN_GAIN: f64 = 1.05;

/// Rounds of one-sequence-at-a-time improvement; each usually settles in one or two.
const ROUNDS: usize = 3;

/// What drafts may cost the streams beside them: each stream's expected time per token in
/// a layout with drafts at most `max_slowdown` times its time without drafts, or, with a
/// TPOT objective, at most the objective (or its time without drafts, where that is more).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FairnessGuard {
    pub max_slowdown: f64,
    pub tpot_ms: Option<f64>,
}

impl Default for FairnessGuard {
    fn default() -> Self {
        Self { max_slowdown: crate::config::DEFAULT_SPEC_MAX_SLOWDOWN, tpot_ms: None }
    }
}

impl FairnessGuard {
    /// The longest a stream may wait per token, given `unguarded` ms per token without
    /// drafts.
    fn allowance(&self, unguarded: f64) -> f64 {
        match self.tpot_ms {
            Some(tpot) => tpot.max(unguarded),
            None => unguarded * self.max_slowdown,
        }
    }
}

/// What bounds one step's layout besides its prices.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct StepBounds {
    /// Drafted rows the step has room for, in all.
    pub budget: usize,
    pub rules: PassRules,
    /// What making drafts costs before the step, per token of the deepest draft (a draft
    /// model's passes, which the drafting sequences share; 0 for lookups).
    pub draft_pass_ms: f64,
    pub guard: FairnessGuard,
}

/// How the runtime cuts a step into passes and what shapes a pass's cost beyond its rows.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct PassRules {
    /// Rows one pass over the weights computes (`ubatch_passes`).
    pub ubatch_rows: usize,
    /// `Executor::attention_tile_rows`: a pass whose sequences hold one row past whole
    /// tiles computes that row by itself, priced as a one-row step more.
    pub attention_tile: Option<usize>,
}

/// What one sequence can feed beyond its one row this step.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct DraftOption {
    /// Tokens on offer (drafts after the constraint and the room cut them, or forced ones).
    pub available: usize,
    /// Chance that each of them is kept, given the ones before it were.
    pub acceptance: f64,
    /// Forced by a constraint, not drafted: certain, outside the draft budget, and fed
    /// whole unless another layout is faster.
    pub forced: bool,
}

impl DraftOption {
    pub fn drafted(available: usize, acceptance: f64) -> Self {
        Self { available, acceptance, forced: false }
    }

    pub fn forced(available: usize) -> Self {
        Self { available, acceptance: 1.0, forced: true }
    }
}

/// Chooses draft lengths: `base[s]` rows sequence `s` feeds anyway (0 for a slot that
/// feeds none), `options[s]` what it could feed beyond them, within `bounds`. Writes one
/// length per slot into `lengths`. A layout with drafts must beat every layout without by
/// `MIN_GAIN` and keep to the guard; forced tokens are fed whole unless holding some back
/// is faster. Returns whether the guard ruled out a layout that would otherwise have won
/// (drafts cut for the streams beside them).
pub(crate) fn choose(
    base: &[usize],
    options: &[Option<DraftOption>],
    prices: DraftPrices,
    bounds: StepBounds,
    lengths: &mut Vec<usize>,
) -> bool {
    let budget = bounds.budget;
    let mut search = Search::new(base, options, prices, bounds);
    lengths.clear();
    lengths.extend(options.iter().map(|o| o.filter(|o| o.forced).map_or(0, |o| o.available)));
    search.unguarded_from(lengths);
    let mut best = search.score(lengths);
    let mut trial = lengths.clone();
    let deepest = options.iter().flatten().map(|o| o.available).max().unwrap_or(0);
    for depth in 1..=deepest {
        for (k, option) in trial.iter_mut().zip(options) {
            *k = option.map_or(0, |o| o.available.min(depth));
        }
        if search.drafted(&trial) <= budget {
            let score = search.score(&trial);
            if score > best {
                (best, *lengths) = (score, trial.clone());
            }
        }
    }
    for _ in 0..ROUNDS {
        let mut improved = false;
        for (s, option) in options.iter().enumerate() {
            let Some(option) = option else { continue };
            trial.clone_from(lengths);
            trial[s] = 0;
            let room = if option.forced { option.available } else { budget.saturating_sub(search.drafted(&trial)) };
            for k in 0..=option.available.min(room) {
                trial[s] = k;
                let score = search.score(&trial);
                if score > best {
                    (best, lengths[s], improved) = (score, k, true);
                }
            }
        }
        if !improved {
            break;
        }
    }
    search.best_refused > best
}

/// The lengths of a layout's drafts (not its forced runs): what the budget bounds, and what
/// a draft model's passes follow.
fn drafted<'a>(options: &'a [Option<DraftOption>], lengths: &'a [usize]) -> impl Iterator<Item = usize> + 'a {
    options.iter().zip(lengths).filter(|(o, _)| o.is_some_and(|o| !o.forced)).map(|(_, &k)| k)
}

/// Drafted (not forced) rows in a layout.
pub(crate) fn drafted_rows(options: &[Option<DraftOption>], lengths: &[usize]) -> usize {
    drafted(options, lengths).sum()
}

/// Prices layouts; buffers reused across them.
struct Search<'a> {
    base: &'a [usize],
    options: &'a [Option<DraftOption>],
    /// Per slot, the expected kept tokens of a draft of each length (index = length).
    expected: Vec<Vec<f64>>,
    prices: DraftPrices<'a>,
    rules: PassRules,
    draft_pass_ms: f64,
    guard: FairnessGuard,
    /// Each slot's expected ms per token in the layout without drafts (`unguarded_from`).
    unguarded: Vec<f64>,
    /// The best score of a layout the guard refused.
    best_refused: f64,
    rows: Vec<usize>,
    passes: Vec<Pass>,
}

impl<'a> Search<'a> {
    fn new(base: &'a [usize], options: &'a [Option<DraftOption>], prices: DraftPrices<'a>, bounds: StepBounds) -> Self {
        // A draft of k tokens adds a + a^2 + ... + a^k kept tokens to the step's output.
        let expected = options
            .iter()
            .map(|option| {
                let Some(o) = option else { return vec![0.0] };
                let mut kept = vec![0.0; o.available + 1];
                let mut reach = 1.0;
                for k in 1..=o.available {
                    reach *= o.acceptance;
                    kept[k] = kept[k - 1] + reach;
                }
                kept
            })
            .collect();
        let StepBounds { rules, draft_pass_ms, guard, .. } = bounds;
        Self {
            base,
            options,
            expected,
            prices,
            rules,
            draft_pass_ms,
            guard,
            unguarded: Vec::new(),
            best_refused: f64::NEG_INFINITY,
            rows: Vec::new(),
            passes: Vec::new(),
        }
    }

    /// Takes `lengths` (no drafts) as the layout each stream's time per token is guarded
    /// against.
    fn unguarded_from(&mut self, lengths: &[usize]) {
        let ms = self.step_ms(lengths);
        self.unguarded = (0..lengths.len()).map(|s| self.ms_per_token(s, lengths, ms)).collect();
    }

    /// Slot `s`'s expected milliseconds per token in a step of `ms` laid out as `lengths`:
    /// the step, over the row it feeds anyway and the drafted or forced tokens it expects
    /// to keep.
    fn ms_per_token(&self, s: usize, lengths: &[usize], ms: f64) -> f64 {
        ms / (1.0 + self.expected[s][lengths[s]])
    }

    /// Whether every stream in the step keeps within the guard.
    fn fair(&self, lengths: &[usize], ms: f64) -> bool {
        (0..lengths.len())
            .filter(|&s| self.base[s] > 0)
            .all(|s| self.ms_per_token(s, lengths, ms) <= self.guard.allowance(self.unguarded[s]) + 1e-9)
    }

    /// Drafted (not forced) tokens in a layout: what the draft budget bounds.
    fn drafted(&self, lengths: &[usize]) -> usize {
        drafted_rows(self.options, lengths)
    }

    /// The rate, discounted by `MIN_GAIN` where the layout feeds drafts; nothing for a
    /// layout whose drafts break the guard (remembered as refused).
    fn score(&mut self, lengths: &[usize]) -> f64 {
        let ms = self.step_ms(lengths);
        let rate = self.rate(lengths, ms);
        if self.drafted(lengths) == 0 {
            return rate;
        }
        let score = rate / MIN_GAIN;
        if self.fair(lengths, ms) {
            score
        } else {
            self.best_refused = self.best_refused.max(score);
            f64::NEG_INFINITY
        }
    }

    /// What a pass costs: its rows' price, and a one-row step more where each sequence holds
    /// one row past whole attention tiles (a draft one token shorter saves it).
    fn pass_ms(&self, pass: Pass) -> f64 {
        let ms = self.prices.step_ms(pass.rows);
        match self.rules.attention_tile {
            Some(tile) if pass.per_sequence > tile && pass.per_sequence % tile == 1 => ms + self.prices.step_ms(1),
            _ => ms,
        }
    }

    /// What the step laid out as `lengths` costs: its passes, and making its drafts.
    fn step_ms(&mut self, lengths: &[usize]) -> f64 {
        self.rows.clear();
        self.rows.extend(self.base.iter().zip(lengths).map(|(b, k)| b + k));
        passes_into(&mut self.rows, self.rules.ubatch_rows, &mut self.passes);
        let making = if self.draft_pass_ms > 0.0 {
            self.draft_pass_ms * drafted(self.options, lengths).max().unwrap_or(0) as f64
        } else {
            0.0
        };
        (making + self.passes.iter().map(|&pass| self.pass_ms(pass)).sum::<f64>()).max(1e-3)
    }

    /// Expected output tokens per millisecond of a step of `ms` laid out as `lengths`.
    fn rate(&self, lengths: &[usize], ms: f64) -> f64 {
        let kept: f64 = self.expected.iter().zip(lengths).map(|(e, &k)| e[k]).sum();
        (self.base.iter().sum::<usize>() as f64 + kept) / ms
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cost::step_costs::RowCosts;

    /// The guard off (drafts may slow other streams as much as pays), as before it was.
    const UNGUARDED: FairnessGuard = FairnessGuard { max_slowdown: f64::INFINITY, tpot_ms: None };

    fn bounds(budget: usize, rules: PassRules, draft_pass_ms: f64, guard: FairnessGuard) -> StepBounds {
        StepBounds { budget, rules, draft_pass_ms, guard }
    }

    const WIDE: PassRules = PassRules { ubatch_rows: 512, attention_tile: None };

    fn chosen(base: &[usize], options: &[Option<DraftOption>], costs: &RowCosts, budget: usize) -> Vec<usize> {
        guarded(base, options, costs, budget, UNGUARDED).0
    }

    fn guarded(
        base: &[usize],
        options: &[Option<DraftOption>],
        costs: &RowCosts,
        budget: usize,
        guard: FairnessGuard,
    ) -> (Vec<usize>, bool) {
        let mut lengths = Vec::new();
        let prices = DraftPrices::new(costs, costs.price(1, 10.0));
        let cut = choose(base, options, prices, bounds(budget, WIDE, 0.0, guard), &mut lengths);
        (lengths, cut)
    }

    fn offer(available: usize, acceptance: f64) -> Option<DraftOption> {
        Some(DraftOption::drafted(available, acceptance))
    }

    /// Prices as measured (module comment of `ubatch_passes`): a one-row pass ~10 ms,
    /// eight rows ~41 ms, then ~4 ms a row.
    fn cpu() -> RowCosts {
        let mut costs = RowCosts::default();
        costs.observe(1, 10.0);
        for rows in 2..64 {
            let ms = if rows <= 8 { 10.0 + (rows - 1) as f64 * 31.0 / 7.0 } else { 41.0 + (rows - 8) as f64 * 4.0 };
            costs.observe(rows, ms);
        }
        costs
    }

    #[test]
    fn one_sequence_drafts_as_deep_as_pays() {
        let costs = cpu();
        assert!(chosen(&[1], &[offer(8, 0.95)], &costs, 64)[0] >= 4);
        assert_eq!(chosen(&[1], &[offer(8, 0.2)], &costs, 64), [0]);
        assert_eq!(chosen(&[1], &[offer(8, 0.95)], &costs, 2), [2], "within the budget");
        assert_eq!(chosen(&[1], &[None], &costs, 64), [0]);
    }

    #[test]
    fn a_lone_draft_that_would_need_a_pass_of_its_own_is_not_fed() {
        let costs = cpu();
        // Seven streams without drafts and one with a good short draft: feeding it alone
        // adds a pass (~10 ms for ~1.8 tokens), against 41 ms for eight tokens.
        let mut options = vec![None; 8];
        options[7] = offer(2, 0.9);
        assert_eq!(chosen(&[1; 8], &options, &costs, 64), [0; 8]);
        // Every stream with the same offer: one wider pass for all of them pays.
        let options = vec![offer(2, 0.9); 8];
        let lengths = chosen(&[1; 8], &options, &costs, 64);
        assert!(lengths[0] > 0 && lengths.iter().all(|&k| k == lengths[0]), "{lengths:?}");
    }

    #[test]
    fn forced_tokens_are_fed_whole_unless_they_would_take_a_pass_of_their_own() {
        let costs = cpu();
        let forced = Some(DraftOption::forced(4));
        // Alone, a run of forced tokens is one pass however long: fed whole.
        assert_eq!(chosen(&[1], &[forced], &costs, 0), [4]);
        // Beside seven streams feeding a row each, the run would add a pass: held back,
        // to go one row a step in the pass the others take anyway.
        let mut options = vec![None; 8];
        options[2] = forced;
        assert_eq!(chosen(&[1; 8], &options, &costs, 0), [0; 8]);
        // Where the others draft, the run rides in the pass their drafts widen.
        let mut options = vec![offer(4, 0.97); 8];
        options[2] = forced;
        let lengths = chosen(&[1; 8], &options, &costs, 64);
        assert!(lengths[2] > 0, "{lengths:?}");
    }

    #[test]
    fn uneven_offers_are_evened_to_fewer_passes() {
        let costs = cpu();
        let options = [offer(4, 0.9), offer(1, 0.9), offer(3, 0.9), offer(1, 0.9)];
        let lengths = chosen(&[1; 4], &options, &costs, 64);
        let mut rows: Vec<usize> = lengths.iter().map(|k| k + 1).collect();
        let mut passes = Vec::new();
        passes_into(&mut rows, 512, &mut passes);
        assert!(passes.len() <= 2, "{lengths:?} makes passes {passes:?}");
        assert!(lengths.iter().sum::<usize>() >= 4, "{lengths:?}");
    }

    #[test]
    fn drafts_that_cost_passes_to_make_go_shallower_or_not_at_all() {
        let costs = cpu();
        let prices = DraftPrices::new(&costs, costs.price(1, 10.0));
        let with_cost = |options: &[Option<DraftOption>], pass_ms: f64| {
            let mut lengths = Vec::new();
            choose(&vec![1; options.len()], options, prices, bounds(64, WIDE, pass_ms, UNGUARDED), &mut lengths);
            lengths
        };
        let options = [offer(8, 0.97)];
        let free = with_cost(&options, 0.0)[0];
        let cheap = with_cost(&options, 1.0)[0];
        assert!(free >= 4 && cheap <= free, "{free} free, {cheap} at 1 ms a token");
        // A pass that costs what a one-row step does: no draft pays.
        assert_eq!(with_cost(&options, 10.0), [0]);
        // The passes are shared: a second sequence drafting as deep adds no pass of them.
        let two = with_cost(&[offer(8, 0.97), offer(8, 0.97)], 1.0);
        assert!(two.iter().all(|&k| k > 0), "{two:?}");
    }

    #[test]
    fn a_sequence_stops_short_of_one_row_past_an_attention_tile() {
        // A copy sure to be kept, every row at the same price: as deep as it goes, but alone
        // 1 + 64 rows would put one row past the 64-row tile.
        let costs = RowCosts::linear(8.0, 4.0);
        let prices = DraftPrices::new(&costs, costs.price(1, 10.0));
        let with_tile = |base: &[usize], options: &[Option<DraftOption>], tile| {
            let mut lengths = Vec::new();
            let rules = PassRules { ubatch_rows: 512, attention_tile: tile };
            choose(base, options, prices, bounds(512, rules, 0.0, UNGUARDED), &mut lengths);
            lengths
        };
        let copy = offer(64, 1.0);
        assert_eq!(with_tile(&[1], &[copy], None), [64]);
        assert_eq!(with_tile(&[1], &[copy], Some(64)), [63], "64 rows, one tile");
        // Beside streams feeding a row each, llama.cpp's split takes one row of every
        // sequence first: the copy's 64 drafts then make a 64-row pass of their own.
        let mut options = vec![None; 4];
        options[3] = copy;
        assert_eq!(with_tile(&[1; 4], &options, Some(64))[3], 64);
    }

    #[test]
    fn a_stream_without_drafts_keeps_its_time_per_token_within_the_guard() {
        // Rows cheap beside the step's first (as on a GPU): one stream copies a long run it is
        // sure to keep, and four beside it draft nothing. Its drafts go in a pass of their
        // own (`ubatch_passes`): the step of five rows (14 ms) takes 10 ms more at least.
        let costs = RowCosts::linear(10.0, 1.0);
        let mut options = vec![None; 5];
        options[0] = offer(32, 0.97);
        let (free, _) = guarded(&[1; 5], &options, &costs, 64, UNGUARDED);
        let (fair, cut) = guarded(&[1; 5], &options, &costs, 64, FairnessGuard::default());
        assert!(free[0] > 8, "unguarded, the copy drafts deep and every step waits for it: {free:?}");
        assert_eq!((fair, cut), (vec![0; 5], true), "1.2 times 14 ms leaves no room for a pass more");
        // Under a TPOT objective the objective is the bound: 42 ms holds a pass of 19 rows.
        let tpot = FairnessGuard { tpot_ms: Some(42.0), ..FairnessGuard::default() };
        let (loose, _) = guarded(&[1; 5], &options, &costs, 64, tpot);
        assert!((1..=19).contains(&loose[0]), "{loose:?}");
    }

    #[test]
    fn a_lone_stream_or_streams_that_all_draft_are_not_held_back() {
        let costs = cpu();
        let guard = FairnessGuard::default();
        // Alone, a stream pays for its own drafts, and drafts as deep as pays.
        for (available, acceptance) in [(8, 0.95), (32, 0.99), (8, 0.2)] {
            let option = [offer(available, acceptance)];
            assert_eq!(guarded(&[1], &option, &costs, 64, guard), (chosen(&[1], &option, &costs, 64), false));
        }
        // Every stream copying what it keeps: each gains from the longer step.
        let options = vec![offer(8, 0.98); 4];
        let (lengths, cut) = guarded(&[1; 4], &options, &costs, 64, guard);
        assert!(!cut && lengths.iter().all(|&k| k > 0), "{lengths:?}");
    }
}
