//! The step-cost model: what a step costs by its decode rows and prompt tokens, measured and
//! smoothed. Drafts are priced by it (`DraftPrices`: a decode step by its row count), so is
//! the TPOT objective's prefill budget, and the wait forecast publishes what it measured.

/// Smoothing of the measured costs: recent steps dominate, one odd step does not.
pub(crate) const SMOOTHING: f64 = 0.1;

/// Measured step costs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct StepCosts {
    /// A step with only decode tokens in it.
    pub decode_step_ms: f64,
    /// Each prompt token a step prefills adds this much.
    pub prefill_token_ms: f64,
}

impl Default for StepCosts {
    /// Before anything is measured: roughly a small model on two CPU cores.
    fn default() -> Self {
        Self { decode_step_ms: 30.0, prefill_token_ms: 2.0 }
    }
}

impl StepCosts {
    /// Folds in one step that decoded `decode_tokens` and prefilled `prefill_tokens`.
    pub fn observe(&mut self, took_ms: f64, decode_tokens: usize, prefill_tokens: usize) {
        if prefill_tokens == 0 {
            if decode_tokens > 0 {
                self.decode_step_ms += SMOOTHING * (took_ms - self.decode_step_ms);
            }
        } else if prefill_tokens >= 16 {
            // The decode part of a mixed step costs about a decode step.
            let base = if decode_tokens > 0 { self.decode_step_ms } else { 0.0 };
            let per_token = ((took_ms - base) / prefill_tokens as f64).max(0.0);
            self.prefill_token_ms += SMOOTHING * (per_token - self.prefill_token_ms);
        }
    }

    /// The least a request with `prompt` tokens to compute waits for its first token once
    /// it has a slot: its own prefill and one step, as if nothing else were prefilled.
    pub fn own_first_token_ms(&self, prompt: usize) -> f64 {
        prompt as f64 * self.prefill_token_ms + self.decode_step_ms
    }
}

/// What a decode-only step costs by how many rows it computes (a row per generating
/// sequence, plus drafted tokens), measured. On CPU the cost is far from linear: with
/// SmolLM2 on two cores at ~650 cached tokens, 1 row took 9 ms, 2 rows 22 ms, 9 rows 56 ms
/// (llama.cpp's one-row path is its fastest), so a short draft can cost more than it saves
/// where a long one pays. Rows never measured are priced from the nearest measured count
/// below, each further row at what a prompt token costs in a prefill (a wide step computes
/// rows as a prefill does: ~5 ms each there, against 17 ms for a one-row step at ~900
/// cached tokens), or at `PRIOR_ROW_SHARE` of a one-row step if that is less or unknown.
#[derive(Debug, Clone)]
pub(crate) struct RowCosts {
    ms: [Option<f64>; ROW_COUNTS],
    /// The measured cost of a prompt token in a prefill.
    prompt_token_ms: Option<f64>,
}

/// Row counts priced apart; beyond, the last is extrapolated.
const ROW_COUNTS: usize = 64;

/// A further row's price, as a share of a one-row step, until measured.
const PRIOR_ROW_SHARE: f64 = 0.5;

impl Default for RowCosts {
    fn default() -> Self {
        Self { ms: [None; ROW_COUNTS], prompt_token_ms: None }
    }
}

impl RowCosts {
    /// Measured as `first_row_ms` for one row and `row_ms` more for each further row.
    pub fn linear(first_row_ms: f64, row_ms: f64) -> Self {
        let mut costs = Self::default();
        for rows in 1..ROW_COUNTS {
            costs.ms[rows] = Some(first_row_ms + (rows - 1) as f64 * row_ms);
        }
        costs
    }

    /// A decode-only step of `rows` rows took `took_ms`.
    pub fn observe(&mut self, rows: usize, took_ms: f64) {
        if let Some(slot) = self.ms.get_mut(rows) {
            *slot = Some(slot.map_or(took_ms, |ms| ms + SMOOTHING * (took_ms - ms)));
        }
    }

