//! What steps cost and what follows from it: the measured step-cost model (`step_costs`:
//! row and pass prices, which drafts and the TPOT budget are priced by), the wait forecast
//! admission reads (`wait_forecast`), which prompts a step prefills (`prefill_plan`), and
//! how many prompt tokens a step may take under the TPOT objective (`tpot_budget`).
//! Nothing here changes a sequence: it prices and predicts.

pub(crate) mod prefill_plan;
pub(crate) mod step_costs;
pub(crate) mod tpot_budget;
pub(crate) mod wait_forecast;

use step_costs::StepCostModel;
use wait_forecast::WaitForecaster;

/// The engine thread's costs: what its steps measured, the wait forecast it publishes, and
/// the TPOT objective prompts are prefilled under.
pub(crate) struct Costs {
    pub step: StepCostModel,
    pub wait: WaitForecaster,
    pub tpot_slo_ms: Option<u32>,
}
