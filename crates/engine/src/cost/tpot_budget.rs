//! The TPOT objective's prefill budget (`--tpot-slo-ms`): how many prompt tokens a step may
//! prefill beside the generating sequences.

use super::step_costs::StepCostModel;
use crate::request::sequence::Sequence;

/// The smallest prompt chunk a step beside generating sequences prefills under the TPOT
/// objective (fewer wait for more slack): llama.cpp's CPU attention runs fewer than 64
/// query rows of a sequence one by one over its whole KV (see `attention_cost`), which on
/// some CPUs makes smaller chunks cost more per token than they spare.
const MIN_PREFILL_PER_STEP: usize = 64;

/// How many of its next tokens a sequence behind its TPOT objective may take to catch up
/// before prompts stop waiting for it (a stream that long behind is lost anyway).
const RECOVERY_TOKENS: u32 = 32;

/// Prompt tokens this step may prefill beside the generating sequences (`rows` rows of
/// them, `StepBatch::generating_rows`) under the TPOT objective: what the tightest of them
/// can spend on this step and keep its mean time per output token within the objective
/// (the slack its earlier, faster steps left), less the step's decode part, at the
/// measured costs. A chunk smaller than `MIN_PREFILL_PER_STEP` waits for more slack
/// instead (small chunks cost more per token). A sequence behind its objective holds
/// prompts back until decode-only steps have won the time back, unless even
/// `RECOVERY_TOKENS` of them (or its tokens left) could not: then it holds nothing back,
/// nor does anything without an objective or with nothing generating.
///
/// A cap per step would not do: on a CPU a prompt token costs the same in whichever step
/// it is computed, so chunking a prefill spreads a stream's stalls but leaves its mean
/// time per token as it was; only prefilling while streams have slack to spare keeps it.
/// The wait forecast learns the rate prompts fill at in the long run (`steady`): the
/// objective less the decode part, every step.
pub(crate) fn prefill_cap(
    slots: &[Option<Sequence>],
    rows: usize,
    costs: &StepCostModel,
    tpot_slo_ms: Option<u32>,
) -> PrefillCap {
    let Some(target) = tpot_slo_ms.filter(|_| rows > 0).map(f64::from) else {
        return PrefillCap { tokens: usize::MAX, steady: None };
    };
    let steady = costs.prefill_within(target, rows);
    // Where decode steps alone overrun the objective, nothing holds prompts back.
    let steady = (steady > 0).then_some((target, steady));
    let tokens = step_cap(slots, rows, costs, target);
    PrefillCap { tokens, steady }
}

/// The prompt tokens a step may prefill under the TPOT objective, and in the long run.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct PrefillCap {
    /// This step's (`usize::MAX`: no cap).
    pub tokens: usize,
    /// The objective and the tokens a step of it leaves for prompts, where decode steps
    /// alone do not overrun it: what the wait forecast fills prompts at.
    pub steady: Option<(f64, usize)>,
}

/// What the tightest generating sequence can spend on this step's prompts.
fn step_cap(slots: &[Option<Sequence>], rows: usize, costs: &StepCostModel, target: f64) -> usize {
    let decode_ms = costs.decode_ms(rows);
    // A sequence behind its objective wins back what each decode-only step leaves of it.
    let recoverable = |seq: &Sequence, slack: f64| {
        let left = seq.request().max_tokens.saturating_sub(seq.generated()).min(RECOVERY_TOKENS);
        slack + f64::from(left) * (target - decode_ms) >= decode_ms
    };
    let tightest = slots
        .iter()
        .flatten()
        .filter_map(|seq| seq.tpot_slack_ms(target).filter(|&slack| recoverable(seq, slack)))
        .fold(f64::INFINITY, f64::min);
    if tightest.is_infinite() {
        return usize::MAX;
    }
    let tokens = costs.prefill_within(tightest.max(0.0), rows);
    if tokens < MIN_PREFILL_PER_STEP {
        0
    } else {
        tokens
    }
}