    /// What a decode-only step of `rows` rows is expected to cost; `one_row_ms` when
    /// nothing was measured yet.
    pub fn price(&self, rows: usize, one_row_ms: f64) -> f64 {
        let rows = rows.max(1);
        let one = self.ms[1].unwrap_or(one_row_ms);
        if let Some(Some(ms)) = self.ms.get(rows) {
            return *ms;
        }
        let below = (1..rows.min(ROW_COUNTS)).rev().find_map(|r| self.ms[r].map(|ms| (r, ms))).unwrap_or((1, one));
        let further_row_ms = self.prompt_token_ms.map_or(f64::INFINITY, |ms| ms).min(PRIOR_ROW_SHARE * one);
        below.1 + (rows - below.0) as f64 * further_row_ms
    }
}

/// Step prices for drafts (`speculation::draft_lengths`): what a decode step of so many rows costs.
#[derive(Debug, Clone, Copy)]
pub(crate) struct DraftPrices<'a> {
    rows: &'a RowCosts,
    one_row_ms: f64,
}

impl<'a> DraftPrices<'a> {
    #[cfg(test)]
    pub fn new(rows: &'a RowCosts, one_row_ms: f64) -> Self {
        Self { rows, one_row_ms }
    }

    pub fn step_ms(&self, rows: usize) -> f64 {
        self.rows.price(rows, self.one_row_ms)
    }

    /// Whether a one-row step was measured: before, its price is a prior.
    pub fn one_row_measured(&self) -> bool {
        self.rows.ms[1].is_some()
    }
}

/// What the engine thread measured of its steps: the decode and prefill costs, and decode
/// steps by their row counts. The scheduler reports every step to it.
#[derive(Debug, Clone, Default)]
pub(crate) struct StepCostModel {
    costs: StepCosts,
    /// What decode-only steps cost by their rows, for pricing drafts.
    rows: RowCosts,
    /// Costs given, not measured (tests, whose fake steps take no time).
    frozen: bool,
}

impl StepCostModel {
    /// Prompt tokens a step can add beside `decode_rows` generating rows and take at most
    /// `target_ms`: what the decode part leaves of the target, at the measured cost per
    /// prompt token.
    pub fn prefill_within(&self, target_ms: f64, decode_rows: usize) -> usize {
        ((target_ms - self.decode_ms(decode_rows)) / self.costs.prefill_token_ms.max(1e-3)).max(0.0) as usize
    }

    /// What one more step beside `decode_rows` generating rows costs, in prompt tokens: its
    /// decode part (with none, a one-row step: a pass over the weights) at the measured cost
    /// per prompt token. A prompt cheaper than that may share another's step
    /// (`prefill_plan`).
    pub fn step_in_prompt_tokens(&self, decode_rows: usize) -> usize {
        (self.decode_ms(decode_rows) / self.costs.prefill_token_ms.max(1e-3)) as usize
    }

    /// What the decode part of a step of `decode_rows` generating rows costs.
    pub fn decode_ms(&self, decode_rows: usize) -> f64 {
        self.rows.price(decode_rows, self.costs.decode_step_ms)
    }

    /// What a step of `decode_rows` generating rows and `prefill_tokens` prompt tokens took:
    /// `took_ms` as measured, or its price where costs are frozen (tests' steps take no time).
    pub fn step_took_ms(&self, took_ms: f64, decode_rows: usize, prefill_tokens: usize) -> f64 {
        if !self.frozen {
            return took_ms;
        }
        let decode_ms = if decode_rows > 0 { self.decode_ms(decode_rows) } else { 0.0 };
        decode_ms + prefill_tokens as f64 * self.costs.prefill_token_ms
    }

    /// A decode-only step (no prompt tokens) of `rows` rows, drafts included, took `took_ms`.
    pub fn observe_decode_rows(&mut self, rows: usize, took_ms: f64) {
        if !self.frozen {
            self.rows.observe(rows, took_ms);
        }
    }

    /// The step costs measured so far (what the next published outlook will carry).
    pub fn costs(&self) -> StepCosts {
        self.costs
    }

    /// What decode steps cost by their rows, to price drafts with.
    pub fn row_costs(&self) -> DraftPrices<'_> {
        DraftPrices { rows: &self.rows, one_row_ms: self.costs.decode_step_ms }
    }

    /// A step that took `took_ms` for `decode_tokens` and `prefill_tokens`.
    pub fn observe_step(&mut self, took_ms: f64, decode_tokens: usize, prefill_tokens: usize) {
        if !self.frozen {
            self.costs.observe(took_ms, decode_tokens, prefill_tokens);
            if prefill_tokens > 0 {
                self.rows.prompt_token_ms = Some(self.costs.prefill_token_ms);
            }
        }
    }

    /// The prices `--fixed-step-prices` fixes: the unmeasured defaults, each row beyond a
    /// step's first costing what a prompt token does.
    pub fn fixed() -> Self {
        let mut model = Self::default();
        let costs = StepCosts::default();
        model.freeze(costs, costs.prefill_token_ms);
        model
    }

    /// Uses `costs`, and a step of r decode rows costs `one_row_ms + (r - 1) * row_ms`,
    /// from now on, whatever steps take.
    pub fn freeze(&mut self, costs: StepCosts, row_ms: f64) {
        self.rows = RowCosts::linear(costs.decode_step_ms, row_ms);
        (self.costs, self.frozen) = (costs, true);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fixed_prices_do_not_follow_the_measured_steps() {
        let mut model = StepCostModel::fixed();
        let before = (model.costs(), model.decode_ms(4), model.step_took_ms(123.0, 4, 10));
        model.observe_step(400.0, 4, 100);
        model.observe_decode_rows(4, 90.0);
        assert_eq!((model.costs(), model.decode_ms(4), model.step_took_ms(123.0, 4, 10)), before);
        // The unmeasured defaults: each row past the first at a prompt token's price.
        assert_eq!(model.decode_ms(4), 30.0 + 3.0 * 2.0);
        assert_eq!(model.step_took_ms(123.0, 4, 10), 36.0 + 10.0 * 2.0, "priced, not measured");
    }

    #[test]
    fn costs_follow_the_measured_steps() {
        let mut c = StepCosts { decode_step_ms: 20.0, prefill_token_ms: 1.0 };
        for _ in 0..200 {
            c.observe(40.0, 8, 0);
            c.observe(40.0 + 256.0 * 3.0, 8, 256);
        }
        assert!((c.decode_step_ms - 40.0).abs() < 0.5, "{c:?}");
        assert!((c.prefill_token_ms - 3.0).abs() < 0.1, "{c:?}");
        c.observe(1000.0, 8, 4);
        assert!((c.prefill_token_ms - 3.0).abs() < 0.1, "a few prompt tokens say little about prefill");
    }

    #[test]
    fn row_counts_are_priced_as_measured_and_unmeasured_ones_from_the_nearest_below() {
        let mut rows = RowCosts::default();
        assert_eq!(rows.price(3, 10.0), 10.0 + 2.0 * 5.0, "nothing measured: from the one-row cost");
        rows.observe(1, 9.0);
        rows.observe(2, 22.0);
        assert_eq!(rows.price(1, 10.0), 9.0);
        assert_eq!(rows.price(2, 10.0), 22.0);
        assert_eq!(rows.price(5, 10.0), 22.0 + 3.0 * 4.5, "from 2 rows, 0.5 of a one-row step each");
        rows.observe(2, 12.0);
        assert!((rows.price(2, 10.0) - 21.0).abs() < 1e-9, "smoothed");
        assert_eq!(rows.price(500, 10.0), 21.0 + 498.0 * 4.5, "past the table: extrapolated");
        // Once a prefill was measured, further rows cost what its prompt tokens did, if less.
        rows.prompt_token_ms = Some(3.0);
        assert_eq!(rows.price(5, 10.0), 21.0 + 3.0 * 3.0);
        rows.prompt_token_ms = Some(8.0);
        assert_eq!(rows.price(5, 10.0), 21.0 + 3.0 * 4.5);
    }

    #[test]
    fn a_measured_prefill_prices_the_rows_of_wide_draft_steps() {
        let mut forecaster = StepCostModel::default();
        forecaster.observe_decode_rows(1, 17.0);
        let before = forecaster.row_costs().step_ms(65);
        // A 64-token prompt chunk beside one decode row: ~5 ms a prompt token.
        for _ in 0..100 {
            forecaster.observe_step(17.0 + 64.0 * 5.0, 1, 64);
        }
        let after = forecaster.row_costs().step_ms(65);
        // The prompt tokens' share is learnt net of the decode part's prior cost (30 ms).
        assert!((after - (17.0 + 64.0 * 5.0)).abs() < 20.0, "{before} -> {after}");
        assert!(before > after);
    }
}
